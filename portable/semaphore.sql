-- Counting semaphores with leased, fenced permits (semaphore.c; docs/design.md,
-- "Row locks"). Grants of a key are serialized by its key row, waited for
-- at most 1 s (55P03 then: a grant left in an open transaction holds it);
-- a grant locks the key's expired permit rows with SKIP LOCKED and counts
-- a row another transaction holds locked as taken, so it never
-- over-allocates and never waits for a holder. A grant of nothing rolls
-- back its subtransaction and keeps no lock. A refresh and a fence check
-- lock only the caller's own permit row, then read the clock.

-- SIMBA_PERMIT_LIVE: by its own lease or its session's; lock: an ended
-- session's row FOR SHARE.
CREATE FUNCTION simba_portable_permit_live(p simba_semaphore_permit, t timestamptz, lock boolean)
RETURNS boolean
LANGUAGE sql VOLATILE
AS $$
SELECT CASE WHEN p.session_id IS NULL THEN p.expires_at > t
            ELSE NOT simba_session_ended(p.session_id, t, NULL, lock) END
$$;

CREATE FUNCTION simba_portable_token(token uuid)
RETURNS uuid
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF token IS NULL THEN
        RAISE EXCEPTION 'token must not be null' USING ERRCODE = '22004';
    END IF;
    RETURN token;
END
$$;

CREATE FUNCTION simba_semaphore_acquire(
    key        text,
    holder     text,
    permits    integer,
    ttl        interval DEFAULT '10 seconds',
    context    text     DEFAULT NULL,
    session_id uuid     DEFAULT NULL)
RETURNS simba_permit
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, :"schema", pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    c simba_portable_caller := simba_portable_enter('simba_semaphore_acquire', true);
    t timestamptz;
    expires timestamptz;
    session_lease record;
    st simba_settings;
    lock_timeout text := pg_catalog.current_setting('lock_timeout');
    waiting_for_key boolean := false;
    reusable integer[];
    slots bigint;
    next_slot integer;
    granted simba_permit;
