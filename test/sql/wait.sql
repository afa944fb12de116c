-- simba_wait: a waiter's registration on its LISTEN connection, which lets
-- a release skip its NOTIFY under simba.notify = registered (wake.c; the
-- NOTIFYs themselves: isolation spec wake)
\set VERBOSITY terse

-- bad input: an error with its SQLSTATE, and nothing registered
SELECT simba_wait(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_wait(ARRAY['a'], NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_wait(ARRAY['a', NULL]);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_wait(ARRAY['a', '']);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_wait(ARRAY[['a'], ['b']]);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_wait(ARRAY['a', repeat('x', 257)]);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS registered FROM pg_locks
 WHERE locktype = 'advisory' AND classid = 1397312834 AND pid = pg_backend_pid();

-- releases send their NOTIFY only to registered waiters unless the DBA says otherwise
SHOW simba.notify;

-- registered: a session-level ShareLock per bucket of names (at most 32)
SELECT simba_wait(ARRAY['w1', 'w2', 'w3']) AS refused, simba_wait('{}') AS none;
SELECT count(*) AS buckets, bool_and(mode = 'ShareLock' AND granted) AS shared,
       bool_and(objsubid = 2 AND objid < 32) AS keys
  FROM pg_locks WHERE locktype = 'advisory' AND classid = 1397312834 AND pid = pg_backend_pid();
SELECT simba_wait(ARRAY(SELECT 'n' || i FROM generate_series(1, 500) i));
SELECT count(*) AS buckets FROM pg_locks
 WHERE locktype = 'advisory' AND classid = 1397312834 AND pid = pg_backend_pid();
-- kept past a rollback, as any session-level lock
BEGIN;
SELECT simba_wait(ARRAY['w4']);
ROLLBACK;
-- dropped as many times as registered; dropping what was never registered does nothing
SELECT simba_wait(ARRAY(SELECT 'n' || i FROM generate_series(1, 500) i), false);
SELECT simba_wait(ARRAY['w1', 'w2', 'w3', 'w4'], false);
SELECT simba_wait(ARRAY['w1', 'never'], false);
SELECT count(*) AS left_registered FROM pg_locks
 WHERE locktype = 'advisory' AND classid = 1397312834 AND pid = pg_backend_pid();

-- a role without simba_grant may not register
SET client_min_messages = warning;
CREATE ROLE regress_simba_nogrant;
RESET client_min_messages;
SET ROLE regress_simba_nogrant;
SELECT simba_wait(ARRAY['w1']);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
DROP ROLE regress_simba_nogrant;
