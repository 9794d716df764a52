-- V016: run concurrency (docs/architecture.md §4.13). A workflow's concurrency
-- limits how many of its runs of one key are started and not finished at once.
--
-- The slots a key's runs hold are rows, counted under the key's advisory lock:
-- never a position in a list (a position taken at INSERT and seen at COMMIT is
-- how Hatchet once ran 3 with a limit of 2). A run holds at most one slot, from
-- its start to its end; a run over its key's limit waits in runs_waiting until
-- a finishing run of the key hands it its slot. Both tables are small (the runs
-- going and waiting, never the finished) and unpartitioned, like the outbox.
CREATE TABLE run_slots (
    run_id      TEXT COLLATE "C" PRIMARY KEY,
    workflow_id TEXT NOT NULL,
    key         TEXT NOT NULL,
    taken_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX run_slots_key ON run_slots (workflow_id, key, taken_at);

CREATE TABLE runs_waiting (
    run_id      TEXT COLLATE "C" PRIMARY KEY,
    workflow_id TEXT NOT NULL,
    key         TEXT NOT NULL,
    -- 1 (first) to 5, as rendered at start; the release ages it (a level a minute)
    priority    SMALLINT NOT NULL CHECK (priority BETWEEN 1 AND 5),
    -- the limit this run was started under (a templated max_runs is the run's own)
    max_runs    INT NOT NULL CHECK (max_runs >= 1),
    -- the node the start asked to begin at (None: the definition's start)
    start_node  TEXT,
    queued_at   TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX runs_waiting_key ON runs_waiting (workflow_id, key, queued_at);

ALTER TABLE runs_waiting SET (autovacuum_vacuum_scale_factor = 0.01);
ALTER TABLE run_slots SET (autovacuum_vacuum_scale_factor = 0.01);
