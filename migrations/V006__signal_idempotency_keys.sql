-- V006: a signal sent again with the same Idempotency-Key takes effect once.
--
-- A client that lost the answer to POST /v1/runs/{id}/signals/{name} cannot
-- tell whether the signal arrived; sending it again must not complete a second
-- WAIT_FOR_EVENT node. The first request under a key records the outcome here
-- (under the run's lock, in the signal's transaction); a repeat answers it.
-- Like run_idempotency_keys: small, unpartitioned (its key is not the
-- partition key), and emptied with the month of runs it belongs to.
CREATE TABLE signal_idempotency_keys (
    run_id          TEXT COLLATE "C" NOT NULL,
    idempotency_key TEXT NOT NULL,
    name            TEXT NOT NULL,
    delivered       BOOLEAN NOT NULL,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, idempotency_key)
);

-- As in V001, plus the month's signal keys; and one month that cannot be dropped
-- (a view someone built on it, a lock timeout) no longer stops the others: each
-- month is dropped in a subtransaction of its own, and a failure is returned with
-- the month (error NULL: dropped) for the partition-manager to report.
DROP FUNCTION composer_drop_partitions(TIMESTAMPTZ);
CREATE FUNCTION composer_drop_partitions(older_than TIMESTAMPTZ)
RETURNS TABLE (suffix TEXT, error TEXT)
LANGUAGE plpgsql AS $$
DECLARE
    part RECORD;
    month_start TIMESTAMPTZ;
    active BOOLEAN;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('composer_partitions'));
    FOR part IN
        SELECT c.relname
          FROM pg_inherits i
          JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = 'workflow_runs'::regclass
         ORDER BY c.relname
    LOOP
        suffix := substring(part.relname FROM '_p(\d{6})$');
        CONTINUE WHEN suffix IS NULL;
        month_start := composer_partition_month(suffix);
        CONTINUE WHEN (month_start AT TIME ZONE 'UTC' + INTERVAL '1 month') AT TIME ZONE 'UTC'
                      > older_than;

        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I WHERE status IN (''PENDING'', ''RUNNING''))',
                       part.relname) INTO active;
        IF active THEN
            RAISE NOTICE 'keeping partition %: it still has active runs', part.relname;
            CONTINUE;
        END IF;

        BEGIN
            DELETE FROM run_idempotency_keys
             WHERE run_id >= composer_uuid7_bound(month_start)
               AND run_id < composer_uuid7_bound(
                       (month_start AT TIME ZONE 'UTC' + INTERVAL '1 month') AT TIME ZONE 'UTC');
            DELETE FROM signal_idempotency_keys
             WHERE run_id >= composer_uuid7_bound(month_start)
               AND run_id < composer_uuid7_bound(
                       (month_start AT TIME ZONE 'UTC' + INTERVAL '1 month') AT TIME ZONE 'UTC');
            -- Referencing tables first, so their foreign keys never see orphans.
            EXECUTE format('DROP TABLE IF EXISTS %I', 'workflow_events_p' || suffix);
            EXECUTE format('DROP TABLE IF EXISTS %I', 'task_instances_p' || suffix);
            EXECUTE format('ALTER TABLE workflow_runs DETACH PARTITION %I', part.relname);
            EXECUTE format('DROP TABLE %I', part.relname);
            error := NULL;
        EXCEPTION WHEN OTHERS THEN
            error := SQLERRM;
        END;
        RETURN NEXT;
    END LOOP;
END;
$$;
