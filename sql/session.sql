-- sessions: tenures and permits under a session live exactly as long as the
-- session; a keepalive renews them all; close releases them all; a session
-- belongs to the role that opened it
SET client_min_messages = warning;
SET simba.drop_live_leases = on;
DROP EXTENSION simba;
CREATE EXTENSION simba;
RESET client_min_messages;
-- errors naming a session (a random id) are shown by their SQLSTATE only
\set VERBOSITY terse
CREATE ROLE regress_simba_sa;
CREATE ROLE regress_simba_sb;
SELECT simba_grant('regress_simba_sa');
SELECT simba_grant('regress_simba_sb');
SET simba.history = on;

SET ROLE regress_simba_sa;
-- open: the lease is counted from the decision, with the defaults 10 s + 6 s
SELECT ttl_at - current_at AS ttl, transition_at - ttl_at AS transition FROM simba_session_open();
-- 6 s + 2 s: what follows until its keepalive must fit in it, however slow
-- the backend (valgrind)
SELECT session_id AS sid, transition_at AS sid_end FROM simba_session_open('6s', '2s') \gset
-- a tenure under it ignores its own ttl and transition: it ends with the session
SELECT owner_id, fence, transition_at = :'sid_end' AS session_end FROM simba_acquire('m', 'a', '1ms', '0s', :'sid');
SELECT owner_id, fence FROM simba_acquire('m2', 'a', session_id => :'sid');
SELECT token AS ptoken, fence AS pfence, expires_at = :'sid_end' AS permit_session_end
  FROM simba_semaphore_acquire('k', 'a', 1, '1ms', session_id => :'sid') \gset
\echo permit_session_end :permit_session_end
SELECT pg_sleep(0.05);
SELECT mutex, owner_id, state, session_id = :'sid' AS under_session FROM simba_mutex_status ORDER BY mutex;
SELECT key, slot, session_id = :'sid' AS under_session FROM simba_semaphore_status;
SELECT state, mutexes, permits FROM simba_session_status WHERE session_id = :'sid';
-- the holder renews (same fence) and others wait, as without a session
SELECT owner_id, fence FROM simba_acquire('m', 'a', session_id => :'sid');
SELECT owner_id, fence FROM simba_acquire('m', 'b');
SELECT simba_semaphore_acquire('k', 'b', 1) IS NULL AS permit_held;
SELECT simba_fence_check('m', 'a', 1);
SELECT simba_semaphore_fence_check('k', :'ptoken', :pfence);
-- simba_renew and simba_semaphore_refresh leave a session's lease alone
SELECT owner_id, fence, transition_at = :'sid_end' AS session_end FROM simba_renew('m', 'a', 1, '1h', '0s');
SELECT simba_semaphore_refresh('k', :'ptoken', '1h') AS refreshed;
SELECT expires_at = :'sid_end' AS session_end FROM simba_semaphore_status WHERE key = 'k';

-- keepalive: one statement renews everything held under the session
SELECT transition_at AS sid_end2, transition_at - current_at AS left FROM simba_session_keepalive(:'sid') \gset
SELECT :'left'::interval = '8s' AS full_lease;
SELECT count(*) AS renewed FROM simba_mutex_status WHERE session_id = :'sid' AND transition_at = :'sid_end2';
RESET ROLE;

-- another role can neither keep it alive, nor close it, nor acquire under it
SET ROLE regress_simba_sb;
\set VERBOSITY sqlstate
SELECT simba_session_keepalive(:'sid');
\set VERBOSITY terse
SELECT simba_session_close(:'sid') AS b_closed;
\set VERBOSITY sqlstate
SELECT simba_acquire('m3', 'b', session_id => :'sid');
SELECT simba_semaphore_acquire('k3', 'b', 1, session_id => :'sid');
\set VERBOSITY terse
RESET ROLE;
SELECT count(*) AS m3_rows FROM simba_mutex WHERE mutex = 'm3';
SELECT count(*) AS k3_rows FROM simba_semaphore WHERE key = 'k3';

