-- Every SQL statement Composer runs, by name. Loaded once by _sql.py; a test
-- prepares each one against a migrated database. A few run together in one round
-- trip, each a data-modifying CTE of one statement (_sql.together, write_step):
-- only statements that write different rows and read nothing another writes.
--
-- Run-scoped tables (workflow_runs, task_instances, workflow_events,
-- run_history, task_logs) are partitioned by run id: every statement on them
-- filters on the run id, so it touches one partition. Fenced task updates repeat the state machine's check
-- (task id, node id, attempt, an active state) so a write the snapshot did not
-- expect matches no row instead of corrupting one.
--
-- Batched fenced updates (many rows, their keys in arrays) find and lock their rows
-- in a MATERIALIZED CTE, one primary-key probe per row (CROSS JOIN LATERAL … FOR
-- UPDATE: a locking subquery is never flattened into a join), and then write the
-- rows they locked, by key and with no fence left to check. Written as one join with
-- the fence, the planner estimates the fence's state (state = 'WAITING', ...) to
-- match a handful of rows, on a young partition without statistics and on one whose
-- statistics say nearly every row is finished; it then scans every row of the
-- partition once and compares each with every row of the batch (a join filter over
-- a materialized scan). That was 100 × 1,000 comparisons a statement in W4 (12–23 ms
-- instead of 2) and 1,600 × 1,600 in W2's publish (268 ms); it grows with the
-- partition until the planner's estimate crosses over.
--
-- Every time an event's transaction writes is composer_now() (migration V003):
-- clock_timestamp() read once by the lock query, after the run lock was
-- granted, and kept for the transaction. So each event's rows carry one time,
-- later than anything an earlier transaction of the run wrote, whatever order
-- the transactions began in: nothing finishes before it starts, and no task
-- reads as created after its run finished unless it was. Statements outside an
-- event (a start, a lease, the enqueuer, a definition change) use now().

-- =============================================================================
-- Definitions
-- =============================================================================

-- name: create_definition
-- The next version of a workflow. Two concurrent creates compute the same
-- version; the second fails on the primary key and is told to try again.
INSERT INTO workflow_definitions (id, version, name, spec, webhook_url, created_by)
SELECT $1, COALESCE(max(version), 0) + 1, $2, $3, $4, $5
  FROM workflow_definitions
 WHERE id = $1
RETURNING id, version, name, spec, webhook_url, created_by, deployed, deployed_at, deleted_at, created_at;

-- name: get_definition
SELECT id, version, name, spec, webhook_url, created_by, deployed, deployed_at, deleted_at, created_at
  FROM workflow_definitions
 WHERE id = $1 AND version = $2;

-- name: lock_definition_versions
-- Until commit: applies of one workflow take turns, so two identical ones at
-- once store one version (the second sees the first's).
SELECT pg_advisory_xact_lock(hashtext('composer.definitions:' || $1::text));

-- name: get_latest_definition
-- The newest version that is not deleted: what an apply compares a definition with.
SELECT id, version, name, spec, webhook_url, created_by, deployed, deployed_at, deleted_at, created_at
  FROM workflow_definitions
 WHERE id = $1 AND deleted_at IS NULL
 ORDER BY version DESC
 LIMIT 1;

-- name: get_deployed_definition
SELECT id, version, name, spec, webhook_url, created_by, deployed, deployed_at, deleted_at, created_at
  FROM workflow_definitions
 WHERE id = $1 AND deployed AND deleted_at IS NULL;

-- name: get_deployed_version
-- The deployed version's number alone: a start's look-up, its DAG cached by version.
SELECT version
  FROM workflow_definitions
 WHERE id = $1 AND deployed AND deleted_at IS NULL;

-- name: list_definition_versions
-- A workflow's versions without their specs, newest first.
SELECT id, version, name, webhook_url, created_by, deployed, deployed_at, deleted_at, created_at
  FROM workflow_definitions
 WHERE id = $1 AND deleted_at IS NULL
 ORDER BY version DESC;

-- name: list_definitions
-- One row per workflow that has a version not deleted.
SELECT id,
       (array_agg(name ORDER BY version DESC))[1] AS name,
       max(version) AS latest_version,
       max(version) FILTER (WHERE deployed) AS deployed_version,
       min(created_at) AS created_at,
       max(created_at) AS updated_at
  FROM workflow_definitions
 WHERE deleted_at IS NULL
 GROUP BY id
 ORDER BY id;

-- name: deploy_definition
-- Marks one version deployed and every other version of the workflow not, in
-- one statement (the one-deployed constraint is checked at its end).
UPDATE workflow_definitions
   SET deployed = (version = $2),
       deployed_at = CASE WHEN version = $2 THEN now() ELSE deployed_at END
 WHERE id = $1
   AND (deployed OR version = $2)
   AND EXISTS (SELECT 1 FROM workflow_definitions
                WHERE id = $1 AND version = $2 AND deleted_at IS NULL)
RETURNING version, deployed;

-- name: delete_definition
-- Soft delete: no new runs; runs pinned to a version still load it and finish.
UPDATE workflow_definitions
   SET deleted_at = now()
 WHERE id = $1 AND deleted_at IS NULL
RETURNING version;

-- =============================================================================
-- Runs
-- =============================================================================

-- name: definition_deleted_at
SELECT deleted_at
  FROM workflow_definitions
 WHERE id = $1 AND version = $2;

-- name: find_idempotent_run
SELECT r.id, r.status, k.request_digest, now() AS now
  FROM run_idempotency_keys k
  JOIN workflow_runs r ON r.id = k.run_id
 WHERE k.workflow_id = $1 AND k.idempotency_key = $2;

-- name: insert_run
-- A start in one round trip: the version's check (it exists and is not deleted), the
-- idempotency key's claim ($7; NULL: none) and the run's row, with the schedule and
-- fire time it was started for ($13, $14; V024) and its priority ($15; V026). The
-- key's claim waits for a concurrent start with the same key to commit or roll back; $12 is the digest of
-- the start's request (V012), what a repeat is compared with. Nothing is written when
-- the version is missing (live NULL) or deleted (live false), or the key was taken
-- (claimed false): status is NULL then, and when the run id was taken.
WITH definition AS (
    SELECT deleted_at IS NULL AS live
      FROM workflow_definitions
     WHERE id = $2 AND version = $3
), key AS (
    INSERT INTO run_idempotency_keys (workflow_id, idempotency_key, run_id, request_digest)
    SELECT $2::text, $7::text, $1::text, $12::text
     WHERE $7::text IS NOT NULL AND (SELECT live FROM definition)
    ON CONFLICT DO NOTHING
    RETURNING run_id
), run AS (
    INSERT INTO workflow_runs (id, workflow_id, version, status, input, config, idempotency_key,
                               data_key, started_by, context, labels, schedule_id, scheduled_for,
                               priority)
    SELECT $1::text, $2::text, $3::int, $4::text, $5::jsonb, $6::jsonb, $7::text, $8::text,
           $9::text, $10::jsonb, $11::jsonb, $13::text, $14::timestamptz, $15::smallint
     WHERE (SELECT live FROM definition) AND ($7::text IS NULL OR EXISTS (SELECT 1 FROM key))
    ON CONFLICT (id) DO NOTHING
    RETURNING status
)
SELECT (SELECT status FROM run) AS status,
       (SELECT live FROM definition) AS live,
       EXISTS (SELECT 1 FROM key) AS claimed,
       now() AS now;

-- name: insert_runs
-- insert_run for several starts in one statement (a timer firing many schedules at
-- once: one round trip a transaction, not one a start), row n of the answer for start
-- n. Each row is checked and claimed as insert_run does; two starts of the batch with
-- the same key: the first claims it, the second finds it claimed (claimed false).
WITH req AS (
    SELECT u.*, CASE WHEN d.id IS NOT NULL THEN d.deleted_at IS NULL END AS live  -- NULL: none
      -- the documents come as JSON texts (json_texts), cast where they are stored
      FROM unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::text[], $6::text[],
                  $7::text[], $8::text[], $9::text[], $10::text[], $11::text[], $12::text[],
                  $13::text[], $14::timestamptz[], $15::smallint[])
           WITH ORDINALITY AS u(id, workflow_id, version, status, input, config,
                                idempotency_key, data_key, started_by, context, labels,
                                request_digest, schedule_id, scheduled_for, priority, n)
      LEFT JOIN workflow_definitions d ON d.id = u.workflow_id AND d.version = u.version
), key AS (
    INSERT INTO run_idempotency_keys (workflow_id, idempotency_key, run_id, request_digest)
    SELECT workflow_id, idempotency_key, id, request_digest
      FROM req
     WHERE idempotency_key IS NOT NULL AND live
     ORDER BY n
    ON CONFLICT DO NOTHING
    RETURNING run_id
), run AS (
    INSERT INTO workflow_runs (id, workflow_id, version, status, input, config, idempotency_key,
                               data_key, started_by, context, labels, schedule_id, scheduled_for,
                               priority)
    SELECT id, workflow_id, version, status, input::jsonb, config::jsonb, idempotency_key,
           data_key, started_by, context::jsonb, labels::jsonb, schedule_id, scheduled_for,
           priority
      FROM req
     WHERE live AND (idempotency_key IS NULL OR id IN (SELECT run_id FROM key))
    ON CONFLICT (id) DO NOTHING
    RETURNING id, status
)
SELECT r.n, run.status, r.live, r.id IN (SELECT run_id FROM key) AS claimed, now() AS now
  FROM req r
  LEFT JOIN run ON run.id = r.id
 ORDER BY r.n;

-- name: lock_run
-- The first statement of every event's transaction: the run's row lock,
-- held until commit, serializes all events of one run. It also returns the
-- event's clock, read after the lock (every time the event persists is it).
-- Buffered signals are read only when the machine asks (a node that waits for a
-- signal parks). The calling context comes along: the task rows the event inserts
-- for kinds that carry it copy it (V008).
SELECT s.workflow_id, s.version, s.status, s.input, s.config, s.data_key, s.context,
       -- evaluated above the row lock (a subquery with FOR UPDATE is not flattened)
       set_config('composer.now', clock_timestamp()::text, true)::timestamptz AS now
  FROM (SELECT r.workflow_id, r.version, r.status, r.input, r.config, r.data_key, r.context
          FROM workflow_runs r
         WHERE r.id = $1
           FOR UPDATE) s;

-- name: load_task_states
-- What routing needs from each reached node: no inputs, no outputs. A MAP node's
-- items (V021) are load_map_items_of_run's, asked only when the run has a MAP in
-- progress: one scan here, so its plan is cheap to make (with the items' laterals
-- in the same statement, each execution spent ~2 ms making its plan, as
-- load_task_states_of_runs did).
SELECT node_id, id, state, attempt, branches, awaited_signal, error, NULL::int AS item,
       map_progress
  FROM task_instances
 WHERE run_id = $1 AND item IS NULL;

-- name: load_map_items_of_run
-- The items of the run's MAP nodes in progress that routing needs: only those
-- its progress names: in flight, and as many of the next to go (a group commit's
-- reports of one run each send one), never all: an event costs the same at item
-- 1 and item 1,000. Each item is one probe of the (run, node, item) index
-- (LATERAL … LIMIT 1 keeps the planner from hashing every item of the node
-- instead). The columns are load_task_states's.
SELECT i.node_id, i.id, i.state, i.attempt, NULL AS branches, NULL AS awaited_signal, i.error,
       i.item, NULL AS map_progress
  FROM task_instances m
 CROSS JOIN LATERAL (
           SELECT f::int FROM jsonb_array_elements_text(m.map_progress -> 'in_flight') f
           UNION ALL
           SELECT generate_series((m.map_progress ->> 'next')::int,
                                  (m.map_progress ->> 'next')::int
                                  + jsonb_array_length(m.map_progress -> 'in_flight'))) l(item)
 CROSS JOIN LATERAL (
           SELECT i.node_id, i.id, i.state, i.attempt, i.error, i.item
             FROM task_instances i
            WHERE i.run_id = $1 AND i.node_id = m.node_id AND i.item = l.item
            LIMIT 1) i
 WHERE m.run_id = $1 AND m.item IS NULL AND m.map_progress IS NOT NULL
   AND m.state = 'WAITING';

