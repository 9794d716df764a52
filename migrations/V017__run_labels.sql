-- V017: labels on runs, for finding them (GET /v1/runs?label=key:value).
--
-- A run's labels are a flat JSON object of text keys and text values, set by
-- its start and never changed; NULL when it has none (not '{}'), so that the
-- partial index below holds no entry for the runs that carry none: the W1/W2
-- hot path starts runs without labels and pays nothing for the index.
-- Labels are stored in plain text even when the run's payloads are sealed
-- (docs/architecture.md §6.3): they are for finding runs, not for secrets.
ALTER TABLE workflow_runs ADD COLUMN labels JSONB;

-- A label filter is containment (labels @> '{"customer": "acme"}'), which
-- jsonb_path_ops answers with one hashed entry per key/value pair. Created on
-- the partitioned table: each month's partition gets its own, now and when
-- composer_create_month attaches a new one.
CREATE INDEX workflow_runs_labels ON workflow_runs USING GIN (labels jsonb_path_ops)
    WHERE labels IS NOT NULL;
