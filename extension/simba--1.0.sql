-- simba: leased mutexes with fencing tokens (install script).
--
-- Design: one row per mutex in simba_mutex holds the current lease (owner,
-- acquired_at, ttl_at, transition_at) and two counters: version (+1 on every
-- change) and fence (+1 whenever the mutex changes hands, kept on renewal).
-- Every state change is one call into C (mutex.c) that runs a saved plan;
-- times come from the server clock at the call, never from the client.
--
-- Locking: acquire/renew/release update the row (row lock for the update
-- only); simba_fence_check takes the row FOR SHARE in the caller's own
-- transaction, so a takeover waits until that transaction ends.
--
-- Privileges: nothing is granted to PUBLIC. Any role that may take a lock can
-- stall every process waiting on it, so a DBA grants that on purpose with
-- simba_grant(role). The write functions are SECURITY DEFINER with a pinned
-- search_path; the table itself is written only through them.

\echo Use "CREATE EXTENSION simba" to load this file. \quit

CREATE TABLE @extschema@.simba_mutex (
    mutex         text        PRIMARY KEY,
    owner_id      text,
    acquired_at   timestamptz,
    ttl_at        timestamptz,
    transition_at timestamptz,
    version       bigint      NOT NULL DEFAULT 0,
    fence         bigint      NOT NULL DEFAULT 0
) WITH (fillfactor = 50);  -- room for HOT updates: every renewal rewrites the row
COMMENT ON TABLE @extschema@.simba_mutex IS
  'simba: one row per mutex; owner_id NULL = free. Written only by the simba_* functions. Rows are never deleted by simba, so fences are never reused.';

-- Fences must survive dump and restore, or a restored database could reissue them.
SELECT pg_catalog.pg_extension_config_dump('@extschema@.simba_mutex', '');

CREATE TYPE @extschema@.simba_owner AS (
    mutex         text,
    owner_id      text,
    acquired_at   timestamptz,
    ttl_at        timestamptz,
    transition_at timestamptz,
    version       bigint,
    fence         bigint,
    current_at    timestamptz
);
COMMENT ON TYPE @extschema@.simba_owner IS
  'simba: a mutex''s lease as seen at current_at (server time of the decision); owner_id NULL = free';

CREATE FUNCTION @extschema@.simba_acquire(
    mutex        text,
    contender_id text,
    ttl          interval DEFAULT '10 seconds',
    transition   interval DEFAULT '6 seconds')
RETURNS @extschema@.simba_owner
AS 'MODULE_PATHNAME', 'simba_acquire'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.simba_acquire(text, text, interval, interval) IS
  'simba: acquire the mutex when free or past transition_at, renew it when already owner; returns the owner after the attempt';

CREATE FUNCTION @extschema@.simba_release(mutex text, contender_id text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'simba_release'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.simba_release(text, text) IS
  'simba: release the mutex if the caller holds it (true), NOTIFY simba with the mutex name; false and no change otherwise';

CREATE FUNCTION @extschema@.simba_owner(mutex text)
RETURNS @extschema@.simba_owner
AS 'MODULE_PATHNAME', 'simba_owner'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.simba_owner(text) IS
  'simba: the current owner, no change; owner_id NULL when free, expired or unknown';

CREATE FUNCTION @extschema@.simba_fence_check(mutex text, contender_id text, fence bigint)
RETURNS void
AS 'MODULE_PATHNAME', 'simba_fence_check'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.simba_fence_check(text, text, bigint) IS
  'simba: error (SB001 not owner, SB002 stale fence, SB003 lease expired) unless the caller holds the mutex with this fence; locks the row FOR SHARE until the calling transaction ends';

CREATE VIEW @extschema@.simba_mutex_status AS
SELECT m.mutex,
       CASE WHEN m.transition_at > c.now THEN m.owner_id END AS owner_id,
       CASE WHEN m.owner_id IS NULL OR NOT m.transition_at > c.now THEN 'free'
            WHEN m.ttl_at > c.now THEN 'held'
            ELSE 'transition' END AS state,
       m.acquired_at,
       m.ttl_at,
       m.transition_at,
       CASE WHEN m.transition_at > c.now THEN m.transition_at - c.now END AS time_left,
       m.fence,
       m.version
  FROM @extschema@.simba_mutex m
 CROSS JOIN (SELECT pg_catalog.clock_timestamp() AS now) c;
COMMENT ON VIEW @extschema@.simba_mutex_status IS
  'simba: every mutex now: state held (in ttl), transition (owner may renew, others wait) or free; time_left until others may take it';

-- Granting on purpose (see the header): one call per application role.
CREATE FUNCTION @extschema@.simba_schema()
RETURNS name
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT n.nspname FROM pg_catalog.pg_extension e
      JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
     WHERE e.extname = 'simba'
$$;
COMMENT ON FUNCTION @extschema@.simba_schema() IS
  'simba: the schema the extension is installed in';

CREATE FUNCTION @extschema@.simba_grant(role regrole)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    EXECUTE pg_catalog.format(
        'GRANT EXECUTE ON FUNCTION %1$I.simba_acquire(text, text, interval, interval),'
        ' %1$I.simba_release(text, text), %1$I.simba_owner(text),'
        ' %1$I.simba_fence_check(text, text, bigint) TO %2$s;'
        ' GRANT USAGE ON SCHEMA %1$I TO %2$s;'
        ' GRANT SELECT ON %1$I.simba_mutex_status TO %2$s',
        @extschema@.simba_schema(), role);
END
$$;
COMMENT ON FUNCTION @extschema@.simba_grant(regrole) IS
  'simba: let a role acquire, renew, release and fence-check mutexes and read simba_mutex_status';

CREATE FUNCTION @extschema@.simba_revoke(role regrole)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    EXECUTE pg_catalog.format(
        'REVOKE EXECUTE ON FUNCTION %1$I.simba_acquire(text, text, interval, interval),'
        ' %1$I.simba_release(text, text), %1$I.simba_owner(text),'
        ' %1$I.simba_fence_check(text, text, bigint) FROM %2$s;'
        ' REVOKE SELECT ON %1$I.simba_mutex_status FROM %2$s',
        @extschema@.simba_schema(), role);
END
$$;
COMMENT ON FUNCTION @extschema@.simba_revoke(regrole) IS
  'simba: undo simba_grant for a role (schema USAGE is left alone)';

-- Nothing for PUBLIC: taking a lock is a privilege (see the header).
REVOKE ALL ON TABLE @extschema@.simba_mutex FROM PUBLIC;
REVOKE ALL ON TABLE @extschema@.simba_mutex_status FROM PUBLIC;
REVOKE ALL ON FUNCTION
    @extschema@.simba_acquire(text, text, interval, interval),
    @extschema@.simba_release(text, text),
    @extschema@.simba_owner(text),
    @extschema@.simba_fence_check(text, text, bigint),
    @extschema@.simba_grant(regrole),
    @extschema@.simba_revoke(regrole)
  FROM PUBLIC;
