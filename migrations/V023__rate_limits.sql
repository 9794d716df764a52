-- V023: rate limits (docs/architecture.md §4.12). A worker node may name a rate
-- limit key: a token bucket, shared by name by every node that names it. Each
-- attempt takes its units from the bucket on the admission step; without them it
-- is held (PENDING, in order, never dropped) and released as tokens come back.
CREATE TABLE rate_buckets (
    key          TEXT PRIMARY KEY,
    limit_per    INT NOT NULL CHECK (limit_per >= 1),
    per_seconds  DOUBLE PRECISION NOT NULL CHECK (per_seconds > 0),
    tokens       DOUBLE PRECISION NOT NULL,
    refilled_at  TIMESTAMPTZ NOT NULL,
    -- set through PUT /v1/limits/{key}: the definitions' values no longer apply
    set_by       TEXT
);

ALTER TABLE task_instances ADD COLUMN rate_key TEXT, ADD COLUMN rate_units INT;
CREATE INDEX task_instances_rate_held ON task_instances (rate_key, created_at)
    WHERE rate_key IS NOT NULL AND held_reason IS NOT NULL;
