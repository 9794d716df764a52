-- V025: the one-task-per-node index leads with the node, not the run
-- (docs/architecture.md §2, "MAP").
--
-- V021's unique (run_id, node_id, item) index could serve a condition on run_id
-- alone. Statements that find task rows by (run id, task id) — a batch of leases,
-- completions, MAP items that go — could then scan the index for every row of
-- the run and filter on the task id; the planner took it whenever its statistics
-- (most runs small) priced that scan as the primary key's one-row probe, since
-- this index is the smaller of the two. For a MAP of 1,000 items, every item's
-- lease and report walked 1,000 rows. Led by node_id, the index only serves
-- lookups that name the node (and the run): the primary key is the one index a
-- run-and-task lookup can take.
CREATE UNIQUE INDEX task_instances_node_run_item ON task_instances (node_id, run_id, item)
    NULLS NOT DISTINCT;
DROP INDEX task_instances_run_node_item;
