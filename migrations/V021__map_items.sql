-- V021: the items of a MAP node (docs/architecture.md §2, "MAP").
--
-- A MAP node has one task row of its own (WAITING while its items run, then
-- COMPLETED with the list of their outputs, or FAILED) and one worker task row
-- per item, with the MAP's node id and the item's index in `item` (NULL for every
-- other task). An item task is a worker task like any other: attempts, retries,
-- lease, reports, logs and history. Items are inserted at once when the MAP
-- starts; those beyond max_parallel wait PENDING without dispatched_at (no outbox
-- row, so the sweeper does not take them for lost) until a place frees.
--
-- `map_progress` (on the MAP's own row) counts its items — total, next (the
-- first not yet sent), completed, failed, in_flight (the indexes out now) — so an
-- event of the run loads the MAP's items in flight and its next one, never all.
ALTER TABLE task_instances ADD COLUMN item INT CHECK (item >= 0);
ALTER TABLE task_instances ADD COLUMN map_progress JSONB;

-- One task per node, and per item of a MAP node (NULL item: the node's own task).
CREATE UNIQUE INDEX task_instances_run_node_item ON task_instances (run_id, node_id, item)
    NULLS NOT DISTINCT;
DROP INDEX task_instances_run_node;
-- An event loads the run's own tasks (item IS NULL) without walking a MAP's items.
CREATE INDEX task_instances_run_tasks ON task_instances (run_id) WHERE item IS NULL;
