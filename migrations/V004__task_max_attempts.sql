-- V004: a worker task carries its node's attempt budget.
--
-- A lease answer tells the worker how many attempts the node allows (the
-- handler's ctx.max_attempts and is_last_attempt). Reading it from the
-- definition meant joining the run's row to every lease, a second partition
-- probe on the hottest statement; the machine knows the retry policy when it
-- creates the task, so the task row keeps it. NULL on rows written before this
-- migration: the lease answers 0 (unknown) and the worker falls back to the
-- stream message's value.
ALTER TABLE task_instances ADD COLUMN max_attempts INT CHECK (max_attempts > 0);
