-- simba 1.4: leased mutexes with fencing tokens, counting semaphores with
-- leased permits, ownership history (install script; the upgrade scripts
-- simba--A--B.sql take older installs to the same objects, which
-- test/sql/upgrade.sql checks).
--
-- Design (docs/design.md): one row per mutex in simba_mutex holds the current
-- lease (owner_id and owner_role, acquired_at, ttl_at, transition_at, or the
-- session_id of the simba_session_lease it lives by) and two
-- counters: version (+1 on every change) and fence (a new value of
-- simba_mutex_fence whenever the mutex changes hands, kept on renewal).
-- Every state change is one call into C that runs a saved plan; times come
-- from simba's clock at the call (the server's wall clock, kept from steps
-- by its boot clock: clock_origin), never from the client.
--
-- Locking: acquire/renew/release update the row (row lock for the update
-- only); simba_fence_check takes the row FOR SHARE in the caller's own
-- transaction, so a takeover waits until that transaction ends.
--
-- Privileges: nothing is granted to PUBLIC. Any role that may take a lock can
-- stall every process waiting on it, so a DBA grants that on purpose with
-- simba_grant(role). The functions run as the caller (a lease is the
-- caller's), and their statements run as the function's owner under a
-- search path of schema OIDs (simba_as_owner, simba.c), reaching the tables
-- by the schema's OID; the tables are written only through them. So the
-- functions need no SET search_path, which would cost every call a save
-- and restore of the settings; only simba_grant, simba_revoke and
-- simba_strip_privileges, which run SQL they compose, keep one. Their statements are planned without
-- sequential scans (simba_execute, simba.c): plans are kept, and one chosen
-- while a table was tiny must not scan it whole once it has grown (the
-- admin functions' whole-table statements keep them: a disabled scan's cost
-- would only push them past jit_above_cost). SECURITY.md has the threat model.

\echo Use "CREATE EXTENSION simba" to load this file. \quit

CREATE TABLE @extschema@.simba_mutex (
    mutex         text        PRIMARY KEY,
    owner_id      text,
    acquired_at   timestamptz,
    ttl_at        timestamptz,
    transition_at timestamptz,
    version       bigint      NOT NULL DEFAULT 0,
    fence         bigint      NOT NULL DEFAULT 0,
    owner_role    name,
    owner_roleid  oid,
    owner_sysid   bigint,
    clock_origin  timestamptz,
    session_id    uuid,
    released_at   timestamptz
) WITH (fillfactor = 50);  -- room for HOT updates: every renewal rewrites the row
COMMENT ON TABLE @extschema@.simba_mutex IS
  'simba: one row per mutex; owner_id NULL = free; the holder is owner_id with the role owner_roleid of cluster owner_sysid (owner_role by name in another cluster); times on the clock of clock_origin, or the lease of session session_id (simba_session_lease); released_at: when it was last released. Written only by the simba_* functions; simba_mutex_gc (and the collector simba.gc_idle_age starts) removes rows of idle mutexes (fences come from a sequence, never reused).';
-- a session's close and collection find its rows
CREATE INDEX simba_mutex_session ON @extschema@.simba_mutex (session_id) WHERE session_id IS NOT NULL;

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
-- A restored session keeps what it holds, its lease counted again in full from the new clock.
SELECT pg_catalog.pg_extension_config_dump('@extschema@.simba_session_lease', '');

CREATE SEQUENCE @extschema@.simba_mutex_fence;
COMMENT ON SEQUENCE @extschema@.simba_mutex_fence IS
  'simba: fences of mutex tenures, never returned twice (not even by a transaction that rolled back)';

-- Fences must survive dump and restore, or a restored database could reissue them.
SELECT pg_catalog.pg_extension_config_dump('@extschema@.simba_mutex', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.simba_mutex_fence', '');

CREATE TYPE @extschema@.simba_owner AS (
    mutex         text,
    owner_id      text,
    acquired_at   timestamptz,
    ttl_at        timestamptz,
    transition_at timestamptz,
    version       bigint,
    fence         bigint,
    current_at    timestamptz,
    owner_role    name,
    session_id    uuid
);
COMMENT ON TYPE @extschema@.simba_owner IS
  'simba: a mutex''s lease as seen at current_at (server time of the decision); owner_id NULL = free; the holder is owner_id together with owner_role; session_id: the session the tenure lives by (NULL: its own lease)';

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

CREATE FUNCTION @extschema@.simba_release(mutex text, contender_id text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'simba_release_1_4'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.simba_release(text, text) IS
  'simba: release the mutex if the caller holds it (true), NOTIFY simba with the mutex name; false and no change otherwise';

CREATE FUNCTION @extschema@.simba_owner(mutex text)
RETURNS @extschema@.simba_owner
AS 'MODULE_PATHNAME', 'simba_owner_1_4'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.simba_owner(text) IS
  'simba: the current owner, no change; owner_id NULL when free, expired or unknown';

CREATE FUNCTION @extschema@.simba_fence_check(mutex text, contender_id text, fence bigint)
RETURNS void
AS 'MODULE_PATHNAME', 'simba_fence_check_1_4'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.simba_fence_check(text, text, bigint) IS
  'simba: error (SB001 not owner, SB002 stale fence, SB003 lease expired) unless the caller holds the mutex with this fence; locks the row FOR SHARE until the calling transaction ends';

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

-- simba's clock: what the functions and the views count leases with.
CREATE FUNCTION @extschema@.simba_clock(OUT now timestamptz, OUT origin timestamptz)
RETURNS record
AS 'MODULE_PATHNAME', 'simba_clock'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.simba_clock() IS
  'simba: now on simba''s clock (the wall clock at origin, advanced by the boot clock since: a step of the wall clock does not move it) and that origin; on a standby the wall clock and NULL';

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

-- Counting semaphores: one row per key, one per permit slot (semaphore.c).
CREATE SEQUENCE @extschema@.simba_permit_fence;
COMMENT ON SEQUENCE @extschema@.simba_permit_fence IS
  'simba: fences of semaphore permits, strictly increasing across grants and keys';

CREATE TABLE @extschema@.simba_semaphore (
    key     text    PRIMARY KEY,
    permits integer NOT NULL
);
COMMENT ON TABLE @extschema@.simba_semaphore IS
  'simba: one row per semaphore key, with the limit of the latest acquire. Written only by the simba_semaphore_* functions.';

CREATE TABLE @extschema@.simba_semaphore_permit (
    key         text        NOT NULL REFERENCES @extschema@.simba_semaphore ON DELETE CASCADE,
    slot        integer     NOT NULL,
    holder      text        NOT NULL,
    token       uuid        NOT NULL UNIQUE,
    fence       bigint      NOT NULL,
    context     text,
    acquired_at timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    holder_role name,
    holder_roleid oid,
    holder_sysid  bigint,
    renewed_at    timestamptz NOT NULL,
    clock_origin  timestamptz,
    session_id    uuid,
    PRIMARY KEY (key, slot)
) WITH (fillfactor = 70);  -- refreshes rewrite the row: leave room for HOT updates
COMMENT ON TABLE @extschema@.simba_semaphore_permit IS
  'simba: one row per permit slot; live while expires_at > now, or while its session session_id lives. Written only by the simba_semaphore_* functions.';
CREATE INDEX simba_semaphore_permit_session ON @extschema@.simba_semaphore_permit (session_id)
    WHERE session_id IS NOT NULL;

SELECT pg_catalog.pg_extension_config_dump('@extschema@.simba_semaphore', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.simba_semaphore_permit', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.simba_permit_fence', '');

CREATE TYPE @extschema@.simba_permit AS (
    key        text,
    slot       integer,
    token      uuid,
    fence      bigint,
    expires_at timestamptz
);
COMMENT ON TYPE @extschema@.simba_permit IS
  'simba: a granted permit; the token proves it (refresh, release, fence check)';

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

CREATE FUNCTION @extschema@.simba_semaphore_refresh(key text, token uuid, ttl interval)
RETURNS boolean
AS 'MODULE_PATHNAME', 'simba_semaphore_refresh_1_4'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.simba_semaphore_refresh(text, uuid, interval) IS
  'simba: extend a live permit to now + ttl (under a session: no change); false once it expired or was taken over';

CREATE FUNCTION @extschema@.simba_semaphore_release(key text, token uuid)
RETURNS boolean
AS 'MODULE_PATHNAME', 'simba_semaphore_release_1_4'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.simba_semaphore_release(text, uuid) IS
  'simba: give a live permit back and NOTIFY simba with the key; false for an expired, taken-over or unknown token';

CREATE FUNCTION @extschema@.simba_semaphore_fence_check(key text, token uuid, fence bigint)
RETURNS void
AS 'MODULE_PATHNAME', 'simba_semaphore_fence_check_1_4'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.simba_semaphore_fence_check(text, uuid, bigint) IS
  'simba: error (SB001 not holder, SB002 stale fence, SB003 expired) unless the token holds a live permit with this fence; its slot is not granted again until the calling transaction ends';

CREATE FUNCTION @extschema@.simba_semaphore_gc()
RETURNS bigint
AS 'MODULE_PATHNAME', 'simba_semaphore_gc_1_4'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.simba_semaphore_gc() IS
  'simba: remove the rows of keys that have no live permit; returns how many keys it removed';

-- A lease written under another clock origin (before a reboot, a promotion
-- or a restore) counts again in full from this origin: shift moves its
-- times there. A security barrier: a caller's function in WHERE sees only
-- the rows the view shows.
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

CREATE VIEW @extschema@.simba_mutex_status WITH (security_barrier) AS
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

CREATE VIEW @extschema@.simba_semaphore_status WITH (security_barrier) AS
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

-- Ownership history, logged while simba.history is on (history.c).
CREATE TABLE @extschema@.simba_mutex_history (
    id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    mutex          text        NOT NULL,
    event          text        NOT NULL CHECK (event IN ('acquired', 'taken_over', 'reacquired',
                                                         'released', 'late_release', 'forced_release')),
    owner_id       text,
    fence          bigint      NOT NULL,
    previous_owner text,
    at             timestamptz NOT NULL,
    owner_role     name,
    previous_role  name,
    previous_fence bigint
);
COMMENT ON SEQUENCE @extschema@.simba_mutex_history_id_seq IS
  'simba: ids of simba_mutex_history rows';
CREATE INDEX simba_mutex_history_mutex_fence ON @extschema@.simba_mutex_history (mutex, fence);
CREATE INDEX simba_mutex_history_at ON @extschema@.simba_mutex_history (at);
-- One late release per tenure, however often a late holder calls simba_release.
CREATE UNIQUE INDEX simba_mutex_history_late_release
    ON @extschema@.simba_mutex_history (mutex, fence) WHERE event = 'late_release';
COMMENT ON TABLE @extschema@.simba_mutex_history IS
  'simba: changes of hands and releases of mutexes while simba.history is on (renewals are not logged); prune with simba_history_prune';

-- Not SECURITY DEFINER: it runs inside the simba_* functions (as their
-- owner) and logs only their writes, not a restore's COPY or a manual fix.
CREATE FUNCTION @extschema@.simba_history_trigger()
RETURNS trigger
AS 'MODULE_PATHNAME', 'simba_history_trigger_1_3'
LANGUAGE C;
COMMENT ON FUNCTION @extschema@.simba_history_trigger() IS
  'simba: logs changes of hands of simba_mutex rows to simba_mutex_history when simba.history is on';

-- No WHEN clauses: PostgreSQL rebuilds a trigger's WHEN expression for every
-- statement, which costs more than calling the C function, which returns at
-- once for renewals and while simba.history is off.
CREATE TRIGGER simba_mutex_history_insert
    AFTER INSERT ON @extschema@.simba_mutex
    FOR EACH ROW EXECUTE FUNCTION @extschema@.simba_history_trigger();
CREATE TRIGGER simba_mutex_history_update
    AFTER UPDATE ON @extschema@.simba_mutex
    FOR EACH ROW EXECUTE FUNCTION @extschema@.simba_history_trigger();

CREATE VIEW @extschema@.simba_mutex_stats AS
WITH tenures AS (
    SELECT h.mutex, h.owner_id AS holder, h.event, h.at FROM @extschema@.simba_mutex_history h
    UNION ALL
    -- a tenure ended by expiry counts for the holder whose lease lapsed
    SELECT h.mutex, h.previous_owner, 'expired', h.at FROM @extschema@.simba_mutex_history h
     WHERE h.event = 'taken_over'
    UNION ALL
    SELECT h.mutex, h.owner_id, 'expired', h.at FROM @extschema@.simba_mutex_history h
     WHERE h.event = 'reacquired'
)
SELECT mutex, holder,
       count(*) FILTER (WHERE event IN ('acquired', 'taken_over', 'reacquired')) AS acquisitions,
       count(*) FILTER (WHERE event = 'released') AS releases,
       count(*) FILTER (WHERE event = 'late_release') AS late_releases,
       count(*) FILTER (WHERE event = 'expired') AS expired,
       count(*) FILTER (WHERE event = 'forced_release') AS forced_releases,
       max(at) AS last_event_at
  FROM tenures
 WHERE holder IS NOT NULL
 GROUP BY mutex, holder;
COMMENT ON VIEW @extschema@.simba_mutex_stats IS
  'simba: per mutex and holder, from simba_mutex_history: acquisitions, releases, late releases (finished after the lease ended), leases lost by expiry, forced releases';

CREATE FUNCTION @extschema@.simba_history_prune(keep interval)
RETURNS bigint
AS 'MODULE_PATHNAME', 'simba_history_prune'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.simba_history_prune(interval) IS
  'simba: delete history older than now - keep; returns how many rows it deleted';

CREATE FUNCTION @extschema@.simba_force_release(mutex text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'simba_force_release_1_4'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.simba_force_release(text) IS
  'simba: admin only — free the mutex whoever holds it (the next holder gets the next fence) and NOTIFY simba; false if it was free';

SELECT pg_catalog.pg_extension_config_dump('@extschema@.simba_mutex_history', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.simba_mutex_history_id_seq', '');

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

-- Granting on purpose (see the header): one call per application role.
CREATE FUNCTION @extschema@.simba_grant(role regrole)
RETURNS void
AS 'MODULE_PATHNAME', 'simba_grant_1_4'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.simba_grant(regrole) IS
  'simba: let a role acquire, renew, release and fence-check mutexes and permits, and read the status views and the history';

CREATE FUNCTION @extschema@.simba_revoke(role regrole)
RETURNS void
AS 'MODULE_PATHNAME', 'simba_revoke_1_4'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.simba_revoke(regrole) IS
  'simba: undo simba_grant for a role (schema USAGE is left alone)';

CREATE FUNCTION @extschema@.simba_strip_privileges(keep_grants boolean DEFAULT true)
RETURNS bigint
AS 'MODULE_PATHNAME', 'simba_strip_privileges'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.simba_strip_privileges(boolean) IS
  'simba: revoke every privilege on simba''s objects but the owner''s and (keep_grants) what simba_grant gives; returns how many it revoked';

-- Nothing for PUBLIC or anyone but the owner, whatever the default
-- privileges of the installing role: a DBA grants with simba_grant.
SELECT @extschema@.simba_strip_privileges(false);
