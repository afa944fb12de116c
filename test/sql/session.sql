-- sessions: tenures (of simba_acquire, simba_acquire_all, simba_fair_acquire),
-- permits and read-write holds under a session live exactly as long as the
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
SELECT owner_id, fence, transition_at = :'sid_end' AS session_end, session_id = :'sid' AS under_session
  FROM simba_acquire('m', 'a', '1ms', '0s', :'sid');
SELECT owner_id, fence FROM simba_acquire('m2', 'a', session_id => :'sid');
SELECT token AS ptoken, fence AS pfence, expires_at = :'sid_end' AS permit_session_end
  FROM simba_semaphore_acquire('k', 'a', 1, '1ms', session_id => :'sid') \gset
\echo permit_session_end :permit_session_end
-- so do a multi-lock's members, a fair tenure, and read and write holds
SELECT mutex, owner_id, fence, transition_at = :'sid_end' AS session_end, session_id = :'sid' AS under_session
  FROM simba_acquire_all('{n1,n2}', 'a', '1ms', '0s', :'sid');
SELECT owner_id, fence, position, transition_at = :'sid_end' AS session_end, session_id = :'sid' AS under_session
  FROM simba_fair_acquire('nf', 'a', '1ms', '0s', :'sid');
SELECT mode, granted, fence, transition_at = :'sid_end' AS session_end
  FROM simba_rwlock_acquire('nr', 'a', 'read', '1ms', '0s', :'sid');
SELECT mode AS nw_mode, fence AS nw_fence, transition_at = :'sid_end' AS nw_session_end, acquired_at AS nw_since
  FROM simba_rwlock_acquire('nw', 'a', 'write', '1ms', '0s', :'sid') \gset
\echo nw :nw_mode :nw_fence :nw_session_end
SELECT mode, granted, fence FROM simba_rwlock_acquire('nd', 'a', 'write', '1ms', '0s', :'sid');
SELECT pg_sleep(0.05);
SELECT mutex, owner_id, state, session_id = :'sid' AS under_session FROM simba_mutex_status ORDER BY mutex;
SELECT key, slot, session_id = :'sid' AS under_session FROM simba_semaphore_status;
SELECT rwlock, mode, holders FROM simba_rwlock_status ORDER BY rwlock;
SELECT state, mutexes, permits, rwlocks FROM simba_session_status WHERE session_id = :'sid';
-- the holder renews (same fence) and others wait, as without a session
SELECT owner_id, fence FROM simba_acquire('m', 'a', session_id => :'sid');
-- a loser and a reader of the owner see which session the tenure lives by
SELECT owner_id, fence, session_id = :'sid' AS under_session FROM simba_acquire('m', 'b');
SELECT owner_id, session_id = :'sid' AS under_session FROM simba_owner('m');
SELECT simba_semaphore_acquire('k', 'b', 1) IS NULL AS permit_held;
SELECT simba_fence_check('m', 'a', 1);
SELECT simba_semaphore_fence_check('k', :'ptoken', :pfence);
SELECT mutex, owner_id, fence FROM simba_acquire_all('{n1,n2}', 'a', session_id => :'sid');
SELECT mutex, owner_id FROM simba_acquire_all('{n2,n3}', 'b');
SELECT owner_id, position, session_id = :'sid' AS under_session FROM simba_fair_acquire('nf', 'b', '1h', '0s');
SELECT mode, fence, acquired_at = :'nw_since' AS same_hold, transition_at = :'sid_end' AS session_end
  FROM simba_rwlock_acquire('nw', 'a', 'write', session_id => :'sid');
SELECT mode, granted FROM simba_rwlock_acquire('nw', 'b', 'read');
SELECT mode, position FROM simba_rwlock_acquire('nr', 'b', 'write', '1h', '0s');
SELECT simba_rwlock_fence_check('nw', 'a', 1);
-- simba_renew and simba_semaphore_refresh leave a session's lease alone
SELECT owner_id, fence, transition_at = :'sid_end' AS session_end FROM simba_renew('m', 'a', 1, '1h', '0s');
SELECT simba_semaphore_refresh('k', :'ptoken', '1h') AS refreshed;
SELECT expires_at = :'sid_end' AS session_end FROM simba_semaphore_status WHERE key = 'k';

-- keepalive: one statement renews everything held under the session; it
-- comes 3 s into the lease, so its end is well after the first one
SELECT pg_sleep(greatest(0, extract(epoch FROM :'sid_end'::timestamptz - '5s'::interval - (simba_clock()).now)))
    AS into_the_lease;
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
SELECT simba_acquire_all('{m3}', 'b', session_id => :'sid');
SELECT simba_fair_acquire('m3', 'b', session_id => :'sid');
SELECT simba_rwlock_acquire('r3', 'b', 'read', session_id => :'sid');
\set VERBOSITY terse
RESET ROLE;
SELECT count(*) AS m3_rows FROM simba_mutex WHERE mutex = 'm3';
SELECT count(*) AS k3_rows FROM simba_semaphore WHERE key = 'k3';
SELECT count(*) AS r3_rows FROM simba_rwlock WHERE rwlock = 'r3';

