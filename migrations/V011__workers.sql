-- V011: the workers that serve the queues, as their heartbeats say.
--
-- Each SDK worker process beats every few seconds over the worker protocol
-- (Heartbeat): its name, host, queues, concurrency, tasks in flight. The
-- coordinator upserts one row per worker at most every few seconds, so the
-- table is small and written at a rate set by the number of workers, never by
-- the number of tasks. A worker that stops on purpose writes stopped_at; one
-- that dies just stops beating ("live" is seen within a threshold the reader
-- chooses). Rows unseen for a day are deleted by the coordinator, a bounded
-- batch at a time. Not run-scoped: not partitioned.
CREATE TABLE workers (
    id            TEXT COLLATE "C" PRIMARY KEY,
    host          TEXT NOT NULL,
    queues        TEXT[] NOT NULL,
    concurrency   INT NOT NULL CHECK (concurrency >= 0),
    in_flight     INT NOT NULL CHECK (in_flight >= 0),
    sdk_version   TEXT NOT NULL,
    -- SERVING or DRAINING while it runs; STOPPED once it stopped on purpose.
    state         TEXT NOT NULL CHECK (state IN ('SERVING', 'DRAINING', 'STOPPED')),
    started_at    TIMESTAMPTZ NOT NULL,
    last_seen_at  TIMESTAMPTZ NOT NULL,
    stopped_at    TIMESTAMPTZ
);

-- Pruning (the oldest first) and the listing (the most recent first).
CREATE INDEX workers_last_seen ON workers (last_seen_at);
