-- V022: bulk actions on runs (POST /v1/runs/bulk/cancel and /bulk/retry).
--
-- An operation is a row: what to do (cancel or retry), to which runs (the
-- listing's filter, or the ids given), and how far it got. The lease-sweeper
-- runs it in the background at a bounded rate (docs/architecture.md §6.7): it
-- first collects the matching run ids into run_operation_items, a page at a
-- time from the listing's statements (keyset by run id: `cursor` is where the
-- next page starts, so collecting resumes after a restart and never counts the
-- whole table in one statement), then settles each item. An item is settled in
-- the transaction of the cancel or retry it caused, so a restart never applies
-- one twice; runs started after the request are not touched.
-- Not run-scoped, not partitioned: a few rows per operation a person asked for.
CREATE TABLE run_operations (
    id              TEXT COLLATE "C" PRIMARY KEY,
    action          TEXT NOT NULL CHECK (action IN ('cancel', 'retry')),
    -- the listing's parameters (workflow_id, status, labels, created_after,
    -- created_before); NULL when the request named its runs
    filter          JSONB,
    reason          TEXT NOT NULL DEFAULT '',
    -- retry: the node to retry from; NULL: each run's first failed or cancelled node
    from_node       TEXT,
    requested_by    TEXT,
    idempotency_key TEXT UNIQUE,
    -- collecting: the exclusive upper run id of the next page to collect
    cursor          TEXT COLLATE "C",
    collected       BOOLEAN NOT NULL DEFAULT false,
    total           INT NOT NULL DEFAULT 0,
    done            INT NOT NULL DEFAULT 0,
    skipped         INT NOT NULL DEFAULT 0,
    failed          INT NOT NULL DEFAULT 0,
    last_error      TEXT,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    finished_at     TIMESTAMPTZ
);
-- The runner finds the operations still going.
CREATE INDEX run_operations_going ON run_operations (created_at) WHERE finished_at IS NULL;

CREATE TABLE run_operation_items (
    operation_id TEXT COLLATE "C" NOT NULL REFERENCES run_operations (id) ON DELETE CASCADE,
    run_id       TEXT COLLATE "C" NOT NULL,
    -- NULL until settled: done, skipped (nothing to do: finished, or still going
    -- for a retry) or failed (error says why)
    outcome      TEXT CHECK (outcome IN ('done', 'skipped', 'failed')),
    error        TEXT,
    PRIMARY KEY (operation_id, run_id)
);
CREATE INDEX run_operation_items_pending ON run_operation_items (operation_id, run_id)
    WHERE outcome IS NULL;
