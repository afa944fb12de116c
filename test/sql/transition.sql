-- the transition window: after ttl_at only the owner may renew; after
-- transition_at anyone may acquire (short leases; each pg_sleep ends just past
-- a deadline read from the row, so a slow backend, under valgrind say, still
-- acts inside the window it means to)
-- a fresh install: fences below count from 1, whatever tests ran before
SET client_min_messages = warning;
SET simba.drop_live_leases = on;
DROP EXTENSION simba;
CREATE EXTENSION simba;
RESET client_min_messages;

SELECT owner_id, fence FROM simba_acquire('t', 'a', '2s', '3s');
-- inside the ttl: others wait
SELECT owner_id, fence FROM simba_acquire('t', 'b', '2s', '3s');
SELECT pg_sleep(extract(epoch FROM ttl_at - (simba_clock()).now) + 0.05) AS past_ttl
  FROM simba_mutex_status WHERE mutex = 't';
-- inside the transition: others still wait ...
SELECT state FROM simba_mutex_status WHERE mutex = 't';
SELECT owner_id, fence FROM simba_acquire('t', 'b', '2s', '3s');
-- ... and the owner renews without a change of hands, here into a short
-- lease that the next sleep outlives
SELECT owner_id, fence, version FROM simba_acquire('t', 'a', '100ms', '100ms');
SELECT pg_sleep(extract(epoch FROM transition_at - (simba_clock()).now) + 0.05) AS past_transition
  FROM simba_mutex_status WHERE mutex = 't';
-- past transition_at: anyone may acquire, with the next fence
SELECT state FROM simba_mutex_status WHERE mutex = 't';
SELECT owner_id FROM simba_owner('t');
SELECT simba_release('t', 'a') AS late_release;
SELECT owner_id, fence, version FROM simba_acquire('t', 'b', '10s', '0s');

-- transition 0: the lease ends with the ttl
SELECT owner_id, transition_at = ttl_at AS no_transition FROM simba_acquire('t0', 'a', '50ms', '0s');
SELECT pg_sleep(0.1);
SELECT owner_id, fence FROM simba_acquire('t0', 'b', '10s', '0s');
