-- V027: a run's priority, looked up by its id through a plan made once per session.
--
-- enqueue_dispatches wrote each dispatch's band from a subquery on workflow_runs by
-- run id. A run id is a parameter, so each execution was planned afresh (a custom
-- plan over every monthly partition, pruned at plan time): 0.4–1.0 ms of planning
-- for a 0.1 ms insert, on every report's transaction. A PL/pgSQL function keeps the
-- plan of its query for the session, and this one asks for the generic plan, which
-- prunes the partitions as it starts (the id is known then): the look-up costs an
-- index probe, and the insert around it plans in under 0.1 ms.
CREATE FUNCTION composer_run_priority(run TEXT) RETURNS SMALLINT
    LANGUAGE plpgsql STABLE STRICT
    SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    RETURN (SELECT r.priority FROM workflow_runs r WHERE r.id = run);
END
$$;
