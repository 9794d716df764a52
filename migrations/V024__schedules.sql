-- V024: schedules (docs/architecture.md §6.8). A schedule starts runs of a
-- workflow at cron or interval fire times. Fire times are computed, never
-- stored one by one: a row keeps the next one (next_fire_at) and when it is
-- started (due_at: the fire time plus its jitter). The timer claims due rows
-- (claimed_by/claimed_until: a replica that dies lets its claim run out) and
-- starts one run per fire time under the idempotency key schedule:<id>:<time>,
-- so a second replica, a restart or a crash between the start and the row's
-- update never starts a fire twice. Not run-scoped, not partitioned: a row per
-- schedule a person wrote.
CREATE TABLE schedules (
    id              TEXT COLLATE "C" PRIMARY KEY,
    workflow_id     TEXT NOT NULL,
    -- the ScheduleSpec as JSON (composer_core.schedules); its input is not sealed
    spec            JSONB NOT NULL,
    -- 'definition': written by deploying a version whose schedules: list it (and
    -- removed by deploying one that does not); 'api': POST /v1/schedules
    source          TEXT NOT NULL CHECK (source IN ('definition', 'api')),
    paused          BOOLEAN NOT NULL DEFAULT false,
    -- raised by every change of spec or pause: a claim's write-back that finds
    -- another revision leaves next_fire_at to the change
    revision        INT NOT NULL DEFAULT 1,
    next_fire_at    TIMESTAMPTZ NOT NULL,
    due_at          TIMESTAMPTZ NOT NULL,
    -- buffer_one: the fire time that waits for the last run's end
    buffered_for    TIMESTAMPTZ,
    last_run_id     TEXT COLLATE "C",
    last_fired_for  TIMESTAMPTZ,
    fired           BIGINT NOT NULL DEFAULT 0,
    skipped         BIGINT NOT NULL DEFAULT 0,
    missed          BIGINT NOT NULL DEFAULT 0,
    claimed_by      TEXT,
    claimed_until   TIMESTAMPTZ,
    created_by      TEXT,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at      TIMESTAMPTZ NOT NULL DEFAULT now()
);
-- The timer's look-up: due schedules, soonest first.
CREATE INDEX schedules_due ON schedules (due_at) WHERE NOT paused;
CREATE INDEX schedules_workflow ON schedules (workflow_id);

-- What happened to a schedule, for a person: fires started, skipped (overlap),
-- missed (older than the catch-up window), buffered, pauses, triggers, backfills.
CREATE TABLE schedule_events (
    id              BIGSERIAL PRIMARY KEY,
    schedule_id     TEXT COLLATE "C" NOT NULL,
    at              TIMESTAMPTZ NOT NULL DEFAULT now(),
    kind            TEXT NOT NULL,
    scheduled_for   TIMESTAMPTZ,
    run_id          TEXT COLLATE "C",
    detail          TEXT,
    actor           TEXT
);
CREATE INDEX schedule_events_schedule ON schedule_events (schedule_id, id DESC);

-- A backfill: the schedule's fire times over [start_at, end_at], started in the
-- background (the timer, a claim at a time) with an overlap policy of its own.
-- cursor: the last fire time handled (NULL: none yet).
CREATE TABLE schedule_backfills (
    id              TEXT COLLATE "C" PRIMARY KEY,
    schedule_id     TEXT COLLATE "C" NOT NULL REFERENCES schedules (id) ON DELETE CASCADE,
    start_at        TIMESTAMPTZ NOT NULL,
    end_at          TIMESTAMPTZ NOT NULL CHECK (end_at >= start_at),
    overlap         TEXT NOT NULL CHECK (overlap IN ('allow_all', 'skip', 'buffer_all')),
    cursor          TIMESTAMPTZ,
    total           INT NOT NULL,
    started         INT NOT NULL DEFAULT 0,
    skipped         INT NOT NULL DEFAULT 0,
    last_run_id     TEXT COLLATE "C",
    requested_by    TEXT,
    claimed_by      TEXT,
    claimed_until   TIMESTAMPTZ,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    finished_at     TIMESTAMPTZ
);
CREATE INDEX schedule_backfills_going ON schedule_backfills (created_at) WHERE finished_at IS NULL;

-- The runs a schedule started, and the fire time each was started for.
ALTER TABLE workflow_runs ADD COLUMN schedule_id TEXT, ADD COLUMN scheduled_for TIMESTAMPTZ;
CREATE INDEX workflow_runs_schedule ON workflow_runs (schedule_id, id DESC)
    WHERE schedule_id IS NOT NULL;
