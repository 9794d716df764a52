-- V002: composer_ensure_partitions also covers the UTC month of 24 hours ago.
--
-- A client may choose its run id up to 24 h in the past (composer_common.ids,
-- CLIENT_ID_MAX_AGE), and a run's UUIDv7 timestamp picks its partition. On a
-- database first migrated early on the 1st of a month, the previous month had
-- no partition, so such a start failed with "no partition". Creating that
-- month too costs nothing once it exists.
CREATE OR REPLACE FUNCTION composer_ensure_partitions(months_ahead INT DEFAULT 3) RETURNS INT
LANGUAGE plpgsql AS $$
DECLARE
    created INT := 0;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('composer_partitions'));
    created := composer_create_month(now() - INTERVAL '24 hours');
    FOR i IN 0..months_ahead LOOP
        created := created + composer_create_month(
            (date_trunc('month', now() AT TIME ZONE 'UTC') + make_interval(months => i))
                AT TIME ZONE 'UTC');
    END LOOP;
    RETURN created;
END;
$$;
SELECT composer_ensure_partitions();
