-- V012: a start's Idempotency-Key remembers the request it was first used with,
-- and a task a cancel stopped is CANCELLED.
--
-- A key reused with a different request (another input, config, version or
-- start node) must not silently answer the first run: the client believes it
-- started what it sent. The start stores a SHA-256 digest of its canonical
-- request beside the key, sealed like the run's documents when
-- COMPOSER_ENCRYPTION_KEYS is set (a bare digest of a small input could be
-- confirmed by guessing it); a repeat compares digests and answers 409 when
-- they differ. Keys stored before this migration have none: a repeat of one
-- answers the first run, as it did.
ALTER TABLE run_idempotency_keys ADD COLUMN request_digest TEXT;

-- A task a cancel stopped is CANCELLED, no longer FAILED: a cancelled wait did
-- not fail. The state check admits it. NOT VALID then VALIDATE: the new check
-- only widens the old one, and validating takes a lock that lets writes go on.
ALTER TABLE task_instances DROP CONSTRAINT task_instances_state_check;
ALTER TABLE task_instances ADD CONSTRAINT task_instances_state_check
    CHECK (state IN ('PENDING', 'QUEUED', 'RUNNING', 'WAITING',
                     'COMPLETED', 'FAILED', 'SKIPPED', 'CANCELLED')) NOT VALID;
ALTER TABLE task_instances VALIDATE CONSTRAINT task_instances_state_check;
