-- The leased mutex (docs/design.md, "Protocol", "Row locks"): acquire,
-- renew, release, owner, fence check, the multi-lock, the forced release
-- and the collection of idle rows, as mutex.c and history.c decide them.
--
-- An acquire reads the row without a lock and loses there when another
-- holder's lease is live: a loser locks nothing. A call that may win locks
-- the row (FOR NO KEY UPDATE, which waits for a fence check or a writer in
-- flight), decides again on that latest version and updates it, inside a
-- subtransaction that it rolls back when it lost after all, so a loser
-- that waited keeps no lock either.

-- simba_mutex's row m as simba_owner shows it at t: owner NULL once its
-- lease, or its session, has ended; a tenure's times are its session's.
CREATE FUNCTION simba_portable_owner(m simba_mutex, t timestamptz)
RETURNS simba_owner
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    live boolean := simba_portable_live(m, t, false);
BEGIN
    IF m.session_id IS NOT NULL THEN
        m.ttl_at := COALESCE(simba_session_time(m.session_id, 'ttl_at', NULL), m.ttl_at);
        m.transition_at := COALESCE(simba_session_time(m.session_id, 'transition_at', NULL), m.transition_at);
    END IF;
    RETURN ROW(m.mutex, CASE WHEN live THEN m.owner_id END, m.acquired_at, m.ttl_at, m.transition_at,
               m.version, m.fence, t,
               CASE WHEN live THEN m.owner_role END, CASE WHEN live THEN m.session_id END)::simba_owner;
END
$$;

-- A mutex never used: free, version and fence 0.
CREATE FUNCTION simba_portable_unused(mutex text, t timestamptz)
RETURNS simba_owner
LANGUAGE sql IMMUTABLE
AS $$ SELECT ROW(mutex, NULL, NULL, NULL, NULL, 0, 0, t, NULL, NULL)::simba_owner $$;

-- SIMBA_MUTEX_LIVE (simba.h): held, by its own lease or its session's;
-- lock: an ended session's row FOR SHARE (simba_session_ended). NULL when
-- a lease lacks the times it needs (SQL's unknown: neither live nor over).
CREATE FUNCTION simba_portable_live(m simba_mutex, t timestamptz, lock boolean)
RETURNS boolean
LANGUAGE sql VOLATILE
AS $$
SELECT m.owner_id IS NOT NULL
       AND CASE WHEN m.session_id IS NULL THEN m.transition_at > t
                ELSE NOT simba_session_ended(m.session_id, t, NULL, lock) END
$$;

-- SAME_HOLDER: the caller's contender id under the caller's role (by OID in
-- this cluster, by name in another); a tenure without a role is nobody's.
CREATE FUNCTION simba_portable_same(owner_id text, owner_role name, owner_roleid oid, owner_sysid bigint,
                                    contender text, c simba_portable_caller)
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
SELECT COALESCE(owner_id = contender AND simba_portable_same_role(owner_role, owner_roleid, owner_sysid, c), false)
$$;

-- One acquire (simba_mutex_take): won, and the owner after it. m is the
-- row as the caller read it without a lock (NULL: absent); the new
-- tenure's times are ttl_at and transition_at from t (a session's at the
-- join, under session_id). A call that may win locks the row in a
-- subtransaction, decides again on that latest version, and rolls the
-- subtransaction (and its lock) back if it lost after all.
CREATE FUNCTION simba_portable_take(m simba_mutex, mutex text, contender text, t timestamptz,
                                    ttl_at timestamptz, transition_at timestamptz, c simba_portable_caller,
                                    session_id uuid, history boolean, OUT won boolean, OUT owner simba_owner)
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_variable
DECLARE
    n simba_mutex;
    renewal boolean;
    tries integer := 0;
