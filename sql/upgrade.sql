-- install a given version, as pg_stat_statements tests its upgrade path
DROP EXTENSION simba;
CREATE EXTENSION simba VERSION '1.0';
SELECT extversion FROM pg_extension WHERE extname = 'simba';
SELECT owner_id, fence FROM simba_acquire('upgrade', 'a');
-- every object is commented
SELECT count(*) AS uncommented
  FROM pg_depend d
 WHERE d.refclassid = 'pg_extension'::regclass
   AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'simba')
   AND d.deptype = 'e'
   AND obj_description(d.objid, d.classid::regclass::name) IS NULL;
-- the versioned list of objects
SELECT pg_describe_object(classid, objid, 0) AS object
  FROM pg_depend
 WHERE refclassid = 'pg_extension'::regclass
   AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'simba')
   AND deptype = 'e'
 ORDER BY 1;
