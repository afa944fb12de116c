-- fencing tokens: a new value whenever the mutex changes hands, kept on
-- renewal, never reused (not even after a rollback); simba_fence_check
-- inside the writer's transaction
-- a fresh install: fences below count from 1, whatever tests ran before
SET client_min_messages = warning;
SET simba.drop_live_leases = on;
DROP EXTENSION simba;
CREATE EXTENSION simba;
RESET client_min_messages;
\set VERBOSITY terse

SELECT fence FROM simba_acquire('f', 'a', '10s', '1s');     -- first holder
SELECT fence FROM simba_acquire('f', 'a', '10s', '1s');     -- renewal keeps it
SELECT fence FROM simba_acquire('f', 'b', '10s', '1s');     -- b loses: still a's
SELECT simba_release('f', 'a');
SELECT fence FROM simba_acquire('f', 'a', '10s', '1s');     -- same id after release: new fence
SELECT simba_release('f', 'a');
SELECT owner_id, fence FROM simba_acquire('f', 'b', '10s', '1s'); -- another holder: next fence

-- re-acquisition by the same id after its lease lapsed: new fence
SELECT fence FROM simba_acquire('f-lapse', 'a', '50ms', '50ms');
SELECT pg_sleep(0.15);
SELECT fence FROM simba_acquire('f-lapse', 'a', '10s', '1s');

-- the check passes for the owner with its fence ...
SELECT simba_fence_check('f', 'b', 3);

-- ... and says which condition failed otherwise, each with its own SQLSTATE
SELECT simba_fence_check('f', 'a', 3);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_fence_check('f', 'b', 2);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_fence_check('free-mutex', 'a', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT fence AS short_fence FROM simba_acquire('f-short', 'a', '200ms', '0s') \gset
SELECT simba_fence_check('f-short', 'a', :short_fence);
SELECT pg_sleep(0.3);
SELECT simba_fence_check('f-short', 'a', :short_fence);
\echo :LAST_ERROR_SQLSTATE

-- a fenced write: commits while the lease holds, refused with a stale fence
CREATE TABLE ledger (id serial, writer text, fence bigint);
BEGIN;
SELECT simba_fence_check('f', 'b', 3);
INSERT INTO ledger (writer, fence) VALUES ('b', 3);
COMMIT;
BEGIN;
SELECT simba_fence_check('f', 'a', 2);
INSERT INTO ledger (writer, fence) VALUES ('a', 2);
COMMIT;
SELECT writer, fence FROM ledger;

-- fences only grow: 50 handoffs between two ids, each to a higher fence
CREATE TEMP TABLE handoffs (i int, fence bigint);
DO $$
DECLARE
    holder text := 'b';
    next_holder text;
BEGIN
    FOR i IN 1..50 LOOP
        next_holder := CASE WHEN holder = 'a' THEN 'b' ELSE 'a' END;
        PERFORM simba_release('f', holder);
        INSERT INTO handoffs SELECT i, o.fence FROM simba_acquire('f', next_holder, '10s', '1s') o;
        holder := next_holder;
    END LOOP;
END
$$;
SELECT count(*) AS handoffs, bool_and(fence > previous) AS each_one_higher
  FROM (SELECT fence, lag(fence, 1, 3::bigint) OVER (ORDER BY i) AS previous FROM handoffs) h;
SELECT owner_id, fence, version FROM simba_mutex WHERE mutex = 'f';
DROP TABLE ledger;

-- a fence handed out in a transaction that rolled back is never handed out
-- again: neither for a first use nor for a takeover of a free mutex
BEGIN;
SAVEPOINT s;
SELECT fence AS rolled_back FROM simba_acquire('f-rollback', 'a', '10s', '1s') \gset
ROLLBACK TO s;
SELECT owner_id, fence > :rolled_back AS higher FROM simba_acquire('f-rollback', 'a', '10s', '1s');
COMMIT;
SELECT simba_release('f-rollback', 'a');
BEGIN;
SELECT fence AS rolled_back FROM simba_acquire('f-rollback', 'b', '10s', '1s') \gset
ROLLBACK;
SELECT owner_id, fence > :rolled_back AS higher FROM simba_acquire('f-rollback', 'c', '10s', '1s');