BEGIN
    LOOP
        tries := tries + 1;
        IF m.mutex IS NULL THEN
            INSERT INTO simba_mutex AS x (mutex, owner_id, owner_role, owner_roleid, owner_sysid, acquired_at,
                                          ttl_at, transition_at, session_id, version, fence)
            VALUES (mutex, contender, c.role, c.roleid, c.sysid, t, ttl_at, transition_at, session_id, 1,
                    pg_catalog.nextval('simba_mutex_fence'))
            ON CONFLICT DO NOTHING
            RETURNING x.* INTO n;
            IF FOUND THEN
                IF history THEN
                    PERFORM simba_portable_log(NULL, n, false);
                END IF;
                won := true;
                owner := ROW(mutex, contender, t, ttl_at, transition_at, 1, n.fence, t, c.role, session_id);
                RETURN;
            END IF;
        ELSIF NOT simba_portable_same(m.owner_id, m.owner_role, m.owner_roleid, m.owner_sysid, contender, c)
              AND simba_portable_live(m, t, false) IS NOT false THEN
            won := false;
            owner := simba_portable_owner(m, t);
            RETURN;
        ELSE
            BEGIN
                IF NOT history THEN
                    -- One statement: the UPDATE locks the latest version (waiting for a
                    -- writer or fence check in flight) and decides on it.
                    UPDATE simba_mutex AS x
                       SET owner_id = contender, owner_role = c.role, owner_roleid = c.roleid,
                           owner_sysid = c.sysid, session_id = simba_portable_take.session_id,
                           acquired_at = t, ttl_at = simba_portable_take.ttl_at,
                           transition_at = simba_portable_take.transition_at, clock_origin = NULL,
                           version = x.version + 1,
                           fence = CASE WHEN simba_portable_same(x.owner_id, x.owner_role, x.owner_roleid,
                                                                 x.owner_sysid, contender, c)
                                          AND simba_portable_live(x, t, true)
                                        THEN x.fence ELSE pg_catalog.nextval('simba_mutex_fence') END
                     WHERE x.mutex = simba_portable_take.mutex
                       AND (x.owner_id IS NULL
                            OR simba_portable_same(x.owner_id, x.owner_role, x.owner_roleid, x.owner_sysid,
                                                   contender, c)
                            OR simba_portable_live(x, t, true) IS false)
                    RETURNING x.version, x.fence INTO n.version, n.fence;
                    IF FOUND THEN
                        won := true;
                        owner := ROW(mutex, contender, t, ttl_at, transition_at, n.version, n.fence, t, c.role,
                                     session_id);
                        RETURN;
                    END IF;
                    RAISE SQLSTATE 'SBP01';
                END IF;
                -- With the history on, the row locked first: its change is logged from the exact old row.
                SELECT * INTO m FROM simba_mutex x WHERE x.mutex = simba_portable_take.mutex FOR NO KEY UPDATE;
                IF FOUND THEN
                    renewal := simba_portable_same(m.owner_id, m.owner_role, m.owner_roleid, m.owner_sysid,
                                                   contender, c);
                    IF m.owner_id IS NULL OR renewal OR simba_portable_live(m, t, true) IS false THEN
                        renewal := renewal AND simba_portable_live(m, t, true);
                        UPDATE simba_mutex AS x
                           SET owner_id = contender, owner_role = c.role, owner_roleid = c.roleid,
                               owner_sysid = c.sysid, session_id = simba_portable_take.session_id,
                               acquired_at = t, ttl_at = simba_portable_take.ttl_at,
                               transition_at = simba_portable_take.transition_at, clock_origin = NULL,
                               version = x.version + 1,
                               fence = CASE WHEN renewal THEN x.fence ELSE pg_catalog.nextval('simba_mutex_fence') END
                         WHERE x.mutex = simba_portable_take.mutex
                        RETURNING x.* INTO n;
                        IF history THEN
                            PERFORM simba_portable_log(m, n, false);
                        END IF;
                        won := true;
                        owner := ROW(mutex, contender, t, ttl_at, transition_at, n.version, n.fence, t, c.role,
                                     session_id);
                        RETURN;
                    END IF;
                END IF;
                -- Lost on the latest version: roll back its row lock.
                RAISE SQLSTATE 'SBP01';
            EXCEPTION WHEN SQLSTATE 'SBP01' THEN
                NULL;
            END;
        END IF;
        -- A concurrent first use, or a writer that won first: decide on the row as it is now.
        SELECT * INTO m FROM simba_mutex x WHERE x.mutex = simba_portable_take.mutex;
        IF tries >= 3 THEN
            IF m.mutex IS NULL THEN
                RAISE EXCEPTION 'simba: mutex row vanished while acquiring';
            END IF;
            won := false;
            owner := simba_portable_owner(m, t);
            RETURN;
        END IF;
    END LOOP;
END
$$;

-- The caller's session for an acquire under it (simba_session_join): locked
-- FOR KEY SHARE (a keepalive does not wait for it, a collection does), live
-- and the caller's, else SB004. Its ttl_at and transition_at.
CREATE FUNCTION simba_portable_join(session_id uuid, c simba_portable_caller,
                                    OUT ttl_at timestamptz, OUT transition_at timestamptz)
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_column
DECLARE
    found_it boolean;