BEGIN
    IF simba_portable_bad_name($1) THEN
        PERFORM simba_portable_name($1, 'key');
    ELSIF simba_portable_bad_name($2) THEN
        PERFORM simba_portable_name($2, 'holder');
    END IF;
    IF simba_portable_bad_duration($4, false) THEN
        PERFORM simba_portable_duration($4, 'ttl', false);
    END IF;
    IF $3 IS NULL THEN
        RAISE EXCEPTION 'permits must not be null' USING ERRCODE = '22004';
    ELSIF $3 < 1 OR $3 > 10000 THEN
        RAISE EXCEPTION 'permits must be between 1 and 10000' USING ERRCODE = '22023';
    ELSIF pg_catalog.length($5) > 256 THEN
        RAISE EXCEPTION 'context must be at most 256 characters' USING ERRCODE = '22023',
            DETAIL = pg_catalog.format('It has %s characters.', pg_catalog.length($5));
    END IF;
    SELECT * INTO st FROM simba_settings;
    session_lease := simba_portable_lease(pg_catalog.clock_timestamp(), $4, interval '0', st.max_lease);
    BEGIN
        -- Under a session: it lives as long as the session.
        IF $6 IS NOT NULL THEN
            session_lease := simba_portable_join($6, c);
        END IF;
        -- The key row, made on first use (a concurrent creator wins), waited
        -- for at most 1 s or the caller's shorter lock_timeout.
        IF pg_catalog.current_setting('lock_timeout') IN ('0', '0ms')
           OR pg_catalog.current_setting('lock_timeout')::interval > interval '1 s' THEN
            PERFORM pg_catalog.set_config('lock_timeout', '1s', true);
        END IF;
        waiting_for_key := true;
        LOOP
            UPDATE simba_semaphore AS s SET permits = $3 WHERE s.key = $1;
            EXIT WHEN FOUND;
            INSERT INTO simba_semaphore AS s (key, permits) VALUES ($1, $3) ON CONFLICT DO NOTHING;
        END LOOP;
        waiting_for_key := false;
        PERFORM pg_catalog.set_config('lock_timeout', lock_timeout, true);
        -- The clock after the lock: every earlier grant is visible now.
        t := pg_catalog.clock_timestamp();
        -- The key's expired slots that no other transaction holds, locked, lowest first.
        SELECT pg_catalog.array_agg(x.slot ORDER BY x.slot) INTO reusable
          FROM (SELECT p.slot FROM simba_semaphore_permit AS p
                 WHERE p.key = $1 AND NOT simba_portable_permit_live(p, t, true)
                 ORDER BY p.slot FOR UPDATE OF p SKIP LOCKED) AS x;
        SELECT pg_catalog.count(*), COALESCE(pg_catalog.max(p.slot) + 1, 0) INTO slots, next_slot
          FROM simba_semaphore_permit AS p WHERE p.key = $1;
        IF slots - COALESCE(pg_catalog.cardinality(reusable), 0) >= $3 THEN
            RAISE SQLSTATE 'SBP01';
        END IF;
        IF $6 IS NULL THEN
            expires := t + $4;
        ELSE
            expires := session_lease.transition_at;
        END IF;
        -- Take over the lowest expired slot, or open the next one.
        IF reusable IS NOT NULL THEN
            UPDATE simba_semaphore_permit AS p
               SET holder = $2, holder_role = c.role, holder_roleid = c.roleid, holder_sysid = c.sysid,
                   context = $5, session_id = $6, acquired_at = t, renewed_at = t, expires_at = expires,
                   clock_origin = NULL, token = pg_catalog.gen_random_uuid(),
                   fence = pg_catalog.nextval('simba_permit_fence')
             WHERE p.key = $1 AND p.slot = reusable[1]
            RETURNING p.key, p.slot, p.token, p.fence, p.expires_at INTO granted;
        ELSE
            INSERT INTO simba_semaphore_permit AS p (key, slot, holder, holder_role, holder_roleid, holder_sysid,
                                                     context, acquired_at, renewed_at, expires_at, session_id,
                                                     token, fence)
            VALUES ($1, next_slot, $2, c.role, c.roleid, c.sysid, $5, t, t, expires, $6,
                    pg_catalog.gen_random_uuid(), pg_catalog.nextval('simba_permit_fence'))
            RETURNING p.key, p.slot, p.token, p.fence, p.expires_at INTO granted;
        END IF;
        RETURN granted;
    EXCEPTION
        WHEN SQLSTATE 'SBP01' THEN
            RETURN NULL;
        WHEN lock_not_available THEN
            IF NOT waiting_for_key THEN
                RAISE;
            END IF;
            -- Rolled back already: say which wait it was.
            RAISE EXCEPTION 'could not grant a permit of key "%": another transaction holds the key', $1
                USING ERRCODE = '55P03',
                      DETAIL = 'A permit granted in a transaction that is still open keeps its key until that transaction ends; grants wait for it at most 1000 ms.',
                      HINT = 'Acquire permits in autocommit, or retry.';
    END;
END
$$;

CREATE FUNCTION simba_semaphore_refresh(key text, token uuid, ttl interval)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, :"schema", pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    c simba_portable_caller := simba_portable_enter('simba_semaphore_refresh', true);
    t timestamptz;
BEGIN
    IF simba_portable_bad_name($1) THEN
        PERFORM simba_portable_name($1, 'key');
    ELSIF $2 IS NULL THEN
        PERFORM simba_portable_token($2);
    ELSIF simba_portable_bad_duration($3, false) THEN
        PERFORM simba_portable_duration($3, 'ttl', false);
    END IF;
    PERFORM simba_portable_lease(pg_catalog.clock_timestamp(), $3, interval '0',
                                 (SELECT s.max_lease FROM simba_settings s));
    -- The clock after the row lock: a grant that took the slot first has changed the token.
    PERFORM 1 FROM simba_semaphore_permit AS p
     WHERE p.key = $1 AND p.token = $2
       AND simba_portable_same_role(p.holder_role, p.holder_roleid, p.holder_sysid, c)
       FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    t := pg_catalog.clock_timestamp();
    -- Under a session, nothing changes: it answers whether the permit is live.
    UPDATE simba_semaphore_permit AS p
       SET expires_at = CASE WHEN p.session_id IS NULL THEN t + $3 ELSE p.expires_at END,
           renewed_at = CASE WHEN p.session_id IS NULL THEN t ELSE p.renewed_at END,
           clock_origin = CASE WHEN p.session_id IS NULL THEN NULL ELSE p.clock_origin END
     WHERE p.key = $1 AND p.token = $2
       AND simba_portable_same_role(p.holder_role, p.holder_roleid, p.holder_sysid, c)
       AND simba_portable_permit_live(p, t, true);
    RETURN FOUND;
