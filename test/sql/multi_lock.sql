-- simba_acquire_all / simba_release_all: every mutex or none, each with its
-- own fence; renewed and released together; bound to the role like a
-- single acquire; bad input changes nothing
SET client_min_messages = warning;
SET simba.drop_live_leases = on;
DROP EXTENSION simba;
CREATE EXTENSION simba;
RESET client_min_messages;
\set VERBOSITY default
\set SHOW_CONTEXT never
SET simba.history = on;

-- all three, one row each in byte order of the names ("B" before "a"), each its own fence
SELECT mutex, owner_id, fence, version, ttl_at - acquired_at AS ttl FROM simba_acquire_all('{b,a,B}', 'me', '1h', '1h');
-- again: a renewal of all three, fences kept
SELECT mutex, owner_id, fence, version FROM simba_acquire_all('{a,b,B}', 'me', '1h', '1h');

-- another contender wanting one of them as well as a free one: refused whole,
-- the rows as they stand; the free one was neither taken nor created
SELECT mutex, owner_id, fence, version FROM simba_acquire_all('{free,a}', 'you');
SELECT mutex, owner_id FROM simba_mutex ORDER BY mutex COLLATE "C";
-- a single holder refuses a multi-lock the same way, whatever the order
SELECT owner_id, fence FROM simba_acquire('single', 'you', '1h', '1h');
SELECT mutex, owner_id, fence FROM simba_acquire_all('{zzz,single,c}', 'me');
SELECT count(*) AS rows_for_c_and_zzz FROM simba_mutex WHERE mutex IN ('c', 'zzz');

-- a member lost (forced release), the rest held: a new attempt takes it back
-- with a new fence, keeps the others' fences
SELECT simba_force_release('b');
SELECT mutex, owner_id, fence FROM simba_acquire_all('{a,b,B}', 'me', '1h', '1h');

-- a member taken by someone else since: refused, the others stay held as they were
SELECT simba_force_release('B');
SELECT owner_id, fence FROM simba_acquire('B', 'you', '1h', '1h');
SELECT mutex, owner_id, fence FROM simba_acquire_all('{a,b,B}', 'me', '1h', '1h');

-- release_all: what the caller holds (a NOTIFY each: multi_lock_race.spec); the one it lost stays
SELECT simba_release_all('{B,a,b}', 'me') AS released;
SELECT simba_release_all('{a,b}', 'me') AS released_again;
SELECT mutex, owner_id FROM simba_mutex WHERE mutex IN ('a', 'b', 'B') ORDER BY mutex COLLATE "C";

-- the history has a row per member and event
SELECT mutex, event, owner_id FROM simba_mutex_history WHERE mutex IN ('a', 'b') ORDER BY id;

-- an error inside the multi-lock, caught by a PL/pgSQL block: what it took
-- before the error is not kept (its subtransaction is rolled back first)
CREATE FUNCTION regress_boom() RETURNS trigger LANGUAGE plpgsql AS
  $$ BEGIN IF NEW.mutex = 'boom' THEN RAISE EXCEPTION 'boom'; END IF; RETURN NEW; END $$;
CREATE TRIGGER regress_boom BEFORE INSERT ON simba_mutex FOR EACH ROW EXECUTE FUNCTION regress_boom();
BEGIN;
DO $$ BEGIN PERFORM simba_acquire_all('{aa,boom}', 'me');
EXCEPTION WHEN raise_exception THEN RAISE NOTICE 'caught: %', SQLERRM; END $$;
SELECT count(*) AS rows_for_aa FROM simba_mutex WHERE mutex = 'aa';
SELECT owner_id FROM simba_acquire('aa', 'me');
COMMIT;
DROP TRIGGER regress_boom ON simba_mutex;
DROP FUNCTION regress_boom();

-- another role with the same contender id is another contender
CREATE ROLE regress_simba_multi;
SELECT simba_grant('regress_simba_multi');
SELECT mutex, owner_id FROM simba_acquire_all('{r1,r2}', 'shared', '1h', '1h');
SET ROLE regress_simba_multi;
SELECT mutex, owner_id, owner_role FROM simba_acquire_all('{r1,r2}', 'shared', '1h', '1h');
SELECT simba_release_all('{r1,r2}', 'shared') AS released_by_other_role;
RESET ROLE;
SELECT simba_release_all('{r1,r2}', 'shared') AS released_by_holder;

