-- V007: payloads sealed at rest (docs/architecture.md §6.3).
--
-- The run's data key, sealed by a key-encryption key: "<key id>:<base64>".
-- NULL when the run was started with sealing off (its documents are plain
-- JSON). The documents themselves keep their columns and types: a sealed one
-- is a JSON string (a TEXT for the error columns) that starts with
-- "$sealed:v1:" and carries the key id and the sealed data key, so it opens
-- without this column; the column is what seals the run's next documents.
ALTER TABLE workflow_runs ADD COLUMN data_key TEXT;
