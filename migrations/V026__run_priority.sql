-- V026: a run's priority, kept on its row (docs/architecture.md §4.12, §4.16).
--
-- A workflow's `priority:` (1 first … 5, default 3) is rendered at the run's start.
-- Until now it lived only in runs_waiting, for a run waiting for a slot of its key
-- (§4.13). Kept here, it orders the run's attempts wherever they wait: those the
-- admission step holds (a queue's limit, a node's concurrency key or rate limit) and
-- those waiting in Redis for a worker (the dispatch bands). NULL is the default, 3:
-- a run of a workflow without `priority:` writes nothing more than before, and the
-- column is added without rewriting the table.
ALTER TABLE workflow_runs ADD COLUMN priority SMALLINT CHECK (priority BETWEEN 1 AND 5);
