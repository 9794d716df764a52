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

-- A month's task_logs partition is created and dropped with the others:
-- composer_create_month and composer_drop_partitions (V009) find every table
-- partitioned by run id in the catalogue.

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
