-- the read-write lock: many readers or one writer; writers preferred and
-- queued in order; fences (writers' own, readers' write epoch); downgrade,
-- refused upgrade; fence checks; release; bound to the role; bad input
SET client_min_messages = warning;
SET simba.drop_live_leases = on;
DROP EXTENSION simba;
CREATE EXTENSION simba;
RESET simba.drop_live_leases;
RESET client_min_messages;
\set VERBOSITY default
\set SHOW_CONTEXT never

-- readers share it; a reader's fence is the write epoch (0: never written)
SELECT mode, granted, fence, position FROM simba_rwlock_acquire('doc', 'r1', 'read');
SELECT mode, granted, fence, position FROM simba_rwlock_acquire('doc', 'r2', 'read');
SELECT rwlock, mode, holders, waiting_writers, write_fence FROM simba_rwlock_status;

-- a writer waits behind the readers: queued, first in line
SELECT mode, granted, fence, position, transition_at - acquired_at AS entry_lease
  FROM simba_rwlock_acquire('doc', 'w1', 'write', '1s', '1s');
-- writer preference: while it waits, a new reader is refused (and is not queued)
SELECT mode, granted, fence, position FROM simba_rwlock_acquire('doc', 'r3', 'read');
-- a reader already holding renews
SELECT mode, granted, fence FROM simba_rwlock_acquire('doc', 'r1', 'read');
-- a second writer queues behind the first
SELECT mode, granted, position FROM simba_rwlock_acquire('doc', 'w2', 'write');
SELECT mode, holders, waiting_writers FROM simba_rwlock_status;

-- a reader asking to write is refused with SB005, its read hold kept
SELECT simba_rwlock_acquire('doc', 'r1', 'write');
\echo :LAST_ERROR_SQLSTATE
SELECT holders FROM simba_rwlock_status;

-- readers leave: the first waiting writer gets it with a new fence, the second still waits
SELECT simba_rwlock_release('doc', 'r1') AS r1_released, simba_rwlock_release('doc', 'r2') AS r2_released;
SELECT mode, granted, position FROM simba_rwlock_acquire('doc', 'w2', 'write');
SELECT mode, granted, fence FROM simba_rwlock_acquire('doc', 'w1', 'write', '1h', '1h');
SELECT mode, granted, position FROM simba_rwlock_acquire('doc', 'w2', 'write');
-- the writer renews: same fence
SELECT mode, granted, fence FROM simba_rwlock_acquire('doc', 'w1', 'write', '1h', '1h');

