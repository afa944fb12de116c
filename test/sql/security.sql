-- privileges: nothing for PUBLIC, simba_grant(role) on purpose, and
-- functions running as their owner that search_path tricks cannot redirect
-- a fresh install: fences below count from 1, whatever tests ran before
SET client_min_messages = warning;
SET simba.drop_live_leases = on;
DROP EXTENSION simba;
CREATE EXTENSION simba;
RESET client_min_messages;
\set VERBOSITY terse
CREATE ROLE regress_simba_app;
CREATE ROLE regress_simba_other;
CREATE SCHEMA regress_evil AUTHORIZATION regress_simba_app;

-- a role without grants is refused everywhere
SET ROLE regress_simba_app;
SELECT simba_acquire('sec', 'app');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_owner('sec');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM simba_mutex_status;
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM simba_mutex;
\echo :LAST_ERROR_SQLSTATE
SELECT simba_semaphore_acquire('sec-sem', 'app', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM simba_semaphore_status;
\echo :LAST_ERROR_SQLSTATE
SELECT simba_semaphore_gc();
\echo :LAST_ERROR_SQLSTATE
SELECT simba_grant('regress_simba_app');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

-- the DBA grants one role on purpose
SELECT simba_grant('regress_simba_app');
SET ROLE regress_simba_app;
SELECT owner_id, fence FROM simba_acquire('sec', 'app', '1h', '1h');
SELECT mutex, owner_id, state FROM simba_mutex_status WHERE mutex = 'sec';
SELECT simba_fence_check('sec', 'app', 1);
SELECT owner_id FROM simba_owner('sec');
SELECT token AS app_token, fence AS app_fence FROM simba_semaphore_acquire('sec-sem', 'app', 1) \gset
SELECT simba_semaphore_fence_check('sec-sem', :'app_token', :app_fence);
SELECT simba_semaphore_refresh('sec-sem', :'app_token', '1h');
SELECT key, holder FROM simba_semaphore_status;
SELECT simba_semaphore_release('sec-sem', :'app_token');
-- gc stays the DBA's
SELECT simba_semaphore_gc();
\echo :LAST_ERROR_SQLSTATE
-- so do the lock statements' internal helpers (a granted role could lock
-- another role's ended session row through one); simba_epoch_us is granted
SELECT simba_session_ended(gen_random_uuid(), now(), NULL, true);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_lease_end(now(), now(), NULL, now());
\echo :LAST_ERROR_SQLSTATE
SELECT simba_session_time(gen_random_uuid(), 'ttl_at', now());
\echo :LAST_ERROR_SQLSTATE
SELECT simba_epoch_us('1970-01-01 00:00:01+00');
-- still no direct access to the table: only through the functions
UPDATE simba_mutex SET owner_id = 'me' WHERE mutex = 'sec';
\echo :LAST_ERROR_SQLSTATE
DELETE FROM simba_mutex;
\echo :LAST_ERROR_SQLSTATE
INSERT INTO simba_mutex (mutex, owner_id) VALUES ('sec', 'me');
\echo :LAST_ERROR_SQLSTATE
UPDATE simba_semaphore_permit SET expires_at = 'infinity';
\echo :LAST_ERROR_SQLSTATE
SELECT nextval('simba_permit_fence');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

-- the grant was for that role only
SET ROLE regress_simba_other;
SELECT simba_release('sec', 'app');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

-- search_path hijack: the granted role shadows the table, the text =
-- operator and clock_timestamp() in its own schema, and a temp table too
SELECT owner_id FROM simba_acquire('sec-held', 'someone-else', '1h', '1h');
SET ROLE regress_simba_app;
CREATE TABLE regress_evil.simba_mutex (mutex text, owner_id text, acquired_at timestamptz,
    ttl_at timestamptz, transition_at timestamptz, version bigint, fence bigint);
CREATE TEMP TABLE simba_mutex (LIKE regress_evil.simba_mutex);
CREATE FUNCTION regress_evil.always(text, text) RETURNS boolean
    LANGUAGE sql AS 'SELECT true';
CREATE OPERATOR regress_evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = regress_evil.always);
CREATE FUNCTION regress_evil.clock_timestamp() RETURNS timestamptz
    LANGUAGE sql AS $$SELECT 'infinity'::timestamptz$$;
CREATE TEMP TABLE simba_session_lease (session_id uuid);
CREATE TEMP TABLE simba_semaphore_permit (key text, token uuid);
SET search_path = pg_temp, regress_evil, pg_catalog, public;
SELECT owner_id, fence FROM public.simba_acquire('sec-held', 'app', '1h', '1h');
SELECT public.simba_release('sec-held', 'app');
SELECT public.simba_fence_check('sec-held', 'app', 1);
-- the functions carry no SET search_path: sessions and permits as well
SELECT session_id AS sec_session FROM public.simba_session_open() \gset
SELECT owner_id FROM public.simba_acquire('sec-session', 'app', session_id => :'sec_session');
SELECT public.simba_session_close(:'sec_session');
SELECT token AS sec_token FROM public.simba_semaphore_acquire('sec-sem', 'app', 1) \gset
SELECT public.simba_semaphore_release('sec-sem', :'sec_token');
SELECT (SELECT count(*) FROM regress_evil.simba_mutex) AS evil_rows,
       (SELECT count(*) FROM pg_temp.simba_mutex) + (SELECT count(*) FROM pg_temp.simba_session_lease)
       + (SELECT count(*) FROM pg_temp.simba_semaphore_permit) AS temp_rows;
RESET search_path;
RESET ROLE;
SELECT owner_id, fence FROM simba_owner('sec-held');

