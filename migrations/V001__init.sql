-- V001: definitions, run data partitioned by month of the UUIDv7 run id,
-- buffered signals, the outbox, idempotency keys and the partition functions.
--
-- Forward only: once this file is applied anywhere, change the schema with a
-- new file (V002__…sql), never by editing this one (the runner refuses a file
-- whose checksum changed). Ship changes expand-then-contract: add first, drop
-- one release later.

-- ---------------------------------------------------------------------------
-- Definitions: versioned, never physically deleted, so a run pinned to a
-- version can always load it and finish.
-- ---------------------------------------------------------------------------
CREATE TABLE workflow_definitions (
    id          TEXT NOT NULL,
    version     INT NOT NULL CHECK (version > 0),
    name        TEXT NOT NULL,
    spec        JSONB NOT NULL,
    webhook_url TEXT,
    created_by  TEXT,
    deployed    BOOLEAN NOT NULL DEFAULT false,
    deployed_at TIMESTAMPTZ,
    deleted_at  TIMESTAMPTZ,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (id, version),
    -- At most one deployed version per workflow: the one new runs use. An
    -- exclusion constraint rather than a unique index because it can be
    -- checked at the end of the statement, so one UPDATE can move the flag
    -- from the old version to the new.
    CONSTRAINT workflow_definitions_one_deployed
        EXCLUDE USING btree (id WITH =) WHERE (deployed) DEFERRABLE INITIALLY IMMEDIATE
);

