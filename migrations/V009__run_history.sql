-- V009: run history — every applied event of a run and what it did, kept.
--
-- task_instances holds each node's current attempt only: a retry overwrites the
-- error, a retry from a node replaces the task, a second cancel its reason. The
-- history keeps them: one row per thing that happened (run started, task
-- scheduled, dispatched, leased, completed, failed, retry scheduled, timer
-- fired, signal received and consumed, cancel, retry from a node, run
-- finished), written in the transaction that applied it, in one INSERT per
-- transaction with the rest of a group commit's writes (docs/architecture.md §6.4).
--
-- Rows are appended, never updated: no fillfactor room, no foreign key (a key
-- probe of workflow_runs per row on the hot path; the month's partitions are
-- dropped together). seq orders a run's rows (one event's rows share `at`, the
-- transaction's composer_now()) and pages them: the primary key serves
-- "WHERE run_id = $1 AND seq > $2 ORDER BY seq". detail holds the row's values
-- (an error, a reason, the input of a start), sealed as one document when the
-- run is sealed (docs/sealing.md).
CREATE SEQUENCE run_history_seq AS BIGINT;

CREATE TABLE run_history (
    run_id  TEXT COLLATE "C" NOT NULL,
    seq     BIGINT NOT NULL DEFAULT nextval('run_history_seq'),
    at      TIMESTAMPTZ NOT NULL,
    kind    TEXT NOT NULL,
    node_id TEXT,
    task_id TEXT COLLATE "C",
    attempt INT,
    actor   TEXT,           -- the worker (leased) or the API token's name (start, cancel…)
    detail  JSONB,
    PRIMARY KEY (run_id, seq)
) PARTITION BY RANGE (run_id);

-- A month's partitions: one of every table partitioned by run id, found in the
-- catalogue rather than listed, so a later migration's run-scoped table gets
-- its partitions without replacing this function again.
CREATE OR REPLACE FUNCTION composer_create_month(ts TIMESTAMPTZ) RETURNS INT
LANGUAGE plpgsql AS $$
DECLARE
    month_start TIMESTAMP := date_trunc('month', ts AT TIME ZONE 'UTC');
    suffix TEXT := to_char(month_start, 'YYYYMM');
    lower_bound TEXT := composer_uuid7_bound(month_start AT TIME ZONE 'UTC');
    upper_bound TEXT := composer_uuid7_bound((month_start + INTERVAL '1 month') AT TIME ZONE 'UTC');
    tbl TEXT;
    created INT := 0;
BEGIN
    FOR tbl IN
        -- workflow_runs first: the others' foreign keys point at it
        SELECT c.relname::TEXT
          FROM pg_partitioned_table p
          JOIN pg_class c ON c.oid = p.partrelid
          JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = current_schema()
         ORDER BY c.relname <> 'workflow_runs', c.relname
    LOOP
        IF to_regclass(format('%I', tbl || '_p' || suffix)) IS NULL THEN
            EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)%s',
                tbl || '_p' || suffix, tbl, lower_bound, upper_bound,
                -- room on each page for HOT updates of the hottest table
                CASE WHEN tbl = 'task_instances' THEN ' WITH (fillfactor = 70)' ELSE '' END);
            created := created + 1;
        END IF;
    END LOOP;
    RETURN created;
END;
$$;

-- As in V006, but every run-scoped table's partition of the month is dropped
-- (found in the catalogue, as above), the referencing ones before workflow_runs'.
CREATE OR REPLACE FUNCTION composer_drop_partitions(older_than TIMESTAMPTZ)
RETURNS TABLE (suffix TEXT, error TEXT)
LANGUAGE plpgsql AS $$
DECLARE
    part RECORD;
    tbl TEXT;
    month_start TIMESTAMPTZ;
    active BOOLEAN;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('composer_partitions'));
    FOR part IN
        SELECT c.relname
          FROM pg_inherits i
          JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = 'workflow_runs'::regclass
         ORDER BY c.relname
    LOOP
        suffix := substring(part.relname FROM '_p(\d{6})$');
        CONTINUE WHEN suffix IS NULL;
        month_start := composer_partition_month(suffix);
        CONTINUE WHEN (month_start AT TIME ZONE 'UTC' + INTERVAL '1 month') AT TIME ZONE 'UTC'
                      > older_than;

        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I WHERE status IN (''PENDING'', ''RUNNING''))',
                       part.relname) INTO active;
        IF active THEN
            RAISE NOTICE 'keeping partition %: it still has active runs', part.relname;
            CONTINUE;
        END IF;

        BEGIN
            DELETE FROM run_idempotency_keys
             WHERE run_id >= composer_uuid7_bound(month_start)
               AND run_id < composer_uuid7_bound(
                       (month_start AT TIME ZONE 'UTC' + INTERVAL '1 month') AT TIME ZONE 'UTC');
            DELETE FROM signal_idempotency_keys
             WHERE run_id >= composer_uuid7_bound(month_start)
               AND run_id < composer_uuid7_bound(
                       (month_start AT TIME ZONE 'UTC' + INTERVAL '1 month') AT TIME ZONE 'UTC');
            -- Referencing tables first, so their foreign keys never see orphans.
            FOR tbl IN
                SELECT c.relname::TEXT
                  FROM pg_partitioned_table p
                  JOIN pg_class c ON c.oid = p.partrelid
                  JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE n.nspname = current_schema() AND c.relname <> 'workflow_runs'
                 ORDER BY c.relname
            LOOP
                EXECUTE format('DROP TABLE IF EXISTS %I', tbl || '_p' || suffix);
            END LOOP;
            EXECUTE format('ALTER TABLE workflow_runs DETACH PARTITION %I', part.relname);
            EXECUTE format('DROP TABLE %I', part.relname);
            error := NULL;
        EXCEPTION WHEN OTHERS THEN
            error := SQLERRM;
        END;
        RETURN NEXT;
    END LOOP;
END;
$$;

-- The history's partitions for every month that already has runs' partitions.
SELECT composer_create_month(composer_partition_month(substring(c.relname FROM '_p(\d{6})$')))
  FROM pg_inherits i
  JOIN pg_class c ON c.oid = i.inhrelid
 WHERE i.inhparent = 'workflow_runs'::regclass
   AND c.relname ~ '_p\d{6}$';