-- past the session's first end: the keepalive alone keeps it all, though
-- no call of their own renewed them
SELECT pg_sleep(greatest(0, extract(epoch FROM :'sid_end'::timestamptz - (simba_clock()).now)) + 0.05) AS past_first_end;
SELECT state <> 'ended' AS live, mutexes, permits, rwlocks FROM simba_session_status WHERE session_id = :'sid';
SELECT mutex, owner_id, state <> 'free' AS held FROM simba_mutex_status WHERE mutex LIKE 'n%' ORDER BY mutex;
SELECT rwlock, mode, holders, waiting_writers FROM simba_rwlock_status ORDER BY rwlock;
-- and so does the drop guard: 5 tenures and 3 read-write holds, and the permit
SET simba.drop_live_leases = off;
DROP EXTENSION simba;
SET simba.drop_live_leases = on;
-- a fence check passes and a release releases, by the session's times
SET ROLE regress_simba_sa;
SELECT simba_rwlock_fence_check('nw', 'a', 1);
SELECT simba_rwlock_release('nr', 'a') AS released;
RESET ROLE;

-- the session ends (no keepalive): everything under it ends with it
SELECT pg_sleep(extract(epoch FROM transition_at - (simba_clock()).now) + 0.05) AS past_end
  FROM simba_session_status WHERE session_id = :'sid';