-- ---------------------------------------------------------------------------
-- Runs. Range-partitioned by id: a UUIDv7's text form starts with its
-- millisecond timestamp, so with COLLATE "C" (byte order) the id alone names
-- the month's partition and every query that filters on the run id touches one
-- partition. There is deliberately no DEFAULT partition: rows in it would
-- block creating future months.
-- ---------------------------------------------------------------------------
CREATE TABLE workflow_runs (
    id              TEXT COLLATE "C" NOT NULL,
    workflow_id     TEXT NOT NULL,
    version         INT NOT NULL,
    status          TEXT NOT NULL DEFAULT 'PENDING'
                    CHECK (status IN ('PENDING', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED')),
    input           JSONB,
    config          JSONB,
    output          JSONB,
    error           TEXT,
    idempotency_key TEXT,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    completed_at    TIMESTAMPTZ,
    PRIMARY KEY (id),
    FOREIGN KEY (workflow_id, version) REFERENCES workflow_definitions (id, version)
) PARTITION BY RANGE (id);

-- Listing runs by workflow and/or status, newest first, with the id as the
-- cursor (GET /v1/runs). Indexing status is compatible with HOT here, unlike on
-- task_instances: a run row is written at start, at finish and on a retry
-- (the per-event run lock is SELECT … FOR UPDATE, which writes no new row
-- version), so these indexes cost a few entries per run, not per transition.
-- A created-at range becomes an id range (composer_uuid7_bound), which also
-- prunes partitions.
CREATE INDEX workflow_runs_by_workflow ON workflow_runs (workflow_id, id);
CREATE INDEX workflow_runs_by_status ON workflow_runs (status, id);
CREATE INDEX workflow_runs_by_workflow_status ON workflow_runs (workflow_id, status, id);

-- A unique index on a partitioned table must contain the partition key, so
-- "one run per (workflow, idempotency key)" cannot live on workflow_runs. This
-- small unpartitioned table enforces it: a start inserts its key first, and a
-- concurrent start with the same key waits on that row, then finds the run.
CREATE TABLE run_idempotency_keys (
    workflow_id     TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    run_id          TEXT COLLATE "C" NOT NULL,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (workflow_id, idempotency_key)
);
-- Retention deletes the keys of a dropped month by run id range.
CREATE INDEX run_idempotency_keys_run ON run_idempotency_keys (run_id);

-- ---------------------------------------------------------------------------
-- Tasks: the hottest table. Every state change of every task updates a row,
-- so its indexes are chosen for HOT (heap-only tuple) updates, which skip
-- index maintenance altogether. PostgreSQL allows a HOT update only when no
-- column an index uses changes — and that includes the columns in a partial
-- index's WHERE clause. An index "WHERE state = 'RUNNING'" therefore makes
-- every state change a full update of every index. So no index here mentions
-- state, lease_owner or lease_expires_at; the background loops find their rows
-- through columns that change once per task attempt instead:
--
--   wake_at        set while a task waits on a timer, cleared when it resolves;
--   dispatched_at  set while a task is with a worker (PENDING, QUEUED, RUNNING):
--                  when its current attempt was due for dispatch; cleared when
--                  the task finishes.
--
-- A worker task's life: INSERT; QUEUED (HOT); RUNNING with a lease (HOT); lease
-- renewals (HOT); COMPLETED/FAILED (not HOT: dispatched_at is cleared, which
-- takes it out of the in-flight index). Partitions are created with a
-- fillfactor below 100 so an updated row finds room on its own page, which
-- HOT also needs.
-- ---------------------------------------------------------------------------
CREATE TABLE task_instances (
    id               TEXT COLLATE "C" NOT NULL,
    run_id           TEXT COLLATE "C" NOT NULL,
    node_id          TEXT NOT NULL,
    node_type        TEXT NOT NULL
                     CHECK (node_type IN ('HTTP', 'PYTHON', 'TASK', 'SWITCH', 'FORK', 'JOIN',
                                          'WAIT', 'WAIT_FOR_EVENT')),
    state            TEXT NOT NULL
                     CHECK (state IN ('PENDING', 'QUEUED', 'RUNNING', 'WAITING',
                                      'COMPLETED', 'FAILED', 'SKIPPED')),
    attempt          INT NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    input            JSONB,
    output           JSONB,
    error            TEXT,
    error_code       TEXT,
    branches         TEXT[],       -- SWITCH: the successors it selected, recorded once
    wake_at          TIMESTAMPTZ,  -- WAITING: when the timer fires (WAIT) or times out (WAIT_FOR_EVENT)
    awaited_signal   TEXT,         -- WAIT_FOR_EVENT: the signal that resolves it
    queue            TEXT,         -- worker tasks: the queue they are dispatched on
    dispatched_at    TIMESTAMPTZ,  -- with a worker: when the current attempt was due for dispatch
    lease_owner      TEXT,
    lease_expires_at TIMESTAMPTZ,
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    started_at       TIMESTAMPTZ,
    finished_at      TIMESTAMPTZ,
    PRIMARY KEY (run_id, id),
    FOREIGN KEY (run_id) REFERENCES workflow_runs (id) ON DELETE CASCADE
) PARTITION BY RANGE (run_id);

-- One task per node per run: even two racing decisions cannot create a second.
-- Also serves loading a run's tasks (every lookup starts with run_id).
CREATE UNIQUE INDEX task_instances_run_node ON task_instances (run_id, node_id);
-- The timer loop: waits that are due. Only rows with a pending timer.
CREATE INDEX task_instances_wake ON task_instances (wake_at) WHERE wake_at IS NOT NULL;
-- The lease sweeper: tasks with a worker, oldest dispatch first. Both of its
-- questions are answered from this small set: RUNNING with an expired lease,
-- and PENDING/QUEUED for too long with no outbox row (a lost dispatch).
CREATE INDEX task_instances_in_flight ON task_instances (dispatched_at)
    WHERE dispatched_at IS NOT NULL;

-- ---------------------------------------------------------------------------
-- Buffered signals: a signal that arrived before any WAIT_FOR_EVENT node was
-- waiting for it. Consumed oldest first, at most once.
-- ---------------------------------------------------------------------------
CREATE TABLE workflow_events (
    id          TEXT COLLATE "C" NOT NULL,
    run_id      TEXT COLLATE "C" NOT NULL,
    name        TEXT NOT NULL,
    payload     JSONB,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    consumed_at TIMESTAMPTZ,
    consumed_by TEXT,             -- the node that took it
    PRIMARY KEY (run_id, id),
    FOREIGN KEY (run_id) REFERENCES workflow_runs (id) ON DELETE CASCADE
) PARTITION BY RANGE (run_id);

CREATE INDEX workflow_events_pending ON workflow_events (run_id, name, created_at)
    WHERE consumed_at IS NULL;

-- ---------------------------------------------------------------------------
-- The transactional outbox: messages written in the same transaction as the
-- state change they announce, published after commit by the outbox-enqueuer
-- and deleted once published. kind 'dispatch' goes to a worker queue (the
-- destination), kind 'webhook' is a run-finished POST to a URL. A message is
-- not published before next_attempt_at: retry backoff for dispatches, delivery
-- backoff for webhooks. Rows live seconds, so the table is small and not
-- partitioned; vacuum it eagerly since every row is deleted.
-- ---------------------------------------------------------------------------
CREATE TABLE outbox (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind            TEXT NOT NULL CHECK (kind IN ('dispatch', 'webhook')),
    run_id          TEXT COLLATE "C" NOT NULL,
    task_id         TEXT COLLATE "C",
    destination     TEXT NOT NULL,
    payload         JSONB NOT NULL,
    next_attempt_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    attempts        INT NOT NULL DEFAULT 0,
    last_error      TEXT,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    CHECK (kind <> 'dispatch' OR task_id IS NOT NULL)
) WITH (autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 1000);

CREATE INDEX outbox_due ON outbox (kind, next_attempt_at);
-- Cancelling a task drops its unpublished dispatch; the sweeper asks whether a
-- task still has one.
CREATE INDEX outbox_task ON outbox (task_id) WHERE task_id IS NOT NULL;

-- ---------------------------------------------------------------------------
-- Partitions
-- ---------------------------------------------------------------------------

-- The smallest UUIDv7 text whose timestamp is >= ts: the partition boundary
-- for runs created from ts on.
CREATE FUNCTION composer_uuid7_bound(ts TIMESTAMPTZ) RETURNS TEXT
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-0000-0000-000000000000'
      FROM (SELECT lpad(to_hex(floor(extract(epoch FROM ts) * 1000)::BIGINT), 12, '0') AS h) b
$$;

-- The UTC month start a partition suffix (YYYYMM) stands for.
CREATE FUNCTION composer_partition_month(suffix TEXT) RETURNS TIMESTAMPTZ
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT to_date(suffix, 'YYYYMM')::timestamp AT TIME ZONE 'UTC'
$$;

-- Creates the three run-scoped partitions for the UTC month containing ts
-- (those missing); returns how many it created. Callers hold the partition
-- advisory lock.
CREATE FUNCTION composer_create_month(ts TIMESTAMPTZ) RETURNS INT
LANGUAGE plpgsql AS $$
DECLARE
    month_start TIMESTAMP := date_trunc('month', ts AT TIME ZONE 'UTC');
    suffix TEXT := to_char(month_start, 'YYYYMM');
    lower_bound TEXT := composer_uuid7_bound(month_start AT TIME ZONE 'UTC');
    upper_bound TEXT := composer_uuid7_bound((month_start + INTERVAL '1 month') AT TIME ZONE 'UTC');
    tbl TEXT;
    created INT := 0;
BEGIN
    FOREACH tbl IN ARRAY ARRAY['workflow_runs', 'task_instances', 'workflow_events'] LOOP
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

-- Ensures partitions for the current UTC month and months_ahead after it.
-- Safe to call from several processes at once (advisory lock); returns how
-- many partitions it created.
CREATE FUNCTION composer_ensure_partitions(months_ahead INT DEFAULT 3) RETURNS INT
LANGUAGE plpgsql AS $$
DECLARE
    created INT := 0;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('composer_partitions'));
    FOR i IN 0..months_ahead LOOP
        created := created + composer_create_month(
            (date_trunc('month', now() AT TIME ZONE 'UTC') + make_interval(months => i))
                AT TIME ZONE 'UTC');
    END LOOP;
    RETURN created;
END;
$$;

-- Drops every month that ended at or before older_than — all three tables and
-- the month's idempotency keys — except a month that still has a PENDING or
-- RUNNING run, which is kept (and reported with a NOTICE) until its runs end.
-- Returns the suffixes (YYYYMM) of the months dropped.
CREATE FUNCTION composer_drop_partitions(older_than TIMESTAMPTZ) RETURNS SETOF TEXT
LANGUAGE plpgsql AS $$
DECLARE
    part RECORD;
    suffix TEXT;
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

        DELETE FROM run_idempotency_keys
         WHERE run_id >= composer_uuid7_bound(month_start)
           AND run_id < composer_uuid7_bound(
                   (month_start AT TIME ZONE 'UTC' + INTERVAL '1 month') AT TIME ZONE 'UTC');
        -- Referencing tables first, so their foreign keys never see orphans.
        EXECUTE format('DROP TABLE IF EXISTS %I', 'workflow_events_p' || suffix);
        EXECUTE format('DROP TABLE IF EXISTS %I', 'task_instances_p' || suffix);
        EXECUTE format('ALTER TABLE workflow_runs DETACH PARTITION %I', part.relname);
        EXECUTE format('DROP TABLE %I', part.relname);
        RETURN NEXT suffix;
    END LOOP;
END;
$$;

SELECT composer_ensure_partitions(3);
