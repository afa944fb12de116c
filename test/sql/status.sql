-- simba_mutex_status: every mutex with its state now
-- a fresh install: fences below count from 1, whatever tests ran before
SET client_min_messages = warning;
SET simba.drop_live_leases = on;
DROP EXTENSION simba;
CREATE EXTENSION simba;
RESET client_min_messages;
SELECT (simba_acquire('s-held', 'a', '1h', '1h')).owner_id IS NOT NULL;
SELECT (simba_acquire('s-trans', 'a', '10ms', '1h')).owner_id IS NOT NULL;
SELECT (simba_acquire('s-expired', 'a', '10ms', '10ms')).owner_id IS NOT NULL;
SELECT (simba_acquire('s-released', 'a', '1h', '1h')).owner_id IS NOT NULL;
SELECT simba_release('s-released', 'a');
SELECT pg_sleep(0.05);

SELECT mutex, owner_id, state, fence, version,
       time_left > '50 minutes' AS hour_left, time_left IS NULL AS no_time_left,
       acquired_at IS NOT NULL AS has_times
  FROM simba_mutex_status
 WHERE mutex LIKE 's-%'
 ORDER BY mutex;

-- column types as documented
SELECT attname, format_type(atttypid, atttypmod)
  FROM pg_attribute
 WHERE attrelid = 'simba_mutex_status'::regclass AND attnum > 0
 ORDER BY attnum;

-- simba_epoch_us: lease times as clients read them, exact to the microsecond
SELECT simba_epoch_us('1970-01-01 00:00:00+00') AS unix_epoch,
       simba_epoch_us('2000-01-01 00:00:00+00') AS postgres_epoch,
       simba_epoch_us('1969-12-31 23:59:59.999999+00') AS before_1970,
       simba_epoch_us('2026-11-25 01:02:03.456789+01') AS a_lease_time,
       simba_epoch_us(NULL) IS NULL AS strict;
-- the same as extract(epoch ...) on every time of an owner row
SELECT bool_and(simba_epoch_us(t) = (extract(epoch FROM t) * 1000000)::int8) AS same
  FROM simba_mutex_status, LATERAL (VALUES (acquired_at), (ttl_at), (transition_at)) v(t)
 WHERE mutex LIKE 's-%' AND t IS NOT NULL;
-- infinite or beyond int8 microseconds: 22008
SELECT simba_epoch_us('infinity');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_epoch_us('-infinity');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_epoch_us('294247-01-10 04:00:54.775807+00') AS largest;
SELECT simba_epoch_us('294247-01-10 04:00:54.775808+00');
\echo :LAST_ERROR_SQLSTATE
