-- V008: who did what to a run, and the calling context its handlers get.
--
-- Each API token has a name (COMPOSER_API_TOKENS="name=token:role,…"). A run
-- records the name behind the token that started it, the one that cancelled
-- it and the one that last retried it; each signal row the one that sent it.
-- Token names are not personal data: plain TEXT.
--
-- workflow_runs.context is the calling context of the start: the caller's
-- name and role and the request metadata it chose to pass, one JSONB document
-- ({"caller": {"name", "role"}, "metadata": {…}}) that the SDK hands to
-- handlers as ctx.caller. The lease statement must not read the run's row for
-- it (a second partition probe on the hottest statement), so the engine copies
-- the document onto each TASK node's row it inserts (task_instances.context)
-- and the lease returns it from there. NULL where a run has none: nothing is
-- stored or sent for it.
--
-- Every signal the engine accepts now has a workflow_events row: a signal a
-- waiting node took as it arrived is written consumed at once, so the row
-- carries who sent it.
ALTER TABLE workflow_runs ADD COLUMN context JSONB;
ALTER TABLE workflow_runs ADD COLUMN started_by TEXT;
ALTER TABLE workflow_runs ADD COLUMN cancelled_by TEXT;
ALTER TABLE workflow_runs ADD COLUMN retried_by TEXT;
ALTER TABLE task_instances ADD COLUMN context JSONB;
ALTER TABLE workflow_events ADD COLUMN sent_by TEXT;
