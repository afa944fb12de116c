-- simba 1.3 -> 1.4: the second security review (SECURITY.md lists each
-- finding with the test that covers it).
--
-- * A lease belongs to the role whose privileges the call runs with
--   (current_user, a SECURITY DEFINER wrapper's owner), by OID within the
--   cluster: the functions are no longer SECURITY DEFINER (their statements
--   run as the owner from C) and refuse inside security-restricted
--   operations. A tenure without a role (taken before 1.3) is adopted by
--   nobody.
-- * Leases count on simba's clock, which a step of the wall clock does not
--   move (clock_origin; simba_clock()).
-- * Permits: refresh and fence check lock only the caller's permit; a grant
--   of nothing leaves no lock.
-- * The status views are security barriers; simba_mutex_gc removes the rows
--   of free mutexes; the functions plan without sequential scans.
-- * The functions carry no SET search_path: their statements already run
--   under a search path of schema OIDs (simba_as_owner), and the clause cost
--   every call a save and restore of the settings. simba_grant and
--   simba_revoke, which run SQL they compose, keep it.
-- * DROP EXTENSION refuses while leases or permits are live.
-- * simba_renew renews a tenure by its fence and never takes the mutex: a
--   holder that lost its tenure does not silently get a new one.
-- * Sessions: simba_session_open/keepalive/close, and a session_id argument
--   of simba_acquire and simba_semaphore_acquire (so both are re-created:
--   the grants are given again below) and of the new simba_acquire_all,
--   simba_fair_acquire and simba_rwlock_acquire.
-- * Privileges: a role that holds anything simba_grant does not give (from
--   default privileges, say) keeps nothing; roles granted before get the
--   functions added since.

\echo Use "ALTER EXTENSION simba UPDATE TO '1.4'" to load this file. \quit

-- Holders by role OID (owner_sysid names the cluster of that OID), lease
-- times by clock origin; a permit's last renewal.
ALTER TABLE @extschema@.simba_mutex
    ADD COLUMN owner_roleid oid,
    ADD COLUMN owner_sysid bigint,
    ADD COLUMN clock_origin timestamptz,
    ADD COLUMN session_id uuid,
    ADD COLUMN released_at timestamptz;
ALTER TABLE @extschema@.simba_semaphore_permit
    ADD COLUMN holder_roleid oid,
    ADD COLUMN holder_sysid bigint,
    ADD COLUMN renewed_at timestamptz,
    ADD COLUMN clock_origin timestamptz,
    ADD COLUMN session_id uuid;
COMMENT ON TABLE @extschema@.simba_mutex IS
  'simba: one row per mutex; owner_id NULL = free; the holder is owner_id with the role owner_roleid of cluster owner_sysid (owner_role by name in another cluster); times on the clock of clock_origin, or the lease of session session_id (simba_session_lease); released_at: when it was last released. Written only by the simba_* functions; simba_mutex_gc (and the collector simba.gc_idle_age starts) removes rows of idle mutexes (fences come from a sequence, never reused).';
COMMENT ON TABLE @extschema@.simba_semaphore_permit IS
  'simba: one row per permit slot; live while expires_at > now, or while its session session_id lives. Written only by the simba_semaphore_* functions.';
CREATE INDEX simba_mutex_session ON @extschema@.simba_mutex (session_id) WHERE session_id IS NOT NULL;
CREATE INDEX simba_semaphore_permit_session ON @extschema@.simba_semaphore_permit (session_id)
    WHERE session_id IS NOT NULL;

-- Sessions (session.c): one lease for every tenure, permit and read-write hold taken under it.
CREATE TABLE @extschema@.simba_session_lease (
    session_id    uuid        PRIMARY KEY,
    owner_role    name        NOT NULL,
    owner_roleid  oid         NOT NULL,
    owner_sysid   bigint      NOT NULL,
    opened_at     timestamptz NOT NULL,
    renewed_at    timestamptz NOT NULL,
    ttl_at        timestamptz NOT NULL,
    transition_at timestamptz NOT NULL,
    ttl           interval    NOT NULL,
    transition    interval    NOT NULL,
    clock_origin  timestamptz,
    revoked       bigint      NOT NULL DEFAULT 0
) WITH (fillfactor = 50);  -- every keepalive rewrites the row
COMMENT ON TABLE @extschema@.simba_session_lease IS
  'simba: one row per session, of the role owner_roleid of cluster owner_sysid; live until transition_at (on the clock of clock_origin); a keepalive renews it by ttl and transition; revoked counts its tenures simba_force_release took. Written only by the simba_* functions; a row is deleted only once no mutex, permit or read-write hold refers to it.';
SELECT pg_catalog.pg_extension_config_dump('@extschema@.simba_session_lease', '');

CREATE TYPE @extschema@.simba_session AS (
    session_id    uuid,
    ttl_at        timestamptz,
    transition_at timestamptz,
    current_at    timestamptz,
    revoked       bigint
);
COMMENT ON TYPE @extschema@.simba_session IS
  'simba: a session''s lease as seen at current_at: keep it alive before ttl_at; it ends at transition_at; revoked: how many of its tenures an admin has taken (simba_force_release) since it opened';

CREATE FUNCTION @extschema@.simba_session_open(
    ttl        interval DEFAULT '10 seconds',
    transition interval DEFAULT '6 seconds')
RETURNS @extschema@.simba_session
AS 'MODULE_PATHNAME', 'simba_session_open_1_4'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.simba_session_open(interval, interval) IS
  'simba: open a session of the caller''s role: mutexes (simba_acquire, simba_acquire_all, simba_fair_acquire), permits and read-write holds acquired under it live as long as it does';

CREATE FUNCTION @extschema@.simba_session_keepalive(session_id uuid)
RETURNS @extschema@.simba_session
AS 'MODULE_PATHNAME', 'simba_session_keepalive_1_4'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.simba_session_keepalive(uuid) IS
  'simba: renew the caller''s live session by its ttl and transition; SB004 if it has ended, is unknown or another role''s (then nothing it held is held)';

CREATE FUNCTION @extschema@.simba_session_close(session_id uuid)
RETURNS bigint
AS 'MODULE_PATHNAME', 'simba_session_close_1_4'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.simba_session_close(uuid) IS
  'simba: end the caller''s session, releasing every mutex, permit and read-write hold held under it (NOTIFY simba for each, as their releases send; a fair queue''s head on its wake_channel); returns how many it released (0 for an ended or unknown session)';

CREATE FUNCTION @extschema@.simba_session_gc()
RETURNS bigint
AS 'MODULE_PATHNAME', 'simba_session_gc_1_4'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.simba_session_gc() IS
  'simba: admin only — remove ended sessions (what they held becomes leases that ended with them); returns how many';

-- The owner row says which session a tenure lives by (NULL: its own lease).
ALTER TYPE @extschema@.simba_owner ADD ATTRIBUTE session_id uuid;
COMMENT ON TYPE @extschema@.simba_owner IS
  'simba: a mutex''s lease as seen at current_at (server time of the decision); owner_id NULL = free; the holder is owner_id together with owner_role; session_id: the session the tenure lives by (NULL: its own lease)';

-- The functions on their 1.4 entry points, as the caller; the two acquires
-- gain a session_id argument, so they are created anew.
DROP FUNCTION @extschema@.simba_acquire(text, text, interval, interval);
CREATE FUNCTION @extschema@.simba_acquire(
    mutex        text,
    contender_id text,
    ttl          interval DEFAULT '10 seconds',
    transition   interval DEFAULT '6 seconds',
    session_id   uuid     DEFAULT NULL)
RETURNS @extschema@.simba_owner
AS 'MODULE_PATHNAME', 'simba_acquire_1_4'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.simba_acquire(text, text, interval, interval, uuid) IS
  'simba: acquire the mutex when free or past transition_at, renew it when already owner; under a session (session_id), the tenure lives as long as the session and ttl and transition are not used; returns the owner after the attempt';
CREATE OR REPLACE FUNCTION @extschema@.simba_release(mutex text, contender_id text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'simba_release_1_4'
LANGUAGE C VOLATILE;
CREATE OR REPLACE FUNCTION @extschema@.simba_owner(mutex text)
RETURNS @extschema@.simba_owner
AS 'MODULE_PATHNAME', 'simba_owner_1_4'
LANGUAGE C VOLATILE;
CREATE OR REPLACE FUNCTION @extschema@.simba_fence_check(mutex text, contender_id text, fence bigint)
RETURNS void
AS 'MODULE_PATHNAME', 'simba_fence_check_1_4'
LANGUAGE C VOLATILE;
DROP FUNCTION @extschema@.simba_semaphore_acquire(text, text, integer, interval, text);
CREATE FUNCTION @extschema@.simba_semaphore_acquire(
    key        text,
    holder     text,
    permits    integer,
    ttl        interval DEFAULT '10 seconds',
    context    text     DEFAULT NULL,
    session_id uuid     DEFAULT NULL)
RETURNS @extschema@.simba_permit
AS 'MODULE_PATHNAME', 'simba_semaphore_acquire_1_4'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.simba_semaphore_acquire(text, text, integer, interval, text, uuid) IS
  'simba: a permit of key if fewer than permits are live, else NULL; waits for grants of key in flight, and fails with 55P03 after 1 s when a grant left in an open transaction holds key; under a session (session_id) it lives as long as the session and ttl is not used';
CREATE OR REPLACE FUNCTION @extschema@.simba_semaphore_refresh(key text, token uuid, ttl interval)
RETURNS boolean
AS 'MODULE_PATHNAME', 'simba_semaphore_refresh_1_4'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.simba_semaphore_refresh(text, uuid, interval) IS
  'simba: extend a live permit to now + ttl (under a session: no change); false once it expired or was taken over';
CREATE OR REPLACE FUNCTION @extschema@.simba_semaphore_release(key text, token uuid)
RETURNS boolean
AS 'MODULE_PATHNAME', 'simba_semaphore_release_1_4'
LANGUAGE C VOLATILE;
CREATE OR REPLACE FUNCTION @extschema@.simba_semaphore_fence_check(key text, token uuid, fence bigint)
RETURNS void
AS 'MODULE_PATHNAME', 'simba_semaphore_fence_check_1_4'
LANGUAGE C VOLATILE;
CREATE OR REPLACE FUNCTION @extschema@.simba_semaphore_gc()
RETURNS bigint
AS 'MODULE_PATHNAME', 'simba_semaphore_gc_1_4'
LANGUAGE C VOLATILE;
CREATE OR REPLACE FUNCTION @extschema@.simba_history_prune(keep interval)
RETURNS bigint
AS 'MODULE_PATHNAME', 'simba_history_prune'
LANGUAGE C VOLATILE;
CREATE OR REPLACE FUNCTION @extschema@.simba_force_release(mutex text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'simba_force_release_1_4'
LANGUAGE C VOLATILE;
CREATE OR REPLACE FUNCTION @extschema@.simba_grant(role regrole)
RETURNS void
AS 'MODULE_PATHNAME', 'simba_grant_1_4'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
CREATE OR REPLACE FUNCTION @extschema@.simba_revoke(role regrole)
RETURNS void
AS 'MODULE_PATHNAME', 'simba_revoke_1_4'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

-- simba's clock: what the functions and the views count leases with.
-- New in 1.4: renewal that never takes the mutex (a lost tenure stays lost).
CREATE FUNCTION @extschema@.simba_renew(
    mutex        text,
    contender_id text,
    fence        bigint,
    ttl          interval DEFAULT '10 seconds',
    transition   interval DEFAULT '6 seconds')
RETURNS @extschema@.simba_owner
AS 'MODULE_PATHNAME', 'simba_renew_1_4'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.simba_renew(text, text, bigint, interval, interval) IS
  'simba: renew the caller''s live tenure with this fence; never takes the mutex (a lost tenure stays lost); returns the owner after the attempt';

CREATE FUNCTION @extschema@.simba_clock(OUT now timestamptz, OUT origin timestamptz)
RETURNS record
AS 'MODULE_PATHNAME', 'simba_clock'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.simba_clock() IS
  'simba: now on simba''s clock (the wall clock at origin, advanced by the boot clock since: a step of the wall clock does not move it) and that origin; on a standby the wall clock and NULL';

-- A lease written under another clock origin (before a reboot, a promotion
-- or a restore) counts again in full from this origin: shift moves its
-- times there. A security barrier: a caller's function in WHERE sees only
-- the rows the view shows.
-- What 1.3 wrote: roles by OID where the role still has that name; times
-- on this clock, whose origin starts now. A permit counts as last renewed
-- now (or at its end): it never lasts less than its stored end.
UPDATE @extschema@.simba_mutex AS m
   SET owner_roleid = r.oid, owner_sysid = c.system_identifier
  FROM pg_catalog.pg_roles AS r, pg_catalog.pg_control_system() AS c
 WHERE r.rolname = m.owner_role;
UPDATE @extschema@.simba_mutex SET clock_origin = (SELECT origin FROM @extschema@.simba_clock());
UPDATE @extschema@.simba_semaphore_permit AS p
   SET holder_roleid = r.oid, holder_sysid = c.system_identifier
  FROM pg_catalog.pg_roles AS r, pg_catalog.pg_control_system() AS c
 WHERE r.rolname = p.holder_role;
UPDATE @extschema@.simba_semaphore_permit
   SET renewed_at = LEAST(pg_catalog.now(), expires_at),
       clock_origin = (SELECT origin FROM @extschema@.simba_clock());
ALTER TABLE @extschema@.simba_semaphore_permit ALTER COLUMN renewed_at SET NOT NULL;

CREATE OR REPLACE VIEW @extschema@.simba_semaphore_status WITH (security_barrier) AS
SELECT p.key, p.slot, p.holder, p.context, p.acquired_at, l.expires_at,
       l.expires_at - c.now AS time_left, p.fence, s.permits, p.holder_role, p.session_id
  FROM @extschema@.simba_semaphore_permit p
  JOIN @extschema@.simba_semaphore s USING (key)
  LEFT JOIN @extschema@.simba_session_lease ss ON ss.session_id = p.session_id
 CROSS JOIN @extschema@.simba_clock() c
 CROSS JOIN LATERAL (SELECT CASE WHEN ss.session_id IS NOT NULL
                                 THEN CASE WHEN ss.clock_origin IS DISTINCT FROM c.origin AND c.origin IS NOT NULL
                                           THEN c.origin + pg_catalog.make_interval(secs => pg_catalog.date_part('epoch', ss.transition_at - ss.renewed_at))
                                           ELSE ss.transition_at END
                                 WHEN p.clock_origin IS DISTINCT FROM c.origin AND c.origin IS NOT NULL
                                 THEN c.origin + pg_catalog.make_interval(secs => pg_catalog.date_part('epoch', p.expires_at - p.renewed_at))
                                 ELSE p.expires_at END AS expires_at) l
 WHERE l.expires_at > c.now;

COMMENT ON VIEW @extschema@.simba_semaphore_status IS
  'simba: every live permit now, with the limit of its key (permits); expires_at is its session''s end under a session';

CREATE FUNCTION @extschema@.simba_mutex_gc(idle_for interval DEFAULT '0 seconds', max_rows bigint DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'simba_mutex_gc'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.simba_mutex_gc(interval, bigint) IS
  'simba: admin only — remove the rows of mutexes free for idle_for or longer (released, or their lease or session ended), no live fair queue entry naming them and no transaction holding them locked, at most max_rows (NULL: all); fences stay above every fence issued; returns how many';

-- When the idle-row collector (gc.c) last claimed a collection of this
-- database: one row, written by the collector alone, so a database is
-- collected at most once per simba.gc_interval however many connections
-- start it. Owner only, and not dumped (no pg_extension_config_dump): a
-- restored database is collected at its next interval.
CREATE TABLE @extschema@.simba_gc_state (
    id        boolean     PRIMARY KEY DEFAULT true CHECK (id),
    last_run  timestamptz NOT NULL
);
COMMENT ON TABLE @extschema@.simba_gc_state IS
  'simba: when the idle-row collector (simba.gc_idle_age) last ran in this database; one row, written by the collector alone, which runs at most once per simba.gc_interval';

-- DROP EXTENSION refuses while leases or permits are live (drop_guard.c).
CREATE FUNCTION @extschema@.simba_drop_guard()
RETURNS event_trigger
AS 'MODULE_PATHNAME', 'simba_drop_guard'
LANGUAGE C;
COMMENT ON FUNCTION @extschema@.simba_drop_guard() IS
  'simba: refuse DROP EXTENSION simba (or DROP SCHEMA CASCADE of its schema, or DROP OWNED BY the owner of either) while leases or permits are live, unless simba.drop_live_leases is on';
CREATE EVENT TRIGGER simba_drop_guard ON ddl_command_start
  WHEN TAG IN ('DROP EXTENSION', 'DROP SCHEMA', 'DROP OWNED')
  EXECUTE FUNCTION @extschema@.simba_drop_guard();
COMMENT ON EVENT TRIGGER simba_drop_guard IS
  'simba: refuse to drop simba while leases or permits are live (a re-created extension starts fences at 1)';

-- SIMBA_LEASE_END of the lock path's statements (simba.h, clock.c): the
-- owner's only, as its statements run as the owner.
CREATE FUNCTION @extschema@.simba_lease_end(t timestamptz, since timestamptz, clock_origin timestamptz,
                                            origin timestamptz)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'simba_lease_end'
LANGUAGE C IMMUTABLE PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.simba_lease_end(timestamptz, timestamptz, timestamptz, timestamptz) IS
  'simba (internal): a lease end t written under clock_origin (renewed at since) as the clock of origin counts it';

-- SIMBA_SESSION_ENDED of the lock path's statements (simba.h, session.c):
-- the owner's only, as its statements run as the owner.
CREATE FUNCTION @extschema@.simba_session_ended(session_id uuid, t timestamptz, origin timestamptz, lock boolean)
RETURNS boolean
AS 'MODULE_PATHNAME', 'simba_session_ended'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.simba_session_ended(uuid, timestamptz, timestamptz, boolean) IS
  'simba (internal): whether the session has ended at t on the clock of origin, its row locked FOR SHARE when it has and lock';

-- SIMBA_SESSION_TIME_OR of the lock path's statements (simba.h, session.c):
-- the owner's only, as its statements run as the owner.
CREATE FUNCTION @extschema@.simba_session_time(session_id uuid, col text, origin timestamptz)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'simba_session_time'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.simba_session_time(uuid, text, timestamptz) IS
  'simba (internal): the session''s ttl_at or transition_at (col) on the clock of origin, NULL if the statement''s snapshot has no such session';

-- Lease times as clients read them (clock.c): exact, and without the
-- numeric arithmetic of extract(epoch ...). Looks nothing up, so no
-- search_path to pin; EXECUTE comes with simba_grant.
CREATE FUNCTION @extschema@.simba_epoch_us(t timestamptz)
RETURNS bigint
AS 'MODULE_PATHNAME', 'simba_epoch_us'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.simba_epoch_us(timestamptz) IS
  'simba: t as microseconds since 1970-01-01 00:00 UTC, exactly (how clients read lease times); 22008 for infinite or out-of-range times';

-- Multi-lock (mutex.c): all or nothing, rows taken in byte order of the names.
CREATE FUNCTION @extschema@.simba_acquire_all(
    mutexes      text[],
    contender_id text,
    ttl          interval DEFAULT '10 seconds',
    transition   interval DEFAULT '6 seconds',
    session_id   uuid     DEFAULT NULL)
RETURNS SETOF @extschema@.simba_owner
AS 'MODULE_PATHNAME', 'simba_acquire_all_1_4'
LANGUAGE C VOLATILE ROWS 10;
COMMENT ON FUNCTION @extschema@.simba_acquire_all(text[], text, interval, interval, uuid) IS
  'simba: acquire (or renew) every one of the mutexes (at most 1000, each once) or none: one row per mutex in byte order of the names, every owner the caller''s afterwards, or the owners as they stand and nothing changed; each mutex keeps its own fence; under a session (session_id) every one lives as long as the session and ttl and transition are not used';

CREATE FUNCTION @extschema@.simba_release_all(mutexes text[], contender_id text)
RETURNS integer
AS 'MODULE_PATHNAME', 'simba_release_all_1_4'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.simba_release_all(text[], text) IS
  'simba: release every one of the mutexes the caller holds, in byte order of the names, NOTIFY simba for each; returns how many were released';

-- Read-write locks (rwlock.c): many readers or one writer, writers preferred.
CREATE SEQUENCE @extschema@.simba_rwlock_fence;
COMMENT ON SEQUENCE @extschema@.simba_rwlock_fence IS
  'simba: writers'' fences of read-write locks (never reused)';
CREATE TABLE @extschema@.simba_rwlock (
    rwlock      text   PRIMARY KEY,
    write_fence bigint NOT NULL DEFAULT 0,
    version     bigint NOT NULL DEFAULT 0
);
COMMENT ON TABLE @extschema@.simba_rwlock IS
  'simba: one row per read-write lock; write_fence is the latest writer''s fence, the write epoch a reader''s fence names; every grant locks the row. Written only by the simba_rwlock_* functions';
CREATE TABLE @extschema@.simba_rwlock_holder (
    rwlock        text        NOT NULL,
    owner_id      text        NOT NULL,
    owner_role    name        NOT NULL,
    owner_roleid  oid         NOT NULL,
    owner_sysid   bigint      NOT NULL,
    mode          text        NOT NULL CHECK (mode IN ('read', 'write', 'waiting')),
    fence         bigint      NOT NULL,
    acquired_at   timestamptz NOT NULL,
    renewed_at    timestamptz NOT NULL,
    ttl_at        timestamptz NOT NULL,
    transition_at timestamptz NOT NULL,
    clock_origin  timestamptz,
    session_id    uuid,
    PRIMARY KEY (rwlock, owner_id, owner_roleid, owner_sysid)
);
COMMENT ON TABLE @extschema@.simba_rwlock_holder IS
  'simba: readers, the writer and the waiting writers of each read-write lock, each with its lease (from renewed_at, on the clock of clock_origin), or a reader''s or writer''s the lease of session session_id (simba_session_lease); a waiting writer''s acquired_at is its place in the queue. Written only by the simba_rwlock_* functions';
CREATE INDEX simba_rwlock_holder_session ON @extschema@.simba_rwlock_holder (session_id) WHERE session_id IS NOT NULL;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.simba_rwlock', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.simba_rwlock_holder', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.simba_rwlock_fence', '');

CREATE TYPE @extschema@.simba_rwlock_grant AS (
    rwlock        text,
    contender_id  text,
    mode          text,
    granted       boolean,
    fence         bigint,
    acquired_at   timestamptz,
    ttl_at        timestamptz,
    transition_at timestamptz,
    current_at    timestamptz,
    position      integer
);
COMMENT ON TYPE @extschema@.simba_rwlock_grant IS
  'simba: the caller''s hold of a read-write lock at current_at: mode read or write (granted, with fence: the writer''s own, or for a reader the write epoch), waiting (a writer queued at position, 1 = next; ask again before transition_at to keep the place), or NULL (a reader refused: a writer holds or waits)';

CREATE FUNCTION @extschema@.simba_rwlock_acquire(
    rwlock       text,
    contender_id text,
    mode         text,
    ttl          interval DEFAULT '10 seconds',
    transition   interval DEFAULT '6 seconds',
    session_id   uuid     DEFAULT NULL)
RETURNS @extschema@.simba_rwlock_grant
AS 'MODULE_PATHNAME', 'simba_rwlock_acquire_1_4'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.simba_rwlock_acquire(text, text, text, interval, interval, uuid) IS
  'simba: take, renew or wait for a read-write lock in mode read or write: many readers or one writer; while a writer waits new readers are refused; a writer asking for read downgrades without a gap; a reader asking for write is refused (SB005); under a session (session_id) a read or write hold lives as long as the session, a waiting writer''s place by its own ttl and transition';

CREATE FUNCTION @extschema@.simba_rwlock_release(rwlock text, contender_id text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'simba_rwlock_release_1_4'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.simba_rwlock_release(text, text) IS
  'simba: release the caller''s live read or write hold (true) or withdraw its place in the writers'' queue (false), NOTIFY simba with the lock''s name (not for a reader while no writer waits: nobody waits for it); false and no change otherwise';

CREATE FUNCTION @extschema@.simba_rwlock_fence_check(rwlock text, contender_id text, fence bigint)
RETURNS void
AS 'MODULE_PATHNAME', 'simba_rwlock_fence_check_1_4'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.simba_rwlock_fence_check(text, text, bigint) IS
  'simba: error (SB001 not a holder, SB002 stale fence, SB003 lease expired, or its session ended) unless the caller holds the read-write lock with this fence; locks the lock''s row FOR SHARE until the calling transaction ends: no grant until then';

-- Fair (FIFO) lock (fair.c): a mutex whose contenders queue; only the head is woken.
CREATE TABLE @extschema@.simba_mutex_queue (
    mutex         text        NOT NULL,
    owner_id      text        NOT NULL,
    owner_role    name        NOT NULL,
    owner_roleid  oid         NOT NULL,
    owner_sysid   bigint      NOT NULL,
    enqueued_at   timestamptz NOT NULL,
    renewed_at    timestamptz NOT NULL,
    transition_at timestamptz NOT NULL,
    clock_origin  timestamptz,
    ttl           interval,
    transition    interval,
    session_id    uuid,
    PRIMARY KEY (mutex, owner_id, owner_roleid, owner_sysid)
);
COMMENT ON TABLE @extschema@.simba_mutex_queue IS
  'simba: contenders waiting for a mutex through simba_fair_acquire, in order of enqueued_at; an entry lapses at transition_at (from renewed_at, on the clock of clock_origin) unless its contender asks again; ttl and transition, or session_id, are the lease a release hands the head of the queue. Written only by the simba_fair_* functions';
SELECT pg_catalog.pg_extension_config_dump('@extschema@.simba_mutex_queue', '');

-- The status of every mutex, now with how long a free one has been idle and
-- how many wait in its fair queue (after the queue's table).
CREATE OR REPLACE VIEW @extschema@.simba_mutex_status WITH (security_barrier) AS
SELECT m.mutex,
       CASE WHEN l.live THEN m.owner_id END AS owner_id,
       CASE WHEN NOT l.live THEN 'free'
            WHEN e.ttl_at > c.now THEN 'held'
            ELSE 'transition' END AS state,
       m.acquired_at + s.shift AS acquired_at,
       e.ttl_at,
       e.transition_at,
       CASE WHEN l.live THEN e.transition_at - c.now END AS time_left,
       m.fence,
       m.version,
       CASE WHEN l.live THEN m.owner_role END AS owner_role,
       m.session_id,
       CASE WHEN l.live THEN NULL
            WHEN m.owner_id IS NULL THEN LEAST(m.released_at, c.now)
            ELSE e.transition_at END AS idle_since,
       (SELECT pg_catalog.count(*) FROM @extschema@.simba_mutex_queue q
         WHERE q.mutex = m.mutex
           AND CASE WHEN q.clock_origin IS DISTINCT FROM c.origin AND c.origin IS NOT NULL
                    THEN c.origin + pg_catalog.make_interval(secs => pg_catalog.date_part('epoch', q.transition_at - q.renewed_at))
                    ELSE q.transition_at END > c.now) AS waiting
  FROM @extschema@.simba_mutex m
 CROSS JOIN @extschema@.simba_clock() c
 CROSS JOIN LATERAL (SELECT CASE WHEN m.clock_origin IS DISTINCT FROM c.origin AND c.origin IS NOT NULL
                                 THEN pg_catalog.make_interval(secs => pg_catalog.date_part('epoch', c.origin - m.acquired_at))
                                 ELSE interval '0' END AS shift) s
  LEFT JOIN @extschema@.simba_session_lease ss ON ss.session_id = m.session_id
 CROSS JOIN LATERAL (SELECT CASE WHEN ss.clock_origin IS DISTINCT FROM c.origin AND c.origin IS NOT NULL
                                 THEN pg_catalog.make_interval(secs => pg_catalog.date_part('epoch', c.origin - ss.renewed_at))
                                 ELSE interval '0' END AS shift) sh
 CROSS JOIN LATERAL (SELECT COALESCE(ss.ttl_at + sh.shift, m.ttl_at + s.shift) AS ttl_at,
                            COALESCE(ss.transition_at + sh.shift, m.transition_at + s.shift) AS transition_at) e
 CROSS JOIN LATERAL (SELECT m.owner_id IS NOT NULL AND e.transition_at > c.now AS live) l;

COMMENT ON VIEW @extschema@.simba_mutex_status IS
  'simba: every mutex now: state held (in ttl), transition (owner may renew, others wait) or free; time_left until others may take it; times are the session''s for a tenure under a session; idle_since: when a free mutex was released or its lease ended (NULL while held, or if released before 1.4); waiting: live entries of its fair queue';

CREATE TYPE @extschema@.simba_fair_owner AS (
    mutex         text,
    owner_id      text,
    acquired_at   timestamptz,
    ttl_at        timestamptz,
    transition_at timestamptz,
    version       bigint,
    fence         bigint,
    current_at    timestamptz,
    owner_role    name,
    session_id    uuid,
    position      integer,
    wake_channel  text
);
COMMENT ON TYPE @extschema@.simba_fair_owner IS
  'simba: a fair acquire''s answer: the mutex''s owner as simba_owner has it, the caller''s place in the queue (position, 1 = next; NULL when it holds the mutex), and the channel to LISTEN on to be woken when it is the caller''s turn';

CREATE FUNCTION @extschema@.simba_fair_acquire(
    mutex        text,
    contender_id text,
    ttl          interval DEFAULT '10 seconds',
    transition   interval DEFAULT '6 seconds',
    session_id   uuid     DEFAULT NULL)
RETURNS @extschema@.simba_fair_owner
AS 'MODULE_PATHNAME', 'simba_fair_acquire_1_4'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.simba_fair_acquire(text, text, interval, interval, uuid) IS
  'simba: acquire or renew the mutex in arrival order: taken when no live queue entry is ahead of the caller, else the caller''s entry is written or renewed in its place (it lapses after ttl + transition unless the caller asks again, also under a session); under a session (session_id) the tenure lives as long as the session';

CREATE FUNCTION @extschema@.simba_fair_release(mutex text, contender_id text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'simba_fair_release_1_4'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.simba_fair_release(text, text) IS
  'simba: release the caller''s live tenure (true), or withdraw its place in the queue; NOTIFY only the waiter whose turn it is now, on its wake_channel';

-- Sessions now, after the tables of what they may hold. A lease written
-- under another clock origin (before a reboot, a promotion or a restore)
-- counts again in full from this origin: shift moves its times there. A
-- security barrier: a caller's function in WHERE sees only the rows the
-- view shows.
CREATE VIEW @extschema@.simba_session_status WITH (security_barrier) AS
SELECT s.session_id,
       s.owner_role,
       CASE WHEN e.transition_at <= c.now THEN 'ended'
            WHEN e.ttl_at > c.now THEN 'held'
            ELSE 'transition' END AS state,
       s.opened_at,
       s.renewed_at + e.shift AS renewed_at,
       e.ttl_at,
       e.transition_at,
       CASE WHEN e.transition_at > c.now THEN e.transition_at - c.now END AS time_left,
       (SELECT pg_catalog.count(*) FROM @extschema@.simba_mutex m
         WHERE m.session_id = s.session_id AND m.owner_id IS NOT NULL) AS mutexes,
       (SELECT pg_catalog.count(*) FROM @extschema@.simba_semaphore_permit p
         WHERE p.session_id = s.session_id) AS permits,
       (SELECT pg_catalog.count(*) FROM @extschema@.simba_rwlock_holder h
         WHERE h.session_id = s.session_id) AS rwlocks
  FROM @extschema@.simba_session_lease s
 CROSS JOIN @extschema@.simba_clock() c
 CROSS JOIN LATERAL (SELECT CASE WHEN s.clock_origin IS DISTINCT FROM c.origin AND c.origin IS NOT NULL
                                 THEN pg_catalog.make_interval(secs => pg_catalog.date_part('epoch', c.origin - s.renewed_at))
                                 ELSE interval '0' END AS shift) sh
 CROSS JOIN LATERAL (SELECT s.ttl_at + sh.shift AS ttl_at, s.transition_at + sh.shift AS transition_at,
                            sh.shift) e;
COMMENT ON VIEW @extschema@.simba_session_status IS
  'simba: every session now: state held (in ttl), transition (keep it alive now) or ended (until simba_session_gc); the mutexes, permits and read-write holds (rwlocks) it holds';

CREATE VIEW @extschema@.simba_rwlock_status WITH (security_barrier) AS
SELECT r.rwlock,
       CASE WHEN pg_catalog.count(*) FILTER (WHERE h.mode = 'write') > 0 THEN 'write'
            WHEN pg_catalog.count(*) FILTER (WHERE h.mode = 'read') > 0 THEN 'read'
            ELSE 'free' END AS mode,
       pg_catalog.array_agg(h.owner_id ORDER BY h.owner_id) FILTER (WHERE h.mode IN ('read', 'write')) AS holders,
       pg_catalog.count(*) FILTER (WHERE h.mode = 'waiting') AS waiting_writers,
       r.write_fence,
       r.version
  FROM @extschema@.simba_rwlock r
 CROSS JOIN @extschema@.simba_clock() c
  LEFT JOIN LATERAL (
       SELECT h.owner_id, h.mode
         FROM @extschema@.simba_rwlock_holder h
        CROSS JOIN LATERAL (SELECT CASE WHEN h.clock_origin IS DISTINCT FROM c.origin AND c.origin IS NOT NULL
                                        THEN pg_catalog.make_interval(secs => pg_catalog.date_part('epoch', c.origin - h.renewed_at))
                                        ELSE interval '0' END AS shift) s
         LEFT JOIN @extschema@.simba_session_lease ss ON ss.session_id = h.session_id
        CROSS JOIN LATERAL (SELECT CASE WHEN ss.clock_origin IS DISTINCT FROM c.origin AND c.origin IS NOT NULL
                                        THEN pg_catalog.make_interval(secs => pg_catalog.date_part('epoch', c.origin - ss.renewed_at))
                                        ELSE interval '0' END AS shift) sh
        WHERE h.rwlock = r.rwlock AND COALESCE(ss.transition_at + sh.shift, h.transition_at + s.shift) > c.now) h ON true
 GROUP BY r.rwlock, r.write_fence, r.version;
COMMENT ON VIEW @extschema@.simba_rwlock_status IS
  'simba: every read-write lock now: mode write, read or free, its live holders (under a session: while the session lives), the writers waiting for it, and the write epoch (write_fence)';

-- Wake-ups (wake.c): a waiter registers on its LISTEN connection, so that
-- under simba.notify = registered a release nobody waits for skips its NOTIFY.
CREATE FUNCTION @extschema@.simba_wait(names text[], waiting boolean DEFAULT true)
RETURNS text[]
AS 'MODULE_PATHNAME', 'simba_wait'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.simba_wait(text[], boolean) IS
  'simba: register this connection (the one that LISTENs on simba) as a waiter on each name, or (waiting false) drop registrations it made; returns the names a release under way kept it from registering (call again for those). Under simba.notify = registered only releases of registered names send NOTIFY simba';

-- The lapse waker (lapse.c): the end of every session announced as its
-- close would be, while anyone waits, so that waiters need not poll.
CREATE FUNCTION @extschema@.simba_waker()
RETURNS boolean
AS 'MODULE_PATHNAME', 'simba_waker'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.simba_waker() IS
  'simba: whether this database''s lapse waker runs, announcing the end of every session (NOTIFY simba for what it held, the heads of its fair queues) as its close would; starts it if not (simba.lapse_waker), waiting up to a second. Call it after registering with simba_wait';
CREATE FUNCTION @extschema@.simba_wake_lapsed(since timestamptz, OUT scanned_to timestamptz,
                                              OUT next_end timestamptz, OUT sessions bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'simba_wake_lapsed'
LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION @extschema@.simba_wake_lapsed(timestamptz) IS
  'simba: the lapse waker''s round: NOTIFY what every session that ended after since (at most a minute back) and by now held, as its close would; changes nothing. Returns the time scanned to and the next session''s end';

-- Exactly the documented privileges, then every role granted before gets
-- what simba_grant gives today (the functions and views added since).
SELECT @extschema@.simba_strip_privileges(true);
SELECT @extschema@.simba_grant(g.grantee::pg_catalog.regrole)
  FROM (SELECT DISTINCT a.grantee
          FROM pg_catalog.pg_proc AS p, pg_catalog.aclexplode(p.proacl) AS a
         WHERE p.oid = '@extschema@.simba_release(text, text)'::pg_catalog.regprocedure
           AND a.grantee <> p.proowner AND a.privilege_type = 'EXECUTE') AS g;