-- the session ends (no keepalive): everything under it ends with it
SELECT pg_sleep(extract(epoch FROM transition_at - (simba_clock()).now) + 0.05) AS past_end
  FROM simba_session_status WHERE session_id = :'sid';
SELECT state, mutexes, permits FROM simba_session_status WHERE session_id = :'sid';
SELECT mutex, owner_id, state FROM simba_mutex_status ORDER BY mutex;
SELECT count(*) AS live_permits FROM simba_semaphore_status;
SET ROLE regress_simba_sa;
SELECT simba_fence_check('m', 'a', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_semaphore_fence_check('k', :'ptoken', :pfence);
\echo :LAST_ERROR_SQLSTATE
-- a keepalive, an acquire under it, a renewal: none brings anything back
\set VERBOSITY sqlstate
SELECT simba_session_keepalive(:'sid');
SELECT simba_acquire('m', 'a', session_id => :'sid');
\set VERBOSITY terse
SELECT owner_id FROM simba_renew('m', 'a', 1);
SELECT simba_semaphore_refresh('k', :'ptoken', '1h') AS refreshed;
RESET ROLE;
-- others take over with the next fences
SELECT owner_id, fence FROM simba_acquire('m', 'b', '1h', '0s');
SELECT slot, fence > :pfence AS newer FROM simba_semaphore_acquire('k', 'b', 1, '1h');

-- collection: the ended session's row goes; what it held still is over
SELECT simba_session_gc() AS collected;
SELECT count(*) AS sessions FROM simba_session_lease WHERE session_id = :'sid';
SELECT count(*) AS referring FROM simba_mutex WHERE session_id = :'sid';
SELECT mutex, owner_id, state FROM simba_mutex_status ORDER BY mutex;
SELECT simba_session_gc() AS collected_again;

-- close: releases everything held under a live session, in one statement
SET ROLE regress_simba_sa;
SELECT session_id AS sid2 FROM simba_session_open('1h', '0s') \gset
SELECT owner_id, fence FROM simba_acquire('c1', 'a', session_id => :'sid2');
SELECT owner_id, fence FROM simba_acquire('c2', 'a', session_id => :'sid2');
SELECT slot FROM simba_semaphore_acquire('ck', 'a', 2, session_id => :'sid2');
-- one item of a live session is released on its own, the session goes on
SELECT owner_id FROM simba_acquire('c3', 'a', session_id => :'sid2');
SELECT simba_release('c3', 'a') AS released_one;
SELECT token AS ck2_token FROM simba_semaphore_acquire('ck2', 'a', 1, session_id => :'sid2') \gset
SELECT simba_semaphore_release('ck2', :'ck2_token') AS released_permit;
SELECT state, mutexes, permits FROM simba_session_status WHERE session_id = :'sid2';
-- collecting free rows leaves a live session's alone
RESET ROLE;
SELECT simba_mutex_gc() >= 0 AS mutex_gc, simba_semaphore_gc() >= 0 AS semaphore_gc;
SELECT count(*) AS c_rows FROM simba_mutex WHERE mutex IN ('c1', 'c2') AND session_id = :'sid2';
SELECT count(*) AS ck_live FROM simba_semaphore_status WHERE key = 'ck';
SET ROLE regress_simba_sa;
SELECT simba_session_close(:'sid2') AS released;
SELECT simba_session_close(:'sid2') AS released_again;
\set VERBOSITY sqlstate
SELECT simba_session_keepalive(:'sid2');
\set VERBOSITY terse
RESET ROLE;
SELECT mutex, owner_id, state FROM simba_mutex_status WHERE mutex LIKE 'c%' ORDER BY mutex;
SELECT count(*) AS ck2_permits FROM simba_semaphore_status WHERE key = 'ck2';
SELECT count(*) AS ck_permits FROM simba_semaphore_status WHERE key = 'ck';
SELECT count(*) AS sessions FROM simba_session_lease WHERE session_id = :'sid2';
-- a session's tenures are in the history like any other: closing is a release
SELECT event, mutex, owner_id, fence FROM simba_mutex_history WHERE mutex IN ('m', 'c1') ORDER BY id;

-- an admin's forced release of a tenure under a live session: the session
-- goes on, and every keepalive from then on counts the tenure as revoked
SET ROLE regress_simba_sa;
SELECT session_id AS sid4, revoked AS revoked_at_open FROM simba_session_open('1h', '0s') \gset
\echo revoked_at_open :revoked_at_open
SELECT owner_id, fence AS rv_fence FROM simba_acquire('rv', 'a', session_id => :'sid4') \gset
SELECT owner_id FROM simba_acquire('rv2', 'a', session_id => :'sid4');
SELECT revoked FROM simba_session_keepalive(:'sid4');
RESET ROLE;
SELECT simba_force_release('rv') AS forced;
SELECT simba_force_release('rv') AS forced_again;
SELECT simba_force_release('rv-never-held') AS forced_unknown;
SET ROLE regress_simba_sa;
SELECT revoked, transition_at > current_at AS live FROM simba_session_keepalive(:'sid4');
SELECT owner_id FROM simba_renew('rv', 'a', :rv_fence);
SELECT mutex, owner_id, session_id = :'sid4' AS under_session FROM simba_mutex_status
 WHERE mutex IN ('rv', 'rv2') ORDER BY mutex;
SELECT simba_session_close(:'sid4') AS released;
RESET ROLE;

-- an acquire under a session in a savepoint rolled back leaves nothing held
-- and the session as it was
SET ROLE regress_simba_sa;
SELECT session_id AS sid5 FROM simba_session_open('1h', '0s') \gset
BEGIN;
SAVEPOINT s;
SELECT owner_id FROM simba_acquire('sp', 'a', session_id => :'sid5');
ROLLBACK TO SAVEPOINT s;
SELECT revoked FROM simba_session_keepalive(:'sid5');
COMMIT;
SELECT owner_id FROM simba_owner('sp');
SELECT state, mutexes FROM simba_session_status WHERE session_id = :'sid5';
SELECT simba_session_close(:'sid5') AS released;
RESET ROLE;

-- a holder may move its tenure onto a session and off again (same fence)
SELECT session_id AS sid3 FROM simba_session_open('1h', '0s') \gset
SELECT owner_id, fence FROM simba_acquire('mv', 'a', '1h', '0s');
SELECT owner_id, fence FROM simba_acquire('mv', 'a', session_id => :'sid3');
SELECT session_id = :'sid3' AS moved FROM simba_mutex_status WHERE mutex = 'mv';
SELECT owner_id, fence FROM simba_acquire('mv', 'a', '1h', '0s');
SELECT session_id IS NULL AS moved_off FROM simba_mutex_status WHERE mutex = 'mv';
SELECT simba_session_close(:'sid3') AS released;

-- bad input: its SQLSTATE, nothing changes
CREATE TEMP TABLE before AS SELECT * FROM simba_session_lease;
SELECT simba_session_open(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_session_open('0s');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_session_open('10s', '-1s');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_session_open('1 day');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_session_open('10000 hours');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_session_keepalive(NULL);
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY sqlstate
SELECT simba_session_keepalive(gen_random_uuid());
\set VERBOSITY terse
SELECT simba_session_close(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_session_close(gen_random_uuid()) AS unknown_closed;
\set VERBOSITY sqlstate
SELECT simba_acquire('bad', 'a', session_id => gen_random_uuid());
\set VERBOSITY terse
SELECT count(*) AS changed FROM (SELECT * FROM simba_session_lease EXCEPT SELECT * FROM before) AS d;
SELECT count(*) AS bad_rows FROM simba_mutex WHERE mutex = 'bad';

RESET simba.history;
RESET ROLE;
SELECT simba_revoke('regress_simba_sa');
SELECT simba_revoke('regress_simba_sb');
DROP OWNED BY regress_simba_sa, regress_simba_sb;
DROP ROLE regress_simba_sa, regress_simba_sb;
