-- Seeds 1,000,000 runs over the three months before now into a scratch database
-- migrated by `composer migrate`, for timing GET /v1/runs' filtered pages
-- (docs/architecture.md §5, "Finding runs"). Never run it on a real database:
--   createdb composer_listing_bench
--   COMPOSER_DATABASE_URL=postgresql://…/composer_listing_bench composer migrate
--   psql -d composer_listing_bench -f bench/runs_listing_seed.sql
--
-- 20 workflows; each value drawn independently; statuses as a busy system has them (90 % SUCCEEDED, 5 % FAILED,
-- 3 % RUNNING, 2 % CANCELLED); 30 % of the runs carry labels: env (prod 2/3,
-- staging), a customer among 1,000 (customer 'acme': about 100 runs) and region.
SELECT composer_create_month(now() - make_interval(months => m)) FROM generate_series(0, 3) m;

INSERT INTO workflow_definitions (id, version, name, spec, deployed)
SELECT 'wf-' || w, 1, 'wf-' || w, '{}'::jsonb, true FROM generate_series(0, 19) w;

SELECT setseed(0.27);
INSERT INTO workflow_runs (id, workflow_id, version, status, input, labels, created_at,
                           updated_at, completed_at)
SELECT substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-7' || substr(r, 1, 3) || '-8'
           || substr(r, 4, 3) || '-' || substr(r, 7, 12),
       'wf-' || floor(u1 * 20)::int, 1,
       CASE WHEN u2 < 0.90 THEN 'SUCCEEDED' WHEN u2 < 0.95 THEN 'FAILED'
            WHEN u2 < 0.98 THEN 'RUNNING' ELSE 'CANCELLED' END,
       '{}'::jsonb,
       CASE WHEN u3 < 0.3 THEN jsonb_build_object(
                'env', CASE WHEN u4 < 2.0 / 3 THEN 'prod' ELSE 'staging' END,
                'customer', CASE WHEN i % 3000 = 1 THEN 'acme' ELSE 'c' || floor(u5 * 1000)::int END,
                'region', 'r' || floor(u6 * 7)::int) END,
       ts, ts, ts
  FROM (SELECT i, md5(i::text) AS r, random() AS u1, random() AS u2, random() AS u3,
               random() AS u4, random() AS u5, random() AS u6,
               now() - interval '90 days' + (i * interval '90 days' / 1000000) AS ts
          FROM generate_series(1, 1000000) i) s,
       LATERAL (SELECT lpad(to_hex(floor(extract(epoch FROM s.ts) * 1000)::bigint), 12, '0') AS h) x;

VACUUM ANALYZE workflow_runs;
