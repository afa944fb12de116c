-- acquire, renew and release
-- (times are shown as durations: absolute server times differ per run)
-- a fresh install: fences below count from 1, whatever tests ran before
SET client_min_messages = warning;
SET simba.drop_live_leases = on;
DROP EXTENSION simba;
CREATE EXTENSION simba;
RESET client_min_messages;

-- first use creates the row: version 1, fence 1, lease counted from the decision
SELECT mutex, owner_id, version, fence,
       ttl_at - acquired_at AS ttl, transition_at - ttl_at AS transition,
       current_at = acquired_at AS decided_at_acquire
  FROM simba_acquire('acq', 'a', '10s', '5s');

-- another contender loses, sees the owner, and changes nothing
SELECT mutex, owner_id, version, fence, current_at > acquired_at AS decided_later
  FROM simba_acquire('acq', 'b', '10s', '5s');
SELECT owner_id, version, fence FROM simba_mutex WHERE mutex = 'acq';

-- the owner renews: version moves on, fence stays, the lease takes the new ttl
SELECT owner_id, version, fence, ttl_at - acquired_at AS ttl, transition_at - ttl_at AS transition
  FROM simba_acquire('acq', 'a', '20s', '1s');

-- defaults: ttl 10 s, transition 6 s
SELECT ttl_at - acquired_at AS ttl, transition_at - ttl_at AS transition
  FROM simba_acquire('acq-defaults', 'a');

-- only the owner releases; a second release is a no-op
SELECT simba_release('acq', 'b') AS by_other;
SELECT owner_id, version, fence FROM simba_owner('acq');
SELECT simba_release('acq', 'a') AS by_owner;
SELECT simba_release('acq', 'a') AS again;
SELECT owner_id, acquired_at, ttl_at, transition_at, version, fence FROM simba_owner('acq');

-- free again: anyone acquires, with the next fence
SELECT owner_id, version, fence FROM simba_acquire('acq', 'b', '10s', '5s');

-- releasing a mutex nobody ever used
SELECT simba_release('never-used', 'a') AS unknown;

-- an unknown mutex reads as free and is not created by reading
SELECT mutex, owner_id, acquired_at, ttl_at, transition_at, version, fence, current_at IS NOT NULL AS has_time
  FROM simba_owner('never-used');
SELECT count(*) AS rows FROM simba_mutex WHERE mutex = 'never-used';
-- several results in one row each keep their own values (the result of an
-- unknown mutex once lived in memory freed before the caller read it)
SELECT (simba_owner('u1')).mutex, (simba_owner('u2')).mutex, (simba_owner('u3')).mutex;
SELECT (simba_owner('u1')).mutex, (simba_acquire('u4', 'a')).mutex, (simba_owner('u5')).mutex,
       (simba_acquire('u6', 'a')).owner_id;
SELECT o.mutex, o.fence FROM generate_series(1, 3) AS i, LATERAL simba_owner('u' || i) AS o;

-- hostile and unusual names are data, never SQL
SELECT mutex, owner_id, fence
  FROM simba_acquire($$x'); DROP TABLE simba_mutex; --$$, $$o\'"\\; SELECT 1$$);
SELECT mutex, owner_id, fence FROM simba_acquire('ロック 🔒', 'prozeß-1');
SELECT mutex, owner_id FROM simba_acquire(E'tab\there', E'new\nline');
SELECT length(mutex) AS mutex_chars, length(owner_id) AS owner_chars
  FROM simba_acquire(repeat('m', 256), repeat('é', 256));
SELECT count(*) AS rows FROM simba_mutex;

-- the owner type is usable as a composite
SELECT (simba_owner('acq')).owner_id;
