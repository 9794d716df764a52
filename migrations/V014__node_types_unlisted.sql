-- V014: the database no longer lists the node kinds.
--
-- A task's node_type is its node's kind's name (composer_core.kinds, one module
-- per kind, registered in one table). Validation refuses a type no kind is
-- registered for before any definition is stored, and every task row is written
-- from a stored definition, so the CHECK that listed the types here only made
-- each new kind a migration too. The column stays NOT NULL TEXT.
ALTER TABLE task_instances DROP CONSTRAINT task_instances_node_type_check;