BEGIN
    SELECT s.ttl_at, s.transition_at INTO ttl_at, transition_at
      FROM simba_session_lease s
     WHERE s.session_id = $1
       AND simba_portable_same_role(s.owner_role, s.owner_roleid, s.owner_sysid, c)
       FOR KEY SHARE;
    found_it := FOUND;
    -- The clock after the lock: the session must be live now.
    IF NOT found_it OR transition_at <= pg_catalog.clock_timestamp() THEN
        PERFORM simba_portable_no_session($1, found_it, transition_at);
    END IF;
END
$$;

-- A waiter's attempt under a session on a mutex another holder holds live:
-- lost, read without a lock (docs/design.md, "A waiter's losing attempt
-- locks nothing"); NULL when the full path must decide.
CREATE FUNCTION simba_portable_lost_under_session(mutex text, contender text, t timestamptz,
                                                  c simba_portable_caller, session_id uuid)
RETURNS simba_owner
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_variable
DECLARE
    m simba_mutex;
BEGIN
    SELECT x.* INTO m
      FROM simba_session_lease s, simba_mutex x
     WHERE s.session_id = simba_portable_lost_under_session.session_id
       AND simba_portable_same_role(s.owner_role, s.owner_roleid, s.owner_sysid, c)
       AND s.transition_at > t
       AND x.mutex = simba_portable_lost_under_session.mutex;
    IF FOUND AND NOT simba_portable_same(m.owner_id, m.owner_role, m.owner_roleid, m.owner_sysid, contender, c)
       AND simba_portable_live(m, t, false) THEN
        RETURN simba_portable_owner(m, t);
    END IF;
    RETURN NULL;
END
$$;

CREATE FUNCTION simba_acquire(
    mutex        text,
    contender_id text,
    ttl          interval DEFAULT '10 seconds',
    transition   interval DEFAULT '6 seconds',
    session_id   uuid     DEFAULT NULL)
RETURNS simba_owner
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, :"schema", pg_temp
AS $$
DECLARE
    c simba_portable_caller := simba_portable_enter('simba_acquire', true);
    t timestamptz := pg_catalog.clock_timestamp();
    r record;
    lease record;
    lost simba_owner;
BEGIN
    IF simba_portable_bad_name($1) THEN
        PERFORM simba_portable_name($1, 'mutex');
    ELSIF simba_portable_bad_name($2) THEN
        PERFORM simba_portable_name($2, 'contender_id');
    END IF;
    -- The settings and the row, in one statement, without a lock.
    SELECT s AS st, x AS m INTO r FROM simba_settings s LEFT JOIN simba_mutex x ON x.mutex = $1;
    lease := simba_portable_lease(t, $3, $4, (r.st).max_lease);
    IF $5 IS NOT NULL THEN
        lost := simba_portable_lost_under_session($1, $2, t, c, $5);
        IF (lost).mutex IS NOT NULL THEN
            RETURN lost;
        END IF;
        lease := simba_portable_join($5, c);
    END IF;
    RETURN (simba_portable_take(r.m, $1, $2, t, lease.ttl_at, lease.transition_at, c, $5, (r.st).history)).owner;
END
$$;

CREATE FUNCTION simba_renew(
    mutex        text,
    contender_id text,
    fence        bigint,
    ttl          interval DEFAULT '10 seconds',
    transition   interval DEFAULT '6 seconds')
RETURNS simba_owner
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, :"schema", pg_temp
AS $$
DECLARE
    c simba_portable_caller := simba_portable_enter('simba_renew', true);
    t timestamptz := pg_catalog.clock_timestamp();
    lease record;
    m simba_mutex;
BEGIN
    IF simba_portable_bad_name($1) THEN
        PERFORM simba_portable_name($1, 'mutex');
    ELSIF simba_portable_bad_name($2) THEN
        PERFORM simba_portable_name($2, 'contender_id');
    END IF;
    lease := simba_portable_lease(t, $4, $5, (SELECT s.max_lease FROM simba_settings s));
    IF $3 IS NULL THEN
        RAISE EXCEPTION 'fence must not be null' USING ERRCODE = '22004';
    ELSIF $3 <= 0 THEN
        RAISE EXCEPTION 'fence must be positive' USING ERRCODE = '22023';
    END IF;
    -- Only the caller's live tenure with this fence, never a new one; one
    -- under a session is renewed by its keepalive.
    UPDATE simba_mutex AS x
       SET acquired_at = t, ttl_at = lease.ttl_at, transition_at = lease.transition_at, clock_origin = NULL,
           version = x.version + 1
     WHERE x.mutex = $1 AND x.fence = $3 AND x.session_id IS NULL
       AND simba_portable_same(x.owner_id, x.owner_role, x.owner_roleid, x.owner_sysid, $2, c)
       AND x.transition_at > t
    RETURNING x.* INTO m;
    IF FOUND THEN
        RETURN ROW(m.mutex, m.owner_id, m.acquired_at, m.ttl_at, m.transition_at, m.version, m.fence, t,
                   m.owner_role, m.session_id)::simba_owner;
    END IF;
    SELECT * INTO m FROM simba_mutex x WHERE x.mutex = $1;
    IF FOUND THEN
        RETURN simba_portable_owner(m, t);
    END IF;
    RETURN simba_portable_unused($1, t);
END
$$;

-- The caller's live tenure freed (free_row): released; else not, and a
-- late release logged while history is on. Its update waits for a fence
-- check in flight, as the C extension's does, inside a subtransaction
-- rolled back when the caller does not hold the mutex, so a release by
-- anyone else keeps no lock. notify: the setting for the NOTIFY that is
-- the caller's to send (simba_portable_wake).
CREATE FUNCTION simba_portable_release(mutex text, contender text, c simba_portable_caller, t timestamptz,
                                       OUT released boolean, OUT notify text)
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_variable
DECLARE
    history boolean;
    fence bigint;
BEGIN
    released := false;
    BEGIN
        UPDATE simba_mutex AS x
           SET owner_id = NULL, owner_role = NULL, owner_roleid = NULL, owner_sysid = NULL,
               session_id = NULL, acquired_at = NULL, ttl_at = NULL, transition_at = NULL,
               released_at = t, version = x.version + 1
          FROM simba_settings AS s
         WHERE x.mutex = simba_portable_release.mutex
           AND simba_portable_same(x.owner_id, x.owner_role, x.owner_roleid, x.owner_sysid, contender, c)
           AND simba_portable_live(x, t, true)
        RETURNING s.notify, s.history, x.fence INTO notify, history, fence;
        IF FOUND THEN
            released := true;
            IF history THEN
                -- the holder named as it is now (the extension names it as its last renewal did)
                INSERT INTO simba_mutex_history (mutex, event, owner_id, owner_role, fence, at)
                VALUES (mutex, 'released', contender, c.role, fence, pg_catalog.clock_timestamp());
            END IF;
            RETURN;
        END IF;
        RAISE SQLSTATE 'SBP01';
    EXCEPTION WHEN SQLSTATE 'SBP01' THEN
        NULL;
    END;
    IF (SELECT s.history FROM simba_settings AS s) THEN
        PERFORM simba_portable_log_late_release(mutex, contender, c, t);
    END IF;
END
$$;

CREATE FUNCTION simba_release(mutex text, contender_id text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, :"schema", pg_temp
AS $$
DECLARE
    c simba_portable_caller := simba_portable_enter('simba_release', true);
    r record;
    woke boolean;
BEGIN
    IF simba_portable_bad_name($1) THEN
        PERFORM simba_portable_name($1, 'mutex');
    ELSIF simba_portable_bad_name($2) THEN
        PERFORM simba_portable_name($2, 'contender_id');
    END IF;
    r := simba_portable_release($1, $2, c, pg_catalog.clock_timestamp());
    IF r.released THEN
        -- Wakes the waiters (delivered at commit, like NOTIFY).
        woke := simba_portable_wake($1, r.notify);
    END IF;
    RETURN r.released;
END
$$;

CREATE FUNCTION simba_owner(mutex text)
RETURNS simba_owner
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, :"schema", pg_temp
AS $$
DECLARE
    c simba_portable_caller := simba_portable_enter('simba_owner', false);
    t timestamptz;
    m simba_mutex;
BEGIN
    IF simba_portable_bad_name($1) THEN
        PERFORM simba_portable_name($1, 'mutex');
    END IF;
    t := pg_catalog.clock_timestamp();
    SELECT * INTO m FROM simba_mutex x WHERE x.mutex = $1;
    IF FOUND THEN
        RETURN simba_portable_owner(m, t);
    END IF;
    RETURN simba_portable_unused($1, t);
END
$$;

CREATE FUNCTION simba_fence_check(mutex text, contender_id text, fence bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, :"schema", pg_temp
AS $$
DECLARE
    c simba_portable_caller := simba_portable_enter('simba_fence_check', true);
    m simba_mutex;
    t timestamptz;
    ends timestamptz;
BEGIN
    IF simba_portable_bad_name($1) THEN
        PERFORM simba_portable_name($1, 'mutex');
    ELSIF simba_portable_bad_name($2) THEN
        PERFORM simba_portable_name($2, 'contender_id');
    END IF;
    IF $3 IS NULL THEN
        RAISE EXCEPTION 'fence must not be null' USING ERRCODE = '22004';
    ELSIF $3 <= 0 THEN
        RAISE EXCEPTION 'fence must be positive' USING ERRCODE = '22023';
    END IF;
    -- FOR SHARE until the caller's transaction ends: a takeover waits for it.
    SELECT * INTO m FROM simba_mutex x WHERE x.mutex = $1 FOR SHARE;
    ends := CASE WHEN m.session_id IS NULL THEN m.transition_at
                 ELSE COALESCE(simba_session_time(m.session_id, 'transition_at', NULL), m.transition_at) END;
    -- Read after the row lock: the lease must still hold now.
    t := pg_catalog.clock_timestamp();
    IF m.owner_id IS DISTINCT FROM $2 THEN
        RAISE EXCEPTION 'contender "%" does not hold mutex "%"', $2, $1 USING ERRCODE = 'SB001',
            DETAIL = CASE WHEN m.owner_id IS NULL THEN 'The mutex is free.'
                          ELSE pg_catalog.format('It is held by "%s".', m.owner_id) END;
    END IF;
    IF NOT simba_portable_same(m.owner_id, m.owner_role, m.owner_roleid, m.owner_sysid, $2, c) THEN
        RAISE EXCEPTION 'contender "%" of role "%" does not hold mutex "%"', $2, c.role, $1
            USING ERRCODE = 'SB001',
                  DETAIL = CASE WHEN m.owner_role IS NULL
                                THEN pg_catalog.format('It is held by "%s", taken before version 1.3 without a role.', m.owner_id)
                                ELSE pg_catalog.format('It is held by "%s" of role "%s".', m.owner_id, m.owner_role) END,
                  HINT = 'A lease belongs to the role that took it.';
    END IF;
    IF $3 <> m.fence THEN
        RAISE EXCEPTION 'stale fence % for mutex "%"', $3, $1 USING ERRCODE = 'SB002',
            DETAIL = pg_catalog.format('The current fence is %s.', m.fence);
    END IF;
    IF ends <= t THEN
        RAISE EXCEPTION 'lease of contender "%" on mutex "%" has expired', $2, $1 USING ERRCODE = 'SB003',
            DETAIL = pg_catalog.format('It ended at %s.', ends),
            HINT = 'Acquire the mutex again; the new lease gets a new fence.';
    END IF;
END
$$;

-- mutexes checked as simba_name checks one, each once, in byte order.
CREATE FUNCTION simba_portable_names(mutexes text[])
RETURNS text[]
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    names text[];
    dup text;
BEGIN
    IF mutexes IS NULL THEN
        RAISE EXCEPTION 'mutexes must not be null' USING ERRCODE = '22004';
    ELSIF pg_catalog.array_ndims(mutexes) > 1 THEN
        RAISE EXCEPTION 'mutexes must be a one-dimensional array' USING ERRCODE = '2202E';
    ELSIF COALESCE(pg_catalog.cardinality(mutexes), 0) = 0 THEN
        RAISE EXCEPTION 'mutexes must not be empty' USING ERRCODE = '22023';
    ELSIF pg_catalog.cardinality(mutexes) > 1000 THEN
        RAISE EXCEPTION 'mutexes must name at most 1000 mutexes' USING ERRCODE = '54000',
            DETAIL = pg_catalog.format('It names %s.', pg_catalog.cardinality(mutexes));
    ELSIF pg_catalog.array_position(mutexes, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'mutexes must not contain null' USING ERRCODE = '22004';
    ELSIF '' = ANY (mutexes) THEN
        RAISE EXCEPTION 'mutexes must not contain an empty name' USING ERRCODE = '22023';
    END IF;
    PERFORM simba_portable_name(n, 'a mutex name') FROM pg_catalog.unnest(mutexes) AS n;
    SELECT pg_catalog.array_agg(n ORDER BY n COLLATE "C") INTO names FROM pg_catalog.unnest(mutexes) AS n;
    SELECT n INTO dup FROM pg_catalog.unnest(names) AS n GROUP BY n HAVING pg_catalog.count(*) > 1
     ORDER BY n COLLATE "C" LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'mutexes must name each mutex once' USING ERRCODE = '22023',
            DETAIL = pg_catalog.format('"%s" appears more than once.', dup);
    END IF;
    RETURN names;
END
$$;

-- All or nothing (docs/design.md, "Multi-lock"): the members taken one by
-- one in byte order inside a subtransaction rolled back at the first one
-- it cannot take, with the session joined inside it.
CREATE FUNCTION simba_acquire_all(
    mutexes      text[],
    contender_id text,
    ttl          interval DEFAULT '10 seconds',
    transition   interval DEFAULT '6 seconds',
    session_id   uuid     DEFAULT NULL)
RETURNS SETOF simba_owner
LANGUAGE plpgsql VOLATILE SECURITY DEFINER ROWS 10
SET search_path = pg_catalog, :"schema", pg_temp
AS $$
DECLARE
    c simba_portable_caller := simba_portable_enter('simba_acquire_all', true);
    names text[] := simba_portable_names($1);
    t timestamptz := pg_catalog.clock_timestamp();
    st simba_settings;
    lease record;
    took record;
    taken simba_owner[] := '{}';
    n text;
BEGIN
    IF simba_portable_bad_name($2) THEN
        PERFORM simba_portable_name($2, 'contender_id');
    END IF;
    SELECT * INTO st FROM simba_settings;
    lease := simba_portable_lease(t, $3, $4, st.max_lease);
    -- A waiter under a session that finds a member held live loses without the subtransaction.
    IF $5 IS NULL OR NOT EXISTS (SELECT 1 FROM pg_catalog.unnest(names) AS x(name)
                                  WHERE (simba_portable_lost_under_session(x.name, $2, t, c, $5)).mutex IS NOT NULL) THEN
        BEGIN
            IF $5 IS NOT NULL THEN
                lease := simba_portable_join($5, c);
            END IF;
            FOREACH n IN ARRAY names LOOP
                took := simba_portable_take((SELECT x FROM simba_mutex x WHERE x.mutex = n), n, $2, t,
                                            lease.ttl_at, lease.transition_at, c, $5, st.history);
                IF NOT took.won THEN
                    RAISE SQLSTATE 'SBP01';
                END IF;
                taken := taken || took.owner;
            END LOOP;
            RETURN QUERY SELECT * FROM pg_catalog.unnest(taken);
            RETURN;
        EXCEPTION WHEN SQLSTATE 'SBP01' THEN
            NULL;
        END;
    END IF;
    -- Refused: every member as it stands, unchanged by this call.
    RETURN QUERY
        SELECT (CASE WHEN x.mutex IS NULL THEN simba_portable_unused(u.name, t)
                     ELSE simba_portable_owner(x, t) END).*
          FROM pg_catalog.unnest(names) WITH ORDINALITY AS u(name, i)
          LEFT JOIN simba_mutex x ON x.mutex = u.name
         ORDER BY u.i;
END
$$;

CREATE FUNCTION simba_release_all(mutexes text[], contender_id text)
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, :"schema", pg_temp
AS $$
DECLARE
    c simba_portable_caller := simba_portable_enter('simba_release_all', true);
    names text[] := simba_portable_names($1);
    t timestamptz := pg_catalog.clock_timestamp();
    released text[] := '{}';
    notify text;
    r record;
    n text;
    woke boolean;
BEGIN
    IF simba_portable_bad_name($2) THEN
        PERFORM simba_portable_name($2, 'contender_id');
    END IF;
    FOREACH n IN ARRAY names LOOP
        r := simba_portable_release(n, $2, c, t);
        IF r.released THEN
            released := released || n;
            notify := r.notify;
        END IF;
    END LOOP;
    -- One NOTIFY per mutex released, as simba_release sends.
    FOREACH n IN ARRAY released LOOP
        woke := simba_portable_wake(n, notify);
    END LOOP;
    RETURN pg_catalog.cardinality(released);
END
$$;