-- name: lock_runs
-- The lock query of a batch of events (the coordinator's group commit): every
-- run of the batch not locked by another transaction, in id order (so two
-- batches never deadlock), and one clock for the whole transaction, read
-- after the last lock was granted. A run another transaction holds is skipped:
-- its event is applied on its own, waiting for the lock. The locks gave the
-- transaction its id, read here too: tracked_transaction need not ask for it.
-- $2, when not NULL, is the earliest the clock may read: the due time of the waits
-- a staged timer group fires (docs/architecture.md §3.1, "Waits due together").
WITH locked AS MATERIALIZED (
    SELECT r.id, r.workflow_id, r.version, r.status, r.input, r.config, r.data_key, r.context,
           r.priority
      FROM workflow_runs r
     WHERE r.id = ANY($1::text[])
     ORDER BY r.id
       FOR UPDATE SKIP LOCKED
), clock AS MATERIALIZED (
    SELECT set_config('composer.now', greatest(clock_timestamp(), $2::timestamptz)::text,
                      true)::timestamptz AS now,
           pg_current_xact_id_if_assigned()::text AS xid
      FROM (SELECT count(*) FROM locked) c
)
SELECT l.id, l.workflow_id, l.version, l.status, l.input, l.config, l.data_key, l.context,
       l.priority, clock.now, clock.xid
  FROM clock, locked l;

-- name: load_task_states_of_runs
-- load_task_states for a batch of reports ($1: their runs), with the token and
-- queue of each RUNNING attempt's lease (a report counts only with the lease's
-- token); a MAP node's items are load_map_items_of_runs's, asked only for the
-- runs with a MAP in progress. One scan, so its plan is cheap to make: with the
-- items' branches in the same statement, PostgreSQL spent ~2 ms making the plan
-- (a custom plan each time, for the partitions the run ids prune to) to run it
-- in 0.1, on every group commit. Each run is one probe of its run's index entries
-- (LATERAL, not flattened: OFFSET 0): as `run_id = ANY($1)`, the plan made without
-- the ids (the generic plan, docs/architecture.md §5) walked a nearly empty
-- partition's (node_id, run_id, item) index whole for `item IS NULL`, cheaper than
-- the ten probes it assumes an array holds, and went on doing so as it filled.
SELECT t.run_id, t.node_id, t.id, t.state, t.attempt, t.branches, t.awaited_signal, t.error,
       t.queue, CASE WHEN t.state = 'RUNNING' THEN t.lease_token END AS lease_token,
       NULL::int AS item, t.map_progress
  FROM unnest($1::text[]) AS u(run_id)
 CROSS JOIN LATERAL (
           SELECT * FROM task_instances t WHERE t.run_id = u.run_id AND t.item IS NULL
           OFFSET 0) t;

-- name: load_map_items_of_runs
-- The MAP items a batch of reports needs ($1: the runs with a MAP node WAITING with
-- its progress): those the reports name ($2, $3: each report's run id and task
-- id) and as many of the next to go as its run has reports in the batch (a report
-- frees one place at most): a batch reads what its reports touch, however many
-- items are in flight. Each item is one probe of an index (LATERAL … LIMIT 1:
-- never a hash of every item of the node); the one by task id is the primary
-- key's; the MAPs' own rows are read once for both (maps), one probe of each run's
-- (as load_task_states_of_runs).
-- The columns are load_task_states_of_runs's.
WITH maps AS MATERIALIZED (
    SELECT m.*
      FROM unnest($1::text[]) AS a(run_id)
     CROSS JOIN LATERAL (
               SELECT * FROM task_instances m
                WHERE m.run_id = a.run_id AND m.item IS NULL AND m.map_progress IS NOT NULL
                  AND m.state = 'WAITING'
               OFFSET 0) m
)
SELECT i.run_id, i.node_id, i.id, i.state, i.attempt, NULL AS branches,
       NULL AS awaited_signal, i.error, i.queue,
       CASE WHEN i.state = 'RUNNING' THEN i.lease_token END AS lease_token, i.item,
       NULL AS map_progress
  FROM maps m
 CROSS JOIN LATERAL (
           SELECT r.id FROM unnest($2::text[], $3::text[]) AS r(run_id, id)
            WHERE r.run_id = m.run_id) r
 CROSS JOIN LATERAL (
           SELECT i.run_id, i.node_id, i.id, i.state, i.attempt, i.error, i.queue,
                  i.lease_token, i.item
             FROM task_instances i
            WHERE i.run_id = m.run_id AND i.id = r.id
            LIMIT 1) i
 WHERE i.node_id = m.node_id AND i.item IS NOT NULL
UNION ALL
SELECT i.run_id, i.node_id, i.id, i.state, i.attempt, NULL, NULL, i.error, i.queue,
       CASE WHEN i.state = 'RUNNING' THEN i.lease_token END, i.item, NULL
  FROM maps m
 CROSS JOIN LATERAL generate_series(
           (m.map_progress ->> 'next')::int,
           (m.map_progress ->> 'next')::int
           + cardinality(array_positions($2::text[], m.run_id)) - 1) l(item)
 CROSS JOIN LATERAL (
           SELECT i.run_id, i.node_id, i.id, i.state, i.attempt, i.error, i.queue,
                  i.lease_token, i.item
             FROM task_instances i
            WHERE i.run_id = m.run_id AND i.node_id = m.node_id AND i.item = l.item
            LIMIT 1) i;

-- name: load_items
-- Items of one MAP node by index ($3): those a decision asks for (the next to go).
SELECT item, id, state, attempt, error
  FROM task_instances
 WHERE run_id = $1 AND node_id = $2 AND item = ANY($3::int[]);

-- name: load_item_outputs
-- Every item's output of one MAP node, in item order (NULL: it did not complete):
-- read once, as the MAP completes.
SELECT item, CASE WHEN state = 'COMPLETED' THEN output END AS output
  FROM task_instances
 WHERE run_id = $1 AND node_id = $2 AND item IS NOT NULL
 ORDER BY item;

-- name: start_items
-- MAP items that waited for a place go: due for dispatch from now (their outbox
-- rows are written after). Only one still waiting.
-- Found and locked one probe each, then written (batched fenced updates, above).
WITH fenced AS MATERIALIZED (
    SELECT u.run_id, u.id
      FROM unnest($1::text[], $2::text[]) AS u(run_id, id)
     CROSS JOIN LATERAL (
         SELECT FROM task_instances t
          WHERE t.run_id = u.run_id AND t.id = u.id AND t.state = 'PENDING'
            AND t.dispatched_at IS NULL AND t.held_reason IS NULL AND t.item IS NOT NULL
            FOR UPDATE
     ) found
)
UPDATE task_instances t
   SET dispatched_at = composer_now(), updated_at = composer_now()
  FROM fenced f
 WHERE t.run_id = f.run_id AND t.id = f.id
RETURNING t.id;

-- name: set_map_progress
-- The progress of MAP nodes (their own rows), as the transaction's events left it.
-- Found and locked one probe each, then written (batched fenced updates, above).
WITH fenced AS MATERIALIZED (
    SELECT u.run_id, u.id, u.progress
      FROM unnest($1::text[], $2::text[], $3::jsonb[]) AS u(run_id, id, progress)
     CROSS JOIN LATERAL (
         SELECT FROM task_instances t
          WHERE t.run_id = u.run_id AND t.id = u.id AND t.item IS NULL
            FOR UPDATE
     ) found
)
UPDATE task_instances t
   SET map_progress = f.progress
  FROM fenced f
 WHERE t.run_id = f.run_id AND t.id = f.id
RETURNING t.id;

-- name: cancel_items
-- Every item of a MAP node that has not finished (sent or still waiting), with
-- the reason as its error, taken off every loop.
UPDATE task_instances
   SET state = 'CANCELLED', error = $3, finished_at = composer_now(), updated_at = composer_now(),
       dispatched_at = NULL, held_reason = NULL, lease_owner = NULL, lease_expires_at = NULL,
       lease_token = NULL, lease_claim = NULL
 WHERE run_id = $1 AND node_id = $2 AND item IS NOT NULL
   AND state IN ('PENDING', 'QUEUED', 'RUNNING')
RETURNING id, queue;

-- name: load_outputs
-- The nodes' own tasks (item IS NULL): a MAP's items carry its node id too.
SELECT node_id, output
  FROM task_instances
 WHERE run_id = $1 AND node_id = ANY($2::text[]) AND item IS NULL AND state = 'COMPLETED';

-- name: reopen_run
-- A retry: the run is RUNNING again, possibly on another version and with
-- new input or config; its previous outcome is cleared.
UPDATE workflow_runs
   SET status = 'RUNNING', version = $2, input = $3, config = $4,
       output = NULL, error = NULL, completed_at = NULL, updated_at = composer_now()
 WHERE id = $1
RETURNING 1;

-- name: delete_tasks
DELETE FROM task_instances
 WHERE run_id = $1 AND node_id = ANY($2::text[]);

-- name: finish_runs
-- Runs end (a terminal status, their output or error), many of one transaction in one
-- statement; each found by its id (the partition's primary key).
-- Found and locked one probe each, then written (batched fenced updates, above).
WITH fenced AS MATERIALIZED (
    SELECT u.id, u.status, u.output, u.error
      FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS u(id, status, output, error)
     CROSS JOIN LATERAL (
         SELECT FROM workflow_runs r
          WHERE r.id = u.id AND r.status IN ('PENDING', 'RUNNING', 'PAUSED')
            FOR UPDATE
     ) found
)
UPDATE workflow_runs r
   SET status = f.status, output = f.output::jsonb, error = f.error,
       completed_at = composer_now(), updated_at = composer_now()
  FROM fenced f
 WHERE r.id = f.id
RETURNING r.id, r.workflow_id, r.version, r.created_at, r.completed_at,
          (SELECT d.webhook_url FROM workflow_definitions d
            WHERE d.id = r.workflow_id AND d.version = r.version) AS webhook_url,
          r.parent_run_id, r.parent_node_id, r.parent_task_id, r.parent_attempt;

-- name: get_run
SELECT id, workflow_id, version, status, input, config, output, error, idempotency_key,
       created_at, updated_at, completed_at, context, started_by, cancelled_by, retried_by,
       labels, parent_run_id, parent_node_id, parent_task_id, parent_attempt, schedule_id,
       scheduled_for
  FROM workflow_runs
 WHERE id = $1;

-- name: record_cancelled_by
-- Who cancelled the run (the name of their API token), in the cancel's transaction.
UPDATE workflow_runs SET cancelled_by = $2 WHERE id = $1 RETURNING 1;

-- name: record_retried_by
-- Who last retried the run, in the retry's transaction.
UPDATE workflow_runs SET retried_by = $2 WHERE id = $1 RETURNING 1;

-- name: get_run_tasks
-- The run's own tasks; a MAP's with how many items it has and how many are in each
-- state (its items are listed apart: get_map_items).
SELECT t.id, t.node_id, t.node_type, t.state, t.attempt, t.max_attempts, t.input, t.output,
       t.error, t.error_code, t.branches, t.wake_at, t.awaited_signal, t.queue, t.lease_owner,
       t.lease_expires_at, t.created_at, t.updated_at, t.started_at, t.finished_at,
       t.held_reason, NULL::int AS item,
       CASE WHEN t.map_progress IS NOT NULL THEN
           (SELECT jsonb_object_agg(c.state, c.n)
              FROM (SELECT i.state, count(*) AS n
                      FROM task_instances i
                     WHERE i.run_id = $1 AND i.node_id = t.node_id AND i.item IS NOT NULL
                     GROUP BY i.state) c)
       END AS item_counts,
       (t.map_progress ->> 'total')::int AS items_total
  FROM task_instances t
 WHERE t.run_id = $1 AND t.item IS NULL
 ORDER BY t.id;

-- name: get_map_items
-- A page of one MAP node's items, in item order from index $3.
SELECT id, node_id, node_type, state, attempt, max_attempts, input, output, error, error_code,
       branches, wake_at, awaited_signal, queue, lease_owner, lease_expires_at,
       created_at, updated_at, started_at, finished_at, held_reason, item,
       NULL::jsonb AS item_counts, NULL::int AS items_total
  FROM task_instances
 WHERE run_id = $1 AND node_id = $2 AND item IS NOT NULL AND item >= $3
 ORDER BY item
 LIMIT $4;

-- name: insert_task_logs
-- The log lines of the attempts a transaction's reports carried (the group
-- commit), in one statement. An attempt reported once: a repeat of its report
-- is fenced before it gets here, and a replay of the transaction writes the
-- same row, so a second one is left out.
INSERT INTO task_logs (run_id, task_id, node_id, attempt, lines, truncated, created_at)
SELECT u.run_id, u.task_id, u.node_id, u.attempt, u.lines, u.truncated, composer_now()
  FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::text[], $6::int[])
           AS u(run_id, task_id, node_id, attempt, lines, truncated)
ON CONFLICT (run_id, task_id, attempt) DO NOTHING;

