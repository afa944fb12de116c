-- simba 1.3 -> 1.4: the second security review (SECURITY.md lists each
-- finding with the test that covers it).
--
-- * A lease belongs to the role whose privileges the call runs with
--   (current_user, a SECURITY DEFINER wrapper's owner), by OID within the
--   cluster: the functions are no longer SECURITY DEFINER (their statements
--   run as the owner from C) and refuse inside security-restricted
--   operations. A tenure without a role (taken before 1.3) is adopted by
--   nobody.
-- * Leases count on simba's clock, which a step of the wall clock does not
--   move (clock_origin; simba_clock()).
-- * Permits: refresh and fence check lock only the caller's permit; a grant
--   of nothing leaves no lock.
-- * The status views are security barriers; simba_mutex_gc removes the rows
--   of free mutexes; the functions plan without sequential scans.
-- * DROP EXTENSION refuses while leases or permits are live.
-- * simba_renew renews a tenure by its fence and never takes the mutex: a
--   holder that lost its tenure does not silently get a new one.
-- * Privileges: a role that holds anything simba_grant does not give (from
--   default privileges, say) keeps nothing; roles granted before get the
--   functions added since.

\echo Use "ALTER EXTENSION simba UPDATE TO '1.4'" to load this file. \quit

-- Holders by role OID (owner_sysid names the cluster of that OID), lease
-- times by clock origin; a permit's last renewal.
ALTER TABLE @extschema@.simba_mutex
    ADD COLUMN owner_roleid oid,
    ADD COLUMN owner_sysid bigint,
    ADD COLUMN clock_origin timestamptz;
ALTER TABLE @extschema@.simba_semaphore_permit
    ADD COLUMN holder_roleid oid,
    ADD COLUMN holder_sysid bigint,
    ADD COLUMN renewed_at timestamptz,
    ADD COLUMN clock_origin timestamptz;
COMMENT ON TABLE @extschema@.simba_mutex IS
  'simba: one row per mutex; owner_id NULL = free; the holder is owner_id with the role owner_roleid of cluster owner_sysid (owner_role by name in another cluster); times on the clock of clock_origin. Written only by the simba_* functions; simba_mutex_gc removes rows of free mutexes (fences come from a sequence, never reused).';

-- The functions on their 1.4 entry points, as the caller.
CREATE OR REPLACE FUNCTION @extschema@.simba_acquire(
    mutex        text,
    contender_id text,
    ttl          interval DEFAULT '10 seconds',
    transition   interval DEFAULT '6 seconds')
RETURNS @extschema@.simba_owner
AS 'MODULE_PATHNAME', 'simba_acquire_1_4'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off;
CREATE OR REPLACE FUNCTION @extschema@.simba_release(mutex text, contender_id text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'simba_release_1_4'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off;
CREATE OR REPLACE FUNCTION @extschema@.simba_owner(mutex text)
RETURNS @extschema@.simba_owner
AS 'MODULE_PATHNAME', 'simba_owner_1_4'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off;
CREATE OR REPLACE FUNCTION @extschema@.simba_fence_check(mutex text, contender_id text, fence bigint)
RETURNS void
AS 'MODULE_PATHNAME', 'simba_fence_check_1_4'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off;
CREATE OR REPLACE FUNCTION @extschema@.simba_semaphore_acquire(
    key     text,
    holder  text,
    permits integer,
    ttl     interval DEFAULT '10 seconds',
    context text DEFAULT NULL)
RETURNS @extschema@.simba_permit
AS 'MODULE_PATHNAME', 'simba_semaphore_acquire_1_4'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off;
CREATE OR REPLACE FUNCTION @extschema@.simba_semaphore_refresh(key text, token uuid, ttl interval)
RETURNS boolean
AS 'MODULE_PATHNAME', 'simba_semaphore_refresh_1_4'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off;
CREATE OR REPLACE FUNCTION @extschema@.simba_semaphore_release(key text, token uuid)
RETURNS boolean
AS 'MODULE_PATHNAME', 'simba_semaphore_release_1_4'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off;
CREATE OR REPLACE FUNCTION @extschema@.simba_semaphore_fence_check(key text, token uuid, fence bigint)
RETURNS void
AS 'MODULE_PATHNAME', 'simba_semaphore_fence_check_1_4'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off;
CREATE OR REPLACE FUNCTION @extschema@.simba_semaphore_gc()
RETURNS bigint
AS 'MODULE_PATHNAME', 'simba_semaphore_gc_1_4'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
CREATE OR REPLACE FUNCTION @extschema@.simba_history_prune(keep interval)
RETURNS bigint
AS 'MODULE_PATHNAME', 'simba_history_prune'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
CREATE OR REPLACE FUNCTION @extschema@.simba_force_release(mutex text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'simba_force_release_1_4'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off;
CREATE OR REPLACE FUNCTION @extschema@.simba_grant(role regrole)
RETURNS void
AS 'MODULE_PATHNAME', 'simba_grant_1_4'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
CREATE OR REPLACE FUNCTION @extschema@.simba_revoke(role regrole)
RETURNS void
AS 'MODULE_PATHNAME', 'simba_revoke_1_4'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

-- simba's clock: what the functions and the views count leases with.
-- New in 1.4: renewal that never takes the mutex (a lost tenure stays lost).
CREATE FUNCTION @extschema@.simba_renew(
    mutex        text,
    contender_id text,
    fence        bigint,
    ttl          interval DEFAULT '10 seconds',
    transition   interval DEFAULT '6 seconds')
RETURNS @extschema@.simba_owner
AS 'MODULE_PATHNAME', 'simba_renew_1_4'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off;
COMMENT ON FUNCTION @extschema@.simba_renew(text, text, bigint, interval, interval) IS
  'simba: renew the caller''s live tenure with this fence; never takes the mutex (a lost tenure stays lost); returns the owner after the attempt';

CREATE FUNCTION @extschema@.simba_clock(OUT now timestamptz, OUT origin timestamptz)
RETURNS record
AS 'MODULE_PATHNAME', 'simba_clock'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.simba_clock() IS
  'simba: now on simba''s clock (the wall clock at origin, advanced by the boot clock since: a step of the wall clock does not move it) and that origin; on a standby the wall clock and NULL';

-- A lease written under another clock origin (before a reboot, a promotion
-- or a restore) counts again in full from this origin: shift moves its
-- times there. A security barrier: a caller's function in WHERE sees only
-- the rows the view shows.
-- What 1.3 wrote: roles by OID where the role still has that name; times
-- on this clock, whose origin starts now. A permit counts as last renewed
-- now (or at its end): it never lasts less than its stored end.
UPDATE @extschema@.simba_mutex AS m
   SET owner_roleid = r.oid, owner_sysid = c.system_identifier
  FROM pg_catalog.pg_roles AS r, pg_catalog.pg_control_system() AS c
 WHERE r.rolname = m.owner_role;
UPDATE @extschema@.simba_mutex SET clock_origin = (SELECT origin FROM @extschema@.simba_clock());
UPDATE @extschema@.simba_semaphore_permit AS p
   SET holder_roleid = r.oid, holder_sysid = c.system_identifier
  FROM pg_catalog.pg_roles AS r, pg_catalog.pg_control_system() AS c
 WHERE r.rolname = p.holder_role;
UPDATE @extschema@.simba_semaphore_permit
   SET renewed_at = LEAST(pg_catalog.now(), expires_at),
       clock_origin = (SELECT origin FROM @extschema@.simba_clock());
ALTER TABLE @extschema@.simba_semaphore_permit ALTER COLUMN renewed_at SET NOT NULL;

-- A lease written under another clock origin (before a reboot, a promotion
-- or a restore) counts again in full from this origin: shift moves its
-- times there. A security barrier: a caller's function in WHERE sees only
-- the rows the view shows.
CREATE OR REPLACE VIEW @extschema@.simba_mutex_status WITH (security_barrier) AS
SELECT m.mutex,
       CASE WHEN l.live THEN m.owner_id END AS owner_id,
       CASE WHEN NOT l.live THEN 'free'
            WHEN m.ttl_at + s.shift > c.now THEN 'held'
            ELSE 'transition' END AS state,
       m.acquired_at + s.shift AS acquired_at,
       m.ttl_at + s.shift AS ttl_at,
       m.transition_at + s.shift AS transition_at,
       CASE WHEN l.live THEN m.transition_at + s.shift - c.now END AS time_left,
       m.fence,
       m.version,
       CASE WHEN l.live THEN m.owner_role END AS owner_role
  FROM @extschema@.simba_mutex m
 CROSS JOIN @extschema@.simba_clock() c
 CROSS JOIN LATERAL (SELECT CASE WHEN m.clock_origin IS DISTINCT FROM c.origin AND c.origin IS NOT NULL
                                 THEN pg_catalog.make_interval(secs => pg_catalog.date_part('epoch', c.origin - m.acquired_at))
                                 ELSE interval '0' END AS shift) s
 CROSS JOIN LATERAL (SELECT m.owner_id IS NOT NULL AND m.transition_at + s.shift > c.now AS live) l;

CREATE OR REPLACE VIEW @extschema@.simba_semaphore_status WITH (security_barrier) AS
SELECT p.key, p.slot, p.holder, p.context, p.acquired_at, l.expires_at,
       l.expires_at - c.now AS time_left, p.fence, s.permits, p.holder_role
  FROM @extschema@.simba_semaphore_permit p
  JOIN @extschema@.simba_semaphore s USING (key)
 CROSS JOIN @extschema@.simba_clock() c
 CROSS JOIN LATERAL (SELECT CASE WHEN p.clock_origin IS DISTINCT FROM c.origin AND c.origin IS NOT NULL
                                 THEN c.origin + pg_catalog.make_interval(secs => pg_catalog.date_part('epoch', p.expires_at - p.renewed_at))
                                 ELSE p.expires_at END AS expires_at) l
 WHERE l.expires_at > c.now;

CREATE FUNCTION @extschema@.simba_mutex_gc()
RETURNS bigint
AS 'MODULE_PATHNAME', 'simba_mutex_gc'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.simba_mutex_gc() IS
  'simba: admin only — remove the rows of mutexes nobody holds (fences stay above every fence issued); returns how many';

-- DROP EXTENSION refuses while leases or permits are live (drop_guard.c).
CREATE FUNCTION @extschema@.simba_drop_guard()
RETURNS event_trigger
AS 'MODULE_PATHNAME', 'simba_drop_guard'
LANGUAGE C
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.simba_drop_guard() IS
  'simba: refuse DROP EXTENSION simba (or DROP SCHEMA CASCADE of its schema) while leases or permits are live, unless simba.drop_live_leases is on';
CREATE EVENT TRIGGER simba_drop_guard ON ddl_command_start
  WHEN TAG IN ('DROP EXTENSION', 'DROP SCHEMA')
  EXECUTE FUNCTION @extschema@.simba_drop_guard();
COMMENT ON EVENT TRIGGER simba_drop_guard IS
  'simba: refuse to drop simba while leases or permits are live (a re-created extension starts fences at 1)';

-- Exactly the documented privileges, then every role granted before gets
-- what simba_grant gives today (the functions and views added since).
SELECT @extschema@.simba_strip_privileges(true);
SELECT @extschema@.simba_grant(g.grantee::pg_catalog.regrole)
  FROM (SELECT DISTINCT a.grantee
          FROM pg_catalog.pg_proc AS p, pg_catalog.aclexplode(p.proacl) AS a
         WHERE p.oid = '@extschema@.simba_acquire(text, text, interval, interval)'::pg_catalog.regprocedure
           AND a.grantee <> p.proowner AND a.privilege_type = 'EXECUTE') AS g;
