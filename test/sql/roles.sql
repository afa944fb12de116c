-- a lease or permit belongs to the role that took it: another granted role
-- that reads the holder's contender id (or steals a token) is a different
-- contender; and no lease is longer than simba.max_lease
SET client_min_messages = warning;
SET simba.drop_live_leases = on;
DROP EXTENSION simba;
CREATE EXTENSION simba;
RESET client_min_messages;
\set VERBOSITY terse
CREATE ROLE regress_simba_a;
CREATE ROLE regress_simba_b;
SELECT simba_grant('regress_simba_a');
SELECT simba_grant('regress_simba_b');
SET simba.history = on;

SET ROLE regress_simba_a;
SELECT owner_id, owner_role, fence FROM simba_acquire('r', 'shared-id', '1h', '1h');
SELECT token AS a_token, fence AS a_fence FROM simba_semaphore_acquire('rk', 'a', 1, '1h') \gset
RESET ROLE;

-- b reads a's id from the status view and tries it everywhere
SET ROLE regress_simba_b;
SELECT owner_id, owner_role FROM simba_mutex_status WHERE mutex = 'r';
SELECT owner_id, owner_role, fence, version FROM simba_acquire('r', 'shared-id', '1h', '1h');
SELECT simba_release('r', 'shared-id') AS b_released;
SELECT simba_fence_check('r', 'shared-id', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_semaphore_refresh('rk', :'a_token', '1h') AS b_refreshed;
SELECT simba_semaphore_release('rk', :'a_token') AS b_released_permit;
SELECT simba_semaphore_fence_check('rk', :'a_token', :a_fence);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

-- nothing changed for a, which renews, checks and releases as before
SELECT owner_id, owner_role, fence, version FROM simba_mutex_status WHERE mutex = 'r';
SET ROLE regress_simba_a;
SELECT owner_id, fence, version FROM simba_acquire('r', 'shared-id', '1h', '1h');
SELECT simba_fence_check('r', 'shared-id', 1);
SELECT simba_semaphore_refresh('rk', :'a_token', '1h') AS a_refreshed;
SELECT simba_semaphore_fence_check('rk', :'a_token', :a_fence);
-- a short lease that lapses: then b, with the same id, is a new holder
SELECT owner_id, fence FROM simba_acquire('r-short', 'shared-id', '10ms', '0s');
RESET ROLE;
SELECT pg_sleep(greatest(0, extract(epoch FROM transition_at - (simba_clock()).now)) + 0.01)
  FROM simba_mutex WHERE mutex = 'r-short';
SET ROLE regress_simba_b;
-- b cannot log a late release in a's name
SELECT simba_release('r-short', 'shared-id') AS b_late;
SELECT owner_id, owner_role, fence FROM simba_acquire('r-short', 'shared-id', '1h', '1h');
RESET ROLE;
SET ROLE regress_simba_a;
SELECT simba_release('r-short', 'shared-id') AS a_late;
RESET ROLE;
SELECT event, owner_id, owner_role, fence, previous_owner, previous_role, previous_fence
  FROM simba_mutex_history WHERE mutex = 'r-short' ORDER BY id;

-- an admin's forced release crosses roles
SELECT simba_force_release('r') AS forced;

-- leases are at most simba.max_lease (7 days unless a superuser says
-- otherwise): ttl + transition for a mutex, ttl for a permit (22023)
SHOW simba.max_lease;
SET ROLE regress_simba_a;
SELECT owner_id FROM simba_acquire('long', 'a', '168 hours', '0s');
SELECT simba_acquire('long', 'a', '168 hours', '1 microsecond');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_acquire('long', 'a', '2147483647 hours');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_semaphore_acquire('long-k', 'a', 1, '169 hours');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_semaphore_refresh('rk', :'a_token', '169 hours');
\echo :LAST_ERROR_SQLSTATE
SET simba.max_lease = '1y';
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SET simba.max_lease = '1min';
SELECT simba_acquire('long', 'a', '50s', '11s');
\echo :LAST_ERROR_SQLSTATE
RESET simba.max_lease;
-- nothing was written by the refused calls
SELECT mutex, owner_id FROM simba_mutex WHERE mutex LIKE 'long%';
SELECT count(*) AS permits FROM simba_semaphore_permit WHERE key = 'long-k';
RESET simba.history;

SELECT simba_revoke('regress_simba_a');
SELECT simba_revoke('regress_simba_b');
DROP OWNED BY regress_simba_a, regress_simba_b;
DROP ROLE regress_simba_a, regress_simba_b;