-- revoking takes it all back
SELECT simba_revoke('regress_simba_app');
SET ROLE regress_simba_app;
SELECT simba_acquire('sec', 'app');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_semaphore_acquire('sec-sem', 'app', 1);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

-- no function is SECURITY DEFINER; only those that run SQL they compose pin
-- search_path (the others' statements run under simba_as_owner's path)
SELECT p.proname, p.prosecdef, p.proconfig
  FROM pg_proc p
 WHERE p.proname LIKE 'simba\_%'
 ORDER BY 1;
-- and PUBLIC holds no privilege on any simba object
SELECT p.proname
  FROM pg_proc p, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
 WHERE p.proname LIKE 'simba\_%' AND a.grantee = 0
 ORDER BY 1;
SELECT c.relname
  FROM pg_class c, aclexplode(coalesce(c.relacl, acldefault(CASE WHEN c.relkind = 'S' THEN 's' ELSE 'r' END::"char", c.relowner))) a
 WHERE c.relname LIKE 'simba\_%' AND a.grantee = 0;

-- simba_grant and simba_revoke take one real role (22004, 22023, 42704)
SELECT simba_grant(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_grant(0);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_revoke(0);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_grant(4294967295::oid::regrole);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_grant('-');
\echo :LAST_ERROR_SQLSTATE

-- the status views are security barriers: a cheap function of the caller's
-- in WHERE sees only the rows the view shows (security review 2, finding 11)
SELECT simba_grant('regress_simba_app');
SET ROLE regress_simba_app;
CREATE FUNCTION regress_evil.leak(t text) RETURNS boolean COST 0.0000001 LANGUAGE plpgsql AS $$
BEGIN RAISE NOTICE 'leak saw %', t; RETURN true; END $$;
SELECT simba_semaphore_release('leaky', token) FROM simba_semaphore_acquire('leaky', 'hidden', 2, '1h');
SELECT slot FROM simba_semaphore_acquire('leaky', 'shown', 2, '1h');
SELECT holder FROM simba_semaphore_status WHERE key = 'leaky' AND regress_evil.leak(holder);
RESET ROLE;
SELECT simba_revoke('regress_simba_app');

-- default privileges give nobody anything on simba's objects: the install
-- ends with exactly the documented privileges (the owner's, nothing else)
ALTER DEFAULT PRIVILEGES GRANT ALL ON TABLES TO regress_simba_app;
ALTER DEFAULT PRIVILEGES GRANT ALL ON SEQUENCES TO regress_simba_app;
ALTER DEFAULT PRIVILEGES GRANT ALL ON FUNCTIONS TO regress_simba_app;
SET simba.drop_live_leases = on;
DROP EXTENSION simba;
CREATE EXTENSION simba;
SELECT count(*) AS leaked
  FROM pg_depend d
  JOIN pg_class c ON d.classid = 'pg_class'::regclass AND c.oid = d.objid,
       aclexplode(coalesce(c.relacl, acldefault(CASE WHEN c.relkind = 'S' THEN 's' ELSE 'r' END::"char", c.relowner))) a
 WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'simba') AND d.deptype = 'e'
   AND a.grantee <> c.relowner;
SELECT count(*) AS leaked
  FROM pg_depend d
  JOIN pg_proc p ON d.classid = 'pg_proc'::regclass AND p.oid = d.objid,
       aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
 WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'simba') AND d.deptype = 'e'
   AND a.grantee <> p.proowner;
SET ROLE regress_simba_app;
SELECT simba_force_release('x');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_semaphore_gc();
\echo :LAST_ERROR_SQLSTATE
UPDATE public.simba_mutex SET fence = 0;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
-- an upgrade keeps what simba_grant gave to a role that holds nothing else;
-- a role that also holds what defaults or a hand GRANT gave keeps nothing
-- (the DBA grants it again on purpose) (security review 2, finding 3)
SELECT simba_grant('regress_simba_app');
SELECT simba_grant('regress_simba_other');
GRANT UPDATE ON public.simba_mutex TO regress_simba_app;
GRANT EXECUTE ON FUNCTION simba_force_release(text) TO regress_simba_app;
GRANT INSERT ON simba_mutex_status TO regress_simba_app;
SELECT simba_strip_privileges(true) AS revoked;
SELECT has_table_privilege('regress_simba_app', 'public.simba_mutex', 'UPDATE') AS can_update,
       has_function_privilege('regress_simba_app', 'simba_force_release(text)', 'EXECUTE') AS can_force,
       has_table_privilege('regress_simba_app', 'simba_mutex_status', 'INSERT') AS can_insert_status,
       has_table_privilege('regress_simba_app', 'simba_mutex_status', 'SELECT') AS can_read_status,
       has_function_privilege('regress_simba_app', 'simba_acquire(text, text, interval, interval, uuid)', 'EXECUTE') AS can_acquire;
SELECT has_table_privilege('regress_simba_other', 'simba_mutex_status', 'SELECT') AS other_reads_status,
       has_function_privilege('regress_simba_other', 'simba_acquire(text, text, interval, interval, uuid)', 'EXECUTE') AS other_acquires;
ALTER DEFAULT PRIVILEGES REVOKE ALL ON TABLES FROM regress_simba_app;
ALTER DEFAULT PRIVILEGES REVOKE ALL ON SEQUENCES FROM regress_simba_app;
ALTER DEFAULT PRIVILEGES REVOKE ALL ON FUNCTIONS FROM regress_simba_app;

DROP SCHEMA regress_evil CASCADE;
DROP OWNED BY regress_simba_app, regress_simba_other;
DROP ROLE regress_simba_app;
DROP ROLE regress_simba_other;
