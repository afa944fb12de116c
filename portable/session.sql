-- Sessions (session.c; docs/design.md, "Sessions"): one lease for every
-- tenure, permit and read-write hold taken under it.

CREATE FUNCTION simba_portable_no_session(session_id uuid, found boolean, ended timestamptz)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF found THEN
        RAISE EXCEPTION 'session % has ended', session_id USING ERRCODE = 'SB004',
            DETAIL = pg_catalog.format('It ended at %s; nothing it held is held any more.', ended),
            HINT = 'Open a new session; what it acquires gets new fences.';
    END IF;
    RAISE EXCEPTION 'session % does not exist', session_id USING ERRCODE = 'SB004',
        DETAIL = 'It was closed, collected after it ended, never opened, or belongs to another role.',
        HINT = 'Open a new session; what it acquires gets new fences.';
END
$$;

CREATE FUNCTION simba_session_open(
    ttl        interval DEFAULT '10 seconds',
    transition interval DEFAULT '6 seconds')
RETURNS simba_session
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, :"schema", pg_temp
AS $$
DECLARE
    c simba_portable_caller := simba_portable_enter('simba_session_open', true);
    t timestamptz := pg_catalog.clock_timestamp();
    lease record := simba_portable_lease(t, $1, $2, (SELECT s.max_lease FROM simba_settings s));
    s simba_session;
BEGIN
    INSERT INTO simba_session_lease AS x (session_id, owner_role, owner_roleid, owner_sysid, opened_at,
                                          renewed_at, ttl_at, transition_at, ttl, transition)
    VALUES (pg_catalog.gen_random_uuid(), c.role, c.roleid, c.sysid, t, t, lease.ttl_at, lease.transition_at,
            $1, $2)
    RETURNING x.session_id, x.ttl_at, x.transition_at, t, x.revoked INTO s;
    RETURN s;
END
$$;

-- Locks the row FOR NO KEY UPDATE, then reads the clock: a takeover that
-- locked first made it end (SB004), one that comes later finds it live.
CREATE FUNCTION simba_session_keepalive(session_id uuid)
RETURNS simba_session
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, :"schema", pg_temp
AS $$
#variable_conflict use_column
DECLARE
    c simba_portable_caller := simba_portable_enter('simba_session_keepalive', true);
    lease_row simba_session_lease;
    t timestamptz;
    s simba_session;
BEGIN
    IF $1 IS NULL THEN
        RAISE EXCEPTION 'session_id must not be null' USING ERRCODE = '22004';
    END IF;
    SELECT * INTO lease_row FROM simba_session_lease AS x
     WHERE x.session_id = $1
       AND simba_portable_same_role(x.owner_role, x.owner_roleid, x.owner_sysid, c)
       FOR NO KEY UPDATE;
    t := pg_catalog.clock_timestamp();
    IF NOT FOUND OR lease_row.transition_at <= t THEN
        PERFORM simba_portable_no_session($1, lease_row.session_id IS NOT NULL, lease_row.transition_at);
    END IF;
    UPDATE simba_session_lease AS x
       SET renewed_at = t, ttl_at = t + lease_row.ttl, transition_at = t + lease_row.ttl + lease_row.transition, clock_origin = NULL
     WHERE x.session_id = $1
    RETURNING x.session_id, x.ttl_at, x.transition_at, t, x.revoked INTO s;
    RETURN s;
END
$$;

-- Ended sessions (locked) collected: what they held becomes leases that
-- ended with them (same holder and fence), then their rows go.
CREATE FUNCTION simba_portable_collect(ids uuid[])
RETURNS void
LANGUAGE sql VOLATILE
AS $$
UPDATE simba_mutex AS m
   SET session_id = NULL, acquired_at = s.renewed_at, ttl_at = s.ttl_at, transition_at = s.transition_at,
       clock_origin = s.clock_origin
  FROM simba_session_lease AS s WHERE s.session_id = ANY (ids) AND m.session_id = s.session_id;
