-- simba 1.2 -> 1.3: hardening (SECURITY.md has the threat model).
--
-- * Every C function reaches simba's objects through the schema's OID, never
--   its name: the functions now point at new C entry points (the old ones
--   refuse with 55000 until this update has run).
-- * A lease or permit belongs to the role that took it (owner_role,
--   holder_role); a tenure taken before 1.3 is adopted by the first role
--   that renews it.
-- * Mutex fences come from the sequence simba_mutex_fence: a fence returned
--   by a transaction that rolled back is never returned again.
-- * simba.max_lease bounds ttl + transition and permit ttls.
-- * History: holder roles and the previous tenure's fence; one late_release
--   per tenure; its id sequence is dumped with the data.
-- * simba_grant/simba_revoke are C, and nothing but what simba_grant gives
--   survives this script, whatever the default privileges were.

\echo Use "ALTER EXTENSION simba UPDATE TO '1.3'" to load this file. \quit

-- Holders bound to roles.
ALTER TABLE @extschema@.simba_mutex ADD COLUMN owner_role name;
ALTER TYPE @extschema@.simba_owner ADD ATTRIBUTE owner_role name;
ALTER TABLE @extschema@.simba_semaphore_permit ADD COLUMN holder_role name;

-- Fences from a sequence, above every fence issued so far.
CREATE SEQUENCE @extschema@.simba_mutex_fence;
COMMENT ON SEQUENCE @extschema@.simba_mutex_fence IS
  'simba: fences of mutex tenures, never returned twice (not even by a transaction that rolled back)';
SELECT pg_catalog.setval('@extschema@.simba_mutex_fence', f)
  FROM (SELECT max(fence) AS f FROM @extschema@.simba_mutex) AS m
 WHERE f > 0;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.simba_mutex_fence', '');

-- History: roles, the fence of the tenure taken over, one late release per tenure.
ALTER TABLE @extschema@.simba_mutex_history
    ADD COLUMN owner_role name,
    ADD COLUMN previous_role name,
    ADD COLUMN previous_fence bigint;
-- Until 1.3 a takeover's fence was the previous one + 1.
UPDATE @extschema@.simba_mutex_history SET previous_fence = fence - 1 WHERE event = 'taken_over';
DELETE FROM @extschema@.simba_mutex_history AS h
 USING @extschema@.simba_mutex_history AS first
 WHERE h.event = 'late_release' AND first.event = 'late_release'
   AND h.mutex = first.mutex AND h.fence = first.fence AND h.id > first.id;
CREATE UNIQUE INDEX simba_mutex_history_late_release
    ON @extschema@.simba_mutex_history (mutex, fence) WHERE event = 'late_release';
SELECT pg_catalog.pg_extension_config_dump('@extschema@.simba_mutex_history_id_seq', '');

-- The functions on their 1.3 entry points.
CREATE OR REPLACE FUNCTION @extschema@.simba_acquire(
    mutex        text,
    contender_id text,
    ttl          interval DEFAULT '10 seconds',
    transition   interval DEFAULT '6 seconds')
RETURNS @extschema@.simba_owner
AS 'MODULE_PATHNAME', 'simba_acquire_1_3'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION @extschema@.simba_release(mutex text, contender_id text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'simba_release_1_3'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION @extschema@.simba_owner(mutex text)
RETURNS @extschema@.simba_owner
AS 'MODULE_PATHNAME', 'simba_owner_1_3'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION @extschema@.simba_fence_check(mutex text, contender_id text, fence bigint)
RETURNS void
AS 'MODULE_PATHNAME', 'simba_fence_check_1_3'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION @extschema@.simba_semaphore_acquire(
    key     text,
    holder  text,
    permits integer,
    ttl     interval DEFAULT '10 seconds',
    context text DEFAULT NULL)
RETURNS @extschema@.simba_permit
AS 'MODULE_PATHNAME', 'simba_semaphore_acquire_1_3'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION @extschema@.simba_semaphore_refresh(key text, token uuid, ttl interval)
RETURNS boolean
AS 'MODULE_PATHNAME', 'simba_semaphore_refresh_1_3'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION @extschema@.simba_semaphore_release(key text, token uuid)
RETURNS boolean
AS 'MODULE_PATHNAME', 'simba_semaphore_release_1_3'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION @extschema@.simba_semaphore_fence_check(key text, token uuid, fence bigint)
RETURNS void
AS 'MODULE_PATHNAME', 'simba_semaphore_fence_check_1_3'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION @extschema@.simba_history_trigger()
RETURNS trigger
AS 'MODULE_PATHNAME', 'simba_history_trigger_1_3'
LANGUAGE C;

CREATE OR REPLACE FUNCTION @extschema@.simba_force_release(mutex text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'simba_force_release_1_3'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

-- Grants in C: the 1.1 helper baked the schema's name into its body.
CREATE OR REPLACE FUNCTION @extschema@.simba_grant(role regrole)
RETURNS void
AS 'MODULE_PATHNAME', 'simba_grant_1_3'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION @extschema@.simba_revoke(role regrole)
RETURNS void
AS 'MODULE_PATHNAME', 'simba_revoke_1_3'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

DROP FUNCTION @extschema@.simba_set_privileges(regrole, boolean);
DROP FUNCTION @extschema@.simba_schema();

CREATE FUNCTION @extschema@.simba_strip_privileges(keep_grants boolean DEFAULT true)
RETURNS bigint
AS 'MODULE_PATHNAME', 'simba_strip_privileges'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.simba_strip_privileges(boolean) IS
  'simba: revoke every privilege on simba''s objects but the owner''s and (keep_grants) what simba_grant gives; returns how many it revoked';

-- The holder's role, for operators.
CREATE OR REPLACE VIEW @extschema@.simba_mutex_status AS
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
       m.version,
       CASE WHEN m.transition_at > c.now THEN m.owner_role END AS owner_role
  FROM @extschema@.simba_mutex m
 CROSS JOIN (SELECT pg_catalog.clock_timestamp() AS now) c;

CREATE OR REPLACE VIEW @extschema@.simba_semaphore_status AS
SELECT p.key, p.slot, p.holder, p.context, p.acquired_at, p.expires_at,
       p.expires_at - c.now AS time_left, p.fence, s.permits, p.holder_role
  FROM @extschema@.simba_semaphore_permit p
  JOIN @extschema@.simba_semaphore s USING (key)
 CROSS JOIN (SELECT pg_catalog.clock_timestamp() AS now) c
 WHERE p.expires_at > c.now;

-- Exactly the documented privileges: the owner's, and what simba_grant gave.
SELECT @extschema@.simba_strip_privileges(true);
