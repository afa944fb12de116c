-- the owner of simba's schema (in PostgreSQL 15 the database owner owns
-- public) renames it and plants look-alike tables, functions and operators
-- that would make anyone running them superuser: simba's statements, cached
-- or not, keep reaching simba's own objects, and nobody is promoted
SET client_min_messages = warning;
SET simba.drop_live_leases = on;
DROP EXTENSION simba;
CREATE EXTENSION simba;
RESET client_min_messages;
\set VERBOSITY terse
CREATE ROLE regress_simba_owner;
CREATE ROLE regress_simba_mallory;
CREATE ROLE regress_simba_worker;
SELECT simba_grant('regress_simba_worker');
-- what a database owner has: the public schema, and CREATE on the database
ALTER SCHEMA public OWNER TO regress_simba_owner;
SELECT format('GRANT CREATE ON DATABASE %I TO regress_simba_owner', current_database()) \gexec
SET simba.history = on;

-- this session uses every statement first, so its plans are cached
SET ROLE regress_simba_worker;
SELECT owner_id, fence FROM simba_acquire('job', 'app-1', '1h', '1h');
SELECT simba_release('job', 'app-1');
SELECT owner_id, fence FROM simba_acquire('job', 'app-1', '1h', '1h');
SELECT simba_fence_check('job', 'app-1', 2);
SELECT owner_id FROM simba_owner('job');
SELECT token AS tok, fence AS tok_fence FROM simba_semaphore_acquire('pool', 'w', 1, '1h') \gset
SELECT simba_semaphore_refresh('pool', :'tok', '1h');
SELECT simba_semaphore_fence_check('pool', :'tok', :tok_fence);
RESET ROLE;
SELECT simba_force_release('nothing');
SELECT simba_history_prune('1 hour');

-- the schema owner, no superuser, strikes
SET ROLE regress_simba_owner;
ALTER SCHEMA public RENAME TO simba_home;
CREATE SCHEMA public;
CREATE FUNCTION public.pwn() RETURNS trigger LANGUAGE plpgsql
    AS $$BEGIN EXECUTE 'ALTER ROLE regress_simba_mallory SUPERUSER'; RETURN NULL; END$$;
CREATE TABLE public.simba_mutex (mutex text PRIMARY KEY, owner_id text, acquired_at timestamptz,
    ttl_at timestamptz, transition_at timestamptz, version bigint, fence bigint, owner_role name);
CREATE TABLE public.simba_mutex_history (id bigint GENERATED ALWAYS AS IDENTITY, mutex text,
    event text, owner_id text, fence bigint, previous_owner text, at timestamptz, owner_role name,
    previous_role name, previous_fence bigint);
CREATE TABLE public.simba_semaphore (key text PRIMARY KEY, permits int);
CREATE TABLE public.simba_semaphore_permit (key text, slot int, holder text, token uuid,
    fence bigint, context text, acquired_at timestamptz, expires_at timestamptz, holder_role name);
CREATE SEQUENCE public.simba_mutex_fence;
CREATE SEQUENCE public.simba_permit_fence;
CREATE TRIGGER pwn BEFORE INSERT OR UPDATE OR DELETE ON public.simba_mutex
    FOR EACH STATEMENT EXECUTE FUNCTION public.pwn();
CREATE TRIGGER pwn BEFORE INSERT OR UPDATE OR DELETE ON public.simba_mutex_history
    FOR EACH STATEMENT EXECUTE FUNCTION public.pwn();
CREATE TRIGGER pwn BEFORE INSERT OR UPDATE OR DELETE ON public.simba_semaphore
    FOR EACH STATEMENT EXECUTE FUNCTION public.pwn();
CREATE TRIGGER pwn BEFORE INSERT OR UPDATE OR DELETE ON public.simba_semaphore_permit
    FOR EACH STATEMENT EXECUTE FUNCTION public.pwn();
