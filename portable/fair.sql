-- The fair (FIFO) lock (fair.c; docs/design.md, "Multi-lock and
-- read-write lock"): a mutex plus a queue of entries with their own lease.
-- A call decides in a subtransaction kept only when the caller ends up
-- holding the mutex; a waiter rolls it back, so it keeps no lock on the
-- mutex row, and then writes or renews only its own entry.

-- The channel a waiter is woken on: "simba_fair_" and 16 hex digits of the
-- MD5 of its mutex, contender id and role name, as the C extension names it.
CREATE FUNCTION simba_portable_wake_channel(mutex text, contender text, role name)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
SELECT 'simba_fair_' || pg_catalog.left(pg_catalog.md5(mutex || pg_catalog.chr(1) || contender
                                                      || pg_catalog.chr(1) || role), 16)
$$;

-- The head of each of the mutexes' queues woken on its channel (simba_fair_wake).
CREATE FUNCTION simba_portable_fair_wake(mutexes text[], t timestamptz)
RETURNS void
LANGUAGE sql VOLATILE
AS $$
SELECT pg_catalog.pg_notify(simba_portable_wake_channel(r.mutex, h.owner_id, h.owner_role), r.mutex)
  FROM pg_catalog.unnest(mutexes) AS r(mutex),
       LATERAL (SELECT q.owner_id, q.owner_role FROM simba_mutex_queue AS q
                 WHERE q.mutex = r.mutex AND q.transition_at > t
                 ORDER BY q.enqueued_at, q.owner_id LIMIT 1) AS h
$$;

-- Lapsed entries dropped; one another transaction holds locked is left to
-- it (its waiter renewing it).
CREATE FUNCTION simba_portable_drop_lapsed(mutex text, t timestamptz)
RETURNS void
LANGUAGE sql VOLATILE
AS $$
DELETE FROM simba_mutex_queue AS d
 WHERE d.ctid = ANY (ARRAY(SELECT q.ctid FROM simba_mutex_queue AS q
                            WHERE q.mutex = $1 AND q.transition_at <= t FOR UPDATE SKIP LOCKED))
   AND d.mutex = $1
$$;

-- The caller's place in the queue: its entry (ctid), how many live entries
-- are ahead of it (all, if it has none), and the first entry not its own:
-- whom a release hands the mutex to (on the lease its entry records) and wakes.
CREATE TYPE simba_portable_place AS (queued boolean, tid tid, ahead integer, next_id text, next_role name,
                                     next_tid tid, next_caller simba_portable_caller, next_ttl interval,
                                     next_transition interval, next_session uuid, next_ends timestamptz);

CREATE FUNCTION simba_portable_place(mutex text, contender text, c simba_portable_caller, t timestamptz)
RETURNS simba_portable_place
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    p simba_portable_place := ROW(false, NULL, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
    q record;
BEGIN
    FOR q IN SELECT * FROM (SELECT e.ctid, e.owner_id = contender
                                   AND simba_portable_same_role(e.owner_role, e.owner_roleid, e.owner_sysid, c) AS mine,
                                   e.owner_id, e.owner_role, e.enqueued_at, e.transition_at > t AS live,
                                   ROW(e.owner_role, e.owner_roleid, e.owner_sysid)::simba_portable_caller AS caller,
                                   e.ttl, e.transition, e.session_id, e.transition_at AS ends
                              FROM simba_mutex_queue AS e WHERE e.mutex = $1) AS e
              WHERE e.mine OR e.live ORDER BY e.enqueued_at, e.owner_id LOOP
        IF NOT p.queued AND q.mine THEN
            p.queued := true;
            p.tid := q.ctid;
            CONTINUE;
        END IF;
        IF NOT p.queued THEN
            p.ahead := p.ahead + 1;
        END IF;
        IF p.next_id IS NULL THEN
            p.next_id := q.owner_id;
            p.next_role := q.owner_role;
            p.next_tid := q.ctid;
            p.next_caller := q.caller;
            p.next_ttl := q.ttl;
            p.next_transition := q.transition;
            p.next_session := q.session_id;
            p.next_ends := q.ends;
        END IF;
    END LOOP;
    RETURN p;
END
$$;

-- In the release's transaction: the mutex the caller freed goes to the head
-- of its queue on the lease its entry asked for, from t (under its session:
-- the session's), and its entry goes. A head whose session has ended (or is
-- not its role's) is only woken: its next call gets SB004 and asks again
-- under a new session, keeping its place (hand_over, fair.c). False when its
-- entry was gone, withdrawn by a transaction that committed meanwhile: the
-- next head's turn.
CREATE FUNCTION simba_portable_hand_over(mutex text, place simba_portable_place, t timestamptz)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    -- a lease of its own ends with its entry at the latest (hand_over, fair.c)
    transition_at timestamptz := LEAST(t + place.next_ttl + place.next_transition, place.next_ends);
    ttl_at timestamptz := LEAST(t + place.next_ttl, transition_at);
BEGIN
    IF place.next_ttl IS NULL OR place.next_transition IS NULL OR
       (place.next_session IS NULL AND transition_at <= t) THEN
        RETURN true;
    END IF;
    IF place.next_session IS NOT NULL THEN
        SELECT s.ttl_at, s.transition_at INTO ttl_at, transition_at
          FROM simba_session_lease AS s
         WHERE s.session_id = place.next_session
           AND simba_portable_same_role(s.owner_role, s.owner_roleid, s.owner_sysid, place.next_caller)
           FOR KEY SHARE;
        IF NOT FOUND OR transition_at <= pg_catalog.clock_timestamp() THEN
            RETURN true;
        END IF;
    END IF;
    -- Its entry first: a withdrawal deletes it too, and whichever deletes first decides.
    DELETE FROM simba_mutex_queue AS q WHERE q.ctid = place.next_tid AND q.mutex = $1;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM simba_portable_take((SELECT x FROM simba_mutex x WHERE x.mutex = $1), $1, place.next_id, t,
                                ttl_at, transition_at, place.next_caller, place.next_session,
                                (SELECT s.history FROM simba_settings AS s));
    RETURN true;
END
$$;

CREATE FUNCTION simba_fair_acquire(
    mutex        text,
    contender_id text,
    ttl          interval DEFAULT '10 seconds',
    transition   interval DEFAULT '6 seconds',
    session_id   uuid     DEFAULT NULL)
RETURNS simba_fair_owner
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, :"schema", pg_temp
AS $$
DECLARE
    c simba_portable_caller := simba_portable_enter('simba_fair_acquire', true);
    t timestamptz := pg_catalog.clock_timestamp();
    lease record;
    entry_end timestamptz;
    place simba_portable_place;
    st simba_settings;
    took record;
    holds boolean;
    o simba_owner;
BEGIN
    IF simba_portable_bad_name($1) THEN
        PERFORM simba_portable_name($1, 'mutex');
    ELSIF simba_portable_bad_name($2) THEN
        PERFORM simba_portable_name($2, 'contender_id');
    END IF;
    SELECT * INTO st FROM simba_settings;
    lease := simba_portable_lease(t, $3, $4, st.max_lease);
    entry_end := lease.transition_at;  -- the queue entry's own lease, under a session too
    -- The head a release handed the mutex to, or a holder re-checking, under
    -- its session: the row as it stands, read without a lock, nothing written.
    IF $5 IS NOT NULL AND EXISTS (
        SELECT 1 FROM simba_mutex AS m
         WHERE m.mutex = $1 AND m.session_id = $5 AND simba_portable_live(m, t, false)
           AND simba_portable_same(m.owner_id, m.owner_role, m.owner_roleid, m.owner_sysid, $2, c)) THEN
        o := simba_owner($1);
        RETURN ROW(o.mutex, o.owner_id, o.acquired_at, o.ttl_at, o.transition_at, o.version, o.fence,
                   o.current_at, o.owner_role, o.session_id, NULL,
                   simba_portable_wake_channel($1, $2, c.role))::simba_fair_owner;
    END IF;
    -- Entries judged at t, read before the lock: one may count as live a little longer, never shorter.
    PERFORM simba_portable_drop_lapsed($1, t);
    BEGIN
        -- Under a session, its row first (as simba_acquire): a tenure taken lives with it.
        IF $5 IS NOT NULL THEN
            lease := simba_portable_join($5, c);
        END IF;
        -- The mutex row, locked (made on first use): one fair decision at a time.
        LOOP
            SELECT simba_portable_live(m, t, false)
                   AND simba_portable_same(m.owner_id, m.owner_role, m.owner_roleid, m.owner_sysid, $2, c)
              INTO holds
              FROM simba_mutex AS m WHERE m.mutex = $1 FOR UPDATE;
            EXIT WHEN FOUND;
            INSERT INTO simba_mutex AS m (mutex) VALUES ($1) ON CONFLICT DO NOTHING;
        END LOOP;
        place := simba_portable_place($1, $2, c, t);
        -- The holder renews; the head (or anyone, with nobody queued ahead) takes a free mutex.
        IF COALESCE(holds, false) OR place.ahead = 0 THEN
            took := simba_portable_take((SELECT x FROM simba_mutex x WHERE x.mutex = $1), $1, $2, t,
                                        lease.ttl_at, lease.transition_at, c, $5, st.history);
            IF took.won THEN
                -- Its turn came: it leaves the queue.
                IF place.queued THEN
                    DELETE FROM simba_mutex_queue AS q WHERE q.ctid = place.tid AND q.mutex = $1;
                END IF;
                o := took.owner;
                RETURN ROW(o.mutex, o.owner_id, o.acquired_at, o.ttl_at, o.transition_at, o.version, o.fence,
                           o.current_at, o.owner_role, o.session_id, NULL,
                           simba_portable_wake_channel($1, $2, c.role))::simba_fair_owner;
            END IF;
        END IF;
        RAISE SQLSTATE 'SBP01';
    EXCEPTION WHEN SQLSTATE 'SBP01' THEN
        NULL;
    END;
    -- Its entry, written or renewed in its place (dropped meanwhile as lapsed: written anew).
    -- with the lease a release hands it: its ttl and transition, or its session
    IF place.queued THEN
        UPDATE simba_mutex_queue AS q
           SET owner_role = c.role, owner_roleid = c.roleid, owner_sysid = c.sysid, renewed_at = t,
               transition_at = entry_end, clock_origin = NULL, ttl = $3, transition = $4, session_id = $5
         WHERE q.ctid = place.tid AND q.mutex = $1 AND q.owner_id = $2;
    END IF;
    IF NOT place.queued OR NOT FOUND THEN
        INSERT INTO simba_mutex_queue (mutex, owner_id, owner_role, owner_roleid, owner_sysid, enqueued_at,
                                       renewed_at, transition_at, ttl, transition, session_id)
        VALUES ($1, $2, c.role, c.roleid, c.sysid, t, t, entry_end, $3, $4, $5);
    END IF;
    o := simba_owner($1);
    RETURN ROW(o.mutex, o.owner_id, o.acquired_at, o.ttl_at, o.transition_at, o.version, o.fence,
               o.current_at, o.owner_role, o.session_id, place.ahead + 1,
               simba_portable_wake_channel($1, $2, c.role))::simba_fair_owner;
END
$$;

CREATE FUNCTION simba_fair_release(mutex text, contender_id text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, :"schema", pg_temp
AS $$
DECLARE
    c simba_portable_caller := simba_portable_enter('simba_fair_release', true);
    t timestamptz := pg_catalog.clock_timestamp();
    released boolean;
    place simba_portable_place;
BEGIN
    IF simba_portable_bad_name($1) THEN
        PERFORM simba_portable_name($1, 'mutex');
    ELSIF simba_portable_bad_name($2) THEN
        PERFORM simba_portable_name($2, 'contender_id');
    END IF;
    PERFORM simba_portable_drop_lapsed($1, t);
    -- A waiter that gives up leaves the queue (its place goes to the next).
    -- Before the release: a release handing it the mutex deletes its entry,
    -- so this waits for that one, and the release below sees what it got.
    place := simba_portable_place($1, $2, c, t);
    IF place.queued THEN
        DELETE FROM simba_mutex_queue AS q WHERE q.ctid = place.tid AND q.mutex = $1;
    END IF;
    released := (simba_portable_release($1, $2, c, t)).released;
    -- Whose turn it is now has the mutex, if the caller freed it, and is woken; nobody else is.
    -- (at most 16 heads withdrawn meanwhile passed over, as fair.c)
    IF released THEN
        FOR tries IN 1..16 LOOP
            EXIT WHEN place.next_id IS NULL;
            EXIT WHEN simba_portable_hand_over($1, place, t);
            place := simba_portable_place($1, $2, c, t);
        END LOOP;
    END IF;
    IF place.next_id IS NOT NULL AND (released OR (place.queued AND place.ahead = 0)) THEN
        PERFORM pg_catalog.pg_notify(simba_portable_wake_channel($1, place.next_id, place.next_role), $1);
    END IF;
    RETURN released;
END
$$;
