-- housekeeping without cron: a connection that has called simba for
-- simba.gc_interval starts a background worker that removes what has been
-- idle for simba.gc_idle_age (gc.c). The worker runs as the extension's
-- owner, never as a superuser, also when the owner may not log in; it
-- records when it ran (simba_gc_state, owner only), and a connection does
-- not start it while the last run is recent (gc.sql: simba_mutex_gc)
SET client_min_messages = warning;
SET simba.drop_live_leases = on;
DROP EXTENSION simba;
RESET simba.drop_live_leases;
-- an owner that is not a superuser: it creates the extension as one
CREATE ROLE regress_simba_gc_owner LOGIN SUPERUSER;
SET ROLE regress_simba_gc_owner;
CREATE EXTENSION simba;
RESET ROLE;
ALTER ROLE regress_simba_gc_owner NOSUPERUSER;
RESET client_min_messages;
\set VERBOSITY terse

-- the owner logs who deletes its rows, with a trigger: it runs as whoever
-- the collector runs as, and tries to become the session's user
CREATE TABLE public.gc_deleted_by (mutex text, session_role name, running_as name, superuser boolean,
                                   set_role_refused boolean, connected_as name, backend_type text);
GRANT INSERT ON public.gc_deleted_by TO regress_simba_gc_owner;
CREATE FUNCTION public.gc_log() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    refused boolean := false;
BEGIN
    BEGIN
        SET LOCAL ROLE NONE;
    EXCEPTION WHEN OTHERS THEN
        refused := true;
    END;
    INSERT INTO public.gc_deleted_by
    SELECT OLD.mutex, session_user, current_user, r.rolsuper, refused, a.usename, a.backend_type
      FROM pg_catalog.pg_stat_activity a, pg_catalog.pg_roles r
     WHERE a.pid = pg_catalog.pg_backend_pid() AND r.rolname = current_user;
    RETURN OLD;
END $$;
SET ROLE regress_simba_gc_owner;
CREATE TRIGGER gc_log BEFORE DELETE ON simba_mutex FOR EACH ROW EXECUTE FUNCTION public.gc_log();
RESET ROLE;
-- nobody else may read or write the collector's state
SELECT relacl FROM pg_class WHERE oid = 'simba_gc_state'::regclass;

-- idle: a mutex released now; live: one held
SELECT (simba_acquire('w-rel', 'a', '1h', '1h')).owner_id IS NOT NULL AND simba_release('w-rel', 'a') AS released;
SELECT owner_id FROM simba_acquire('w-held', 'a', '1h', '1h');

-- the collector starts once a connection's interval has passed and removes
-- what is idle for gc_idle_age (here 0: the release above), nothing held
SET simba.gc_idle_age = 0;
SET simba.gc_interval = 1;
-- no collector at work (one still connecting shows no database yet)
CREATE PROCEDURE gc_gone() LANGUAGE plpgsql AS $$
DECLARE
    deadline timestamptz := clock_timestamp() + '60 seconds';
BEGIN
    WHILE EXISTS (SELECT FROM pg_stat_activity WHERE backend_type = 'simba gc'
                     AND (datname = current_database() OR datname IS NULL))
          AND clock_timestamp() < deadline LOOP
        PERFORM pg_sleep(0.05);
    END LOOP;
END $$;
CREATE PROCEDURE gc_wait(mutex text) LANGUAGE plpgsql AS $$
DECLARE
    deadline timestamptz := clock_timestamp() + '60 seconds';
BEGIN
    LOOP
        -- a writing call starts the collector once the interval has passed
        PERFORM simba_release('w-tick', 'nobody');
        COMMIT;
        EXIT WHEN NOT EXISTS (SELECT FROM simba_mutex m WHERE m.mutex = gc_wait.mutex) OR clock_timestamp() > deadline;
        PERFORM pg_sleep(0.05);
    END LOOP;
    CALL gc_gone();
END $$;
SELECT simba_release('w-tick', 'nobody') AS starts_the_clock;
-- exactly one collector: the next call after an interval starts it, and
-- with the interval at an hour from then this connection starts no other
-- (under valgrind one took longer than a second to start, a second one was
-- started meanwhile, connected as the owner before the NOLOGIN below, and
-- collected w-rel2 there)
SELECT pg_sleep(1.1) AS one_interval;
SET simba.gc_interval = '1h';
CALL gc_wait('w-rel');
SELECT string_agg(mutex, ' ' ORDER BY mutex) AS rows_left FROM simba_mutex;
-- it ran connected as the owner, and as the owner, not a superuser, and could not change that
SELECT * FROM gc_deleted_by;
SELECT count(*) AS runs, bool_and(last_run <= clock_timestamp()) AS recorded FROM simba_gc_state;

-- an owner that may not log in: the worker connects as the bootstrap
-- superuser and runs as the owner all the same
ALTER ROLE regress_simba_gc_owner NOLOGIN;
-- a collector started above connects no more now, and one connected ends
CALL gc_gone();
UPDATE simba_gc_state SET last_run = last_run - '1 day'::interval;
SELECT (simba_acquire('w-rel2', 'a', '1h', '1h')).owner_id IS NOT NULL AND simba_release('w-rel2', 'a') AS released;
-- this connection's clock restarted (an interval of a second), then one collector
SET simba.gc_interval = 1;
SELECT simba_release('w-tick', 'nobody') AS restarts_the_clock;
SELECT pg_sleep(1.1) AS one_interval;
SET simba.gc_interval = '1h';
CALL gc_wait('w-rel2');
SELECT mutex, session_role = (SELECT rolname FROM pg_roles WHERE oid = 10) AS session_is_bootstrap_superuser,
       running_as, superuser, set_role_refused
  FROM gc_deleted_by WHERE mutex = 'w-rel2';

-- a connection does not start it while its last run is recent (by the
-- setting of the connection that would start it)
\c
SET simba.gc_idle_age = 0;
SET simba.gc_interval = 1;
SELECT simba_release('w-tick', 'nobody') AS starts_the_clock;
-- one interval of this connection
SELECT pg_sleep(1.1) AS one_interval;
SET simba.gc_interval = '1h';
UPDATE simba_gc_state SET last_run = now();
SET client_min_messages = debug1;
SELECT simba_release('w-tick', 'nobody') AS not_started;
RESET client_min_messages;
RESET simba.gc_idle_age;
RESET simba.gc_interval;

SET client_min_messages = warning;
SET simba.drop_live_leases = on;
DROP EXTENSION simba;
CREATE EXTENSION simba;
RESET simba.drop_live_leases;
RESET client_min_messages;
DROP PROCEDURE gc_wait(text);
DROP PROCEDURE gc_gone();
DROP TABLE gc_deleted_by;
DROP FUNCTION gc_log();
DROP ROLE regress_simba_gc_owner;
