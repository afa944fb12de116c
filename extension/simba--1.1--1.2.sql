-- simba 1.1 -> 1.2: ownership history, per-holder stats, forced release.
--
-- Design: with the setting simba.history on (superuser-only; off by default,
-- as it costs an insert per change of hands), an AFTER ROW trigger in C
-- (history.c) logs every change of hands and release of a mutex from the
-- exact old and new rows; renewals are not logged. simba_release logs 'late_release' when the caller held the latest
-- tenure but its lease had already ended ("finished after the lease ended").
-- simba_force_release is an admin tool, not granted by simba_grant.

\echo Use "ALTER EXTENSION simba UPDATE TO '1.2'" to load this file. \quit

CREATE TABLE @extschema@.simba_mutex_history (
    id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    mutex          text        NOT NULL,
    event          text        NOT NULL CHECK (event IN ('acquired', 'taken_over', 'reacquired',
                                                         'released', 'late_release', 'forced_release')),
    owner_id       text,
    fence          bigint      NOT NULL,
    previous_owner text,
    at             timestamptz NOT NULL
);
COMMENT ON SEQUENCE @extschema@.simba_mutex_history_id_seq IS
  'simba: ids of simba_mutex_history rows';
CREATE INDEX simba_mutex_history_mutex_fence ON @extschema@.simba_mutex_history (mutex, fence);
CREATE INDEX simba_mutex_history_at ON @extschema@.simba_mutex_history (at);
COMMENT ON TABLE @extschema@.simba_mutex_history IS
  'simba: changes of hands and releases of mutexes while simba.history is on (renewals are not logged); prune with simba_history_prune';

-- Not SECURITY DEFINER: it runs inside the simba_* functions (as their
-- owner, with their pinned search_path) or for a superuser writing directly.
CREATE FUNCTION @extschema@.simba_history_trigger()
RETURNS trigger
AS 'MODULE_PATHNAME', 'simba_history_trigger'
LANGUAGE C;
COMMENT ON FUNCTION @extschema@.simba_history_trigger() IS
  'simba: logs changes of hands of simba_mutex rows to simba_mutex_history when simba.history is on';

-- No WHEN clauses: PostgreSQL rebuilds a trigger's WHEN expression for every
-- statement, which costs more than calling the C function, which returns at
-- once for renewals and while simba.history is off.
CREATE TRIGGER simba_mutex_history_insert
    AFTER INSERT ON @extschema@.simba_mutex
    FOR EACH ROW EXECUTE FUNCTION @extschema@.simba_history_trigger();
CREATE TRIGGER simba_mutex_history_update
    AFTER UPDATE ON @extschema@.simba_mutex
    FOR EACH ROW EXECUTE FUNCTION @extschema@.simba_history_trigger();

CREATE VIEW @extschema@.simba_mutex_stats AS
WITH tenures AS (
    SELECT h.mutex, h.owner_id AS holder, h.event, h.at FROM @extschema@.simba_mutex_history h
    UNION ALL
    -- a tenure ended by expiry counts for the holder whose lease lapsed
    SELECT h.mutex, h.previous_owner, 'expired', h.at FROM @extschema@.simba_mutex_history h
     WHERE h.event = 'taken_over'
    UNION ALL
    SELECT h.mutex, h.owner_id, 'expired', h.at FROM @extschema@.simba_mutex_history h
     WHERE h.event = 'reacquired'
)
SELECT mutex, holder,
       count(*) FILTER (WHERE event IN ('acquired', 'taken_over', 'reacquired')) AS acquisitions,
       count(*) FILTER (WHERE event = 'released') AS releases,
       count(*) FILTER (WHERE event = 'late_release') AS late_releases,
       count(*) FILTER (WHERE event = 'expired') AS expired,
       count(*) FILTER (WHERE event = 'forced_release') AS forced_releases,
       max(at) AS last_event_at
  FROM tenures
 WHERE holder IS NOT NULL
 GROUP BY mutex, holder;
COMMENT ON VIEW @extschema@.simba_mutex_stats IS
  'simba: per mutex and holder, from simba_mutex_history: acquisitions, releases, late releases (finished after the lease ended), leases lost by expiry, forced releases';

CREATE FUNCTION @extschema@.simba_history_prune(keep interval)
RETURNS bigint
AS 'MODULE_PATHNAME', 'simba_history_prune'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.simba_history_prune(interval) IS
  'simba: delete history older than now - keep; returns how many rows it deleted';

CREATE FUNCTION @extschema@.simba_force_release(mutex text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'simba_force_release'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.simba_force_release(text) IS
  'simba: admin only — free the mutex whoever holds it (the next holder gets the next fence) and NOTIFY simba; false if it was free';

-- simba_grant now also lets a role read the history and the stats.
CREATE OR REPLACE FUNCTION @extschema@.simba_set_privileges(role regrole, allow boolean)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    verb text := CASE WHEN allow THEN 'GRANT' ELSE 'REVOKE' END;
    dir  text := CASE WHEN allow THEN 'TO' ELSE 'FROM' END;
BEGIN
    EXECUTE pg_catalog.format(
        '%3$s EXECUTE ON FUNCTION %1$I.simba_acquire(text, text, interval, interval),'
        ' %1$I.simba_release(text, text), %1$I.simba_owner(text),'
        ' %1$I.simba_fence_check(text, text, bigint),'
        ' %1$I.simba_semaphore_acquire(text, text, integer, interval, text),'
        ' %1$I.simba_semaphore_refresh(text, uuid, interval),'
        ' %1$I.simba_semaphore_release(text, uuid),'
        ' %1$I.simba_semaphore_fence_check(text, uuid, bigint) %4$s %2$s;'
        ' %3$s SELECT ON %1$I.simba_mutex_status, %1$I.simba_semaphore_status,'
        ' %1$I.simba_mutex_stats, %1$I.simba_mutex_history %4$s %2$s',
        @extschema@.simba_schema(), role, verb, dir);
    IF allow THEN
        EXECUTE pg_catalog.format('GRANT USAGE ON SCHEMA %I TO %s', @extschema@.simba_schema(), role);
    END IF;
END
$$;

SELECT pg_catalog.pg_extension_config_dump('@extschema@.simba_mutex_history', '');

REVOKE ALL ON TABLE @extschema@.simba_mutex_history, @extschema@.simba_mutex_stats FROM PUBLIC;
REVOKE ALL ON FUNCTION
    @extschema@.simba_history_trigger(),
    @extschema@.simba_history_prune(interval),
    @extschema@.simba_force_release(text)
  FROM PUBLIC;
