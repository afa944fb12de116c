-- counting semaphore: leased permits with tokens and fences
-- a fresh install: fences below count from 1, whatever tests ran before
SET client_min_messages = warning;
SET simba.drop_live_leases = on;
DROP EXTENSION simba;
CREATE EXTENSION simba;
RESET client_min_messages;
\set VERBOSITY terse

-- up to N permits; the N+1st gets NULL
CREATE TEMP TABLE permits AS
SELECT n, p.*
  FROM generate_series(1, 4) n, LATERAL simba_semaphore_acquire('workers', 'w' || n, 3, '10min', 'job-' || n) p
 ORDER BY n;
SELECT n, key, slot, token IS NOT NULL AS granted FROM permits ORDER BY n;
-- fences strictly increase per key across grants
SELECT bool_and(fence > prev) AS increasing
  FROM (SELECT fence, lag(fence, 1, 0::bigint) OVER (ORDER BY n) AS prev FROM permits WHERE token IS NOT NULL) f;
-- tokens are random uuids (version 4)
SELECT count(DISTINCT token) AS distinct_tokens, bool_and(substr(token::text, 15, 1) = '4') AS v4
  FROM permits WHERE token IS NOT NULL;

-- the status view: live permits with holder, context and the key's limit
SELECT key, slot, holder, context, permits, time_left > '9 min' AS ten_minutes
  FROM simba_semaphore_status WHERE key = 'workers' ORDER BY slot;

-- release frees one; a second release of the same token is false
SELECT simba_semaphore_release('workers', token) FROM permits WHERE n = 2;
SELECT simba_semaphore_release('workers', token) FROM permits WHERE n = 2;
SELECT slot AS w5_slot FROM simba_semaphore_acquire('workers', 'w5', 3) \gset
SELECT slot, holder FROM simba_semaphore_status WHERE key = 'workers' AND slot = :w5_slot;
SELECT simba_semaphore_acquire('workers', 'w6', 3) IS NULL AS full;

-- refresh keeps a permit: extends it to now + ttl
SELECT simba_semaphore_refresh('workers', token, '1h') FROM permits WHERE n = 1;
SELECT time_left > '59 min' AS extended FROM simba_semaphore_status WHERE holder = 'w1';

-- expiry frees a permit, lazily: its slot is taken over by the next grant
SELECT token AS short_token, fence AS short_fence, expires_at AS short_end
  FROM simba_semaphore_acquire('short', 'a', 1, '3s') \gset
SELECT simba_semaphore_acquire('short', 'b', 1) IS NULL AS still_held;
SELECT pg_sleep(extract(epoch FROM :'short_end'::timestamptz - (simba_clock()).now) + 0.05) AS past_expiry;
SELECT slot, fence > :short_fence AS newer_fence FROM simba_semaphore_acquire('short', 'b', 1);
-- the expired-and-taken-over token can neither refresh nor release
SELECT simba_semaphore_refresh('short', :'short_token', '10s') AS refreshed,
       simba_semaphore_release('short', :'short_token') AS released;
-- and its fence check fails; the new holder's passes
SELECT simba_semaphore_fence_check('short', :'short_token', :short_fence);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_semaphore_fence_check('short', token, fence) AS passes
  FROM simba_semaphore_permit WHERE key = 'short';
SELECT simba_semaphore_fence_check('short', token, fence + 1)
  FROM simba_semaphore_permit WHERE key = 'short';
\echo :LAST_ERROR_SQLSTATE
SELECT token AS exp_token, fence AS exp_fence FROM simba_semaphore_acquire('expiring', 'a', 1, '50ms') \gset
SELECT pg_sleep(0.1);
SELECT simba_semaphore_fence_check('expiring', :'exp_token', :exp_fence);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_semaphore_release('nowhere', gen_random_uuid()) AS unknown;

-- reducing permits revokes nobody; new grants wait until below the new limit
SELECT count(*) AS live FROM simba_semaphore_status WHERE key = 'workers';
SELECT simba_semaphore_acquire('workers', 'w7', 2) IS NULL AS refused_at_2;
SELECT simba_semaphore_release('workers', token) FROM permits WHERE n = 1;
SELECT simba_semaphore_acquire('workers', 'w8', 2) IS NULL AS refused_at_2;
SELECT count(*) AS live, max(permits) AS permits FROM simba_semaphore_status WHERE key = 'workers';
SELECT simba_semaphore_release('workers', token) FROM permits WHERE n = 3;
SELECT slot AS w9_slot FROM simba_semaphore_acquire('workers', 'w9', 2) \gset
SELECT holder FROM simba_semaphore_status WHERE key = 'workers' AND slot = :w9_slot;

-- context round-trips, NULL context too
SELECT simba_semaphore_acquire('ctx', 'a', 5, '10s', E'batch 7; ünïcode\t"quoted"') IS NOT NULL;
SELECT simba_semaphore_acquire('ctx', 'b', 5) IS NOT NULL;
SELECT holder, context FROM simba_semaphore_status WHERE key = 'ctx' ORDER BY holder;

-- gc removes keys without live permits only
SELECT simba_semaphore_acquire('gc-dead', 'a', 1, '10ms') IS NOT NULL;
SELECT pg_sleep(0.05);
SELECT simba_semaphore_gc() AS removed_keys;
SELECT key FROM simba_semaphore ORDER BY key;
SELECT count(*) AS permit_rows FROM simba_semaphore_permit WHERE key IN ('gc-dead', 'expiring');
-- fences keep growing after gc removed a key
SELECT fence > :exp_fence AS still_growing FROM simba_semaphore_acquire('expiring', 'a', 1);

-- bad input: clear errors, nothing changed
CREATE TEMP TABLE before AS SELECT * FROM simba_semaphore_permit;
SELECT simba_semaphore_acquire(NULL, 'a', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_semaphore_acquire('', 'a', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_semaphore_acquire('k', NULL, 1);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_semaphore_acquire('k', '', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_semaphore_acquire('k', 'a', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_semaphore_acquire('k', 'a', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_semaphore_acquire('k', 'a', -5);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_semaphore_acquire('k', 'a', 10001);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_semaphore_acquire('k', 'a', 1, '0s');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_semaphore_acquire('k', 'a', 1, '1 day');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_semaphore_acquire('k', 'a', 1, NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_semaphore_acquire('k', 'a', 1, '1s', repeat('c', 257));
\echo :LAST_ERROR_SQLSTATE
SELECT simba_semaphore_acquire(repeat('k', 257), 'a', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_semaphore_refresh('workers', NULL, '1s');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_semaphore_refresh('workers', gen_random_uuid(), '-1s');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_semaphore_release('workers', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_semaphore_release('workers', 'not-a-uuid');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_semaphore_fence_check('workers', gen_random_uuid(), 0);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_semaphore_fence_check('workers', gen_random_uuid(), NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS changed_rows
  FROM (SELECT * FROM simba_semaphore_permit EXCEPT SELECT * FROM before
        UNION ALL
        SELECT * FROM before EXCEPT SELECT * FROM simba_semaphore_permit) d;
SELECT count(*) AS new_keys FROM simba_semaphore WHERE key = 'k';