UPDATE simba_semaphore_permit AS p
   SET session_id = NULL, renewed_at = s.renewed_at, expires_at = s.transition_at, clock_origin = s.clock_origin
  FROM simba_session_lease AS s WHERE s.session_id = ANY (ids) AND p.session_id = s.session_id;
UPDATE simba_rwlock_holder AS h
   SET session_id = NULL, renewed_at = s.renewed_at, ttl_at = s.ttl_at, transition_at = s.transition_at,
       clock_origin = s.clock_origin
  FROM simba_session_lease AS s WHERE s.session_id = ANY (ids) AND h.session_id = s.session_id;
DELETE FROM simba_session_lease WHERE session_id = ANY (ids);
$$;

CREATE FUNCTION simba_session_close(session_id uuid)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, :"schema", pg_temp
AS $$
#variable_conflict use_column
DECLARE
    c simba_portable_caller := simba_portable_enter('simba_session_close', true);
    lease_row simba_session_lease;
    t timestamptz;
    mutexes text[];
    woken text[] := '{}';
    released bigint := 0;
    more text[];
    n text;
    notify text;
BEGIN
    IF $1 IS NULL THEN
        RAISE EXCEPTION 'session_id must not be null' USING ERRCODE = '22004';
    END IF;
    -- Unknown or another role's: nothing to close (as simba_release returns false).
    SELECT * INTO lease_row FROM simba_session_lease AS x
     WHERE x.session_id = $1
       AND simba_portable_same_role(x.owner_role, x.owner_roleid, x.owner_sysid, c)
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    t := pg_catalog.clock_timestamp();
    IF lease_row.transition_at <= t THEN
        PERFORM simba_portable_collect(ARRAY[$1]);
        RETURN 0;
    END IF;
    -- Each tenure's release is logged while history is on (old: the rows
    -- as the statement found them, the holders the log names).
    WITH old AS (
        SELECT m.mutex, m.owner_id, m.owner_role, m.fence FROM simba_mutex AS m
         WHERE m.session_id = $1 AND m.owner_id IS NOT NULL),
    freed AS (
        UPDATE simba_mutex AS m
           SET owner_id = NULL, owner_role = NULL, owner_roleid = NULL, owner_sysid = NULL, session_id = NULL,
               acquired_at = NULL, ttl_at = NULL, transition_at = NULL, released_at = t, version = m.version + 1
         WHERE m.session_id = $1 AND m.owner_id IS NOT NULL
        RETURNING m.mutex),
    logged AS (
        INSERT INTO simba_mutex_history (mutex, event, owner_id, owner_role, fence, at)
        SELECT o.mutex, 'released', o.owner_id, o.owner_role, o.fence, t
          FROM old AS o JOIN freed AS f ON f.mutex = o.mutex
         WHERE (SELECT s.history FROM simba_settings AS s))
    SELECT COALESCE(pg_catalog.array_agg(f.mutex), '{}') INTO mutexes FROM freed AS f;
    released := pg_catalog.cardinality(mutexes);
    woken := mutexes;
    -- A fair queue's head is woken on its own channel: it does not listen on simba.
    PERFORM simba_portable_fair_wake(mutexes, t);
    WITH ended AS (
        UPDATE simba_semaphore_permit AS p SET expires_at = t, renewed_at = t, clock_origin = NULL, session_id = NULL
         WHERE p.session_id = $1
        RETURNING p.key)
    SELECT COALESCE(pg_catalog.array_agg(e.key), '{}') INTO more FROM ended AS e;
    released := released + pg_catalog.cardinality(more);
    woken := woken || more;
    FOR n, more IN
        WITH gone AS (DELETE FROM simba_rwlock_holder AS h WHERE h.session_id = $1 RETURNING h.rwlock, h.mode)
        SELECT g.rwlock, ARRAY[pg_catalog.count(*)::text,
                               (pg_catalog.bool_or(g.mode = 'write')
                                OR EXISTS (SELECT 1 FROM simba_rwlock_holder AS w
                                            WHERE w.rwlock = g.rwlock AND w.mode = 'waiting'))::text]
          FROM gone AS g GROUP BY g.rwlock LOOP
        released := released + more[1]::bigint;
        IF more[2]::boolean THEN
            woken := woken || n;
        END IF;
    END LOOP;
    DELETE FROM simba_session_lease AS x WHERE x.session_id = $1;
    -- Waiters of each mutex, key and read-write lock woken in byte order of
    -- the names, as simba_release_all wakes them; repeats fold into one.
    notify := (SELECT s.notify FROM simba_settings AS s);
    FOR n IN SELECT w FROM (SELECT DISTINCT w FROM pg_catalog.unnest(woken) AS w) AS d ORDER BY w COLLATE "C" LOOP
        PERFORM simba_portable_wake(n, notify);
    END LOOP;
    RETURN released;
