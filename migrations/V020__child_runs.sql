-- V020: child runs of SUB_WORKFLOW nodes (docs/architecture.md §4.14).
--
-- A child run's depth (its parent's plus one; 0 for a run a client started)
-- bounds nesting: a node that would start a run deeper than
-- COMPOSER_MAX_CHILD_DEPTH fails instead. parent_detached marks a child its node
-- started with on_parent_cancel: abandon, which its parent's cancel leaves
-- running. Both have a constant default: adding them rewrites no row.
ALTER TABLE workflow_runs
    ADD COLUMN depth INT NOT NULL DEFAULT 0,
    ADD COLUMN parent_detached BOOLEAN NOT NULL DEFAULT false;
