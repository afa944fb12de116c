-- install the old version, use it, update in place (pg_stat_statements' way)
\set VERBOSITY terse
DROP EXTENSION simba;
CREATE EXTENSION simba VERSION '1.0';
SELECT extversion FROM pg_extension WHERE extname = 'simba';
SELECT owner_id, fence FROM simba_acquire('upgrade', 'a', '1h', '1h');
SELECT simba_semaphore_acquire('k', 'a', 1);   -- not in 1.0

ALTER EXTENSION simba UPDATE TO '1.1';
SELECT extversion FROM pg_extension WHERE extname = 'simba';
-- state from 1.0 survives, and 1.1 works on top of it
SELECT owner_id, fence, state FROM simba_mutex_status WHERE mutex = 'upgrade';
SELECT owner_id, fence FROM simba_acquire('upgrade', 'a', '1h', '1h');
SELECT key, slot, fence > 0 AS fenced FROM simba_semaphore_acquire('upgrade-k', 'a', 1);
SELECT count(*) FROM simba_mutex_history;   -- not in 1.1

-- and on to the latest version: the history starts logging the existing rows
ALTER EXTENSION simba UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'simba';
SET simba.history = on;
SELECT simba_release('upgrade', 'a');
SELECT event, owner_id, fence FROM simba_mutex_history;
RESET simba.history;

-- every object is commented
SELECT pg_describe_object(d.classid, d.objid, 0) AS uncommented
  FROM pg_depend d
 WHERE d.refclassid = 'pg_extension'::regclass
   AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'simba')
   AND d.deptype = 'e'
   AND obj_description(d.objid, d.classid::regclass::name) IS NULL;

-- an updated install and a fresh one have the same objects
CREATE TEMP TABLE updated AS
SELECT pg_describe_object(classid, objid, 0) AS object
  FROM pg_depend
 WHERE refclassid = 'pg_extension'::regclass
   AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'simba')
   AND deptype = 'e';
DROP EXTENSION simba;
CREATE EXTENSION simba;
SELECT extversion FROM pg_extension WHERE extname = 'simba';
SELECT pg_describe_object(classid, objid, 0) AS object, o.object IS NOT NULL AS also_updated
  FROM pg_depend
  LEFT JOIN updated o ON o.object = pg_describe_object(classid, objid, 0)
 WHERE refclassid = 'pg_extension'::regclass
   AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'simba')
   AND deptype = 'e'
 ORDER BY 1;
SELECT count(*) AS objects_updated FROM updated;