SELECT state, mutexes, permits, rwlocks FROM simba_session_status WHERE session_id = :'sid';
SELECT mutex, owner_id, state FROM simba_mutex_status ORDER BY mutex;
SELECT count(*) AS live_permits FROM simba_semaphore_status;
SELECT rwlock, mode, holders, waiting_writers FROM simba_rwlock_status ORDER BY rwlock;
CREATE TEMP TABLE held AS SELECT * FROM simba_rwlock_holder;
SET ROLE regress_simba_sa;
SELECT simba_fence_check('m', 'a', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_semaphore_fence_check('k', :'ptoken', :pfence);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_rwlock_fence_check('nw', 'a', 1);
\echo :LAST_ERROR_SQLSTATE
-- a keepalive, an acquire under it, a renewal: none brings anything back,
-- and an acquire under it changes nothing
\set VERBOSITY sqlstate
SELECT simba_session_keepalive(:'sid');
SELECT simba_acquire('m', 'a', session_id => :'sid');
SELECT simba_acquire_all('{n1,n2}', 'a', session_id => :'sid');
SELECT simba_fair_acquire('nf', 'a', session_id => :'sid');
SELECT simba_rwlock_acquire('nw', 'a', 'write', session_id => :'sid');
SELECT simba_rwlock_acquire('nr', 'a', 'read', session_id => :'sid');
\set VERBOSITY terse
SELECT owner_id FROM simba_renew('m', 'a', 1);
SELECT simba_semaphore_refresh('k', :'ptoken', '1h') AS refreshed;
RESET ROLE;
SELECT count(*) AS changed FROM (TABLE held EXCEPT ALL TABLE simba_rwlock_holder) AS d;
SELECT count(*) AS queued FROM simba_mutex_queue WHERE owner_id = 'a';
-- others take over with the next fences: the fair queue's head, the waiting
-- writer (a new fence), a reader under the dead writer's epoch
SELECT owner_id, fence, session_id IS NULL AS own_lease FROM simba_acquire('m', 'b', '1h', '0s');
SELECT slot, fence > :pfence AS newer FROM simba_semaphore_acquire('k', 'b', 1, '1h');
SET ROLE regress_simba_sa;
SELECT mutex, owner_id, fence FROM simba_acquire_all('{n2,n3}', 'b', '1h', '0s');
SELECT owner_id, fence, position FROM simba_fair_acquire('nf', 'b', '1h', '0s');
SELECT mode, granted, fence FROM simba_rwlock_acquire('nr', 'b', 'write', '1h', '0s');
SELECT mode, granted, fence FROM simba_rwlock_acquire('nw', 'b', 'read', '1h', '0s');
RESET ROLE;

-- collection: the ended session's row goes; what it held still is over (at
-- least one: under valgrind an earlier test's session may have ended too)
SELECT simba_session_gc() >= 1 AS collected;
SELECT count(*) AS sessions FROM simba_session_lease WHERE session_id = :'sid';
SELECT count(*) AS referring FROM simba_mutex WHERE session_id = :'sid';
SELECT count(*) AS referring_holds FROM simba_rwlock_holder WHERE session_id = :'sid';
SELECT mutex, owner_id, state FROM simba_mutex_status ORDER BY mutex;
SELECT simba_session_gc() AS collected_again;
-- the write hold nobody took over is an ordinary lease that ended with it:
-- still refused as ended (SB003), not as someone else's
SELECT mode, transition_at = :'sid_end2' AS ended_with_it FROM simba_rwlock_holder WHERE rwlock = 'nd';
SET ROLE regress_simba_sa;
SELECT simba_rwlock_fence_check('nd', 'a', 2);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

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
SELECT mode FROM simba_rwlock_acquire('cr2', 'a', 'read', session_id => :'sid2');
SELECT simba_rwlock_release('cr2', 'a') AS released_hold;
-- and the newer primitives: two members of a multi-lock, a fair tenure, a
-- read hold a writer waits for, a write hold
SELECT mutex, owner_id FROM simba_acquire_all('{c4,c5}', 'a', session_id => :'sid2');
SELECT owner_id, position FROM simba_fair_acquire('cf', 'a', session_id => :'sid2');
SELECT mode FROM simba_rwlock_acquire('cr', 'a', 'read', session_id => :'sid2');
SELECT mode FROM simba_rwlock_acquire('cw', 'a', 'write', session_id => :'sid2');
RESET ROLE;
SELECT mode, position FROM simba_rwlock_acquire('cr', 'b', 'write', '1h', '0s');
SELECT owner_id, position FROM simba_fair_acquire('cf', 'b', '1h', '0s');
SET ROLE regress_simba_sa;
SELECT state, mutexes, permits, rwlocks FROM simba_session_status WHERE session_id = :'sid2';
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
SELECT rwlock, mode, holders, waiting_writers FROM simba_rwlock_status WHERE rwlock LIKE 'c%' ORDER BY rwlock;
-- whoever waited takes them at its next call (a NOTIFY told it: session_rwlock.spec, fair_race.spec)
SELECT mode, granted, fence FROM simba_rwlock_acquire('cr', 'b', 'write', '1h', '0s');
SELECT owner_id, fence, position FROM simba_fair_acquire('cf', 'b', '1h', '0s');
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

-- a waiter under a session that finds another holder's live tenure loses
-- without locking its session row: no xid, no WAL; the row it returns is
-- the owner's as simba_owner shows it
SELECT session_id AS lh FROM simba_session_open('1h', '0s') \gset
SELECT fence AS lh_fence FROM simba_acquire('lose', 'a', session_id => :'lh') \gset
SET ROLE regress_simba_sb;
SELECT session_id AS lw FROM simba_session_open('1h', '0s') \gset
BEGIN;
SELECT l.owner_id, l.fence = :lh_fence AS same_fence,
       (l.ttl_at, l.transition_at, l.version) = (o.ttl_at, o.transition_at, o.version) AS as_owner_shows
  FROM simba_acquire('lose', 'b', session_id => :'lw') AS l, simba_owner('lose') AS o;
SELECT txid_current_if_assigned() IS NULL AS no_xid;
COMMIT;
-- a bad session is still refused there: unknown, another role's, closed
\set VERBOSITY sqlstate
SELECT simba_acquire('lose', 'b', session_id => gen_random_uuid());
SELECT simba_acquire('lose', 'b', session_id => :'lh');
\set VERBOSITY terse
SELECT simba_session_close(:'lw') AS lw_released;
\set VERBOSITY sqlstate
SELECT simba_acquire('lose', 'b', session_id => :'lw');
\set VERBOSITY terse
-- once the holder's session is closed, a waiter's attempt takes it, with a new fence
RESET ROLE;
SELECT simba_session_close(:'lh') AS lh_released;
SET ROLE regress_simba_sb;
SELECT session_id AS lw2 FROM simba_session_open('1h', '0s') \gset
SELECT owner_id, fence > :lh_fence AS new_fence FROM simba_acquire('lose', 'b', session_id => :'lw2');
SELECT simba_session_close(:'lw2') AS lw2_released;
RESET ROLE;
-- the owner's times under a session are the session's (simba_session_time,
-- internal): NULL for no session or an unknown one, only ttl_at and
-- transition_at
SELECT session_id AS st, ttl_at AS st_ttl, transition_at AS st_tr FROM simba_session_open('1h', '0s') \gset
SELECT simba_session_time(:'st', 'ttl_at', o.origin) = :'st_ttl' AS ttl_is_session,
       simba_session_time(:'st', 'transition_at', o.origin) = :'st_tr' AS transition_is_session,
       simba_session_time(NULL, 'ttl_at', o.origin) IS NULL AS none_null,
       simba_session_time(gen_random_uuid(), 'ttl_at', o.origin) IS NULL AS unknown_null
  FROM simba_clock() AS o;
SELECT simba_session_time(:'st', 'renewed_at', now());
\echo :LAST_ERROR_SQLSTATE
SELECT simba_session_time(:'st', NULL, now());
\echo :LAST_ERROR_SQLSTATE
SELECT simba_session_close(:'st') AS st_released;
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
