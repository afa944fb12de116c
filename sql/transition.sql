-- the transition window: after ttl_at only the owner may renew; after
-- transition_at anyone may acquire (short leases, pg_sleep past them)
-- a fresh install: fences below count from 1, whatever tests ran before
SET client_min_messages = warning;
SET simba.drop_live_leases = on;
DROP EXTENSION simba;
CREATE EXTENSION simba;
RESET client_min_messages;

SELECT owner_id, fence FROM simba_acquire('t', 'a', '200ms', '1s');
-- inside the ttl: others wait
SELECT owner_id, fence FROM simba_acquire('t', 'b', '200ms', '1s');
SELECT pg_sleep(0.3);
-- inside the transition: others still wait ...
SELECT state FROM simba_mutex_status WHERE mutex = 't';
SELECT owner_id, fence FROM simba_acquire('t', 'b', '200ms', '1s');
-- ... and the owner renews without a change of hands
SELECT owner_id, fence, version FROM simba_acquire('t', 'a', '200ms', '1s');
SELECT pg_sleep(1.5);
-- past transition_at: anyone may acquire, with the next fence
SELECT state FROM simba_mutex_status WHERE mutex = 't';
SELECT owner_id FROM simba_owner('t');
SELECT simba_release('t', 'a') AS late_release;
SELECT owner_id, fence, version FROM simba_acquire('t', 'b', '10s', '0s');

-- transition 0: the lease ends with the ttl
SELECT owner_id, transition_at = ttl_at AS no_transition FROM simba_acquire('t0', 'a', '50ms', '0s');
SELECT pg_sleep(0.1);
SELECT owner_id, fence FROM simba_acquire('t0', 'b', '10s', '0s');
