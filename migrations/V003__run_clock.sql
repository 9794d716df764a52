-- V003: composer_now(), the clock of an event's transaction, read once after the
-- run lock (docs/architecture.md §4.6).
--
-- The lock query (lock_run, try_lock_run) reads clock_timestamp() after it holds
-- the run's row lock and keeps it for the rest of the transaction in the
-- transaction-local setting composer.now; every time the event writes is that
-- one value. It is later than anything an earlier transaction of the run wrote
-- (that transaction committed before the lock was granted), and every row the
-- event writes carries the same time, so a join never reads as finished before
-- the branch that completed it. Outside an event (a start, a lease, a definition
-- change) no lock set it, and the transaction's now() is used.
CREATE FUNCTION composer_now() RETURNS TIMESTAMPTZ
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT COALESCE(NULLIF(current_setting('composer.now', true), '')::timestamptz, now())
$$;
