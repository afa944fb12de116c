-- the fair lock: the mutex goes to contenders in arrival order; a waiter
-- keeps its place by asking again; a lapsed entry is skipped; the release
-- hands the mutex to the next waiter and wakes only it (fair_race.spec);
-- bad input changes nothing
SET client_min_messages = warning;
SET simba.drop_live_leases = on;
DROP EXTENSION simba;
CREATE EXTENSION simba;
RESET simba.drop_live_leases;
RESET client_min_messages;
\set VERBOSITY default
\set SHOW_CONTEXT never

-- the first takes it (an ordinary tenure: owner, fence, lease)
SELECT owner_id, fence, position, ttl_at - acquired_at AS ttl FROM simba_fair_acquire('f', 'h', '1h', '1h');
-- the others queue in arrival order; each has a channel of its own
SELECT owner_id, position, wake_channel ~ '^simba_fair_[0-9a-f]{16}$' AS channel FROM simba_fair_acquire('f', 'a', '1h', '1h');
SELECT owner_id, position FROM simba_fair_acquire('f', 'b', '1h', '1h');
SELECT owner_id, position FROM simba_fair_acquire('f', 'c', '1h', '1h');
SELECT count(DISTINCT wake_channel) AS channels
  FROM (VALUES ('a'), ('b'), ('c')) AS w(id), LATERAL simba_fair_acquire('f', w.id, '1h', '1h');
-- asking again keeps the place; the holder renews (same fence)
SELECT owner_id, position FROM simba_fair_acquire('f', 'b', '1h', '1h');
SELECT owner_id, fence, position FROM simba_fair_acquire('f', 'h', '1h', '1h');

-- released: the release hands the mutex to the head (a new fence, the
-- lease it asked for) and its entry goes; the others keep their places
SELECT simba_fair_release('f', 'h') AS released;
SELECT owner_id, position FROM simba_fair_acquire('f', 'c', '1h', '1h');
SELECT owner_id, fence, position FROM simba_fair_acquire('f', 'a', '1h', '1h');
SELECT owner_id, position FROM simba_fair_acquire('f', 'c', '1h', '1h');
SELECT mutex, owner_id FROM simba_mutex_queue ORDER BY enqueued_at;

-- a waiter that stops asking: its entry lapses and the next one is head
SELECT owner_id, position FROM simba_fair_acquire('f', 'b', '50ms', '0s');
SELECT pg_sleep(greatest(0, extract(epoch FROM (SELECT transition_at FROM simba_mutex_queue WHERE owner_id = 'b')
                                     - (simba_clock()).now)) + 0.05) AS past_its_entry;
SELECT simba_fair_release('f', 'a') AS released;
SELECT owner_id, fence, position FROM simba_fair_acquire('f', 'c', '1h', '1h');
SELECT count(*) AS entries FROM simba_mutex_queue;

-- a waiter that gives up withdraws its entry (false: it held nothing)
SELECT owner_id, position FROM simba_fair_acquire('f', 'd', '1h', '1h');
SELECT simba_fair_release('f', 'd') AS released;
SELECT count(*) AS entries FROM simba_mutex_queue;

-- the holder's lease lapses: the head takes it at its next call, a new
-- fence (2 s: still held at the next call under valgrind)
SELECT owner_id, position FROM simba_fair_acquire('f', 'e', '1h', '1h');
SELECT simba_fair_release('f', 'c');
SELECT fence AS short_fence, transition_at AS short_end FROM simba_fair_acquire('f', 'e', '2s', '0s') \gset
SELECT owner_id, position FROM simba_fair_acquire('f', 'g', '1h', '1h');
SELECT pg_sleep(greatest(0, extract(epoch FROM :'short_end'::timestamptz - (simba_clock()).now)) + 0.05) AS past_its_lease;
SELECT owner_id, fence > :short_fence AS new_fence, position FROM simba_fair_acquire('f', 'g', '1h', '1h');
SELECT simba_fair_release('f', 'g');

-- under a session (session.sql has it end with the session): the tenure
-- shows the session's times; a waiter's entry keeps its own lease, which
-- lapses when the waiter stops asking, session or not; the session's close
-- releases the tenure (and counts it: fair_race.spec shows the head woken),
-- and the head takes it at its next call
SELECT session_id AS sid, transition_at AS sid_end FROM simba_session_open('1h', '0s') \gset
SELECT owner_id, fence, position, transition_at = :'sid_end' AS session_end
  FROM simba_fair_acquire('sf', 'h', '50ms', '0s', :'sid');
SELECT owner_id, position FROM simba_fair_acquire('sf', 'a', '2s', '0s', :'sid');
SELECT owner_id, position FROM simba_fair_acquire('sf', 'b', '1h', '0s', :'sid');
SELECT owner_id, transition_at < :'sid_end' AS own_lease FROM simba_mutex_queue WHERE mutex = 'sf' ORDER BY enqueued_at;
SELECT pg_sleep(greatest(0, extract(epoch FROM (SELECT transition_at FROM simba_mutex_queue WHERE mutex = 'sf' AND owner_id = 'a')
                                     - (simba_clock()).now)) + 0.05) AS past_its_entry;
