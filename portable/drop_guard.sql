-- The drop guard (drop_guard.c): a re-created install starts its fence
-- sequences at 1, so dropping simba while leases are live could hand a
-- holder's fence to someone else. Only a superuser (or a managed service's
-- admin role, such as rds_superuser) may create an event trigger: the
-- install script attaches it where it may (epilogue.sql). An event
-- trigger at ddl_command_start cannot see which schema a DROP names, so
-- this one refuses every DROP SCHEMA and DROP OWNED of the database while
-- a lease or permit is live, unless simba_settings.drop_live_leases is on.
CREATE FUNCTION simba_drop_guard()
RETURNS event_trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, :"schema", pg_temp
AS $$
DECLARE
    t timestamptz := pg_catalog.clock_timestamp();
    leases bigint;
    permits bigint;
BEGIN
    IF (SELECT s.drop_live_leases FROM simba_settings s) THEN
        RETURN;
    END IF;
    SELECT (SELECT pg_catalog.count(*) FROM simba_mutex AS m WHERE simba_portable_live(m, t, false))
         + (SELECT pg_catalog.count(*) FROM simba_rwlock_holder AS h
             WHERE h.mode <> 'waiting'
               AND CASE WHEN h.session_id IS NULL THEN h.transition_at > t
                        ELSE NOT simba_session_ended(h.session_id, t, NULL, false) END),
           (SELECT pg_catalog.count(*) FROM simba_semaphore_permit AS p
             WHERE CASE WHEN p.session_id IS NULL THEN p.expires_at > t
                        ELSE NOT simba_session_ended(p.session_id, t, NULL, false) END)
      INTO leases, permits;
    IF leases > 0 OR permits > 0 THEN
        RAISE EXCEPTION 'simba has % live leases and % live permits', leases, permits
            USING ERRCODE = '55006',
                  DETAIL = 'A re-created install starts fences again at 1: a holder of the dropped one could pass a fence check of the new one.',
                  HINT = 'Stop the holders, or force-release their mutexes and let permits expire; or have the owner set drop_live_leases in simba_settings to drop them anyway.';
    END IF;
END
$$;
