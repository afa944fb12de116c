-- The SQL walkthrough `make demo` runs: two workers, one mutex, a fenced
-- ledger; the lease of worker-a lapses and worker-b takes over.
\set ON_ERROR_STOP 0
\set VERBOSITY terse
\pset footer off
CREATE EXTENSION IF NOT EXISTS simba;
CREATE TABLE IF NOT EXISTS demo_ledger (entry serial, writer text, fence bigint);

\echo '\n== worker-a acquires "nightly-report" (ttl 1 s, transition 500 ms); worker-b finds it held'
SELECT mutex, owner_id, fence, ttl_at - acquired_at AS ttl FROM simba_acquire('nightly-report', 'worker-a', '1s', '500ms');
SELECT owner_id AS "worker-b sees", fence FROM simba_acquire('nightly-report', 'worker-b', '1s', '500ms');

\echo '\n== worker-a writes under its fence: the write commits only while it holds the lock'
BEGIN;
SELECT simba_fence_check('nightly-report', 'worker-a', 1);
INSERT INTO demo_ledger (writer, fence) VALUES ('worker-a', 1);
COMMIT;

\echo '\n== worker-a stalls past ttl + transition (think: a GC pause) ...'
SELECT pg_sleep(1.6);
SELECT mutex, state FROM simba_mutex_status WHERE mutex = 'nightly-report';

\echo '\n== ... worker-b takes over with the next fence'
SELECT owner_id, fence FROM simba_acquire('nightly-report', 'worker-b', '10s', '2s');

\echo '\n== worker-a wakes up and tries its late write: refused by the fence check'
BEGIN;
SELECT simba_fence_check('nightly-report', 'worker-a', 1);
INSERT INTO demo_ledger (writer, fence) VALUES ('worker-a', 1);
ROLLBACK;

\echo '\n== worker-b writes, then releases (waiters LISTENing on channel simba are woken)'
BEGIN;
SELECT simba_fence_check('nightly-report', 'worker-b', 2);
INSERT INTO demo_ledger (writer, fence) VALUES ('worker-b', 2);
COMMIT;
SELECT simba_release('nightly-report', 'worker-b') AS released;

\echo '\n== the ledger: every row written under the fence current at its commit'
SELECT * FROM demo_ledger ORDER BY entry;
SELECT mutex, owner_id, state, fence, version FROM simba_mutex_status;
