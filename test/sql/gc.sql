-- housekeeping: simba_mutex_gc(idle_for, max_rows) removes the rows of
-- mutexes idle for that long (released, lease or session ended), never one
-- that is held, under a live session or queued for (fair); fences never go
-- back; the view says since when a mutex is idle; bad input changes nothing
-- (gc_worker.sql: the collector simba.gc_idle_age starts; gc_race.spec: gc
-- against acquires and holders)
SET client_min_messages = warning;
SET simba.drop_live_leases = on;
DROP EXTENSION simba;
CREATE EXTENSION simba;
RESET simba.drop_live_leases;
RESET client_min_messages;
\set VERBOSITY terse

-- the settings: on by default, superuser only
SHOW simba.gc_idle_age;
SHOW simba.gc_interval;
CREATE ROLE regress_simba_gc;
SELECT simba_grant('regress_simba_gc');
SET ROLE regress_simba_gc;
SET simba.gc_idle_age = -1;
\echo :LAST_ERROR_SQLSTATE
SELECT simba_mutex_gc();
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

-- one of each: held; released now; lease lapsed; held under a live
-- session; under an ended session; free with a live fair waiter; free
-- before 1.4 recorded when (written by hand: released_at NULL); released
-- two hours and half an hour ago (by hand)
SELECT fence AS held_fence FROM simba_acquire('g-held', 'a', '1h', '1h') \gset
SELECT (simba_acquire('g-rel', 'a', '1h', '1h')).owner_id IS NOT NULL AND simba_release('g-rel', 'a') AS released;
SELECT transition_at AS lapse_end FROM simba_acquire('g-lapsed', 'a', '100ms', '0s') \gset
SELECT session_id AS live FROM simba_session_open('1h', '1h') \gset
SELECT owner_id FROM simba_acquire('g-sess', 'a', session_id => :'live');
SELECT session_id AS short, transition_at AS short_end FROM simba_session_open('100ms', '0s') \gset
SELECT owner_id FROM simba_acquire('g-ended', 'a', session_id => :'short');
SELECT owner_id FROM simba_fair_acquire('g-fair', 'h', '1h', '1h');
SELECT position FROM simba_fair_acquire('g-fair', 'w', '1h', '1h');
-- a plain release hands nothing over: the mutex free, w's entry live
SELECT simba_release('g-fair', 'h') AS released;
INSERT INTO simba_mutex (mutex, version, fence) VALUES ('g-old', 3, 1);
INSERT INTO simba_mutex (mutex, version, fence, released_at)
SELECT 'g-2h', 1, 1, now - '2 hours'::interval FROM simba_clock()
UNION ALL
SELECT 'g-30m', 1, 1, now - '30 minutes'::interval FROM simba_clock();
SELECT max(fence) AS max_fence FROM simba_mutex \gset
-- past both short leases
SELECT pg_sleep(greatest(0, extract(epoch FROM greatest(:'lapse_end'::timestamptz, :'short_end'::timestamptz)
                                                - (simba_clock()).now)) + 0.05) AS past_the_leases;

-- the view: idle_since for a free mutex (its release or the end of its
-- lease), NULL while held; waiting counts the live fair entries
SELECT mutex, state, idle_since IS NOT NULL AS idle,
       CASE WHEN mutex = 'g-lapsed' THEN idle_since = :'lapse_end'
            WHEN mutex = 'g-ended' THEN idle_since = :'short_end' END AS idle_since_lease_end,
       idle_since <= (simba_clock()).now AS not_in_future, waiting
  FROM simba_mutex_status ORDER BY mutex;

-- idle for an hour: only the rows released two hours ago and before 1.4
SELECT simba_mutex_gc('1 hour') AS removed;
SELECT string_agg(mutex, ' ' ORDER BY mutex) AS rows_left FROM simba_mutex;
-- at most max_rows at a time
SELECT simba_mutex_gc('0 seconds', 1) AS removed_one;
-- every idle row: held, under a live session and queued for stay
SELECT simba_mutex_gc() AS removed_rest;
SELECT string_agg(mutex, ' ' ORDER BY mutex) AS rows_left FROM simba_mutex;
-- the fair waiter gone, its mutex goes too
SELECT simba_fair_release('g-fair', 'w') AS withdrawn;
SELECT simba_mutex_gc() AS removed_fair;
-- the holders are untouched: they renew with their fence
SELECT fence = :held_fence AS same_fence FROM simba_acquire('g-held', 'a', '1h', '1h');
SELECT simba_fence_check('g-held', 'a', :held_fence);
SELECT owner_id FROM simba_owner('g-sess');
-- fences never go back: a collected name gets one above every earlier fence
SELECT owner_id, fence > :max_fence AS fence_above, version FROM simba_acquire('g-rel', 'b', '1h', '1h');
SELECT owner_id, fence > :max_fence AS fence_above FROM simba_acquire('g-2h', 'b', '1h', '1h');

-- bad input: a clear error, nothing removed
SELECT simba_release('g-rel', 'b') AS released;
SELECT count(*) AS rows_before FROM simba_mutex;
SELECT simba_mutex_gc(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_mutex_gc('-1 second');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_mutex_gc('1 day');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_mutex_gc('0 seconds', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS rows_after FROM simba_mutex;

SELECT simba_session_close(:'live') AS closed;
SELECT simba_revoke('regress_simba_gc');
DROP OWNED BY regress_simba_gc;
DROP ROLE regress_simba_gc;
