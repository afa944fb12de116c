-- the extension's life around its leases: DROP EXTENSION refuses while
-- leases are live, PREPARE TRANSACTION refuses to keep simba's locks, a
-- read-only transaction is told so, plans stay index scans as tables grow,
-- and simba_mutex_gc removes idle rows without fences going back
-- (security review 2, findings 6, 9, 10 and 14)
SET client_min_messages = warning;
SET simba.drop_live_leases = on;
DROP EXTENSION simba;
CREATE EXTENSION simba;
RESET simba.drop_live_leases;
RESET client_min_messages;
\set VERBOSITY terse

-- a live lease or permit: the drop refuses, and says the way out
SELECT fence AS live_fence FROM simba_acquire('life', 'a', '1h', '0s') \gset
DROP EXTENSION simba;
\echo :LAST_ERROR_SQLSTATE
SELECT simba_force_release('life');
SELECT token IS NOT NULL AS granted FROM simba_semaphore_acquire('life-k', 'a', 1, '1h');
DROP EXTENSION simba;
\echo :LAST_ERROR_SQLSTATE
-- the same for its schema, dropped with CASCADE
DROP SCHEMA public CASCADE;
\echo :LAST_ERROR_SQLSTATE
SELECT extname FROM pg_extension WHERE extname = 'simba';
-- other extensions and schemas are dropped as usual
CREATE SCHEMA regress_life;
DROP SCHEMA regress_life CASCADE;

-- PREPARE TRANSACTION would keep the row lock past any lease, across restarts
BEGIN;
SELECT owner_id FROM simba_acquire('prepared', 'a', '1s', '0s');
PREPARE TRANSACTION 'regress_simba';
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS prepared FROM pg_prepared_xacts;
SELECT owner_id FROM simba_owner('prepared');

-- a read-only transaction (a hot standby answers the same way): 25006
BEGIN READ ONLY;
SELECT simba_acquire('ro', 'a');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN READ ONLY;
SELECT owner_id FROM simba_owner('life');
ROLLBACK;

-- kept plans stay index scans: plans made while simba_mutex had a few rows
-- do not scan it whole for each of 2,000 new names
ANALYZE simba_mutex;
SELECT count(*) FROM generate_series(1, 10) i, LATERAL simba_acquire('warm-' || i, 'a', '1h', '0s');
SELECT pg_stat_force_next_flush();
SELECT pg_stat_reset_single_table_counters('simba_mutex'::regclass);
SELECT count(*) FROM generate_series(1, 2000) i, LATERAL simba_acquire('plan-' || i, 'a', '1h', '0s');
SELECT pg_stat_force_next_flush();
SELECT seq_scan, idx_scan >= 2000 AS by_index FROM pg_stat_user_tables WHERE relid = 'simba_mutex'::regclass;
-- simba plans its own statements that way whatever the caller's setting,
-- which it leaves as it was
SET enable_seqscan = off;
SELECT owner_id FROM simba_owner('plan-1');
SHOW enable_seqscan;
RESET enable_seqscan;
SELECT owner_id FROM simba_owner('plan-1');
SHOW enable_seqscan;

-- simba_mutex_gc: the rows of free mutexes go; live leases and fences stay
SELECT count(*) FROM generate_series(1, 2000) i, LATERAL simba_release('plan-' || i, 'a') r WHERE r;
SELECT simba_mutex_gc() AS removed;
SELECT count(*) AS rows_left FROM simba_mutex;
SELECT owner_id, fence > :live_fence AS fence_above FROM simba_acquire('life', 'b', '1h', '0s');
SELECT simba_mutex_gc() AS removed_again;
-- admin only
CREATE ROLE regress_simba_life;
SELECT simba_grant('regress_simba_life');
SET ROLE regress_simba_life;
SELECT simba_mutex_gc();
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT simba_revoke('regress_simba_life');
DROP OWNED BY regress_simba_life;
DROP ROLE regress_simba_life;

-- DROP OWNED drops simba too: BY the extension's owner, or BY its schema's
-- owner with CASCADE (security review, finding 6). Refused the same way while
-- a lease is live, the lease and its fence kept; done once none is.
SET client_min_messages = warning;
SET simba.drop_live_leases = on;
DROP EXTENSION simba;
RESET simba.drop_live_leases;
CREATE ROLE regress_simba_ext_owner SUPERUSER;
SET ROLE regress_simba_ext_owner;
CREATE EXTENSION simba;
RESET ROLE;
RESET client_min_messages;
SELECT fence AS owned_fence FROM simba_acquire('owned', 'a', '1h', '0s') \gset
DROP OWNED BY regress_simba_ext_owner;
\echo :LAST_ERROR_SQLSTATE
CREATE ROLE regress_simba_bystander;
DROP OWNED BY regress_simba_bystander, regress_simba_ext_owner CASCADE;
\echo :LAST_ERROR_SQLSTATE
SELECT owner_id, fence = :owned_fence AS same_fence FROM simba_owner('owned');
SELECT simba_force_release('owned');
DROP OWNED BY regress_simba_ext_owner;
SELECT count(*) AS simba_installs FROM pg_extension WHERE extname = 'simba';
CREATE ROLE regress_simba_nsp_owner;
CREATE SCHEMA regress_simba_nsp AUTHORIZATION regress_simba_nsp_owner;
CREATE EXTENSION simba SCHEMA regress_simba_nsp;
SELECT fence AS owned_fence FROM regress_simba_nsp.simba_acquire('owned', 'a', '1h', '0s') \gset
DROP OWNED BY regress_simba_nsp_owner CASCADE;
\echo :LAST_ERROR_SQLSTATE
SELECT owner_id, fence = :owned_fence AS same_fence FROM regress_simba_nsp.simba_owner('owned');
SELECT regress_simba_nsp.simba_force_release('owned');
SET client_min_messages = warning;
DROP OWNED BY regress_simba_nsp_owner CASCADE;
RESET client_min_messages;
SELECT count(*) AS simba_installs FROM pg_extension WHERE extname = 'simba';
CREATE EXTENSION simba;
-- a role that owns none of it drops what it owns as usual, leases live or not
SELECT owner_id FROM simba_acquire('owned', 'a', '1h', '0s');
CREATE TABLE regress_simba_bystanders ();
ALTER TABLE regress_simba_bystanders OWNER TO regress_simba_bystander;
DROP OWNED BY regress_simba_bystander;
SELECT count(*) AS bystanders FROM pg_class WHERE relname = 'regress_simba_bystanders';
SELECT simba_force_release('owned');
DROP ROLE regress_simba_ext_owner, regress_simba_nsp_owner, regress_simba_bystander;
