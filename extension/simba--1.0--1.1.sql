-- simba 1.0 -> 1.1: counting semaphores with leased, fenced permits.
--
-- Design: simba_semaphore has one row per key (the limit last asked for);
-- simba_semaphore_permit one row per slot. A grant takes a free or expired
-- slot, a fresh random token and the next fence from simba_permit_fence
-- (one sequence, so fences keep growing per key even after simba_semaphore_gc
-- removed the key). Rows are written only by the functions (semaphore.c).
--
-- Locking: a grant locks its key row FOR NO KEY UPDATE, then counts live
-- permits with a snapshot taken after that lock: grants on one key are
-- serialized (for the length of one call in autocommit), so they never
-- over-allocate. Refresh and fence check lock the key row FOR SHARE, so
-- they order against grants too: a permit refreshed or fenced by its holder
-- is never counted as expired by a concurrent grant. Release only shortens
-- a permit and needs no key lock.

\echo Use "ALTER EXTENSION simba UPDATE TO '1.1'" to load this file. \quit

CREATE SEQUENCE @extschema@.simba_permit_fence;
COMMENT ON SEQUENCE @extschema@.simba_permit_fence IS
  'simba: fences of semaphore permits, strictly increasing across grants and keys';

CREATE TABLE @extschema@.simba_semaphore (
    key     text    PRIMARY KEY,
    permits integer NOT NULL
);
COMMENT ON TABLE @extschema@.simba_semaphore IS
  'simba: one row per semaphore key, with the limit of the latest acquire. Written only by the simba_semaphore_* functions.';

CREATE TABLE @extschema@.simba_semaphore_permit (
    key         text        NOT NULL REFERENCES @extschema@.simba_semaphore ON DELETE CASCADE,
    slot        integer     NOT NULL,
    holder      text        NOT NULL,
    token       uuid        NOT NULL UNIQUE,
    fence       bigint      NOT NULL,
    context     text,
    acquired_at timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (key, slot)
) WITH (fillfactor = 70);  -- refreshes rewrite the row: leave room for HOT updates
COMMENT ON TABLE @extschema@.simba_semaphore_permit IS
  'simba: one row per permit slot; live while expires_at > now. Written only by the simba_semaphore_* functions.';

SELECT pg_catalog.pg_extension_config_dump('@extschema@.simba_semaphore', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.simba_semaphore_permit', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.simba_permit_fence', '');

CREATE TYPE @extschema@.simba_permit AS (
    key        text,
    slot       integer,
    token      uuid,
    fence      bigint,
    expires_at timestamptz
);
COMMENT ON TYPE @extschema@.simba_permit IS
  'simba: a granted permit; the token proves it (refresh, release, fence check)';

CREATE FUNCTION @extschema@.simba_semaphore_acquire(
    key     text,
    holder  text,
    permits integer,
    ttl     interval DEFAULT '10 seconds',
    context text DEFAULT NULL)
RETURNS @extschema@.simba_permit
AS 'MODULE_PATHNAME', 'simba_semaphore_acquire'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.simba_semaphore_acquire(text, text, integer, interval, text) IS
  'simba: a permit of key if fewer than permits are live, else NULL; never waits for other acquirers beyond one call';

CREATE FUNCTION @extschema@.simba_semaphore_refresh(key text, token uuid, ttl interval)
RETURNS boolean
AS 'MODULE_PATHNAME', 'simba_semaphore_refresh'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.simba_semaphore_refresh(text, uuid, interval) IS
  'simba: extend a live permit to now + ttl; false once it expired or was taken over';

CREATE FUNCTION @extschema@.simba_semaphore_release(key text, token uuid)
RETURNS boolean
AS 'MODULE_PATHNAME', 'simba_semaphore_release'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.simba_semaphore_release(text, uuid) IS
  'simba: give a live permit back and NOTIFY simba with the key; false for an expired, taken-over or unknown token';

CREATE FUNCTION @extschema@.simba_semaphore_fence_check(key text, token uuid, fence bigint)
RETURNS void
AS 'MODULE_PATHNAME', 'simba_semaphore_fence_check'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.simba_semaphore_fence_check(text, uuid, bigint) IS
  'simba: error (SB001 not holder, SB002 stale fence, SB003 expired) unless the token holds a live permit with this fence; blocks new grants of the key until the calling transaction ends';

CREATE FUNCTION @extschema@.simba_semaphore_gc()
RETURNS bigint
AS 'MODULE_PATHNAME', 'simba_semaphore_gc'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.simba_semaphore_gc() IS
  'simba: remove the rows of keys that have no live permit; returns how many keys it removed';

CREATE VIEW @extschema@.simba_semaphore_status AS
SELECT p.key, p.slot, p.holder, p.context, p.acquired_at, p.expires_at,
       p.expires_at - c.now AS time_left, p.fence, s.permits
  FROM @extschema@.simba_semaphore_permit p
  JOIN @extschema@.simba_semaphore s USING (key)
 CROSS JOIN (SELECT pg_catalog.clock_timestamp() AS now) c
 WHERE p.expires_at > c.now;
COMMENT ON VIEW @extschema@.simba_semaphore_status IS
  'simba: every live permit now, with the limit of its key (permits)';

-- simba_grant/simba_revoke now cover the semaphore too, from one list.
CREATE FUNCTION @extschema@.simba_set_privileges(role regrole, allow boolean)
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
        ' %3$s SELECT ON %1$I.simba_mutex_status, %1$I.simba_semaphore_status %4$s %2$s',
        @extschema@.simba_schema(), role, verb, dir);
    IF allow THEN
        EXECUTE pg_catalog.format('GRANT USAGE ON SCHEMA %I TO %s', @extschema@.simba_schema(), role);
    END IF;
END
$$;
COMMENT ON FUNCTION @extschema@.simba_set_privileges(regrole, boolean) IS
  'simba: what simba_grant (allow) and simba_revoke (not allow) do';

CREATE OR REPLACE FUNCTION @extschema@.simba_grant(role regrole)
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$ SELECT @extschema@.simba_set_privileges(role, true) $$;

CREATE OR REPLACE FUNCTION @extschema@.simba_revoke(role regrole)
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$ SELECT @extschema@.simba_set_privileges(role, false) $$;

-- Nothing for PUBLIC (see simba--1.0.sql); gc is for the DBA or a cron job.
REVOKE ALL ON TABLE @extschema@.simba_semaphore, @extschema@.simba_semaphore_permit,
    @extschema@.simba_semaphore_status FROM PUBLIC;
REVOKE ALL ON SEQUENCE @extschema@.simba_permit_fence FROM PUBLIC;
REVOKE ALL ON FUNCTION
    @extschema@.simba_semaphore_acquire(text, text, integer, interval, text),
    @extschema@.simba_semaphore_refresh(text, uuid, interval),
    @extschema@.simba_semaphore_release(text, uuid),
    @extschema@.simba_semaphore_fence_check(text, uuid, bigint),
    @extschema@.simba_semaphore_gc(),
    @extschema@.simba_set_privileges(regrole, boolean)
  FROM PUBLIC;