END
$$;

CREATE FUNCTION simba_session_gc()
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, :"schema", pg_temp
AS $$
DECLARE
    ids uuid[];
BEGIN
    PERFORM simba_portable_enter('simba_session_gc', true);
    SELECT pg_catalog.array_agg(l.session_id) INTO ids
      FROM (SELECT s.session_id FROM simba_session_lease AS s
             WHERE s.transition_at <= pg_catalog.clock_timestamp() FOR UPDATE SKIP LOCKED) AS l;
    IF ids IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM simba_portable_collect(ids);
    RETURN pg_catalog.cardinality(ids);
END
$$;

-- The lapse waker's round (lapse.c in the extension): what a close of each
-- session that ended after since (at most a minute back) and by now would
-- send, changing nothing. This edition runs no waker (simba_waker() is
-- false); an owner may run this from a scheduler of its own.
CREATE FUNCTION simba_wake_lapsed(since timestamptz, OUT scanned_to timestamptz, OUT next_end timestamptz,
                                  OUT sessions bigint)
LANGUAGE plpgsql VOLATILE STRICT SECURITY DEFINER
SET search_path = pg_catalog, :"schema", pg_temp
AS $$
DECLARE
    t timestamptz := pg_catalog.clock_timestamp();
    ids uuid[];
    mutexes text[];
    notify text := (SELECT s.notify FROM simba_settings AS s);
    n text;
BEGIN
    PERFORM simba_portable_enter('simba_wake_lapsed', false);
    since := GREATEST(since, t - interval '1 minute');
    SELECT pg_catalog.array_agg(s.session_id) FILTER (WHERE s.transition_at <= t),
           pg_catalog.min(s.transition_at) FILTER (WHERE s.transition_at > t)
      INTO ids, next_end
      FROM simba_session_lease AS s WHERE s.transition_at > since;
    scanned_to := t;
    sessions := COALESCE(pg_catalog.cardinality(ids), 0);
    IF ids IS NULL THEN
        RETURN;
    END IF;
    SELECT COALESCE(pg_catalog.array_agg(m.mutex), '{}') INTO mutexes
      FROM simba_mutex AS m WHERE m.session_id = ANY (ids) AND m.owner_id IS NOT NULL;
    -- As simba_session_close: a fair queue's head on its own channel, the rest on simba.
    PERFORM simba_portable_fair_wake(mutexes, t);
    FOR n IN SELECT w FROM (SELECT m AS w FROM pg_catalog.unnest(mutexes) AS m
                            UNION SELECT p.key FROM simba_semaphore_permit AS p WHERE p.session_id = ANY (ids)
                            UNION SELECT h.rwlock FROM simba_rwlock_holder AS h WHERE h.session_id = ANY (ids)) AS d
              ORDER BY w COLLATE "C" LOOP
        PERFORM simba_portable_wake(n, notify);
    END LOOP;
END
$$;