SELECT owner_id, fence, position FROM simba_fair_acquire('sf', 'b', '1h', '0s', :'sid');
SELECT owner_id, fence, position FROM simba_fair_acquire('sf', 'h', session_id => :'sid');
SELECT state, mutexes FROM simba_session_status WHERE session_id = :'sid';
SELECT simba_session_close(:'sid') AS released;
SELECT owner_id, fence, position FROM simba_fair_acquire('sf', 'b', '1h', '0s');
SELECT simba_fair_release('sf', 'b') AS released;
SELECT count(*) AS entries FROM simba_mutex_queue WHERE mutex = 'sf';

-- the release hands the mutex to a head queued under its session: the
-- tenure lives with that session, and the head's next call under it only
-- reads (nothing written: the handoff's one commit is the release's); a
-- head whose session has ended is only woken, and keeps its place: asking
-- again under a new session it takes the mutex
SELECT session_id AS hs FROM simba_session_open('1h', '0s') \gset
SELECT owner_id FROM simba_fair_acquire('hf', 'h', '1h', '0s');
SELECT position FROM simba_fair_acquire('hf', 'w', '1h', '0s', :'hs');
SELECT simba_fair_release('hf', 'h') AS released;
SELECT owner_id, session_id = :'hs' AS under_its_session, version AS handed_version
  FROM simba_mutex WHERE mutex = 'hf' \gset
SELECT :'owner_id' AS owner, :'under_its_session' AS under_its_session;
SELECT owner_id, position, version = :handed_version AS nothing_written
  FROM simba_fair_acquire('hf', 'w', '1h', '0s', :'hs');
SELECT count(*) AS entries FROM simba_mutex_queue WHERE mutex = 'hf';
SELECT session_id AS gone, transition_at AS gone_end FROM simba_session_open('100ms', '0s') \gset
SELECT position FROM simba_fair_acquire('hf', 'x', '1h', '0s', :'gone');
SELECT position FROM simba_fair_acquire('hf', 'y', '1h', '0s');
SELECT pg_sleep(greatest(0, extract(epoch FROM :'gone_end'::timestamptz - (simba_clock()).now)) + 0.05) AS past_its_session;
SELECT simba_fair_release('hf', 'w') AS released;
SELECT owner_id IS NULL AS free, (SELECT count(*) FROM simba_mutex_queue WHERE mutex = 'hf') AS entries
  FROM simba_owner('hf');
SELECT session_id AS again FROM simba_session_open('1h', '0s') \gset
SELECT owner_id, position FROM simba_fair_acquire('hf', 'x', '1h', '0s', :'again');
SELECT simba_fair_release('hf', 'x') AS released;
SELECT simba_fair_release('hf', 'y') AS released;
SELECT simba_session_close(:'hs') + simba_session_close(:'again') AS closed;

-- another role with the same contender id is another contender, with another channel
CREATE ROLE regress_simba_fair;
SELECT simba_grant('regress_simba_fair');
SELECT owner_id, position, wake_channel AS mine FROM simba_fair_acquire('shared', 'id', '1h', '1h') \gset
SET ROLE regress_simba_fair;
SELECT owner_id, owner_role, position, wake_channel <> :'mine' AS other_channel FROM simba_fair_acquire('shared', 'id', '1h', '1h');
SELECT simba_fair_release('shared', 'id') AS released_by_other_role;
RESET ROLE;
SELECT simba_fair_release('shared', 'id') AS released_by_holder;

-- bad input: a clear error, nothing changed
SELECT owner_id FROM simba_fair_acquire('keep', 'k', '1h', '1h');
SELECT position FROM simba_fair_acquire('keep', 'w', '1h', '1h');
CREATE TEMP TABLE before AS SELECT * FROM simba_mutex_queue;
SELECT simba_fair_acquire(NULL, 'k');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_fair_acquire('keep', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_fair_acquire('', 'k');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_fair_acquire('keep', repeat('k', 257));
\echo :LAST_ERROR_SQLSTATE
SELECT simba_fair_acquire('keep', 'w', '-1s');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_fair_acquire('keep', 'w', '1s', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_fair_acquire('keep', 'w', '2 days');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_fair_release(NULL, 'k');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_fair_release('keep', '');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_fair_acquire('keep', 'w', session_id => 'not-a-session');
\echo :LAST_ERROR_SQLSTATE
-- a session never opened, or closed (its message names it)
\set VERBOSITY sqlstate
SELECT simba_fair_acquire('keep', 'w', session_id => gen_random_uuid());
SELECT simba_fair_acquire('new', 'w', session_id => :'sid');
\set VERBOSITY default
SELECT count(*) AS rows_for_new FROM simba_mutex WHERE mutex = 'new';
SELECT count(*) AS changed_rows FROM (TABLE before EXCEPT ALL TABLE simba_mutex_queue) d;
SELECT simba_fair_release('keep', 'w'), simba_fair_release('keep', 'k');

SELECT simba_revoke('regress_simba_fair');
DROP OWNED BY regress_simba_fair;
DROP ROLE regress_simba_fair;
