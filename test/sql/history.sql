-- ownership history (simba.history), per-holder stats, forced release
-- a fresh install: fences below count from 1, whatever tests ran before
SET client_min_messages = warning;
SET simba.drop_live_leases = on;
DROP EXTENSION simba;
CREATE EXTENSION simba;
RESET client_min_messages;
\set VERBOSITY terse

-- off by default: nothing is logged
SELECT owner_id FROM simba_acquire('h-off', 'a');
SHOW simba.history;
SELECT simba_release('h-off', 'a');
SELECT count(*) AS logged FROM simba_mutex_history;

SET simba.history = on;
-- first use, renewal (not logged), a loser (not logged), release
SELECT owner_id, fence FROM simba_acquire('h', 'a', '10s', '1s');
SELECT owner_id, fence FROM simba_acquire('h', 'a', '10s', '1s');
SELECT owner_id, fence FROM simba_acquire('h', 'b', '10s', '1s');
SELECT simba_release('h', 'a');
-- b acquires with a short lease and lets it lapse: c takes over
SELECT owner_id, fence FROM simba_acquire('h', 'b', '50ms', '50ms');
SELECT pg_sleep(0.15);
SELECT owner_id, fence FROM simba_acquire('h', 'c', '50ms', '50ms');
-- b finishes its work after its lease ended: a late release, logged once
-- however often b calls
SELECT simba_release('h', 'b') AS b_released;
SELECT simba_release('h', 'b') AS b_released_again;
-- c's own lease lapses and c acquires again: reacquired, new fence
SELECT pg_sleep(0.15);
SELECT simba_release('h', 'c') AS c_released_late;
SELECT simba_release('h', 'c') AS c_released_late_again;
SELECT owner_id, fence FROM simba_acquire('h', 'c', '1h', '1h');
-- an admin frees it whoever holds it; the next holder gets the next fence
SELECT simba_force_release('h') AS forced;
SELECT simba_force_release('h') AS forced_again;
SELECT simba_force_release('never-used') AS forced_unknown;
SELECT owner_id, fence FROM simba_acquire('h', 'd', '1h', '1h');

SELECT event, owner_id, owner_role, fence, previous_owner, previous_role, previous_fence,
       at IS NOT NULL AS timed
  FROM simba_mutex_history WHERE mutex = 'h' ORDER BY id;
SELECT holder, acquisitions, releases, late_releases, expired, forced_releases
  FROM simba_mutex_stats WHERE mutex = 'h' ORDER BY holder;

-- only simba's own writes are changes of hands: a row a restore COPYs in or
-- a superuser writes by hand is not logged (and never crashes the trigger)
INSERT INTO simba_mutex (mutex) VALUES ('h-manual');
INSERT INTO simba_mutex (mutex, owner_id, acquired_at, ttl_at, transition_at, version, fence)
VALUES ('h-manual-held', 'x', now(), now() + '1h', now() + '2h', 1, 1);
UPDATE simba_mutex SET owner_id = 'y' WHERE mutex = 'h-manual-held';
COPY simba_mutex (mutex, owner_id, version, fence) FROM stdin;
h-copied	\N	0	0
h-copied-held	z	3	9
\.
SELECT count(*) AS logged FROM simba_mutex_history WHERE mutex LIKE 'h-%';

-- history times are the decision times of the tenures
SELECT bool_and(h.at = m.acquired_at) AS at_acquired_at
  FROM simba_mutex_history h JOIN simba_mutex m USING (mutex, fence)
 WHERE h.mutex = 'h' AND h.event = 'acquired' AND h.owner_id = 'd';

-- the setting is the superuser's: an application role can neither switch it
-- nor force a release
CREATE ROLE regress_simba_hist;
SELECT simba_grant('regress_simba_hist');
SET ROLE regress_simba_hist;
SET simba.history = off;
\echo :LAST_ERROR_SQLSTATE
SELECT simba_force_release('h');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) > 0 AS can_read_history FROM simba_mutex_history;
SELECT count(*) > 0 AS can_read_stats FROM simba_mutex_stats;
DELETE FROM simba_mutex_history;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT simba_revoke('regress_simba_hist');
DROP OWNED BY regress_simba_hist;
DROP ROLE regress_simba_hist;

-- retention
SELECT simba_history_prune('1 hour') AS pruned_recent;
SELECT simba_history_prune('0') AS pruned_all;
SELECT count(*) AS left_rows FROM simba_mutex_history;
SELECT simba_history_prune(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_history_prune('-1 day');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_force_release(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_force_release('');
\echo :LAST_ERROR_SQLSTATE
RESET simba.history;
