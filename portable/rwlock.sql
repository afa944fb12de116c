-- The fenced read-write lock (rwlock.c; docs/design.md, "Multi-lock and
-- read-write lock"): many readers or one writer, writers preferred. A
-- grant decides under its lock's row (FOR UPDATE) in a subtransaction kept
-- only when it granted; a refused reader rolls it back and keeps no lock,
-- a queued writer then writes only its own entry. A holder's renewal
-- outside sessions, its release and its fence check touch only its own row.

-- The holder rows of a lock, as one caller sees them (read_holders); ends
-- are the rows' own, or (session_ends) their session's for a fence check.
CREATE TYPE simba_portable_holders AS (
    mine boolean, mine_tid tid, mine_mode text, mine_fence bigint, mine_since timestamptz,
    mine_end timestamptz, readers integer, writers integer, waiting integer, waiting_ahead integer,
    writer text);

CREATE FUNCTION simba_portable_holders(rwlock text, contender text, c simba_portable_caller,
                                       session_ends boolean)
RETURNS simba_portable_holders
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_variable
DECLARE
    h simba_portable_holders := ROW(false, NULL, NULL, NULL, NULL, NULL, 0, 0, 0, 0, NULL);
    r record;
BEGIN
    FOR r IN SELECT x.ctid, x.mode, x.fence, x.owner_id, x.owner_role, x.acquired_at,
                    x.owner_id = contender AND simba_portable_same_role(x.owner_role, x.owner_roleid, x.owner_sysid, c) AS mine,
                    CASE WHEN session_ends
                         THEN COALESCE(simba_session_time(x.session_id, 'transition_at', NULL), x.transition_at)
                         ELSE x.transition_at END AS ends
               FROM simba_rwlock_holder AS x WHERE x.rwlock = simba_portable_holders.rwlock
              ORDER BY x.acquired_at, x.owner_id LOOP
        IF r.mine THEN
            h.mine := true;
            h.mine_tid := r.ctid;
            h.mine_mode := r.mode;
            h.mine_fence := r.fence;
            h.mine_since := r.acquired_at;
            h.mine_end := r.ends;
        ELSIF r.mode = 'read' THEN
            h.readers := h.readers + 1;
        ELSIF r.mode = 'write' THEN
            h.writers := h.writers + 1;
            h.writer := pg_catalog.format('"%s" of role "%s"', r.owner_id, r.owner_role);
        ELSE
            h.waiting := h.waiting + 1;
            IF NOT h.mine OR h.mine_mode <> 'waiting' THEN
                h.waiting_ahead := h.waiting_ahead + 1;
            END IF;
        END IF;
    END LOOP;
    RETURN h;
END
$$;

-- SIMBA_HOLDER_LIVE: a hold by its own lease or its session's; lock: an
-- ended session's row FOR SHARE.
CREATE FUNCTION simba_portable_holder_live(h simba_rwlock_holder, t timestamptz, lock boolean)
RETURNS boolean
LANGUAGE sql VOLATILE
AS $$
SELECT CASE WHEN h.session_id IS NULL THEN h.transition_at > t
            ELSE NOT simba_session_ended(h.session_id, t, NULL, lock) END
$$;

CREATE FUNCTION simba_rwlock_acquire(
    rwlock       text,
    contender_id text,
    mode         text,
    ttl          interval DEFAULT '10 seconds',
    transition   interval DEFAULT '6 seconds',
    session_id   uuid     DEFAULT NULL)
RETURNS simba_rwlock_grant
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, :"schema", pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    c simba_portable_caller := simba_portable_enter('simba_rwlock_acquire', true);
    t timestamptz := pg_catalog.clock_timestamp();
    lease record;
    session_lease record;
    st simba_settings;
    writes boolean;
    got text;              -- the mode decided: NULL, a reader refused
    fence bigint;
    since timestamptz;
    pos integer;
    h simba_portable_holders;
    write_fence bigint;
    row_session uuid;
BEGIN
    IF simba_portable_bad_name($1) THEN
        PERFORM simba_portable_name($1, 'rwlock');
    ELSIF simba_portable_bad_name($2) THEN
        PERFORM simba_portable_name($2, 'contender_id');
    ELSIF simba_portable_bad_name($3) THEN
        PERFORM simba_portable_name($3, 'mode');
    END IF;
    writes := $3 = 'write';
    IF simba_portable_bad_duration($4, false) THEN
        PERFORM simba_portable_duration($4, 'ttl', false);
    ELSIF simba_portable_bad_duration($5, true) THEN
        PERFORM simba_portable_duration($5, 'transition', true);
    END IF;
    IF NOT writes AND $3 <> 'read' THEN
        RAISE EXCEPTION 'mode must be ''read'' or ''write'', not "%"', $3 USING ERRCODE = '22023';
    END IF;
    SELECT * INTO st FROM simba_settings;
    lease := simba_portable_lease(t, $4, $5, st.max_lease);
    -- A renewal outside sessions: its own live row only, nothing else read or locked.
    IF $6 IS NULL THEN
        UPDATE simba_rwlock_holder AS x
           SET owner_role = c.role, owner_roleid = c.roleid, owner_sysid = c.sysid, renewed_at = t,
               ttl_at = lease.ttl_at, transition_at = lease.transition_at, clock_origin = NULL
         WHERE x.rwlock = $1 AND x.owner_id = $2
           AND simba_portable_same_role(x.owner_role, x.owner_roleid, x.owner_sysid, c)
           AND x.mode = $3 AND x.session_id IS NULL AND x.transition_at > t
        RETURNING x.fence, x.acquired_at INTO fence, since;
        IF FOUND THEN
            RETURN ROW($1, $2, $3, true, fence, since, lease.ttl_at, lease.transition_at, t, NULL)::simba_rwlock_grant;
        END IF;
    END IF;
    BEGIN
        -- Under a session, its row first (as simba_acquire), inside the
        -- subtransaction: a refused reader keeps no lock on it either.
        IF $6 IS NOT NULL THEN
            session_lease := simba_portable_join($6, c);
        END IF;
        LOOP
            SELECT r.write_fence INTO write_fence FROM simba_rwlock AS r WHERE r.rwlock = $1 FOR UPDATE;
            EXIT WHEN FOUND;
            INSERT INTO simba_rwlock AS r (rwlock) VALUES ($1) ON CONFLICT DO NOTHING;
        END LOOP;
        -- The clock after the lock: every earlier grant is visible now.
        t := pg_catalog.clock_timestamp();
        since := t;
        lease := simba_portable_lease(t, $4, $5, st.max_lease);
        -- Lapsed holds dropped; one another transaction holds locked is left, and counted as held.
        DELETE FROM simba_rwlock_holder AS d
         WHERE d.ctid = ANY (ARRAY(SELECT x.ctid FROM simba_rwlock_holder AS x
                                    WHERE x.rwlock = $1 AND NOT simba_portable_holder_live(x, t, true)
                                      FOR UPDATE OF x SKIP LOCKED))
           AND d.rwlock = $1;
        h := simba_portable_holders($1, $2, c, false);
        IF writes AND h.mine AND h.mine_mode = 'read' THEN
            RAISE EXCEPTION 'contender "%" holds rwlock "%" for reading and cannot upgrade to writing', $2, $1
                USING ERRCODE = 'SB005',
                      DETAIL = 'Two readers upgrading at once would wait for each other forever.',
                      HINT = 'Release it, then acquire it for writing: the write gets a new fence.';
        END IF;
        IF writes AND h.mine AND h.mine_mode = 'write' THEN
            got := 'write';   -- a renewal
            fence := h.mine_fence;
            since := h.mine_since;
        ELSIF writes AND h.readers = 0 AND h.writers = 0 AND h.waiting_ahead = 0 THEN
            got := 'write';
            UPDATE simba_rwlock AS r
               SET write_fence = pg_catalog.nextval('simba_rwlock_fence'), version = r.version + 1
             WHERE r.rwlock = $1
            RETURNING r.write_fence INTO fence;
        ELSIF writes THEN
            got := 'waiting';
            pos := h.waiting_ahead + 1;
            IF h.mine THEN
                since := h.mine_since;   -- its place in the queue
            END IF;
        ELSIF h.mine AND h.mine_mode IN ('read', 'write') THEN
            got := 'read';    -- a renewal, or a downgrade without a gap
            fence := h.mine_fence;
            since := h.mine_since;
        ELSIF h.writers = 0 AND h.waiting = 0 THEN
            got := 'read';
            fence := write_fence;
        END IF;
        -- A queued writer keeps its place, not the lock's row: its entry is written after the rollback.
        IF got IS NULL OR got = 'waiting' THEN
            RAISE SQLSTATE 'SBP01';
        END IF;
        -- A hold lives with the session and shows its times.
        IF $6 IS NOT NULL THEN
            lease := session_lease;
            row_session := $6;
        END IF;
        IF h.mine THEN
            UPDATE simba_rwlock_holder AS x
               SET owner_role = c.role, owner_roleid = c.roleid, owner_sysid = c.sysid, mode = got, fence = fence,
                   acquired_at = since, renewed_at = t, ttl_at = lease.ttl_at, transition_at = lease.transition_at,
                   clock_origin = NULL, session_id = row_session
             WHERE x.ctid = h.mine_tid AND x.rwlock = $1 AND x.owner_id = $2;
        ELSE
            INSERT INTO simba_rwlock_holder (rwlock, owner_id, owner_role, owner_roleid, owner_sysid, mode, fence,
                                             acquired_at, renewed_at, ttl_at, transition_at, session_id)
            VALUES ($1, $2, c.role, c.roleid, c.sysid, got, fence, since, t, lease.ttl_at, lease.transition_at,
                    row_session);
        END IF;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'simba: rwlock holder row vanished while granting';
        END IF;
        RETURN ROW($1, $2, got, true, fence, since, lease.ttl_at, lease.transition_at, t, NULL)::simba_rwlock_grant;
    EXCEPTION WHEN SQLSTATE 'SBP01' THEN
        NULL;
    END;
    IF got IS NULL THEN
        -- A reader refused: nothing changed, no lock kept.
        RETURN ROW($1, $2, NULL, false, NULL, NULL, NULL, NULL, t, NULL)::simba_rwlock_grant;
    END IF;
    -- A queued writer's entry (its own lease, never a session's): new, renewed, or anew over its lapsed row.
    INSERT INTO simba_rwlock_holder AS x (rwlock, owner_id, owner_role, owner_roleid, owner_sysid, mode, fence,
                                          acquired_at, renewed_at, ttl_at, transition_at, session_id)
    VALUES ($1, $2, c.role, c.roleid, c.sysid, 'waiting', 0, since, t, lease.ttl_at, lease.transition_at, NULL)
    ON CONFLICT ON CONSTRAINT simba_rwlock_holder_pkey DO UPDATE
       SET owner_role = c.role, mode = 'waiting', fence = 0, acquired_at = since, renewed_at = t,
           ttl_at = lease.ttl_at, transition_at = lease.transition_at, clock_origin = NULL, session_id = NULL;
    RETURN ROW($1, $2, 'waiting', false, NULL, since, lease.ttl_at, lease.transition_at, t, pos)::simba_rwlock_grant;
