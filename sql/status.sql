-- simba_mutex_status: every mutex with its state now
-- a fresh install: fences below count from 1, whatever tests ran before
SET client_min_messages = warning;
SET simba.drop_live_leases = on;
DROP EXTENSION simba;
CREATE EXTENSION simba;
RESET client_min_messages;
SELECT simba_acquire('s-held', 'a', '1h', '1h') IS NOT NULL;
SELECT simba_acquire('s-trans', 'a', '10ms', '1h') IS NOT NULL;
SELECT simba_acquire('s-expired', 'a', '10ms', '10ms') IS NOT NULL;
SELECT simba_acquire('s-released', 'a', '1h', '1h') IS NOT NULL;
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
