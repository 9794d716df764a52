-- V018: a run may be PAUSED (docs/architecture.md §4.14).
--
-- A paused run is not finished: its running attempts finish and are recorded,
-- but nothing new goes to a worker, no timer of it fires and no signal is taken
-- until it is resumed. The status CHECK of V001 listed the five statuses; it
-- lists six now.
ALTER TABLE workflow_runs DROP CONSTRAINT workflow_runs_status_check;
ALTER TABLE workflow_runs ADD CONSTRAINT workflow_runs_status_check
    CHECK (status IN ('PENDING', 'RUNNING', 'PAUSED', 'SUCCEEDED', 'FAILED', 'CANCELLED'));