-- name: get_task_logs
-- One run's attempt logs, of one node ($2) or all (NULL), in the order they were
-- reported.
SELECT task_id, node_id, attempt, lines, truncated, created_at
  FROM task_logs
 WHERE run_id = $1 AND ($2::text IS NULL OR node_id = $2)
 ORDER BY created_at, task_id, attempt;

-- Listing runs, newest first. $1 is the exclusive upper id bound (the cursor,
-- or the bound of created_before), $2 the inclusive lower one (created_after):
-- both prune partitions. One statement per filter combination, so each keeps
-- a plan that uses its index.

-- name: list_runs
SELECT id, workflow_id, version, status, error, idempotency_key, created_at, updated_at, completed_at,
       started_by, labels, schedule_id, scheduled_for
  FROM workflow_runs
 WHERE id < $1 AND id >= $2
 ORDER BY id DESC
 LIMIT $3;

-- name: list_runs_by_workflow
SELECT id, workflow_id, version, status, error, idempotency_key, created_at, updated_at, completed_at,
       started_by, labels, schedule_id, scheduled_for
  FROM workflow_runs
 WHERE id < $1 AND id >= $2 AND workflow_id = $4
 ORDER BY id DESC
 LIMIT $3;

-- name: list_runs_by_status
SELECT id, workflow_id, version, status, error, idempotency_key, created_at, updated_at, completed_at,
       started_by, labels, schedule_id, scheduled_for
  FROM workflow_runs
 WHERE id < $1 AND id >= $2 AND status = $4
 ORDER BY id DESC
 LIMIT $3;

-- name: list_runs_by_workflow_status
SELECT id, workflow_id, version, status, error, idempotency_key, created_at, updated_at, completed_at,
       started_by, labels, schedule_id, scheduled_for
  FROM workflow_runs
 WHERE id < $1 AND id >= $2 AND workflow_id = $4 AND status = $5
 ORDER BY id DESC
 LIMIT $3;

-- The same four with a label filter, $N a JSON object of every label asked for
-- (all must match: containment), which the partial GIN index workflow_runs_labels
-- answers (V017); with a status or workflow beside it the planner ANDs the two
-- indexes' bitmaps, or walks the id index when the label is common
-- (docs/architecture.md §5, "Finding runs").

-- name: plan_listing_per_value
-- Before a labelled listing, in its transaction: plan it for the values it is
-- given, never with the generic plan a prepared statement may switch to. The
-- right plan depends on how common the label is (a rare one: its GIN entries; a
-- common one: walk the id index and stop at a page), which only the value tells;
-- the generic plan walked the id index for a rare label in 570 ms (1 M runs,
-- docs/architecture.md §5).
SELECT set_config('plan_cache_mode', 'force_custom_plan', true);

-- name: list_runs_labelled
SELECT id, workflow_id, version, status, error, idempotency_key, created_at, updated_at, completed_at,
       started_by, labels, schedule_id, scheduled_for
  FROM workflow_runs
 WHERE id < $1 AND id >= $2 AND labels @> $4::jsonb
 ORDER BY id DESC
 LIMIT $3;

-- name: list_runs_by_workflow_labelled
SELECT id, workflow_id, version, status, error, idempotency_key, created_at, updated_at, completed_at,
       started_by, labels, schedule_id, scheduled_for
  FROM workflow_runs
 WHERE id < $1 AND id >= $2 AND workflow_id = $4 AND labels @> $5::jsonb
 ORDER BY id DESC
 LIMIT $3;

-- name: list_runs_by_status_labelled
SELECT id, workflow_id, version, status, error, idempotency_key, created_at, updated_at, completed_at,
       started_by, labels, schedule_id, scheduled_for
  FROM workflow_runs
 WHERE id < $1 AND id >= $2 AND status = $4 AND labels @> $5::jsonb
 ORDER BY id DESC
 LIMIT $3;

-- name: list_runs_by_workflow_status_labelled
SELECT id, workflow_id, version, status, error, idempotency_key, created_at, updated_at, completed_at,
       started_by, labels, schedule_id, scheduled_for
  FROM workflow_runs
 WHERE id < $1 AND id >= $2 AND workflow_id = $4 AND status = $5 AND labels @> $6::jsonb
 ORDER BY id DESC
 LIMIT $3;

-- =============================================================================
-- Tasks
-- =============================================================================

-- name: insert_task
-- The task a CreateTask describes; nothing when the node already has one.
-- A PENDING task is with a worker from now on (dispatched_at); one created
-- final (control nodes, satisfied waits, skips, failures) is finished now.
INSERT INTO task_instances
       (id, run_id, node_id, node_type, state, input, output, error, branches, wake_at,
        awaited_signal, queue, max_attempts, context, created_at, updated_at, dispatched_at,
        started_at, finished_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, composer_now(), composer_now(),
        CASE WHEN $5 = 'PENDING' THEN composer_now() END,
        CASE WHEN $5 IN ('WAITING', 'COMPLETED', 'FAILED') THEN composer_now() END,
        CASE WHEN $5 IN ('COMPLETED', 'FAILED', 'SKIPPED') THEN composer_now() END)
ON CONFLICT (run_id, node_id, item) DO NOTHING
RETURNING 1;

-- name: insert_tasks
-- insert_task for many tasks of one transaction (the group commit), in one
-- statement; returns the ids inserted (a node that already had its task is
-- left out: the caller's snapshot was stale). No recorded branches here: a task
-- created with them goes through insert_task.
-- Documents go as JSON texts ($6, $7, $13): a jsonb[] parameter would take a
-- list value for a dimension of the array (a list output flattened, or refused).
-- A MAP's item ($15: its index) that waits for a place ($17) gets no dispatch
-- time until it goes (start_items); a MAP's own task carries its progress ($16).
-- A task leased as it is inserted (RUNNING: the next task a report's worker takes
-- with its answer, engine/_lease_ahead.py) carries its lease ($18-$20: owner,
-- token, expiry) and starts at the transaction's clock, as acquire_leases would
-- have leased it in the same transaction, without the second write of its row.
INSERT INTO task_instances
       (id, run_id, node_id, node_type, state, input, output, error, error_code, wake_at,
        awaited_signal, queue, max_attempts, context, item, map_progress, created_at,
        updated_at, dispatched_at, started_at, finished_at, lease_owner, lease_token,
        lease_expires_at, lease_claim)
SELECT u.id, u.run_id, u.node_id, u.node_type, u.state, u.input::jsonb, u.output::jsonb, u.error,
       u.error_code, u.wake_at, u.awaited_signal, u.queue, u.max_attempts, u.context::jsonb,
       u.item, u.map_progress, composer_now(), composer_now(),
       CASE WHEN (u.state = 'PENDING' AND NOT u.waits) OR u.state = 'RUNNING'
            THEN composer_now() END,
       CASE WHEN u.state IN ('WAITING', 'COMPLETED', 'FAILED', 'RUNNING') THEN composer_now() END,
       CASE WHEN u.state IN ('COMPLETED', 'FAILED', 'SKIPPED') THEN composer_now() END,
       u.lease_owner, u.lease_token, u.lease_expires_at,
       CASE WHEN u.lease_token IS NOT NULL THEN '' END
  FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
              $7::text[], $8::text[], $9::timestamptz[], $10::text[], $11::text[], $12::int[],
              $13::text[], $14::text[], $15::int[], $16::jsonb[], $17::bool[], $18::text[],
              $19::text[], $20::timestamptz[])
           AS u(id, run_id, node_id, node_type, state, input, output, error, wake_at,
                awaited_signal, queue, max_attempts, context, error_code, item, map_progress,
                waits, lease_owner, lease_token, lease_expires_at)
ON CONFLICT (run_id, node_id, item) DO NOTHING
RETURNING id;

-- name: complete_tasks
-- complete_task for many attempts of one transaction, in one statement. An
-- earlier attempt's error goes: a COMPLETED task shows no error.
-- The node id is a fence, compared with IS NOT DISTINCT FROM (never an index
-- condition; the column is NOT NULL): each row is found by its primary key,
-- never by the (run, node, item) index, which for a MAP's item would walk every
-- item of its node (the planner takes either when it cannot tell them apart).
-- The rows are found and locked one probe each, then written (batched fenced
-- updates, above).
WITH fenced AS MATERIALIZED (
    SELECT u.run_id, u.id, u.output
      FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::text[])
               AS u(run_id, id, node_id, attempt, output)
     CROSS JOIN LATERAL (
         SELECT FROM task_instances t
          WHERE t.run_id = u.run_id AND t.id = u.id
            AND t.node_id IS NOT DISTINCT FROM u.node_id AND t.attempt = u.attempt
            AND t.state IN ('PENDING', 'QUEUED', 'RUNNING')
            FOR UPDATE
     ) found
)
UPDATE task_instances t
   SET state = 'COMPLETED', output = f.output::jsonb, error = NULL, error_code = NULL,
       finished_at = composer_now(),
       updated_at = composer_now(), dispatched_at = NULL, lease_owner = NULL,
       lease_expires_at = NULL, lease_token = NULL, lease_claim = NULL
  FROM fenced f
 WHERE t.run_id = f.run_id AND t.id = f.id
RETURNING t.id, t.node_type, t.started_at, t.finished_at, t.queue, t.limit_key;

-- name: fail_task
-- The node id: a fence by primary key, as in complete_tasks.
UPDATE task_instances
   SET state = 'FAILED', error = $5, error_code = $6, finished_at = composer_now(),
       updated_at = composer_now(),
       dispatched_at = NULL, lease_owner = NULL, lease_expires_at = NULL,
       lease_token = NULL, lease_claim = NULL
 WHERE run_id = $1 AND id = $2 AND node_id IS NOT DISTINCT FROM $3 AND attempt = $4
   AND state IN ('PENDING', 'QUEUED', 'RUNNING')
RETURNING node_type, started_at, finished_at, queue, limit_key;

-- name: requeue_task
-- The next attempt of a failed execution: back to PENDING with attempt + 1,
-- due for dispatch at $7. Returns the input stored when the task was created,
-- which the next dispatch sends again.
-- The node id: a fence by primary key, as in complete_tasks.
UPDATE task_instances
   SET state = 'PENDING', attempt = attempt + 1, error = $5, error_code = $6,
       dispatched_at = $7, started_at = NULL, updated_at = composer_now(),
       lease_owner = NULL, lease_expires_at = NULL, lease_token = NULL, lease_claim = NULL
 WHERE run_id = $1 AND id = $2 AND node_id IS NOT DISTINCT FROM $3 AND attempt = $4
   AND state IN ('PENDING', 'QUEUED', 'RUNNING')
RETURNING attempt, node_type, queue, input, limit_key;

-- name: resolve_waits
-- WAITING tasks complete or fail (timers fired, signals arrived, waits timed out), many
-- of one transaction in one statement; the node id a fence by primary key, as in
-- complete_tasks.
-- Found and locked one probe each, then written (batched fenced updates, above).
WITH fenced AS MATERIALIZED (
    SELECT u.run_id, u.id, u.state, u.output, u.error
      FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[])
               AS u(run_id, id, node_id, state, output, error)
     CROSS JOIN LATERAL (
         SELECT FROM task_instances t
          WHERE t.run_id = u.run_id AND t.id = u.id
            AND t.node_id IS NOT DISTINCT FROM u.node_id AND t.state = 'WAITING'
            FOR UPDATE
     ) found
)
UPDATE task_instances t
   SET state = f.state, output = f.output::jsonb, error = f.error, wake_at = NULL,
       finished_at = composer_now(), updated_at = composer_now()
  FROM fenced f
 WHERE t.run_id = f.run_id AND t.id = f.id
RETURNING t.id;

-- name: cancel_tasks
-- Cancels the run's still-active tasks among $2, and takes them off every loop.
UPDATE task_instances
   SET state = 'CANCELLED', error = $3, finished_at = composer_now(), updated_at = composer_now(),
       wake_at = NULL, dispatched_at = NULL, lease_owner = NULL, lease_expires_at = NULL,
       lease_token = NULL, lease_claim = NULL
 WHERE run_id = $1 AND id = ANY($2::text[])
   AND state IN ('PENDING', 'QUEUED', 'RUNNING', 'WAITING')
RETURNING id;

-- name: delete_task_dispatches
-- Unpublished dispatches of tasks that will never run (cancelled).
DELETE FROM outbox
 WHERE kind = 'dispatch' AND run_id = $1 AND task_id = ANY($2::text[]);