END
$$;

CREATE FUNCTION simba_rwlock_release(rwlock text, contender_id text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, :"schema", pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    c simba_portable_caller := simba_portable_enter('simba_rwlock_release', true);
    t timestamptz;
    h simba_portable_holders;
    released boolean := false;
    notify boolean := false;
BEGIN
    IF simba_portable_bad_name($1) THEN
        PERFORM simba_portable_name($1, 'rwlock');
    ELSIF simba_portable_bad_name($2) THEN
        PERFORM simba_portable_name($2, 'contender_id');
    END IF;
    BEGIN
        -- Its own row only: a release never waits for another caller's grant.
        t := pg_catalog.clock_timestamp();
        h := simba_portable_holders($1, $2, c, false);
        -- A live hold is released (under a session: while the session lives); a queued writer's entry is withdrawn.
        IF h.mine THEN
            DELETE FROM simba_rwlock_holder AS x
             WHERE x.ctid = h.mine_tid AND x.rwlock = $1 AND simba_portable_holder_live(x, t, true);
        END IF;
        IF NOT h.mine OR NOT FOUND THEN
            RAISE SQLSTATE 'SBP01';
        END IF;
        released := h.mine_mode <> 'waiting';
        -- Nobody waits for a reader unless a writer does: a reader's release
        -- with no writer queued sends nothing.
        notify := h.mine_mode <> 'read' OR h.waiting > 0;
    EXCEPTION WHEN SQLSTATE 'SBP01' THEN
        NULL;
    END;
    IF notify THEN
        notify := simba_portable_wake($1, (SELECT s.notify FROM simba_settings s));
    END IF;
    RETURN released;
END
$$;

CREATE FUNCTION simba_rwlock_fence_check(rwlock text, contender_id text, fence bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, :"schema", pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    c simba_portable_caller := simba_portable_enter('simba_rwlock_fence_check', true);
    h simba_portable_holders;
    t timestamptz;
BEGIN
    IF simba_portable_bad_name($1) THEN
        PERFORM simba_portable_name($1, 'rwlock');
    ELSIF simba_portable_bad_name($2) THEN
        PERFORM simba_portable_name($2, 'contender_id');
    END IF;
    IF $3 IS NULL THEN
        RAISE EXCEPTION 'fence must not be null' USING ERRCODE = '22004';
    ELSIF $3 < 0 THEN
        RAISE EXCEPTION 'fence must not be negative' USING ERRCODE = '22023';
    END IF;
    -- Its own row FOR SHARE until the transaction ends: a grant cannot drop
    -- it, so no conflicting grant is made until then.
    PERFORM 1 FROM simba_rwlock_holder AS x
     WHERE x.rwlock = $1 AND x.owner_id = $2
       AND simba_portable_same_role(x.owner_role, x.owner_roleid, x.owner_sysid, c)
       FOR SHARE;
    h := simba_portable_holders($1, $2, c, true);
    -- Read after the lock: the lease must still hold now.
    t := pg_catalog.clock_timestamp();
    IF NOT h.mine OR h.mine_mode NOT IN ('read', 'write') THEN
        IF h.writer IS NOT NULL THEN
            RAISE EXCEPTION 'contender "%" does not hold rwlock "%"', $2, $1 USING ERRCODE = 'SB001',
                DETAIL = pg_catalog.format('It is held for writing by %s.', h.writer);
        ELSIF h.mine THEN
            RAISE EXCEPTION 'contender "%" does not hold rwlock "%"', $2, $1 USING ERRCODE = 'SB001',
                DETAIL = 'The contender is waiting to write.';
        END IF;
        RAISE EXCEPTION 'contender "%" does not hold rwlock "%"', $2, $1 USING ERRCODE = 'SB001';
    END IF;
    IF $3 <> h.mine_fence THEN
        RAISE EXCEPTION 'stale fence % for rwlock "%"', $3, $1 USING ERRCODE = 'SB002',
            DETAIL = pg_catalog.format('The contender holds it for %s with fence %s.', h.mine_mode, h.mine_fence);
    END IF;
    IF h.mine_end <= t THEN
        RAISE EXCEPTION 'lease of contender "%" on rwlock "%" has expired', $2, $1 USING ERRCODE = 'SB003',
            DETAIL = pg_catalog.format('It ended at %s.', h.mine_end),
            HINT = 'Acquire the rwlock again.';
    END IF;
END
$$;