-- under a session (session.sql has it end with the session): every member
-- shows the session's times; a renewal under it keeps their fences; a
-- refused call changes nothing, under a session too; close releases them all
SELECT session_id AS sid, transition_at AS sid_end FROM simba_session_open('1h', '0s') \gset
SELECT mutex, owner_id, fence, transition_at = :'sid_end' AS session_end
  FROM simba_acquire_all('{s1,s2}', 'me', '1s', '0s', :'sid');
SELECT mutex, owner_id, fence, transition_at = :'sid_end' AS session_end
  FROM simba_acquire_all('{s2,s1}', 'me', session_id => :'sid');
SELECT session_id AS sid_you FROM simba_session_open('1h', '0s') \gset
SELECT mutex, owner_id, fence FROM simba_acquire_all('{s0,s1}', 'you', session_id => :'sid_you');
SELECT s.session_id = :'sid' AS mine, s.mutexes FROM simba_session_status s
 WHERE s.session_id IN (:'sid', :'sid_you') ORDER BY 1;
SELECT count(*) AS rows_for_s0 FROM simba_mutex WHERE mutex = 's0';
-- refused under a session because a member is held: no xid (its session row
-- is not locked), and a bad session is still an error there
BEGIN;
SELECT mutex, owner_id, fence FROM simba_acquire_all('{s0,s1}', 'you', session_id => :'sid_you');
SELECT txid_current_if_assigned() IS NULL AS no_xid;
COMMIT;
\set VERBOSITY sqlstate
SELECT simba_acquire_all('{s0,s1}', 'you', session_id => gen_random_uuid());
\set VERBOSITY default
-- a call without the session moves a member off it (same fence), as simba_acquire
SELECT mutex, fence FROM simba_acquire_all('{s2}', 'me', '1h', '0s');
SELECT mutex, session_id IS NOT NULL AS under_session FROM simba_mutex_status WHERE mutex IN ('s1', 's2') ORDER BY mutex;
SELECT simba_session_close(:'sid') AS released, simba_session_close(:'sid_you') AS released_you;
SELECT mutex, owner_id FROM simba_mutex_status WHERE mutex IN ('s1', 's2') ORDER BY mutex;
SELECT simba_release_all('{s2}', 'me') AS released_s2;

-- bad input: a clear error, nothing changed
SELECT (simba_acquire_all('{keep}', 'me', '1h', '1h')).owner_id IS NOT NULL AS setup;
CREATE TEMP TABLE before AS SELECT * FROM simba_mutex;
SELECT simba_acquire_all(NULL, 'me');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_acquire_all('{keep}', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_acquire_all('{}', 'me');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_acquire_all('{keep,NULL}', 'me');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_acquire_all('{keep,""}', 'me');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_acquire_all('{keep,x,keep}', 'me');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_acquire_all('{{keep},{x}}', 'me');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_acquire_all(ARRAY['keep', repeat('x', 257)], 'me');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_acquire_all(array(SELECT 'n' || g FROM generate_series(1, 1001) g), 'me');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_acquire_all('{keep}', 'me', '-1s');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_acquire_all('{keep}', 'me', '1 day');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_release_all(NULL, 'me');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_release_all('{keep,keep}', 'me');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_release_all('{keep}', '');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_acquire_all('{keep,new}', 'me', session_id => 'not-a-session');
\echo :LAST_ERROR_SQLSTATE
-- a session never opened, or closed (its message names it)
\set VERBOSITY sqlstate
SELECT simba_acquire_all('{keep,new}', 'me', session_id => gen_random_uuid());
SELECT simba_acquire_all('{keep,new}', 'me', session_id => :'sid');
\set VERBOSITY default
SELECT count(*) AS changed_rows FROM (TABLE before EXCEPT ALL TABLE simba_mutex) d;
SELECT count(*) AS rows_for_new FROM simba_mutex WHERE mutex = 'new';
-- the limit itself is allowed
SELECT count(*) FROM simba_acquire_all(array(SELECT 'n' || g FROM generate_series(1, 1000) g), 'me');
SELECT simba_release_all(array(SELECT 'n' || g FROM generate_series(1, 1000) g), 'me');

SELECT simba_revoke('regress_simba_multi');
DROP OWNED BY regress_simba_multi;
DROP ROLE regress_simba_multi;