-- name: acquire_leases
-- Workers take attempts, many in one statement ($1-$10, one row per attempt; the
-- caller sends an attempt at most once per batch). Granted when the task is
-- waiting for a worker and due (dispatched_at: a retry's backoff or a parking is
-- over; an entry that comes before is no dispatch of it), or its lease expired, or
-- this is the same request sent again (same owner and claim: its answer was lost),
-- and only on a queue the worker's credentials cover ($8: the queues joined by '|',
-- NULL for all), on the queue whose stream the entry was read from ($9) and of a
-- node type the worker's handler runs ($10, joined by '|'; NULL: not said). A new
-- grant takes the coordinator's fresh token ($6); the same request sent again
-- keeps the token it was given. Returns what the handler needs: the input and
-- the node from the database, never from the stream, the run's priority (the band
-- of a task leased with its report, which has no outbox row: engine/_reports.py)
-- and the run's calling context from the task's own copy (V008: the run's row is
-- not read for it). A new grant (started_at the statement's time, not the kept
-- one of a request sent again) is appended to the run's history in the same
-- statement: who leased which attempt, when (V009).
WITH fenced AS MATERIALIZED (
    -- one probe each (batched fenced updates, above)
    SELECT u.*
      FROM unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::float8[], $6::text[],
                  $7::text[], $8::text[], $9::text[], $10::text[])
               AS u(run_id, id, attempt, owner, ttl, token, claim, queues, queue, node_types)
     CROSS JOIN LATERAL (
         SELECT FROM task_instances t
          WHERE t.run_id = u.run_id AND t.id = u.id AND t.attempt = u.attempt
            AND ((t.state IN ('PENDING', 'QUEUED') AND t.held_reason IS NULL
                  AND (t.dispatched_at IS NULL OR t.dispatched_at <= statement_timestamp()))
                 OR (t.state = 'RUNNING'
                     AND ((t.lease_owner = u.owner AND u.claim <> '' AND t.lease_claim = u.claim)
                          OR t.lease_expires_at < statement_timestamp())))
            AND (u.queues IS NULL OR t.queue = ANY(string_to_array(u.queues, '|')))
            AND (u.queue IS NULL OR t.queue = u.queue)
            AND (u.node_types IS NULL OR t.node_type = ANY(string_to_array(u.node_types, '|')))
            -- ($11) a task leased with the report that dispatched it has an input of at
            -- most this many bytes of JSON text (NULL: any); one stored uncompressed in
            -- under 2,000 bytes is at most ~12 KB as text (an escaped control character:
            -- 6 bytes for 1), so only a larger or compressed one is measured as text; no
            -- input (a MAP item of null) has no size
            AND ($11::int IS NULL OR t.input IS NULL
                 OR (pg_column_size(t.input) < 2000 AND pg_column_compression(t.input) IS NULL)
                 OR octet_length(t.input::text) <= $11::int)
            FOR UPDATE
     ) found
), granted AS (
UPDATE task_instances t
   SET state = 'RUNNING', lease_owner = u.owner,
       lease_expires_at = statement_timestamp() + make_interval(secs => u.ttl),
       lease_token = CASE WHEN t.state = 'RUNNING' AND t.lease_owner = u.owner
                               AND u.claim <> '' AND t.lease_claim = u.claim
                          THEN t.lease_token ELSE u.token END,
       lease_claim = u.claim,
       -- a parked attempt (park_task) is no longer parked once a worker has it
       error = CASE WHEN t.error_code = 'PARKED' THEN NULL ELSE t.error END,
       error_code = CASE WHEN t.error_code = 'PARKED' THEN NULL ELSE t.error_code END,
       -- the statement's time, not the transaction's: a task leased with the report
       -- that dispatched it (engine/_reports.py) starts after that report's event
       -- clock, read in the same transaction before this statement
       started_at = CASE WHEN t.state = 'RUNNING' AND t.lease_owner = u.owner
                              AND u.claim <> '' AND t.lease_claim = u.claim
                         THEN t.started_at ELSE statement_timestamp() END,
       updated_at = statement_timestamp()
  FROM fenced u
 WHERE t.run_id = u.run_id AND t.id = u.id
RETURNING t.run_id, t.id, t.attempt, t.node_id, t.node_type, t.queue, t.input,
          t.lease_expires_at, t.max_attempts, t.lease_token, t.context, t.started_at,
          t.lease_owner
), leased AS (
INSERT INTO run_history (run_id, at, kind, node_id, task_id, attempt, actor)
SELECT g.run_id, g.started_at, 'task.leased', g.node_id, g.id, g.attempt, g.lease_owner
  FROM granted g
 WHERE g.started_at = statement_timestamp()
)
SELECT g.run_id, g.id, g.attempt, g.node_id, g.node_type, g.queue, g.input,
       g.lease_expires_at, g.max_attempts, g.lease_token, r.workflow_id, r.version, g.context,
       r.priority
  FROM granted g
  JOIN workflow_runs r ON r.id = g.run_id;

-- name: task_routing
-- Where each of these tasks belongs, and when its waiting attempt is due if that is
-- still ahead: why a lease was refused (credentials that do not cover the queue, an
-- entry read from another queue's stream, a node type the handler does not run, an
-- attempt in its retry backoff).
SELECT t.run_id, t.id, t.node_id, t.node_type, t.queue, t.attempt, t.state,
       CASE WHEN t.state IN ('PENDING', 'QUEUED') AND t.dispatched_at > statement_timestamp()
            THEN t.dispatched_at END AS due_at
  FROM task_instances t
  JOIN unnest($1::text[], $2::text[]) AS u(run_id, id) ON t.run_id = u.run_id AND t.id = u.id;

-- name: renew_leases
-- Renewals, many in one statement: only with the lease's token ($6) and on a
-- queue the worker's credentials cover ($7, as in acquire_leases).
-- Found and locked one probe each, then written (batched fenced updates, above).
WITH fenced AS MATERIALIZED (
    SELECT u.run_id, u.id, u.ttl
      FROM unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::float8[], $6::text[],
                  $7::text[])
               AS u(run_id, id, attempt, owner, ttl, token, queues)
     CROSS JOIN LATERAL (
         SELECT FROM task_instances t
          WHERE t.run_id = u.run_id AND t.id = u.id AND t.attempt = u.attempt
            AND t.state = 'RUNNING' AND t.lease_owner = u.owner AND t.lease_token = u.token
            AND (u.queues IS NULL OR t.queue = ANY(string_to_array(u.queues, '|')))
            FOR UPDATE
     ) found
)
UPDATE task_instances t
   SET lease_expires_at = statement_timestamp() + make_interval(secs => f.ttl), updated_at = now()
  FROM fenced f
 WHERE t.run_id = f.run_id AND t.id = f.id
RETURNING t.run_id, t.id, t.attempt, t.lease_expires_at;

-- name: lease_holder
-- The token and queue of the lease on a RUNNING attempt (expired or not); no row
-- when the attempt is not RUNNING. A report counts only with the lease's token.
SELECT lease_token, queue FROM task_instances
 WHERE run_id = $1 AND id = $2 AND attempt = $3 AND state = 'RUNNING';

-- =============================================================================
-- Signals
-- =============================================================================

-- name: buffer_signal
INSERT INTO workflow_events (id, run_id, name, payload, created_at)
VALUES ($1, $2, $3, $4, composer_now());

-- name: record_signal_sender
-- Who sent a signal the same transaction buffered (the name of their API token).
UPDATE workflow_events SET sent_by = $3 WHERE run_id = $1 AND id = $2 RETURNING 1;

-- name: record_taken_signal
-- A signal a waiting node took as it arrived: kept too, consumed at once, so every
-- signal of a run is listed with who sent it.
INSERT INTO workflow_events (id, run_id, name, payload, created_at, consumed_at, consumed_by,
                             sent_by)
VALUES ($1, $2, $3, $4, composer_now(), composer_now(), $5, $6);

-- name: pending_signals
-- The run's buffered signals no node took yet, oldest first (the snapshot's).
SELECT id, name, payload
  FROM workflow_events
 WHERE run_id = $1 AND consumed_at IS NULL
 ORDER BY created_at, id;

-- name: consume_signal
UPDATE workflow_events
   SET consumed_at = composer_now(), consumed_by = $3
 WHERE run_id = $1 AND id = $2 AND consumed_at IS NULL
RETURNING 1;

