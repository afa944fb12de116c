-- install an old version, update in place (pg_stat_statements' way), and
-- check the update reaches exactly what a fresh install makes
\set VERBOSITY terse

-- Every member object with what matters about it: columns, entry points,
-- settings, privileges, indexes, view text. Made of catalog tables only, so
-- it outlives DROP EXTENSION.
CREATE TEMP VIEW simba_objects AS
SELECT pg_describe_object(d.classid, d.objid, 0) AS object,
       coalesce((SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
                                   || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END, ', ' ORDER BY a.attnum)
                   FROM pg_attribute a
                  WHERE d.classid = 'pg_class'::regclass AND a.attrelid = d.objid
                    AND a.attnum > 0 AND NOT a.attisdropped), '')
       || coalesce((SELECT ' ' || string_agg(pg_get_indexdef(i.indexrelid), '; ' ORDER BY pg_get_indexdef(i.indexrelid))
                      FROM pg_index i WHERE d.classid = 'pg_class'::regclass AND i.indrelid = d.objid), '')
       || coalesce((SELECT ' ' || coalesce(pg_get_viewdef(c.oid), '') || ' '
                           || coalesce(c.relacl, acldefault(CASE WHEN c.relkind = 'S' THEN 's' ELSE 'r' END::"char",
                                                            c.relowner))::text
                      FROM pg_class c WHERE d.classid = 'pg_class'::regclass AND c.oid = d.objid), '')
       || coalesce((SELECT ' ' || p.prosrc || ' ' || p.prosecdef || ' ' || p.provolatile::text || ' '
                           || coalesce(p.proconfig::text, '') || ' '
                           || coalesce(p.proacl, acldefault('f', p.proowner))::text
                           || ' ' || pg_get_function_result(p.oid)
                      FROM pg_proc p WHERE d.classid = 'pg_proc'::regclass AND p.oid = d.objid), '')
       || coalesce((SELECT ' ' || string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), ', ' ORDER BY a.attnum)
                      FROM pg_type t JOIN pg_attribute a ON a.attrelid = t.typrelid
                     WHERE d.classid = 'pg_type'::regclass AND t.oid = d.objid AND a.attnum > 0), '')
       AS details
  FROM pg_depend d
 WHERE d.refclassid = 'pg_extension'::regclass
   AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'simba')
   AND d.deptype = 'e';

-- default privileges in force through every update: they must leak nothing
-- (security review 2, finding 3); a role granted at 1.0 must get what
-- simba_grant gives today (finding 13)
SET client_min_messages = warning;
CREATE ROLE regress_upgrade_app;
CREATE ROLE regress_upgrade_nobody;
RESET client_min_messages;
ALTER DEFAULT PRIVILEGES GRANT EXECUTE ON FUNCTIONS TO regress_upgrade_nobody;
ALTER DEFAULT PRIVILEGES GRANT SELECT ON TABLES TO regress_upgrade_nobody;

SET simba.drop_live_leases = on;
DROP EXTENSION simba;
CREATE EXTENSION simba VERSION '1.0';
SELECT extversion FROM pg_extension WHERE extname = 'simba';
SELECT simba_grant('regress_upgrade_app');
-- the installed library refuses old definitions clearly until the update
SELECT simba_acquire('upgrade', 'a', '1h', '1h');
\echo :LAST_ERROR_SQLSTATE
-- state as 1.0 left it, written directly (the old functions refuse): a live
-- lease without a role, a free mutex that had fence 7
INSERT INTO simba_mutex VALUES ('upgrade', 'a', now(), now() + '1h', now() + '2h', 3, 5);
INSERT INTO simba_mutex (mutex, version, fence) VALUES ('upgrade-free', 8, 7);

ALTER EXTENSION simba UPDATE TO '1.1';
SELECT simba_semaphore_acquire('upgrade-k', 'a', 1);
\echo :LAST_ERROR_SQLSTATE

ALTER EXTENSION simba UPDATE TO '1.2';
-- 1.2's history on 1.1's tables used to raise 42P01 halfway: now 55000 first
SET simba.history = on;
SELECT simba_release('upgrade', 'a');
\echo :LAST_ERROR_SQLSTATE
-- history as 1.2 left it: a takeover, and one late release logged twice
INSERT INTO simba_mutex_history (mutex, event, owner_id, fence, previous_owner, at) VALUES
    ('upgrade-free', 'acquired', 'c', 6, NULL, now()),
    ('upgrade-free', 'taken_over', 'b', 7, 'c', now()),
    ('upgrade-free', 'late_release', 'c', 6, NULL, now()),
    ('upgrade-free', 'late_release', 'c', 6, NULL, now());