END
$$;

CREATE FUNCTION simba_semaphore_release(key text, token uuid)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, :"schema", pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    c simba_portable_caller := simba_portable_enter('simba_semaphore_release', true);
    t timestamptz := pg_catalog.clock_timestamp();
    woke boolean;
BEGIN
    IF simba_portable_bad_name($1) THEN
        PERFORM simba_portable_name($1, 'key');
    ELSIF $2 IS NULL THEN
        PERFORM simba_portable_token($2);
    END IF;
    -- Release only shortens a permit.
    UPDATE simba_semaphore_permit AS p
       SET expires_at = t, renewed_at = t, clock_origin = NULL, session_id = NULL
     WHERE p.key = $1 AND p.token = $2
       AND simba_portable_same_role(p.holder_role, p.holder_roleid, p.holder_sysid, c)
       AND simba_portable_permit_live(p, t, true);
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    -- Wakes the waiters (delivered at commit, like NOTIFY).
    woke := simba_portable_wake($1, (SELECT s.notify FROM simba_settings s));
    RETURN true;
END
$$;

CREATE FUNCTION simba_semaphore_fence_check(key text, token uuid, fence bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, :"schema", pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    c simba_portable_caller := simba_portable_enter('simba_semaphore_fence_check', true);
    current_fence bigint;
    expires timestamptz;
    t timestamptz;
BEGIN
    IF simba_portable_bad_name($1) THEN
        PERFORM simba_portable_name($1, 'key');
    ELSIF $2 IS NULL THEN
        PERFORM simba_portable_token($2);
    END IF;
    IF $3 IS NULL THEN
        RAISE EXCEPTION 'fence must not be null' USING ERRCODE = '22004';
    ELSIF $3 <= 0 THEN
        RAISE EXCEPTION 'fence must be positive' USING ERRCODE = '22023';
    END IF;
    -- Its row FOR SHARE: its slot is not granted again until the caller's transaction ends.
    SELECT p.fence, COALESCE(simba_session_time(p.session_id, 'transition_at', NULL), p.expires_at)
      INTO current_fence, expires
      FROM simba_semaphore_permit AS p
     WHERE p.key = $1 AND p.token = $2
       AND simba_portable_same_role(p.holder_role, p.holder_roleid, p.holder_sysid, c)
       FOR SHARE OF p;
    t := pg_catalog.clock_timestamp();
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the token holds no permit of key "%"', $1 USING ERRCODE = 'SB001',
            DETAIL = 'The permit was taken over after it expired, never existed, or belongs to another role.';
    END IF;
    IF $3 <> current_fence THEN
        RAISE EXCEPTION 'stale fence % for the permit of key "%"', $3, $1 USING ERRCODE = 'SB002',
            DETAIL = pg_catalog.format('The permit''s fence is %s.', current_fence);
    END IF;
    IF expires <= t THEN
        RAISE EXCEPTION 'the permit of key "%" has expired', $1 USING ERRCODE = 'SB003',
            DETAIL = pg_catalog.format('It ended at %s.', expires),
            HINT = 'Acquire a new permit; it gets a new token and fence.';
    END IF;
END
$$;

-- Keys with no live permit removed; a key being granted right now is skipped.
CREATE FUNCTION simba_semaphore_gc()
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, :"schema", pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    k text;
    removed bigint := 0;
BEGIN
    PERFORM simba_portable_enter('simba_semaphore_gc', true);
    FOR k IN SELECT s.key FROM simba_semaphore AS s ORDER BY s.key LOOP
        PERFORM 1 FROM simba_semaphore AS s WHERE s.key = k FOR UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        DELETE FROM simba_semaphore AS s
         WHERE s.key = k
           AND NOT EXISTS (SELECT 1 FROM simba_semaphore_permit AS p
                            WHERE p.key = k AND simba_portable_permit_live(p, pg_catalog.clock_timestamp(), true));
        IF FOUND THEN
            removed := removed + 1;
        END IF;
    END LOOP;
    RETURN removed;
END
$$;
