-- Ownership history (history.c) and the admin's forced release. The
-- portable edition logs from its functions (simba_portable_log), with the
-- exact old and new rows, while simba_settings.history is on. It attaches
-- no trigger to simba_mutex (portable/build.sh leaves them out): a trigger
-- call on every write would cost each call, and a restore's COPY or an
-- owner's fix by hand is no change of hands. simba_history_trigger is
-- there for the same API, and logs nothing.

CREATE FUNCTION simba_history_trigger()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN NULL;
END
$$;

-- A change of hands from row old (NULL: inserted) to row new: acquired,
-- taken_over, reacquired, released or forced_release; a renewal is not.
-- Called while simba_settings.history is on.
CREATE FUNCTION simba_portable_log(old simba_mutex, new simba_mutex, forced boolean)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF old.mutex IS NOT NULL AND old.owner_id IS NOT DISTINCT FROM new.owner_id AND old.fence = new.fence THEN
        RETURN;
    END IF;
    IF new.owner_id IS NULL THEN
        IF old.owner_id IS NULL THEN
            RETURN;
        END IF;
        INSERT INTO simba_mutex_history (mutex, event, owner_id, owner_role, fence, at)
        VALUES (new.mutex, CASE WHEN forced THEN 'forced_release' ELSE 'released' END, old.owner_id,
                old.owner_role, old.fence, pg_catalog.clock_timestamp());
    ELSIF old.owner_id IS NULL THEN
        INSERT INTO simba_mutex_history (mutex, event, owner_id, owner_role, fence, at)
        VALUES (new.mutex, 'acquired', new.owner_id, new.owner_role, new.fence, new.acquired_at);
    ELSE
        INSERT INTO simba_mutex_history (mutex, event, owner_id, owner_role, fence, previous_owner,
                                         previous_role, previous_fence, at)
        VALUES (new.mutex,
                CASE WHEN old.owner_id = new.owner_id
                      AND (new.owner_role IS NULL OR old.owner_role IS NULL OR new.owner_role = old.owner_role)
                     THEN 'reacquired' ELSE 'taken_over' END,
                new.owner_id, new.owner_role, new.fence, old.owner_id, old.owner_role, old.fence, new.acquired_at);
    END IF;
END
$$;

-- A release that found its lease over, by the holder of the latest tenure
-- (its lease lapsed, or the current tenure took over from it): once per
-- tenure (the unique index simba_mutex_history_late_release drops repeats).
CREATE FUNCTION simba_portable_log_late_release(mutex text, contender text, c simba_portable_caller,
                                                t timestamptz)
RETURNS void
LANGUAGE sql VOLATILE
AS $$
INSERT INTO simba_mutex_history AS h (mutex, event, owner_id, owner_role, fence, at)
SELECT m.mutex, 'late_release', contender, c.role, tenure.fence, t
  FROM simba_mutex AS m,
       LATERAL (SELECT m.fence
                 WHERE m.owner_id = contender
                   AND simba_portable_same_role(m.owner_role, m.owner_roleid, m.owner_sysid, c)
                UNION ALL
                SELECT p.previous_fence FROM simba_mutex_history AS p
                 WHERE p.mutex = $1 AND p.fence = m.fence AND p.event = 'taken_over'
                   AND p.previous_owner = contender AND p.previous_role = c.role) AS tenure(fence)
 WHERE m.mutex = $1 AND tenure.fence IS NOT NULL
ON CONFLICT (mutex, fence) WHERE event = 'late_release' DO NOTHING
$$;

CREATE FUNCTION simba_history_prune(keep interval)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, :"schema", pg_temp
AS $$
DECLARE
    deleted bigint;
BEGIN
    IF keep IS NULL THEN
        RAISE EXCEPTION 'keep must not be null' USING ERRCODE = '22004';
    ELSIF pg_catalog.date_part('year', keep) * 12 + pg_catalog.date_part('month', keep) < 0
          OR pg_catalog.date_part('day', keep) < 0 OR keep - pg_catalog.date_trunc('day', keep) < interval '0' THEN
        RAISE EXCEPTION 'keep must not be negative' USING ERRCODE = '22023';
    END IF;
    -- Days and months are fine here: "keep 30 days" means calendar days.
    DELETE FROM simba_mutex_history WHERE at < pg_catalog.now() - keep;
    GET DIAGNOSTICS deleted = ROW_COUNT;
    RETURN deleted;
END
$$;

CREATE FUNCTION simba_force_release(mutex text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, :"schema", pg_temp
AS $$
DECLARE
    m simba_mutex;
    n simba_mutex;
    t timestamptz;
BEGIN
    PERFORM simba_portable_enter('simba_force_release', true);
    IF simba_portable_bad_name($1) THEN
        PERFORM simba_portable_name($1, 'mutex');
    END IF;
    -- The mutex row first, then its session's, as an acquire under it locks them.
    SELECT * INTO m FROM simba_mutex x WHERE x.mutex = $1 FOR UPDATE;
    t := pg_catalog.clock_timestamp();
    IF NOT FOUND OR NOT simba_portable_live(m, t, true) THEN
        RETURN false;
    END IF;
    UPDATE simba_mutex AS x
       SET owner_id = NULL, owner_role = NULL, owner_roleid = NULL, owner_sysid = NULL, session_id = NULL,
           acquired_at = NULL, ttl_at = NULL, transition_at = NULL, released_at = t, version = x.version + 1
     WHERE x.mutex = $1
    RETURNING x.* INTO n;
    IF (SELECT s.history FROM simba_settings s) THEN
        PERFORM simba_portable_log(m, n, true);
    END IF;
    IF m.session_id IS NOT NULL THEN
        UPDATE simba_session_lease AS s SET revoked = s.revoked + 1 WHERE s.session_id = m.session_id;
    END IF;
    -- The head of a fair queue is woken on its own channel, as simba_fair_release would.
    PERFORM simba_portable_fair_wake(ARRAY[$1], t);
    -- Always, whatever notify says: the holder that lost it may not be registered.
    PERFORM pg_catalog.pg_notify('simba', $1);
    RETURN true;
END
$$;