-- fence checks: the writer with its fence passes; stale, non-holder, waiting writer fail
SELECT simba_rwlock_fence_check('doc', 'w1', 1);
SELECT simba_rwlock_fence_check('doc', 'w1', 2);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_rwlock_fence_check('doc', 'r3', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_rwlock_fence_check('doc', 'w2', 1);
\echo :LAST_ERROR_SQLSTATE

-- downgrade: the writer asks for read, keeps its fence as its epoch, no gap;
-- the waiting writer now waits for that reader; new readers still refused
SELECT mode, granted, fence FROM simba_rwlock_acquire('doc', 'w1', 'read', '1h', '1h');
SELECT simba_rwlock_fence_check('doc', 'w1', 1);
SELECT mode, holders, waiting_writers, write_fence FROM simba_rwlock_status;
SELECT mode, granted FROM simba_rwlock_acquire('doc', 'r4', 'read');
SELECT simba_rwlock_release('doc', 'w1') AS w1_released;
SELECT mode, granted, fence FROM simba_rwlock_acquire('doc', 'w2', 'write');

-- a waiting writer that stops asking drops out: its entry lapses with its
-- lease (2 s: still live at the next statement under valgrind)
SELECT mode AS w3_mode, position AS w3_position, transition_at AS w3_end
  FROM simba_rwlock_acquire('doc', 'w3', 'write', '2s', '0s') \gset
SELECT :'w3_mode' AS mode, :w3_position AS position, waiting_writers FROM simba_rwlock_status;
SELECT pg_sleep(greatest(0, extract(epoch FROM :'w3_end'::timestamptz - (simba_clock()).now)) + 0.05) AS past_its_lease;
SELECT waiting_writers FROM simba_rwlock_status;
SELECT simba_rwlock_release('doc', 'w2') AS w2_released;
-- readers now get in, with the new epoch
SELECT mode, granted, fence FROM simba_rwlock_acquire('doc', 'r5', 'read');

-- a writer gives up its place: release withdraws it (false: it held nothing)
SELECT mode FROM simba_rwlock_acquire('doc', 'w4', 'write');
SELECT simba_rwlock_release('doc', 'w4') AS w4_released;
SELECT waiting_writers FROM simba_rwlock_status;
SELECT simba_rwlock_release('doc', 'nobody') AS nobody_released;
SELECT simba_rwlock_release('never-used', 'nobody') AS unknown_released;

-- a writer's lease lapses: the hold is lost for good, the next write takes a new fence
SELECT simba_rwlock_release('doc', 'r5');
SELECT mode AS w5_mode, fence AS w5_fence, transition_at AS w5_end
  FROM simba_rwlock_acquire('doc', 'w5', 'write', '50ms', '0s') \gset
SELECT :'w5_mode' AS mode, :w5_fence AS fence;
SELECT pg_sleep(greatest(0, extract(epoch FROM :'w5_end'::timestamptz - (simba_clock()).now)) + 0.05) AS past_its_lease;
\set VERBOSITY terse
SELECT simba_rwlock_fence_check('doc', 'w5', 3);
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY default
SELECT mode, fence FROM simba_rwlock_acquire('doc', 'w5', 'write', '1h', '1h');
SELECT simba_rwlock_release('doc', 'w5');

-- acquired_at names a hold (clients tell a lost read hold by it, its fence
-- being the epoch): kept by renewals and by a downgrade, with the writer's
-- fence; new for a new hold, also for the same contender and for a writer
-- that waited (not its place in the queue)
SELECT acquired_at AS r_since FROM simba_rwlock_acquire('ids', 'r', 'read', '1h', '0s') \gset
SELECT mode, acquired_at = :'r_since' AS same FROM simba_rwlock_acquire('ids', 'r', 'read', '1h', '0s');
SELECT mode, position, acquired_at AS q_place FROM simba_rwlock_acquire('ids', 'w', 'write', '1h', '0s') \gset
\echo :mode :position
SELECT simba_rwlock_release('ids', 'r');
SELECT mode, fence AS w_fence, acquired_at > :'q_place' AS not_its_place, acquired_at AS w_since
  FROM simba_rwlock_acquire('ids', 'w', 'write', '1h', '0s') \gset
\echo :mode :not_its_place
SELECT mode, fence = :w_fence AS same_fence, acquired_at = :'w_since' AS same
  FROM simba_rwlock_acquire('ids', 'w', 'write', '1h', '0s');
SELECT mode, fence = :w_fence AS same_fence, acquired_at = :'w_since' AS same
  FROM simba_rwlock_acquire('ids', 'w', 'read', '1h', '0s');
SELECT mode, acquired_at = :'w_since' AS same FROM simba_rwlock_acquire('ids', 'w', 'read', '1h', '0s');
SELECT simba_rwlock_release('ids', 'w');
SELECT mode, fence = :w_fence AS same_epoch, acquired_at > :'w_since' AS new_hold
  FROM simba_rwlock_acquire('ids', 'w', 'read', '1h', '0s');
SELECT simba_rwlock_release('ids', 'w');
SELECT mode, fence > :w_fence AS new_fence, acquired_at > :'w_since' AS new_hold
  FROM simba_rwlock_acquire('ids', 'w', 'write', '1h', '0s');
SELECT simba_rwlock_release('ids', 'w');

-- under a session (session.sql has it end with the session): a read or
-- write hold shows the session's times and keeps acquired_at and fence when
-- renewed under it; a waiting writer's entry keeps its own lease, which
-- lapses when it stops asking, session or not; a call without the session
-- moves the hold off it; the session's close releases its holds, counts
-- them and lets the waiting writer in
SELECT session_id AS sid, transition_at AS sid_end FROM simba_session_open('1h', '0s') \gset
SELECT mode, fence, transition_at = :'sid_end' AS session_end, acquired_at AS sr_since
  FROM simba_rwlock_acquire('sr', 'r', 'read', '50ms', '0s', :'sid') \gset
\echo :mode :fence :session_end
SELECT mode, fence, transition_at = :'sid_end' AS session_end, acquired_at AS sw_since
  FROM simba_rwlock_acquire('sw', 'w', 'write', '50ms', '0s', :'sid') \gset
\echo :mode :fence :session_end
SELECT mode, position, transition_at < :'sid_end' AS own_lease, transition_at AS q_end
  FROM simba_rwlock_acquire('sr', 'q', 'write', '50ms', '0s', :'sid') \gset
\echo :mode :position :own_lease
SELECT pg_sleep(greatest(0, extract(epoch FROM :'q_end'::timestamptz - (simba_clock()).now)) + 0.05) AS past_its_entry;
SELECT rwlock, mode, holders, waiting_writers FROM simba_rwlock_status WHERE rwlock IN ('sr', 'sw') ORDER BY rwlock;
SELECT mode, acquired_at = :'sr_since' AS same, transition_at = :'sid_end' AS session_end
  FROM simba_rwlock_acquire('sr', 'r', 'read', session_id => :'sid');
SELECT mode, fence, acquired_at = :'sw_since' AS same, transition_at = :'sid_end' AS session_end
  FROM simba_rwlock_acquire('sw', 'w', 'write', session_id => :'sid');
SELECT simba_rwlock_fence_check('sw', 'w', 7);
SELECT mode, position FROM simba_rwlock_acquire('sr', 'q', 'write', '1h', '0s', :'sid');
SELECT mode, fence, acquired_at = :'sw_since' AS same, transition_at < :'sid_end' AS own_lease
  FROM simba_rwlock_acquire('sw', 'w', 'write', '1h', '0s');
SELECT state, rwlocks FROM simba_session_status WHERE session_id = :'sid';
SELECT simba_session_close(:'sid') AS released;
SELECT rwlock, mode, holders, waiting_writers FROM simba_rwlock_status WHERE rwlock IN ('sr', 'sw') ORDER BY rwlock;
SELECT mode, granted, fence FROM simba_rwlock_acquire('sr', 'q', 'write', '1h', '0s');
SELECT simba_rwlock_release('sr', 'q'), simba_rwlock_release('sw', 'w');

-- another role with the same contender id is another contender
CREATE ROLE regress_simba_rw;
SELECT simba_grant('regress_simba_rw');
SELECT mode, fence FROM simba_rwlock_acquire('shared', 'same-id', 'write', '1h', '1h');
SET ROLE regress_simba_rw;
SELECT mode, granted, position FROM simba_rwlock_acquire('shared', 'same-id', 'write');
SELECT simba_rwlock_fence_check('shared', 'same-id', 5);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_rwlock_release('shared', 'same-id') AS withdrawn;
SELECT mode, granted FROM simba_rwlock_acquire('shared', 'same-id', 'read');
RESET ROLE;
SELECT simba_rwlock_release('shared', 'same-id') AS released_by_holder;

-- bad input: a clear error, nothing changed
SELECT mode FROM simba_rwlock_acquire('keep', 'k', 'read', '1h', '1h');
CREATE TEMP TABLE before AS SELECT * FROM simba_rwlock_holder;
SELECT simba_rwlock_acquire(NULL, 'k', 'read');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_rwlock_acquire('keep', NULL, 'read');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_rwlock_acquire('keep', 'k', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_rwlock_acquire('keep', 'k', 'exclusive');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_rwlock_acquire('keep', 'k', 'READ');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_rwlock_acquire('', 'k', 'read');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_rwlock_acquire(repeat('x', 257), 'k', 'read');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_rwlock_acquire('keep', 'k', 'read', '0s');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_rwlock_acquire('keep', 'k', 'read', '1s', '-1s');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_rwlock_acquire('keep', 'k', 'read', '1 mon');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_rwlock_acquire('keep', 'k', 'read', '200000 hours');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_rwlock_release(NULL, 'k');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_rwlock_fence_check('keep', 'k', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_rwlock_fence_check('keep', 'k', -1);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_rwlock_acquire('keep', 'k', 'read', session_id => 'not-a-session');
\echo :LAST_ERROR_SQLSTATE
-- a session never opened, or closed (its message names it)
\set VERBOSITY sqlstate
SELECT simba_rwlock_acquire('keep', 'k', 'read', session_id => gen_random_uuid());
SELECT simba_rwlock_acquire('new', 'k', 'write', session_id => :'sid');
\set VERBOSITY default
SELECT count(*) AS rows_for_new FROM simba_rwlock WHERE rwlock = 'new';
SELECT count(*) AS changed_rows FROM (TABLE before EXCEPT ALL TABLE simba_rwlock_holder) d;
SELECT simba_rwlock_release('keep', 'k');

-- a live hold keeps the extension from being dropped (a new install would
-- start fences at 1 again); a read-only transaction cannot take one
SELECT mode FROM simba_rwlock_acquire('pinned', 'p', 'read', '1h', '1h');
\set VERBOSITY terse
DROP EXTENSION simba;
\echo :LAST_ERROR_SQLSTATE
BEGIN READ ONLY;
SELECT simba_rwlock_acquire('ro', 'p', 'read');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
\set VERBOSITY default
SELECT simba_rwlock_release('pinned', 'p');

SELECT simba_revoke('regress_simba_rw');
DROP OWNED BY regress_simba_rw;
DROP ROLE regress_simba_rw;
