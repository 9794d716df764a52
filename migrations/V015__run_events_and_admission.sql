-- V015: events between runs, and tasks an admission policy holds.
--
-- Events between runs (docs/architecture.md §4.10): a run may have a parent, a
-- node of another run that waits for it (the attempt that started it); when the
-- run finishes, its end is an event addressed to that node, and a parent's cancel
-- is an event addressed to each of its children still going. Such an event is an
-- outbox row of its own kind, 'run_event', written in the transaction of its
-- cause, addressed to its target run (run_id) and applied there exactly once:
-- the transaction that applies it locks the target run and deletes the row.
ALTER TABLE workflow_runs
    ADD COLUMN parent_run_id  TEXT COLLATE "C",
    ADD COLUMN parent_node_id TEXT,
    ADD COLUMN parent_task_id TEXT COLLATE "C",
    ADD COLUMN parent_attempt INT,
    ADD CONSTRAINT workflow_runs_parent_whole CHECK (
        (parent_run_id IS NULL) = (parent_node_id IS NULL)
        AND (parent_run_id IS NULL) = (parent_task_id IS NULL)
        AND (parent_run_id IS NULL) = (parent_attempt IS NULL)) NOT VALID;
-- NOT VALID then VALIDATE: every row has NULLs here, and validating takes a lock
-- that lets writes go on.
ALTER TABLE workflow_runs VALIDATE CONSTRAINT workflow_runs_parent_whole;

-- A parent's cancel finds its children still going.
CREATE INDEX workflow_runs_parent ON workflow_runs (parent_run_id, status)
    WHERE parent_run_id IS NOT NULL;

ALTER TABLE outbox DROP CONSTRAINT outbox_kind_check;
ALTER TABLE outbox ADD CONSTRAINT outbox_kind_check
    CHECK (kind IN ('dispatch', 'webhook', 'run_event')) NOT VALID;
ALTER TABLE outbox VALIDATE CONSTRAINT outbox_kind_check;

-- An admission step (docs/architecture.md §4.11) may hold a task that is ready to
-- go: it stays PENDING with no outbox row and no dispatched_at (so the sweeper
-- does not take it for a lost dispatch), and says why in held_reason, until the
-- policy releases it.
ALTER TABLE task_instances ADD COLUMN held_reason TEXT;
CREATE INDEX task_instances_held ON task_instances (queue, created_at)
    WHERE held_reason IS NOT NULL;