-- written by hand: not logged
SELECT count(*) AS history_rows FROM simba_mutex_history;

ALTER EXTENSION simba UPDATE TO '1.3';
-- a live lease as 1.3 left it, with its holder's role
INSERT INTO simba_mutex (mutex, owner_id, owner_role, acquired_at, ttl_at, transition_at, version, fence)
VALUES ('upgrade-13', 'app', 'regress_upgrade_app', now(), now() + '1h', now() + '2h', 1, 9);

ALTER EXTENSION simba UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'simba';
-- the lease taken before 1.3, without a role, is adopted by nobody (finding
-- 5): not renewed, released or fence-checked; taken over once it ends
SELECT owner_id, owner_role, fence FROM simba_acquire('upgrade', 'a', '1h', '1h');
SELECT simba_release('upgrade', 'a') AS released;
SELECT simba_fence_check('upgrade', 'a', 5);
\echo :LAST_ERROR_SQLSTATE
-- the 1.3 lease stays its role's, now by OID: it renews with its fence
SET ROLE regress_upgrade_app;
SELECT owner_id, owner_role, fence FROM simba_acquire('upgrade-13', 'app', '1h', '1h');
SELECT simba_fence_check('upgrade-13', 'app', 9);
RESET ROLE;
-- the default privileges gave nothing, the role granted at 1.0 has it all
SELECT count(*) AS nobody_holds
  FROM pg_depend d, LATERAL (
         SELECT p.proacl FROM pg_proc p WHERE d.classid = 'pg_proc'::regclass AND p.oid = d.objid
         UNION ALL
         SELECT c.relacl FROM pg_class c WHERE d.classid = 'pg_class'::regclass AND c.oid = d.objid) o(acl),
       aclexplode(o.acl) a
 WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'simba') AND d.deptype = 'e'
   AND a.grantee = 'regress_upgrade_nobody'::regrole;
SELECT has_function_privilege('regress_upgrade_app', 'simba_semaphore_acquire(text, text, integer, interval, text, uuid)', 'EXECUTE') AS app_semaphore,
       has_function_privilege('regress_upgrade_app', 'simba_clock()', 'EXECUTE') AS app_clock,
       has_table_privilege('regress_upgrade_app', 'simba_semaphore_status', 'SELECT') AS app_permits_view,
       has_table_privilege('regress_upgrade_app', 'simba_mutex_history', 'SELECT') AS app_history,
       has_function_privilege('regress_upgrade_app', 'simba_force_release(text)', 'EXECUTE') AS app_force;
-- new fences start above every fence issued before
SELECT owner_id, fence > 7 AS above_old FROM simba_acquire('upgrade-free', 'd', '1h', '1h');
-- the takeover knows the fence it took over from; the late release is kept once
SELECT event, owner_id, fence, previous_fence FROM simba_mutex_history
 WHERE mutex = 'upgrade-free' ORDER BY id;
SELECT key, slot, fence > 0 AS fenced FROM simba_semaphore_acquire('upgrade-k', 'a', 1);
RESET simba.history;

-- every object is commented
SELECT object AS uncommented
  FROM simba_objects o
  JOIN pg_depend d ON pg_describe_object(d.classid, d.objid, 0) = o.object
 WHERE obj_description(d.objid, d.classid::regclass::name) IS NULL;

-- an updated install and a fresh one have the same objects, alike in every
-- detail listed above
SELECT simba_revoke('regress_upgrade_app');
ALTER DEFAULT PRIVILEGES REVOKE EXECUTE ON FUNCTIONS FROM regress_upgrade_nobody;
ALTER DEFAULT PRIVILEGES REVOKE SELECT ON TABLES FROM regress_upgrade_nobody;
CREATE TEMP TABLE updated AS SELECT * FROM simba_objects;
SET simba.drop_live_leases = on;
DROP EXTENSION simba;
CREATE EXTENSION simba;
SELECT extversion FROM pg_extension WHERE extname = 'simba';
SELECT o.object, u.object IS NOT NULL AS also_updated, o.details = u.details AS same_details
  FROM simba_objects o
  LEFT JOIN updated u USING (object)
 ORDER BY 1;
SELECT u.object AS only_updated FROM updated u LEFT JOIN simba_objects o USING (object)
 WHERE o.object IS NULL;

DROP OWNED BY regress_upgrade_app, regress_upgrade_nobody;
DROP ROLE regress_upgrade_app, regress_upgrade_nobody;
