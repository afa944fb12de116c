-- simba_renew: renews the caller's live tenure by its fence, never takes the
-- mutex (a holder that lost its tenure learns it without a new one)
SET client_min_messages = warning;
SET simba.drop_live_leases = on;
DROP EXTENSION simba;
CREATE EXTENSION simba;
RESET client_min_messages;
\set VERBOSITY default
\set SHOW_CONTEXT never

SELECT owner_id, version, fence FROM simba_acquire('r', 'a', '10s', '5s');
-- the holder's fence: renewed, same fence, lease counted from the decision
SELECT owner_id, version, fence, ttl_at - current_at AS ttl, transition_at - ttl_at AS transition
  FROM simba_renew('r', 'a', 1, '20s', '2s');
-- another fence of the holder, or another contender: nothing changes
SELECT owner_id, version, fence FROM simba_renew('r', 'a', 2);
SELECT owner_id, version, fence FROM simba_renew('r', 'b', 1);
SELECT owner_id, version, fence FROM simba_owner('r');

-- after a forced release the holder's renewal reports the mutex free and
-- does not take it
SELECT simba_force_release('r') AS forced;
SELECT owner_id, version, fence FROM simba_renew('r', 'a', 1);
SELECT owner_id, version, fence FROM simba_owner('r');
-- the next holder gets the next fence; the old one renews nothing
SELECT owner_id, version, fence FROM simba_acquire('r', 'b');
SELECT owner_id, version, fence FROM simba_renew('r', 'a', 1);
SELECT owner_id, version, fence FROM simba_renew('r', 'b', 1);

-- an ended lease is not renewed (nor taken)
SELECT owner_id, fence FROM simba_acquire('short', 'a', '1ms', '0s');
SELECT pg_sleep(0.01);
SELECT owner_id, version, fence FROM simba_renew('short', 'a', 3);
SELECT owner_id, version, fence FROM simba_owner('short');

-- a mutex nobody ever used reads as free and is not created
SELECT mutex, owner_id, version, fence FROM simba_renew('never', 'a', 1);
SELECT count(*) AS rows FROM simba_mutex WHERE mutex = 'never';

-- bad input: its SQLSTATE, nothing changes
CREATE TEMP TABLE before AS SELECT * FROM simba_mutex;
SELECT simba_renew('r', 'b', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_renew('r', 'b', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_renew('r', 'b', -2);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_renew(NULL, 'b', 2);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_renew('r', '', 2);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_renew('r', 'b', 2, '-1s');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS changed FROM (SELECT * FROM simba_mutex EXCEPT SELECT * FROM before) AS d;