-- name: run_signals
-- Every signal of a run, consumed or not, oldest first, with who sent it (the API's
-- run page, operators and the chaos suite's accounting). A signal a waiting node
-- took at once is here, consumed, since V008; not before.
SELECT id, name, payload, created_at, consumed_at, consumed_by, sent_by
  FROM workflow_events
 WHERE run_id = $1
 ORDER BY created_at, id;

-- =============================================================================
-- Outbox
-- =============================================================================

-- name: enqueue
-- created_at and next_attempt_at are one value for a message due at once, so the
-- enqueuer can tell it from a delayed one (docs/architecture.md §4.3). A webhook
-- gets its random delivery id here, once: every retry of it sends the same (V013).
INSERT INTO outbox (kind, run_id, task_id, destination, payload, next_attempt_at, created_at,
                    delivery_id)
VALUES ($1, $2, $3, $4, $5, COALESCE($6::timestamptz, composer_now()), composer_now(),
        CASE WHEN $1 = 'webhook' THEN gen_random_uuid() END)
RETURNING id;

-- name: enqueue_dispatches
-- enqueue for many dispatches of one transaction, in one statement: their ids,
-- by task, and the priority band each message carries: its run's priority (V026),
-- written into the message when it is not the default, 3 (the message's stream is
-- its band's: docs/architecture.md §4.16). The run's row is looked up by its key
-- per dispatch, by composer_run_priority (V027: a plan kept for the session, where
-- a subquery here made every execution plan all of workflow_runs' partitions).
INSERT INTO outbox (kind, run_id, task_id, destination, payload, next_attempt_at, created_at)
SELECT 'dispatch', u.run_id, u.task_id, u.queue,
       CASE WHEN u.priority IS NULL OR u.priority = 3 THEN u.payload
            ELSE u.payload || jsonb_build_object('priority', u.priority::text) END,
       COALESCE(u.not_before, composer_now()), composer_now()
  FROM (SELECT u.*, composer_run_priority(u.run_id) AS priority
          FROM unnest($1::text[], $2::text[], $3::text[], $4::jsonb[], $5::timestamptz[])
                   AS u(run_id, task_id, queue, payload, not_before)
        OFFSET 0) u  -- not flattened: the look-up runs once per dispatch, not per use
RETURNING id, task_id, payload->>'priority' AS priority;

-- name: claim_outbox
-- Due messages of one kind, oldest first. The row locks are held until the
-- claiming transaction ends, and SKIP LOCKED lets concurrent claimers pass
-- each other's rows instead of waiting or double-publishing.
-- A message due at once (next_attempt_at = created_at) is published by whoever
-- committed it, right after the commit: it is claimed here only once it is $3
-- seconds old, which means that publish did not happen (a crash, Redis away).
SELECT id, kind, run_id, task_id, destination, payload, attempts, next_attempt_at, created_at,
       delivery_id
  FROM outbox
 WHERE kind = $1 AND next_attempt_at <= statement_timestamp()
   AND (next_attempt_at > created_at
        OR created_at <= statement_timestamp() - make_interval(secs => $3))
 ORDER BY next_attempt_at, id
 LIMIT $2
   FOR UPDATE SKIP LOCKED;

-- name: lease_outbox
-- Due messages of one kind, oldest first, for a delivery made outside any
-- transaction (a webhook POST may take its whole timeout): instead of holding
-- row locks through it, each row's next_attempt_at moves $3 seconds ahead, a
-- lease that keeps other claimers off once this statement's transaction
-- commits. The deliverer then deletes or postpones the rows; if it dies, they
-- come back when the lease ends. Returns the rows as they were before the lease.
WITH due AS (
    SELECT id, next_attempt_at
      FROM outbox
     WHERE kind = $1 AND next_attempt_at <= statement_timestamp()
     ORDER BY next_attempt_at, id
     LIMIT $2
       FOR UPDATE SKIP LOCKED
)
UPDATE outbox o
   SET next_attempt_at = statement_timestamp() + make_interval(secs => $3)
  FROM due
 WHERE o.id = due.id
RETURNING o.id, o.kind, o.run_id, o.task_id, o.destination, o.payload, o.attempts,
          due.next_attempt_at, o.created_at, o.delivery_id;

-- name: delete_outbox
DELETE FROM outbox WHERE id = ANY($1::bigint[]);

-- name: postpone_outbox
-- Publishing failed: try again $2 seconds from now (the database's clock).
UPDATE outbox
   SET attempts = attempts + 1, last_error = $3,
       next_attempt_at = statement_timestamp() + make_interval(secs => $2)
 WHERE id = $1
RETURNING attempts;

-- name: outbox_size
-- Messages not yet published, by kind (how far behind the outbox-enqueuer is).
SELECT kind, count(*) AS n FROM outbox GROUP BY kind;

-- name: mark_published
-- After dispatches were published (by the engine's publisher, for the commits of
-- a few ms, or by the outbox-enqueuer in its claiming transaction): their rows
-- deleted ($1), their attempts still PENDING (and not held meanwhile by a pause
-- of their run) moved to QUEUED ($2-$4). Nothing is read back: when the next
-- dispatch is due is next_outbox_due's, asked by the enqueuer only (it read every
-- dispatch row of the outbox, dead ones too until a vacuum, and the publisher,
-- which never sleeps on it, paid for it on every flush).
-- An attempt another transaction holds is skipped, not waited for: a worker's
-- lease (it read the entry at once) or a report is taking it past QUEUED, which
-- only says "published" (PENDING and QUEUED are one to every other statement).
-- Waiting deadlocked with a batch of leases that locked the same attempts in
-- another order, a 1 s stall each time (deadlock_timeout).
WITH deleted AS (
    DELETE FROM outbox WHERE id = ANY($1::bigint[])
), locked AS MATERIALIZED (
    -- one probe each (batched fenced updates, above)
    SELECT u.run_id, u.id
      FROM unnest($2::text[], $3::text[], $4::int[]) AS u(run_id, id, attempt)
     CROSS JOIN LATERAL (
         SELECT FROM task_instances t
          WHERE t.run_id = u.run_id AND t.id = u.id AND t.attempt = u.attempt
            AND t.state = 'PENDING' AND t.held_reason IS NULL
            FOR UPDATE SKIP LOCKED
     ) found
)
UPDATE task_instances t
   SET state = 'QUEUED', updated_at = now()
  FROM locked l
 WHERE t.run_id = l.run_id AND t.id = l.id;

-- name: next_outbox_due
-- When the earliest message of a kind becomes due: how long a loop may sleep.
-- A message due at once is due for the enqueuer $2 seconds later (claim_outbox).
SELECT min(CASE WHEN next_attempt_at > created_at THEN next_attempt_at
                ELSE created_at + make_interval(secs => $2) END)
  FROM outbox WHERE kind = $1;

-- =============================================================================
-- Background loops
-- =============================================================================

-- name: due_waits
-- A paused run's timers are kept, not fired: they come due again at its resume.
SELECT t.run_id, t.id, t.node_id, t.wake_at
  FROM task_instances t
 WHERE t.wake_at <= COALESCE($2::timestamptz, statement_timestamp()) AND t.state = 'WAITING'
   AND NOT EXISTS (SELECT 1 FROM workflow_runs r WHERE r.id = t.run_id AND r.status = 'PAUSED')
 ORDER BY t.wake_at
 LIMIT $1;

-- name: park_wait
-- A due wait the timer cannot fire (a bug, a broken stored definition): moved to
-- $3 so it stops taking a place in every batch until someone looks.
UPDATE task_instances SET wake_at = $3, updated_at = now()
 WHERE run_id = $1 AND id = $2 AND state = 'WAITING' AND wake_at IS NOT NULL
RETURNING id;

-- name: seconds_until
-- How long until $1 by the database's clock (negative: past), the clock every wait's
-- wake_at was set by: a staged timer group commits no sooner than its due time.
SELECT extract(epoch FROM $1::timestamptz - clock_timestamp())::float8;

-- name: next_wake_at
-- The earliest pending timer of a run that is not paused: how long the timer
-- loop may sleep (a resume wakes it). The wake_at index is walked in order and
-- stops at the first (min() read every pending timer, at every pass).
SELECT t.wake_at
  FROM task_instances t
 WHERE t.wake_at IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM workflow_runs r WHERE r.id = t.run_id AND r.status = 'PAUSED')
 ORDER BY t.wake_at
 LIMIT 1;

-- name: expired_leases
SELECT run_id, id, node_id, attempt, lease_owner, lease_expires_at
  FROM task_instances
 WHERE dispatched_at IS NOT NULL AND state = 'RUNNING'
   AND lease_expires_at < COALESCE($2::timestamptz, statement_timestamp())
 ORDER BY dispatched_at
 LIMIT $1;

-- name: lost_dispatches
-- Attempts due for dispatch before $1 that no worker leased and that have no
-- outbox row left: the publish was lost (or its stream entry was).
SELECT t.run_id, t.id, t.node_id, t.attempt, t.state, t.dispatched_at, t.queue
  FROM task_instances t
 WHERE t.dispatched_at < $1 AND t.state IN ('PENDING', 'QUEUED') AND t.held_reason IS NULL
   AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.task_id = t.id AND o.kind = 'dispatch')
 ORDER BY t.dispatched_at
 LIMIT $2;

-- name: set_data_key
-- A run started before sealing was turned on gets its data key when it next
-- writes (under its lock); one that has a key keeps it. Returns the run's key.
WITH given AS (
    UPDATE workflow_runs SET data_key = $2 WHERE id = $1 AND data_key IS NULL
    RETURNING data_key
)
SELECT coalesce((SELECT data_key FROM given),
                (SELECT data_key FROM workflow_runs WHERE id = $1)) AS data_key;

-- name: park_task
-- A granted attempt whose input cannot be opened here (its key is not
-- configured) is taken back before any worker sees it: waiting for a worker
-- again, with its attempt unspent, the reason in its error, and its dispatch
-- time moved on so the sweeper sends it again only after $5 (the key may be
-- back by then). Fenced by the lease token this grant just took.
UPDATE task_instances
   SET state = 'QUEUED', lease_owner = NULL, lease_expires_at = NULL, lease_token = NULL,
       lease_claim = NULL, started_at = NULL, error = $6, error_code = 'PARKED',
       dispatched_at = now() + $5, updated_at = now()
 WHERE run_id = $1 AND id = $2 AND attempt = $3 AND state = 'RUNNING' AND lease_token = $4;

-- name: redispatch_task
-- The sweeper sends a lost attempt again: it is PENDING and due from now on.
-- Returns what the dispatch needs.
UPDATE task_instances
   SET state = 'PENDING', dispatched_at = now(), updated_at = now()
 WHERE run_id = $1 AND id = $2 AND attempt = $3 AND state IN ('PENDING', 'QUEUED')
RETURNING node_id, node_type, queue, input;

-- name: try_lock_run
-- The run lock for a loop that must not queue behind another transaction on
-- the same run (the timer: one busy run must not hold up every due wait
-- behind it, and two timer replicas pass each other's runs). No row when the
-- run is locked (or gone); the loop comes back to it on its next pass.
SELECT s.workflow_id, s.version, s.status, s.input, s.config, s.data_key, s.context,
       -- evaluated above the row lock (a subquery with FOR UPDATE is not flattened)
       set_config('composer.now', clock_timestamp()::text, true)::timestamptz AS now
  FROM (SELECT r.workflow_id, r.version, r.status, r.input, r.config, r.data_key, r.context
          FROM workflow_runs r
         WHERE r.id = $1
           FOR UPDATE SKIP LOCKED) s;

-- name: lock_expired_lease
-- Under the run lock, before the sweeper fails an attempt for its lease: the
-- lease must still be expired and held by the owner the sweeper saw. The row
-- lock keeps a renewal from slipping in until the failure commits (the
-- renewal then finds the attempt no longer RUNNING: the worker lost its lease).
SELECT 1
  FROM task_instances
 WHERE run_id = $1 AND id = $2 AND attempt = $3 AND state = 'RUNNING'
   AND lease_owner IS NOT DISTINCT FROM $4
   AND lease_expires_at < statement_timestamp()
   FOR UPDATE;

-- name: task_attempts
-- Where a batch of tasks stands: the sweeper decides what a reclaimed stream
-- entry still means.
SELECT t.run_id, t.id, t.state, t.attempt, t.node_id
  FROM task_instances t
  JOIN unnest($1::text[], $2::text[]) AS u(run_id, id)
    ON t.run_id = u.run_id AND t.id = u.id;

-- name: try_advisory_lock
-- A session-level lock that keeps a loop single across replicas: held until
-- unlocked or until the session ends (a crashed holder frees it).
SELECT pg_try_advisory_lock(hashtext($1::text));

-- name: advisory_unlock
SELECT pg_advisory_unlock(hashtext($1::text));

-- =============================================================================
-- Partitions
-- =============================================================================

-- name: ensure_partitions
SELECT composer_ensure_partitions($1);

-- name: drop_partitions
SELECT suffix, error FROM composer_drop_partitions($1);

-- name: list_partitions
-- The months that have a workflow_runs partition, as YYYYMM, oldest first.
SELECT substring(c.relname FROM '_p(\d{6})$') AS suffix
  FROM pg_inherits i
  JOIN pg_class c ON c.oid = i.inhrelid
 WHERE i.inhparent = 'workflow_runs'::regclass
 ORDER BY 1;

-- name: count_active_runs
-- PENDING, RUNNING or PAUSED runs with ids in [$1, $2): one month's, when the
-- partition-manager explains why it keeps a month past retention.
SELECT count(*)
  FROM workflow_runs
 WHERE id >= $1 AND id < $2 AND status IN ('PENDING', 'RUNNING', 'PAUSED');

-- name: transaction_id
-- The id of the open transaction if it wrote anything (NULL: it wrote nothing,
-- so a lost COMMIT of it changed nothing). Asked just before COMMIT, so a COMMIT
-- whose answer is lost can be resolved (commit_status).
SELECT pg_current_xact_id_if_assigned()::text;

-- name: commit_status
-- 'committed', 'aborted' or 'in progress' (NULL: too old to know).
SELECT pg_xact_status($1::text::xid8);

-- name: end_transaction_of
-- Ends the session still running the transaction whose 32-bit xid is $2 (after
-- its client lost the connection mid-COMMIT the server may not have noticed yet):
-- it commits if COMMIT reached it, and aborts otherwise.
SELECT pg_terminate_backend(pid)
  FROM pg_stat_activity
 WHERE pid = $1 AND backend_xid::text = $2;

-- name: signal_key
-- A signal request already applied under this Idempotency-Key: its name and outcome.
SELECT name, delivered FROM signal_idempotency_keys WHERE run_id = $1 AND idempotency_key = $2;

-- name: record_signal_key
INSERT INTO signal_idempotency_keys (run_id, idempotency_key, name, delivered)
VALUES ($1, $2, $3, $4);

-- =============================================================================
-- Run history (V009)
-- =============================================================================

-- name: insert_history
-- Every history row of one transaction (a group commit's many events) in one
-- statement, in the order given: seq follows it. `at` is the transaction's
-- composer_now(), the time every other row of the event carries.
INSERT INTO run_history (run_id, at, kind, node_id, task_id, attempt, actor, detail)
SELECT u.run_id, composer_now(), u.kind, u.node_id, u.task_id, u.attempt, u.actor, u.detail
  FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int[], $6::text[],
              $7::jsonb[]) WITH ORDINALITY
           AS u(run_id, kind, node_id, task_id, attempt, actor, detail, n)
 ORDER BY u.n;

-- name: run_history
-- A page of a run's history, oldest first, after the row `seq` $2 (0: from the start).
SELECT seq, at, kind, node_id, task_id, attempt, actor, detail
  FROM run_history
 WHERE run_id = $1 AND seq > $2
 ORDER BY seq
 LIMIT $3;

-- name: lease_times
-- When each attempt of the run's tasks was last leased: the start of the
-- durations the history shows for completed and failed attempts.
SELECT task_id, attempt, max(at) AS at
  FROM run_history
 WHERE run_id = $1 AND kind = 'task.leased'
 GROUP BY task_id, attempt;

-- =============================================================================
-- Workers (V011): who serves which queue, from their heartbeats
-- =============================================================================

-- name: record_worker_heartbeat
-- One worker's beat: its row, created or brought up to date. A worker that said
-- it STOPPED stays stopped: a beat of the same process that arrives after that
-- (sent before it) is dropped; a new process under the same name (a later
-- started_at) takes the row over. Written at most every few seconds per worker
-- (the coordinator).
INSERT INTO workers AS w (id, host, queues, concurrency, in_flight, sdk_version, state,
                          started_at, last_seen_at, stopped_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, now(), CASE WHEN $7 = 'STOPPED' THEN now() END)
ON CONFLICT (id) DO UPDATE
   SET host = EXCLUDED.host,
       queues = EXCLUDED.queues,
       concurrency = EXCLUDED.concurrency,
       in_flight = EXCLUDED.in_flight,
       sdk_version = EXCLUDED.sdk_version,
       state = EXCLUDED.state,
       started_at = EXCLUDED.started_at,
       last_seen_at = EXCLUDED.last_seen_at,
       stopped_at = EXCLUDED.stopped_at
 WHERE w.state <> 'STOPPED' OR EXCLUDED.started_at > w.started_at
RETURNING 1;

-- name: list_workers
-- The workers, the most recently seen first, with the database's clock (the one
-- last_seen_at was written with) to tell how long ago.
SELECT id, host, queues, concurrency, in_flight, sdk_version, state, started_at,
       last_seen_at, stopped_at, now() AS now
  FROM workers
 ORDER BY last_seen_at DESC, id
 LIMIT $1;

-- name: prune_workers
-- Forget workers unseen for $1 seconds, at most $2 of them (the oldest first):
-- a bounded delete that several coordinators may run at once.
DELETE FROM workers
 WHERE id IN (SELECT id FROM workers
               WHERE last_seen_at < now() - make_interval(secs => $1)
               ORDER BY last_seen_at
               LIMIT $2)
RETURNING 1;

-- name: unserved_queues
-- The queues of the run's tasks waiting for a worker (PENDING, QUEUED) that no
-- live worker serves: none that has not stopped was seen within $2 seconds. Each
-- with the last time any worker serving it was seen (NULL: none ever was) and
-- the database's clock. One partition of task_instances; workers is small.
WITH waiting AS (
    SELECT DISTINCT queue
      FROM task_instances
     WHERE run_id = $1 AND state IN ('PENDING', 'QUEUED') AND queue IS NOT NULL
)
SELECT q.queue, max(w.last_seen_at) AS last_seen_at, now() AS now
  FROM waiting q
  LEFT JOIN workers w ON q.queue = ANY (w.queues)
 GROUP BY q.queue
HAVING NOT coalesce(
           bool_or(w.state <> 'STOPPED' AND w.last_seen_at > now() - make_interval(secs => $2)),
           false)
 ORDER BY q.queue;

-- =============================================================================
-- Events between runs (V015): outbox rows of kind 'run_event'
-- =============================================================================

-- name: set_run_parent
-- A run started for a node of another run (its parent: the node's attempt that
-- started it), in the start's transaction.
UPDATE workflow_runs
   SET parent_run_id = $2, parent_node_id = $3, parent_task_id = $4, parent_attempt = $5
 WHERE id = $1
RETURNING 1;

-- name: active_children
-- The runs a parent's cancel reaches: its children still going (paused ones too),
-- but those started with on_parent_cancel: abandon (V020).
SELECT id
  FROM workflow_runs
 WHERE parent_run_id = $1 AND status IN ('PENDING', 'RUNNING', 'PAUSED') AND NOT parent_detached
 ORDER BY id;

-- name: active_children_of_tasks
-- The children a MAP's cancelled items reach: those of these item tasks still
-- going, but those started with on_parent_cancel: abandon.
SELECT id
  FROM workflow_runs
 WHERE parent_run_id = $1 AND parent_task_id = ANY($2::text[])
   AND status IN ('PENDING', 'RUNNING', 'PAUSED') AND NOT parent_detached
 ORDER BY id;

-- name: enqueue_run_events
-- Events addressed to other runs, in the transaction of their cause: their ids.
-- destination names the event; payload holds it (sealed parts under the sending
-- run's key, named in the payload).
-- An event due later ($5: a retried node's next child, after its backoff) waits
-- for the outbox-enqueuer.
INSERT INTO outbox (kind, run_id, task_id, destination, payload, next_attempt_at, created_at)
SELECT 'run_event', u.run_id, u.task_id, u.event, u.payload,
       COALESCE(u.not_before, composer_now()), composer_now()
  FROM unnest($1::text[], $2::text[], $3::text[], $4::jsonb[], $5::timestamptz[])
           AS u(run_id, task_id, event, payload, not_before)
RETURNING id;

-- name: release_child_starts
-- The starts of the children a paused run ($1) wrote, held until its resume ($2: the
-- held due time), due now. A paused run writes few: the scan of the run events of
-- its children stays small.
UPDATE outbox
   SET next_attempt_at = composer_now()
 WHERE kind = 'run_event' AND destination = 'run_started' AND next_attempt_at = $2
   AND payload ->> 'from' = $1
RETURNING id;

-- name: settle_child_starts
-- A paused run ($1) cancelled: the held starts ($2) of its children go — those the
-- cancel reaches are dropped (the cancel ends them, never started), those it leaves
-- (on_parent_cancel: abandon) are due now, to run on.
WITH held AS (
    SELECT o.id, r.parent_detached
      FROM outbox o
      JOIN workflow_runs r ON r.id = o.run_id
     WHERE o.kind = 'run_event' AND o.destination = 'run_started' AND o.next_attempt_at = $2
       AND o.payload ->> 'from' = $1
), dropped AS (
    DELETE FROM outbox WHERE id IN (SELECT id FROM held WHERE NOT parent_detached)
)
UPDATE outbox
   SET next_attempt_at = composer_now()
 WHERE id IN (SELECT id FROM held WHERE parent_detached)
RETURNING id;

-- name: run_event_target
-- The run an event is addressed to, read before its lock is taken (no row: the
-- event was applied, or never existed).
SELECT run_id FROM outbox WHERE id = $1 AND kind = 'run_event';

-- name: take_run_event
-- Under the target run's lock, in the transaction that applies the event: the
-- row goes with its application, so it is applied once (no row: another
-- transaction applied it first).
DELETE FROM outbox
 WHERE id = $1 AND kind = 'run_event'
RETURNING run_id, task_id, destination, payload, attempts;

-- name: due_run_events
-- Events whose sender did not deliver them ($2 seconds after they were written:
-- it died between commit and delivery, or the delivery failed), oldest first.
SELECT id
  FROM outbox
 WHERE kind = 'run_event' AND next_attempt_at <= statement_timestamp()
   AND created_at <= statement_timestamp() - make_interval(secs => $2)
 ORDER BY next_attempt_at, id
 LIMIT $1;

-- name: postpone_run_event
-- A delivery that failed (the target's transaction met an error): tried again
-- after $2 seconds, with the error kept.
UPDATE outbox
   SET attempts = attempts + 1, last_error = $3,
       next_attempt_at = statement_timestamp() + make_interval(secs => $2)
 WHERE id = $1 AND kind = 'run_event'
RETURNING attempts;

-- =============================================================================
-- Admission (V015): tasks a policy holds back
-- =============================================================================

-- name: lock_queue_admission
-- Serializes the admission decisions of one queue until the transaction ends, so
-- two transactions never both see room for the same slot.
SELECT pg_advisory_xact_lock(hashtextextended('composer.admission:' || $1, 0));

-- name: queue_load
-- A queue's tasks with a worker or on their way to one (those in $2 left out), and
-- how many of it are held: a new task waits behind those (oldest first), not
-- behind the held tasks of paused runs (held_reason $3), which wait for a resume.
SELECT count(*) FILTER (WHERE dispatched_at IS NOT NULL AND held_reason IS NULL
                          AND NOT (id = ANY($2::text[]))) AS in_flight,
       count(*) FILTER (WHERE held_reason IS NOT NULL AND held_reason <> $3
                          AND limit_key IS NULL AND rate_key IS NULL) AS held
  FROM task_instances
 WHERE queue = $1 AND state IN ('PENDING', 'QUEUED', 'RUNNING')
   AND (dispatched_at IS NOT NULL OR held_reason IS NOT NULL);

-- name: hold_tasks
-- Attempts the admission step held: PENDING with a reason, no dispatch time but a
-- retry's backoff end still ahead, which the release keeps (release_task).
-- Found and locked one probe each, then written (batched fenced updates, above).
WITH fenced AS MATERIALIZED (
    SELECT u.run_id, u.id, u.reason
      FROM unnest($1::text[], $2::text[], $3::int[], $4::text[]) AS u(run_id, id, attempt, reason)
     CROSS JOIN LATERAL (
         SELECT FROM task_instances t
          WHERE t.run_id = u.run_id AND t.id = u.id AND t.attempt = u.attempt
            AND t.state = 'PENDING'
            FOR UPDATE
     ) found
)
UPDATE task_instances t
   SET held_reason = f.reason,
       dispatched_at = CASE WHEN t.dispatched_at > composer_now() THEN t.dispatched_at END,
       updated_at = composer_now()
  FROM fenced f
 WHERE t.run_id = f.run_id AND t.id = f.id
RETURNING t.id;

-- name: held_tasks
-- The held attempts of a queue that go first, locked for the release that takes
-- them: by their run's priority (V026, NULL: 3), less a level per whole minute
-- since the task was created (nothing starves), then first come (§4.16). Only
-- the task rows are locked (OF t): a run's row lock is its events'.
-- A paused run's (held_reason $3) wait for its resume.
SELECT t.run_id, t.id, t.node_id, t.attempt
  FROM task_instances t JOIN workflow_runs r ON r.id = t.run_id
 WHERE t.held_reason IS NOT NULL AND t.held_reason <> $3 AND t.queue = $1
   AND t.state = 'PENDING'
   AND t.limit_key IS NULL AND t.rate_key IS NULL  -- a limited node's waits for its keys
 ORDER BY greatest(1, coalesce(r.priority, 3)
                     - floor(extract(epoch FROM now() - t.created_at) / 60)),
          t.created_at, t.id
 LIMIT $2
   FOR UPDATE OF t SKIP LOCKED;

-- name: release_task
-- A held attempt goes: due for dispatch from now on, or from its retry's backoff end
-- when that is still ahead (returned: the dispatch is sent no earlier).
UPDATE task_instances
   SET held_reason = NULL,
       dispatched_at = CASE WHEN dispatched_at > now() THEN dispatched_at ELSE now() END,
       updated_at = now()
 WHERE run_id = $1 AND id = $2 AND attempt = $3 AND state = 'PENDING'
   AND held_reason IS NOT NULL
RETURNING dispatched_at, dispatched_at > now() AS later;

-- Run concurrency (V016, docs/architecture.md §4.13) ---------------------------

-- name: lock_run_key
-- Serializes the slot decisions of one key of one workflow until the transaction
-- ends: two starts (or a start and a release) never both see the same free slot.
SELECT pg_advisory_xact_lock(hashtextextended('composer.runs:' || $1 || chr(31) || $2, 0));

-- name: run_slots_taken
SELECT count(*) FROM run_slots WHERE workflow_id = $1 AND key = $2;

-- name: take_run_slot
INSERT INTO run_slots (run_id, workflow_id, key, taken_at)
VALUES ($3, $1, $2, composer_now());

-- name: queue_run
INSERT INTO runs_waiting (run_id, workflow_id, key, priority, max_runs, start_node, queued_at)
VALUES ($3, $1, $2, $4, $5, $6, composer_now());

-- name: oldest_run_slot
-- The run of a key that has held its slot longest (cancel_in_progress's victim),
-- its slot row deleted: the new run takes it in the same transaction.
DELETE FROM run_slots
 WHERE run_id = (SELECT run_id FROM run_slots WHERE workflow_id = $1 AND key = $2
                  ORDER BY taken_at, run_id LIMIT 1)
RETURNING run_id;

-- name: leave_run_slot
-- A run that finished gives up its slot, or its place in the line: the key whose
-- slot it held (none when it held none).
WITH slot AS (DELETE FROM run_slots WHERE run_id = $1 RETURNING workflow_id, key),
     line AS (DELETE FROM runs_waiting WHERE run_id = $1)
SELECT workflow_id, key FROM slot;

-- name: next_waiting_runs
-- Who goes next on a key: by priority, a level gained per minute waited (so
-- nothing starves), then first come.
SELECT run_id, max_runs, start_node
  FROM runs_waiting
 WHERE workflow_id = $1 AND key = $2
 ORDER BY greatest(1, priority - floor(extract(epoch FROM composer_now() - queued_at) / 60)),
          queued_at, run_id
 LIMIT $3;

-- name: hand_run_slot
-- A waiting run takes a slot: out of the line, into the slots.
WITH line AS (DELETE FROM runs_waiting WHERE run_id = $3 RETURNING run_id)
INSERT INTO run_slots (run_id, workflow_id, key, taken_at)
SELECT run_id, $1, $2, composer_now() FROM line
RETURNING run_id;

-- name: run_waiting
-- Why a PENDING run waits: its key, the key's limit and slots held, and how many
-- waiting runs go before it (the same order as next_waiting_runs).
WITH me AS (SELECT workflow_id, key, priority, queued_at, max_runs,
                   greatest(1, priority - floor(extract(epoch FROM now() - queued_at) / 60))
                       AS effective
              FROM runs_waiting WHERE run_id = $1)
SELECT me.key, me.max_runs, me.effective AS priority,
       (SELECT count(*) FROM run_slots s
         WHERE s.workflow_id = me.workflow_id AND s.key = me.key) AS running,
       (SELECT count(*) FROM runs_waiting w
         WHERE w.workflow_id = me.workflow_id AND w.key = me.key
           AND (greatest(1, w.priority - floor(extract(epoch FROM now() - w.queued_at) / 60)),
                w.queued_at, w.run_id)
             < (me.effective, me.queued_at, $1)) AS ahead
  FROM me;

-- name: set_run_priority
-- A child run's priority, rendered as its start is applied (V026; NULL: 3).
UPDATE workflow_runs SET priority = $2 WHERE id = $1;

-- name: start_waiting_run
-- A waiting run handed a slot starts: PENDING → RUNNING, under its lock.
UPDATE workflow_runs SET status = 'RUNNING', updated_at = composer_now()
 WHERE id = $1 AND status = 'PENDING'
RETURNING 1;

-- name: run_limit_keys
-- Every key of a run limit with a run going or waiting: its slots taken, its line,
-- and the limit its next waiting run was started under (the two small tables only).
WITH slots AS (SELECT workflow_id, key, count(*) AS in_use FROM run_slots GROUP BY 1, 2),
     line AS (SELECT workflow_id, key, count(*) AS waiting, max(max_runs) AS max_runs
                FROM runs_waiting GROUP BY 1, 2)
SELECT workflow_id, key, coalesce(s.in_use, 0) AS in_use, coalesce(l.waiting, 0) AS waiting,
       l.max_runs
  FROM slots s FULL JOIN line l USING (workflow_id, key)
 ORDER BY workflow_id, key
 LIMIT $1;

-- =============================================================================
-- Pause and resume (V018): a paused run's attempts wait for its resume
-- =============================================================================

-- name: pause_run
-- A RUNNING run is PAUSED; no row when it is not running.
UPDATE workflow_runs
   SET status = 'PAUSED', updated_at = composer_now()
 WHERE id = $1 AND status = 'RUNNING'
RETURNING 1;

-- name: resume_run
-- A PAUSED run is RUNNING again; no row when it is not paused.
UPDATE workflow_runs
   SET status = 'RUNNING', updated_at = composer_now()
 WHERE id = $1 AND status = 'PAUSED'
RETURNING 1;

-- name: hold_run_tasks
-- The attempts of a paused run that wait for a worker ($2: these task ids; NULL:
-- all of them) are held with reason $3 until its resume: PENDING, their unsent
-- outbox rows deleted, and a stream entry already published refused by the lease
-- (held_reason). An attempt in its retry backoff keeps the backoff's end as its
-- dispatch time, which the resume honours; the others have none (the sweeper
-- leaves held attempts alone). A RUNNING attempt is not touched: it finishes.
WITH held AS (
    UPDATE task_instances t
       SET held_reason = $3, state = 'PENDING',
           dispatched_at = CASE WHEN t.dispatched_at > composer_now() THEN t.dispatched_at END,
           updated_at = composer_now()
     WHERE t.run_id = $1 AND t.state IN ('PENDING', 'QUEUED')
       AND ($2::text[] IS NULL OR t.id = ANY($2::text[]))
       AND t.held_reason IS DISTINCT FROM $3
       -- a MAP item still waiting for a place is not sent at the resume either: its
       -- MAP sends it when one frees (V021)
       AND NOT (t.item IS NOT NULL AND t.dispatched_at IS NULL AND t.held_reason IS NULL)
    RETURNING t.id, t.node_id, t.attempt, t.queue
), unsent AS (
    DELETE FROM outbox o
     USING held h
     WHERE o.kind = 'dispatch' AND o.run_id = $1 AND o.task_id = h.id
)
SELECT id, node_id, attempt, queue FROM held ORDER BY id;

-- name: release_run_tasks
-- A resumed run's held attempts (held_reason $2) go: each due at its retry
-- backoff's end if that is still ahead, else now. Returns what the dispatch needs.
UPDATE task_instances t
   SET held_reason = NULL, state = 'PENDING',
       dispatched_at = CASE WHEN t.dispatched_at > composer_now() THEN t.dispatched_at
                            ELSE composer_now() END,
       updated_at = composer_now()
 WHERE t.run_id = $1 AND t.held_reason = $2 AND t.state IN ('PENDING', 'QUEUED')
RETURNING t.id, t.node_id, t.attempt, t.queue,
          CASE WHEN t.dispatched_at > composer_now() THEN t.dispatched_at END AS not_before;

-- Node concurrency (V019, docs/architecture.md §4.12) ---------------------------

-- name: set_task_limits
-- The concurrency key and max, and the rate key and units, of tasks of limited
-- nodes, in the transaction that inserted them (before their dispatch is admitted).
UPDATE task_instances t
   SET limit_key = u.limit_key, limit_max = u.limit_max,
       rate_key = u.rate_key, rate_units = u.rate_units
  FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::text[], $6::int[])
           AS u(run_id, id, limit_key, limit_max, rate_key, rate_units)
 WHERE t.run_id = u.run_id AND t.id = u.id;

-- name: task_limit_keys
-- The keys stored on tasks (rendered from their nodes' templates when they were
-- created): what a later dispatch of them (a retry, a MAP item, a resume) goes
-- through.
SELECT id, limit_key, rate_key
  FROM task_instances
  JOIN unnest($1::text[], $2::text[]) AS u(run_id, id) USING (run_id, id);

-- name: lock_limit_key
SELECT pg_advisory_xact_lock(hashtextextended('composer.limit:' || $1, 0));

-- name: limit_load
-- A key's attempts in flight (those in $2 left out) and held (not those of paused
-- runs, held_reason $3, which wait for their resume).
SELECT count(*) FILTER (WHERE dispatched_at IS NOT NULL AND held_reason IS NULL
                          AND NOT (id = ANY($2::text[]))) AS in_flight,
       count(*) FILTER (WHERE held_reason IS NOT NULL AND held_reason <> $3) AS held
  FROM task_instances
 WHERE limit_key = $1 AND state IN ('PENDING', 'QUEUED', 'RUNNING')
   AND (dispatched_at IS NOT NULL OR held_reason IS NOT NULL);

-- name: held_limit_tasks
-- The held attempts of a key that go first (in held_tasks' order: priority aged a
-- level a minute, then first come), and the max each was declared under.
SELECT t.run_id, t.id, t.node_id, t.attempt, t.queue, t.limit_key, t.limit_max, t.rate_key,
       t.rate_units
  FROM task_instances t JOIN workflow_runs r ON r.id = t.run_id
 WHERE t.limit_key = $1 AND t.held_reason IS NOT NULL AND t.held_reason <> $3
   AND t.state = 'PENDING'
 ORDER BY greatest(1, coalesce(r.priority, 3)
                     - floor(extract(epoch FROM now() - t.created_at) / 60)),
          t.created_at, t.id
 LIMIT $2
   FOR UPDATE OF t SKIP LOCKED;

-- name: held_limit_keys
-- Every key with held attempts (the sweeper's pass releases each).
SELECT DISTINCT limit_key FROM task_instances
 WHERE limit_key IS NOT NULL AND held_reason IS NOT NULL AND held_reason <> $1;

-- name: node_limit_keys
-- Every key with attempts in flight or held: for GET /v1/limits.
SELECT limit_key,
       count(*) FILTER (WHERE dispatched_at IS NOT NULL AND held_reason IS NULL) AS in_use,
       count(*) FILTER (WHERE held_reason IS NOT NULL) AS waiting,
       max(limit_max) AS limit_max
  FROM task_instances
 WHERE limit_key IS NOT NULL AND state IN ('PENDING', 'QUEUED', 'RUNNING')
   AND (dispatched_at IS NOT NULL OR held_reason IS NOT NULL)
 GROUP BY limit_key
 ORDER BY limit_key
 LIMIT $1;

-- name: run_depth
-- How deep a run is among child runs (V020): 0 for a run a client started.
SELECT depth FROM workflow_runs WHERE id = $1;

-- name: insert_child_run
-- A SUB_WORKFLOW node's child run, PENDING, written in its parent's event with
-- its parent recorded (docs/architecture.md §4.15); a run_event starts it under
-- its own lock. Its id was decided by the parent's machine: a conflict is the
-- same child written twice, which the parent's transaction never does.
INSERT INTO workflow_runs (id, workflow_id, version, status, input, data_key, depth,
                           parent_run_id, parent_node_id, parent_task_id, parent_attempt,
                           parent_detached, created_at, updated_at)
VALUES ($1, $2, $3, 'PENDING', $4, $5, $6, $7, $8, $9, $10, $11, composer_now(), composer_now())
ON CONFLICT (id) DO NOTHING
RETURNING 1;

-- name: first_child_version
-- The version the first child of a SUB_WORKFLOW node's task runs: its retries'
-- children keep it (the deployed one when the node started).
SELECT version
  FROM workflow_runs
 WHERE parent_run_id = $1 AND parent_task_id = $2
 ORDER BY parent_attempt, id
 LIMIT 1;

-- name: start_child_task
-- A SUB_WORKFLOW node's attempt is under way: RUNNING, with no worker and no
-- dispatch (the sweeper and the lease statements look only at dispatched
-- attempts), until its child's end completes or fails it. Its stored input comes
-- back: a MAP item's child is started from it.
-- The node id: a fence by primary key, as in complete_tasks.
UPDATE task_instances
   SET state = 'RUNNING', dispatched_at = NULL, started_at = composer_now(),
       updated_at = composer_now()
 WHERE run_id = $1 AND id = $2 AND node_id IS NOT DISTINCT FROM $3 AND attempt = $4
   AND state IN ('PENDING', 'RUNNING')
RETURNING input;

-- name: run_children
-- The runs a run's nodes started, oldest first (GET /v1/runs/{id}).
SELECT id, workflow_id, version, status, parent_node_id, parent_task_id, parent_attempt,
       parent_detached, created_at, completed_at
  FROM workflow_runs
 WHERE parent_run_id = $1
 ORDER BY id
 LIMIT $2;

-- =============================================================================
-- Bulk operations on runs (V022, docs/architecture.md §6.7)
-- =============================================================================

-- name: insert_operation
-- A new operation; nothing when its idempotency key was used (the caller then
-- reads the first one's id with operation_by_key).
INSERT INTO run_operations (id, action, filter, reason, from_node, requested_by,
                            idempotency_key, cursor)
VALUES ($1, $2, $3, $4, $5, $6, $7, '~')
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING id;

-- name: operation_by_key
SELECT id, action FROM run_operations WHERE idempotency_key = $1;

-- name: collect_operation_items
-- One collected page of run ids, with where the next page starts ($3) and
-- whether that was the last page ($4), in one statement: total counts what was
-- inserted, so a page collected again adds nothing.
WITH added AS (
    INSERT INTO run_operation_items (operation_id, run_id)
    SELECT $1, unnest($2::text[])
    ON CONFLICT DO NOTHING
    RETURNING 1
)
UPDATE run_operations
   SET cursor = $3, collected = $4, total = total + (SELECT count(*) FROM added),
       updated_at = now()
 WHERE id = $1
RETURNING total;

-- name: get_operation
SELECT id, action, filter, reason, from_node, requested_by, cursor, collected, total, done,
       skipped, failed, last_error, created_at, updated_at, finished_at
  FROM run_operations
 WHERE id = $1;

-- name: going_operations
-- The operations still going, oldest first.
SELECT id, action, filter, reason, from_node, requested_by, cursor, collected, total, done,
       skipped, failed, last_error, created_at, updated_at, finished_at
  FROM run_operations
 WHERE finished_at IS NULL
 ORDER BY created_at
 LIMIT $1;

-- name: pending_operation_items
SELECT run_id
  FROM run_operation_items
 WHERE operation_id = $1 AND outcome IS NULL
 ORDER BY run_id
 LIMIT $2;

-- name: settle_operation_item
-- An item's outcome and the operation's counts, once: an item already settled
-- changes nothing (settled = 0).
WITH settled AS (
    UPDATE run_operation_items
       SET outcome = $3, error = $4
     WHERE operation_id = $1 AND run_id = $2 AND outcome IS NULL
    RETURNING outcome
)
UPDATE run_operations
   SET done = done + (SELECT count(*) FROM settled WHERE outcome = 'done'),
       skipped = skipped + (SELECT count(*) FROM settled WHERE outcome = 'skipped'),
       failed = failed + (SELECT count(*) FROM settled WHERE outcome = 'failed'),
       last_error = CASE WHEN EXISTS (SELECT 1 FROM settled WHERE outcome = 'failed')
                         THEN $4 ELSE last_error END,
       updated_at = now()
 WHERE id = $1
RETURNING (SELECT count(*) FROM settled) AS settled;

-- name: finish_operation
-- DONE when every run is collected and settled.
UPDATE run_operations
   SET finished_at = now(), updated_at = now()
 WHERE id = $1 AND finished_at IS NULL AND collected
   AND NOT EXISTS (SELECT 1 FROM run_operation_items
                    WHERE operation_id = $1 AND outcome IS NULL)
RETURNING 1;

-- Rate limits (V023, docs/architecture.md §4.12) ---------------------------------

-- name: make_rate_bucket
-- A rate key's bucket at its first use: full.
INSERT INTO rate_buckets (key, limit_per, per_seconds, tokens, refilled_at)
VALUES ($1, $2::int, $3::float8, $2::int, clock_timestamp())
ON CONFLICT (key) DO NOTHING;

-- name: take_rate_bucket
-- A rate key's bucket, locked until the transaction ends, with the seconds since
-- it was last refilled.
SELECT limit_per, per_seconds, tokens, set_by, clock_timestamp() AS now,
       extract(epoch FROM clock_timestamp() - refilled_at) AS elapsed
  FROM rate_buckets WHERE key = $1
   FOR UPDATE;

-- name: store_rate_bucket
UPDATE rate_buckets
   SET tokens = $2, refilled_at = $3, limit_per = $4, per_seconds = $5
 WHERE key = $1;

-- name: set_rate_limit
-- PUT /v1/limits/{key}: the key's limit and period from now on, by the caller's
-- name; its tokens capped at the new limit.
INSERT INTO rate_buckets (key, limit_per, per_seconds, tokens, refilled_at, set_by)
VALUES ($1, $2::int, $3::float8, $2::int, clock_timestamp(), $4)
ON CONFLICT (key) DO UPDATE
   SET limit_per = EXCLUDED.limit_per, per_seconds = EXCLUDED.per_seconds,
       tokens = least(rate_buckets.tokens, EXCLUDED.limit_per), set_by = EXCLUDED.set_by
RETURNING key;

-- name: rate_held_load
-- How many attempts wait for a rate key's tokens (not those of paused runs).
SELECT count(*) FROM task_instances
 WHERE rate_key = $1 AND held_reason IS NOT NULL AND held_reason <> $2 AND state = 'PENDING';

-- name: held_rate_tasks
-- The attempts waiting for a rate key's tokens that go first (in held_tasks' order:
-- priority aged a level a minute, then first come), with their units and queue.
SELECT t.run_id, t.id, t.node_id, t.attempt, t.queue, t.limit_key, t.limit_max, t.rate_key,
       t.rate_units
  FROM task_instances t JOIN workflow_runs r ON r.id = t.run_id
 WHERE t.rate_key = $1 AND t.held_reason IS NOT NULL AND t.held_reason <> $3
   AND t.state = 'PENDING'
 ORDER BY greatest(1, coalesce(r.priority, 3)
                     - floor(extract(epoch FROM now() - t.created_at) / 60)),
          t.created_at, t.id
 LIMIT $2
   FOR UPDATE OF t SKIP LOCKED;

-- name: held_rate_keys
SELECT DISTINCT rate_key FROM task_instances
 WHERE rate_key IS NOT NULL AND held_reason IS NOT NULL AND held_reason <> $1;

-- name: rate_limit_keys
-- Every bucket, with how many attempts wait for it: for GET /v1/limits.
SELECT b.key, b.limit_per, b.per_seconds, b.set_by,
       least(b.limit_per, b.tokens + extract(epoch FROM clock_timestamp() - b.refilled_at)
                                     * b.limit_per / b.per_seconds) AS tokens,
       (SELECT count(*) FROM task_instances t
         WHERE t.rate_key = b.key AND t.held_reason IS NOT NULL AND t.state = 'PENDING')
           AS waiting
  FROM rate_buckets b
 ORDER BY b.key
 LIMIT $1;

-- name: holds_run_slot
-- Whether a run holds a slot of its key (handed one, or took one at its start).
SELECT 1 FROM run_slots WHERE run_id = $1;

-- =============================================================================
-- Schedules (V024, docs/architecture.md §6.8)
-- =============================================================================

-- name: insert_schedule
-- A new schedule; nothing when its id is taken.
INSERT INTO schedules (id, workflow_id, spec, source, paused, next_fire_at, due_at, created_by)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (id) DO NOTHING
RETURNING 1;

-- name: lock_schedule
SELECT id, workflow_id, spec, source, paused, revision, next_fire_at, due_at, buffered_for,
       last_run_id, last_fired_for, fired, skipped, missed, claimed_by, claimed_until,
       created_by, created_at, updated_at
  FROM schedules WHERE id = $1 FOR UPDATE;

-- name: get_schedule
SELECT id, workflow_id, spec, source, paused, revision, next_fire_at, due_at, buffered_for,
       last_run_id, last_fired_for, fired, skipped, missed, claimed_by, claimed_until,
       created_by, created_at, updated_at
  FROM schedules WHERE id = $1;

-- name: list_schedules
SELECT id, workflow_id, spec, source, paused, revision, next_fire_at, due_at, buffered_for,
       last_run_id, last_fired_for, fired, skipped, missed, claimed_by, claimed_until,
       created_by, created_at, updated_at
  FROM schedules
 WHERE ($1::text IS NULL OR workflow_id = $1)
 ORDER BY id;

-- name: workflow_schedules
-- The schedules a workflow's deployed definition wrote, locked (a deploy replaces them).
SELECT id, workflow_id, spec, source, paused, revision, next_fire_at, due_at, buffered_for,
       last_run_id, last_fired_for, fired, skipped, missed, claimed_by, claimed_until,
       created_by, created_at, updated_at
  FROM schedules WHERE workflow_id = $1 AND source = 'definition' ORDER BY id FOR UPDATE;

-- name: replace_schedule_spec
-- A changed spec (a deploy): a new revision, fire times from now on.
UPDATE schedules
   SET spec = $2, paused = $3, next_fire_at = $4, due_at = $5, buffered_for = NULL,
       revision = revision + 1, updated_at = now()
 WHERE id = $1;

-- name: delete_schedule
DELETE FROM schedules WHERE id = $1 RETURNING 1;

-- name: set_schedule_paused
-- Pause or resume: a new revision (a claim's write-back leaves it be); a resume
-- fires from the next fire time after now.
UPDATE schedules
   SET paused = $2, next_fire_at = coalesce($3, next_fire_at), due_at = coalesce($4, due_at),
       revision = revision + 1, updated_at = now()
 WHERE id = $1
RETURNING 1;

-- name: claim_due_schedules
-- Due schedules no live claim holds, soonest first, claimed by $2 until $3.
UPDATE schedules s
   SET claimed_by = $2, claimed_until = $3
  FROM (SELECT id FROM schedules
         WHERE NOT paused AND due_at <= $1 AND (claimed_until IS NULL OR claimed_until < $1)
         ORDER BY due_at
         LIMIT $4
           FOR UPDATE SKIP LOCKED) due
 WHERE s.id = due.id
RETURNING s.id, s.workflow_id, s.spec, s.source, s.paused, s.revision, s.next_fire_at, s.due_at,
          s.buffered_for, s.last_run_id, s.last_fired_for, s.fired, s.skipped, s.missed,
          s.claimed_by, s.claimed_until, s.created_by, s.created_at, s.updated_at;

-- name: finish_schedule_claims
-- A pass's outcomes for its schedules, each fenced by its claim ($1: the pass's
-- token), in one statement for the schedules fired together. The counts add up
-- whatever the revision; next_fire_at and the buffer only when no change came in
-- meanwhile (a deploy or a resume set them). last_run_id keeps the newest run (ids
-- grow with time), whoever started it: a trigger may have meanwhile. Returns the
-- schedules whose claim still held.
UPDATE schedules s
   SET next_fire_at = CASE WHEN s.revision = o.revision THEN o.next_fire_at
                           ELSE s.next_fire_at END,
       due_at = CASE WHEN s.revision = o.revision THEN o.due_at ELSE s.due_at END,
       buffered_for = CASE WHEN s.revision = o.revision THEN o.buffered_for
                           ELSE s.buffered_for END,
       last_run_id = CASE WHEN s.last_run_id IS NULL OR o.last_run_id > s.last_run_id
                          THEN coalesce(o.last_run_id, s.last_run_id) ELSE s.last_run_id END,
       last_fired_for = greatest(s.last_fired_for, o.last_fired_for),
       fired = s.fired + o.fired, skipped = s.skipped + o.skipped, missed = s.missed + o.missed,
       claimed_by = NULL, claimed_until = NULL, updated_at = now()
  FROM unnest($2::text[], $3::int[], $4::timestamptz[], $5::timestamptz[], $6::timestamptz[],
              $7::text[], $8::timestamptz[], $9::bigint[], $10::bigint[], $11::bigint[])
       AS o(id, revision, next_fire_at, due_at, buffered_for, last_run_id, last_fired_for,
            fired, skipped, missed)
 WHERE s.id = o.id COLLATE "C" AND s.claimed_by = $1
RETURNING s.id;

-- name: note_schedule_run
-- A trigger's run: the schedule's newest, counted as fired.
UPDATE schedules
   SET last_run_id = CASE WHEN last_run_id IS NULL OR $2::text > last_run_id THEN $2
                          ELSE last_run_id END,
       fired = fired + 1, updated_at = now()
 WHERE id = $1;

-- name: note_schedule_skip
-- A trigger the overlap policy held back: counted as skipped.
UPDATE schedules SET skipped = skipped + 1, updated_at = now() WHERE id = $1;

-- name: next_schedule_due
SELECT min(due_at) FROM schedules WHERE NOT paused;

-- name: insert_schedule_events
INSERT INTO schedule_events (schedule_id, kind, scheduled_for, run_id, detail, actor)
SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::text[], $5::text[], $6::text[]);

-- name: schedule_events
SELECT id, schedule_id, at, kind, scheduled_for, run_id, detail, actor
  FROM schedule_events WHERE schedule_id = $1 ORDER BY id DESC LIMIT $2;

-- name: delete_schedule_events
DELETE FROM schedule_events WHERE schedule_id = $1;

-- name: run_statuses
-- Runs' statuses (schedules' overlap policies ask whether their last runs go).
SELECT id, status FROM workflow_runs WHERE id = ANY($1::text[]);

-- name: list_runs_by_schedule
SELECT id, workflow_id, version, status, error, idempotency_key, created_at, updated_at, completed_at,
       started_by, labels, schedule_id, scheduled_for
  FROM workflow_runs
 WHERE id < $1 AND id >= $2 AND schedule_id = $4 AND ($5::text IS NULL OR status = $5)
 ORDER BY id DESC
 LIMIT $3;

-- name: insert_backfill
INSERT INTO schedule_backfills (id, schedule_id, start_at, end_at, overlap, total, requested_by)
VALUES ($1, $2, $3, $4, $5, $6, $7);

-- name: claim_backfills
-- Backfills going that no live claim holds, oldest first, claimed by $2 until $3.
UPDATE schedule_backfills b
   SET claimed_by = $2, claimed_until = $3
  FROM (SELECT id FROM schedule_backfills
         WHERE finished_at IS NULL AND (claimed_until IS NULL OR claimed_until < $1)
         ORDER BY created_at
         LIMIT $4
           FOR UPDATE SKIP LOCKED) going
 WHERE b.id = going.id
RETURNING b.id, b.schedule_id, b.start_at, b.end_at, b.overlap, b.cursor, b.total, b.started,
          b.skipped, b.last_run_id, b.requested_by, b.created_at, b.finished_at;

-- name: finish_backfill_claim
UPDATE schedule_backfills
   SET cursor = $3, started = started + $4, skipped = skipped + $5,
       last_run_id = coalesce($6, last_run_id),
       finished_at = CASE WHEN $7 THEN now() END,
       claimed_by = NULL, claimed_until = NULL
 WHERE id = $1 AND claimed_by = $2
RETURNING 1;

-- name: schedule_backfills
SELECT id, schedule_id, start_at, end_at, overlap, cursor, total, started, skipped, last_run_id,
       requested_by, created_at, finished_at
  FROM schedule_backfills WHERE schedule_id = $1 ORDER BY created_at DESC LIMIT $2;

-- name: get_backfill
SELECT id, schedule_id, start_at, end_at, overlap, cursor, total, started, skipped, last_run_id,
       requested_by, created_at, finished_at
  FROM schedule_backfills WHERE id = $1;
