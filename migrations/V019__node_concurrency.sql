-- V019: node concurrency (docs/architecture.md §4.12). A worker node may name a
-- concurrency key: at most its max attempts of the key with a worker or on their
-- way to one. The key (global:<name> or workflow:<id>:<name>) and the max the
-- node declared are on the task row, set in the transaction that inserts it, NULL
-- for every other task.
ALTER TABLE task_instances ADD COLUMN limit_key TEXT, ADD COLUMN limit_max INT;

-- A key's attempts in flight (dispatched_at, as the sweeper's index) and held:
-- both indexes cover only rows of limited nodes, and dispatched_at and
-- held_reason are in indexes already, so the hot path's updates stay HOT.
CREATE INDEX task_instances_limit_in_flight ON task_instances (limit_key)
    WHERE limit_key IS NOT NULL AND dispatched_at IS NOT NULL;
CREATE INDEX task_instances_limit_held ON task_instances (limit_key, created_at)
    WHERE limit_key IS NOT NULL AND held_reason IS NOT NULL;
