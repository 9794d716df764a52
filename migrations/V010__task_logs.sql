-- V010: the lines each worker attempt logged (docs/architecture.md, "Task logs").
--
-- A PYTHON node's printed lines (stdout and stderr) and the records an SDK
-- handler writes through ctx.logger, captured by the worker per attempt and
-- bounded there (COMPOSER_TASK_LOG_MAX_BYTES, COMPOSER_TASK_LOG_MAX_LINES: the
-- lines past the bound are dropped, counted in truncated, and a marker line says
-- so). They travel with the attempt's report and are written in the report's
-- transaction: one row per reported attempt that logged anything, failed
-- attempts included. An attempt whose lease expired reported nothing, so it has
-- no row. lines is the attempt's lines joined by newlines, sealed as one text
-- when the run is (docs/sealing.md). No foreign key to task_instances: a retried
-- run replaces its failed tasks, and their attempts' logs stay readable.
CREATE TABLE task_logs (
    run_id     TEXT COLLATE "C" NOT NULL,
    task_id    TEXT COLLATE "C" NOT NULL,
    node_id    TEXT NOT NULL,
    attempt    INT NOT NULL CHECK (attempt >= 0),
    lines      TEXT NOT NULL,
    truncated  INT NOT NULL DEFAULT 0 CHECK (truncated >= 0),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, task_id, attempt),
    FOREIGN KEY (run_id) REFERENCES workflow_runs (id) ON DELETE CASCADE
) PARTITION BY RANGE (run_id);

-- As in V001, with task_logs among the run-scoped tables of a month.
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
    FOREACH tbl IN ARRAY ARRAY['workflow_runs', 'task_instances', 'workflow_events',
                               'task_logs'] LOOP
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

-- The months that exist already get their task_logs partition now.
DO $$
DECLARE
    part RECORD;
BEGIN
    FOR part IN
        SELECT substring(c.relname FROM '_p(\d{6})$') AS suffix
          FROM pg_inherits i
          JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = 'workflow_runs'::regclass
    LOOP
        CONTINUE WHEN part.suffix IS NULL;
        PERFORM composer_create_month(composer_partition_month(part.suffix));
    END LOOP;
END;
$$;

-- As in V006, dropping the month's task_logs partition too (before the runs it
-- references).
CREATE OR REPLACE FUNCTION composer_drop_partitions(older_than TIMESTAMPTZ)
RETURNS TABLE (suffix TEXT, error TEXT)
LANGUAGE plpgsql AS $$
DECLARE
    part RECORD;
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
            EXECUTE format('DROP TABLE IF EXISTS %I', 'task_logs_p' || suffix);
            EXECUTE format('DROP TABLE IF EXISTS %I', 'workflow_events_p' || suffix);
            EXECUTE format('DROP TABLE IF EXISTS %I', 'task_instances_p' || suffix);
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