-- look-alikes of what simba's statements call, in simba's own (renamed) schema
CREATE FUNCTION simba_home.pwn_bool(text, text) RETURNS boolean LANGUAGE plpgsql
    AS $$BEGIN EXECUTE 'ALTER ROLE regress_simba_mallory SUPERUSER'; RETURN true; END$$;
CREATE OPERATOR simba_home.= (LEFTARG = text, RIGHTARG = text, FUNCTION = simba_home.pwn_bool);
CREATE FUNCTION simba_home.nextval(regclass) RETURNS bigint LANGUAGE plpgsql
    AS $$BEGIN EXECUTE 'ALTER ROLE regress_simba_mallory SUPERUSER'; RETURN 1; END$$;
CREATE FUNCTION simba_home.count() RETURNS bigint LANGUAGE plpgsql
    AS $$BEGIN EXECUTE 'ALTER ROLE regress_simba_mallory SUPERUSER'; RETURN 0; END$$;
RESET ROLE;

-- the worker's session carries on: same objects, every path
SET ROLE regress_simba_worker;
SELECT owner_id, owner_role, fence FROM simba_home.simba_acquire('job', 'app-1', '1h', '1h');
SELECT simba_home.simba_fence_check('job', 'app-1', 2);
SELECT simba_home.simba_release('job', 'app-1');
SELECT simba_home.simba_release('job', 'app-1') AS again;
SELECT owner_id, fence FROM simba_home.simba_acquire('job-new', 'app-1', '1h', '1h');
SELECT owner_id, fence FROM simba_home.simba_owner('job-new');
SELECT simba_home.simba_semaphore_refresh('pool', :'tok', '1h');
SELECT simba_home.simba_semaphore_fence_check('pool', :'tok', :tok_fence);
SELECT simba_home.simba_semaphore_release('pool', :'tok');
SELECT key, slot FROM simba_home.simba_semaphore_acquire('pool', 'w', 1, '1h');
RESET ROLE;
SELECT simba_home.simba_force_release('job-new');
SELECT simba_home.simba_history_prune('1 hour');
SELECT simba_home.simba_semaphore_gc();
-- grants name the schema as it is called now
SELECT simba_home.simba_grant('regress_simba_mallory');
SELECT has_function_privilege('regress_simba_mallory',
                              'simba_home.simba_acquire(text, text, interval, interval, uuid)', 'EXECUTE') AS granted;
SELECT simba_home.simba_revoke('regress_simba_mallory');

-- nobody was promoted, the look-alikes saw nothing, simba's rows are right
SELECT rolsuper FROM pg_roles WHERE rolname = 'regress_simba_mallory';
SELECT (SELECT count(*) FROM public.simba_mutex) AS fake_mutex_rows,
       (SELECT count(*) FROM public.simba_mutex_history) AS fake_history_rows,
       (SELECT count(*) FROM public.simba_semaphore_permit) AS fake_permit_rows;
SELECT mutex, owner_id, fence FROM simba_home.simba_mutex ORDER BY mutex;
SELECT event, mutex, owner_id, owner_role, fence FROM simba_home.simba_mutex_history ORDER BY id;
SELECT key, slot, holder FROM simba_home.simba_semaphore_status;

-- put the database back as it was
RESET simba.history;
DROP SCHEMA public CASCADE;
DROP FUNCTION simba_home.pwn_bool(text, text) CASCADE;
DROP FUNCTION simba_home.nextval(regclass), simba_home.count();
ALTER SCHEMA simba_home RENAME TO public;
ALTER SCHEMA public OWNER TO pg_database_owner;
SELECT simba_revoke('regress_simba_worker');
SELECT format('REVOKE CREATE ON DATABASE %I FROM regress_simba_owner', current_database()) \gexec
DROP OWNED BY regress_simba_worker, regress_simba_mallory, regress_simba_owner;
DROP ROLE regress_simba_owner, regress_simba_mallory, regress_simba_worker;
