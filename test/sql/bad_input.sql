-- bad input: a clear error with its SQLSTATE, and no row changes
-- a fresh install: fences below count from 1, whatever tests ran before
SET client_min_messages = warning;
SET simba.drop_live_leases = on;
DROP EXTENSION simba;
CREATE EXTENSION simba;
RESET client_min_messages;
\set VERBOSITY default
\set SHOW_CONTEXT never
SELECT (simba_acquire('bad', 'owner', '1h', '1h')).owner_id IS NOT NULL AS setup;
CREATE TEMP TABLE before AS SELECT * FROM simba_mutex;

-- NULLs (22004)
SELECT simba_acquire(NULL, 'a');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_acquire('bad', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_acquire('bad', 'a', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_acquire('bad', 'a', '1s', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_release(NULL, 'owner');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_release('bad', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_owner(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_fence_check(NULL, 'owner', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_fence_check('bad', 'owner', NULL);
\echo :LAST_ERROR_SQLSTATE

-- empty names (22023)
SELECT simba_acquire('', 'a');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_acquire('bad', '');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_release('', 'owner');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_owner('');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_fence_check('bad', '', 1);
\echo :LAST_ERROR_SQLSTATE

-- names over 256 characters (22023); 256 multibyte characters are fine
SELECT simba_acquire(repeat('m', 257), 'a');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_acquire('bad', repeat('é', 257));
\echo :LAST_ERROR_SQLSTATE
SELECT simba_acquire(repeat('x', 1000000), 'a');
\echo :LAST_ERROR_SQLSTATE
SELECT (simba_owner(repeat('é', 256))).mutex IS NOT NULL AS fits;

-- ttl <= 0, negative transition (22023)
SELECT simba_acquire('bad', 'a', '0s');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_acquire('bad', 'a', '-1s');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_acquire('bad', 'a', '1s', '-1ms');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_acquire('bad', 'a', interval '1 hour' - interval '2 hours');
\echo :LAST_ERROR_SQLSTATE

-- days and months have no fixed length (22023)
SELECT simba_acquire('bad', 'a', '1 day');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_acquire('bad', 'a', '1s', '1 mon');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_acquire('bad', 'a', '1 year');
\echo :LAST_ERROR_SQLSTATE

-- leases longer than simba.max_lease (22023), up to the largest intervals;
-- that bound keeps every lease end inside the timestamp range (22008)
SELECT simba_acquire('bad', 'a', '2562047000 hours');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_acquire('bad', 'a', '1500000000 hours', '1500000000 hours');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_acquire('bad', 'a', interval '9223372036854775807 microseconds', interval '9223372036854775807 microseconds');
\echo :LAST_ERROR_SQLSTATE

-- fences are positive (22023)
SELECT simba_fence_check('bad', 'owner', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_fence_check('bad', 'owner', -9223372036854775808);
\echo :LAST_ERROR_SQLSTATE

-- nothing changed, nothing was created
SELECT count(*) AS changed_rows
  FROM (SELECT * FROM simba_mutex EXCEPT SELECT * FROM before
        UNION ALL
        SELECT * FROM before EXCEPT SELECT * FROM simba_mutex) d;
SELECT simba_fence_check('bad', 'owner', 1);
