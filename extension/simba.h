/*
 * simba.h — shared pieces of the simba extension: argument checks, the
 * SQLSTATEs simba raises, and saved SPI plans bound to the extension schema.
 */
#ifndef SIMBA_H
#define SIMBA_H

#include "postgres.h"

#include "executor/spi.h"
#include "executor/tuptable.h"
#include "fmgr.h"
#include "utils/timestamp.h"

/* Longest mutex name or contender id, in characters (documented in README). */
#define SIMBA_MAX_NAME_CHARS 256
/* Mutexes in one simba_acquire_all / simba_release_all call. */
#define SIMBA_MAX_MULTI_LOCK 1000

/* Fence-check failures, SQLSTATE class SB ("simba"). */
#define ERRCODE_SIMBA_NOT_OWNER     MAKE_SQLSTATE('S', 'B', '0', '0', '1')
#define ERRCODE_SIMBA_STALE_FENCE   MAKE_SQLSTATE('S', 'B', '0', '0', '2')
#define ERRCODE_SIMBA_LEASE_EXPIRED MAKE_SQLSTATE('S', 'B', '0', '0', '3')
/* A session that has ended (closed or past transition_at), is unknown, or is another role's. */
#define ERRCODE_SIMBA_NO_SESSION    MAKE_SQLSTATE('S', 'B', '0', '0', '4')
/* A reader of a read-write lock asked to write (rwlock.c): refused, never a deadlock. */
#define ERRCODE_SIMBA_UPGRADE_REFUSED MAKE_SQLSTATE('S', 'B', '0', '0', '5')

/*
 * A statement prepared once per backend and kept. Its text names simba's
 * objects without a schema and every function as pg_catalog.f: it is parsed,
 * and re-parsed whenever PostgreSQL replans it, under a search path of schema
 * OIDs (pg_catalog, then the extension's schema), never under a name that a
 * schema owner could rename and replace (docs/design.md, "Extension").
 */
typedef struct SimbaPlan
{
	const char *sql;
	int			nargs;
	Oid			argtypes[14];
	bool		scans;			/* an admin's whole-table statement: may scan sequentially */
	SPIPlanPtr	plan;			/* NULL until first use */
} SimbaPlan;

/*
 * Run a plan (inside SPI_connect) and return SPI_processed; nulls as SPI's.
 * Unless the plan scans, it is planned (and replanned) without sequential
 * scans: kept from a table of a few rows, a plan must not scan the table
 * whole once it has grown (docs/design.md, "Plans and growth").
 * The statement runs as the owner of the calling SQL function (simba's
 * functions are not SECURITY DEFINER: see SimbaCaller). Under REPEATABLE
 * READ and SERIALIZABLE it reads the latest committed data, not the
 * transaction's snapshot: simba decides on fresh data, and a write that
 * races another raises 40001.
 */
extern uint64 simba_execute(FunctionCallInfo fcinfo, SimbaPlan *plan,
							Datum *values, const char *nulls, int tcount);

/*
 * Runs body(arg) as simba_execute runs a statement: as the owner of the
 * calling SQL function, under a search path of pg_catalog and the
 * extension's schema by OID. For work that is not a statement but runs a
 * DBA's code, such as a row update's triggers (row_update.c).
 */
extern void simba_as_owner(FunctionCallInfo fcinfo, void (*body) (void *arg), void *arg);

/* The schema and owner of the calling SQL function (its install). */
extern void simba_calling_function(FunctionCallInfo fcinfo, Oid *schema, Oid *owner);
/* The OID of simba_mutex in the install of the calling SQL function. */
extern Oid	simba_mutex_table(FunctionCallInfo fcinfo);
extern Oid	simba_session_table(FunctionCallInfo fcinfo);
extern Oid	simba_fence_sequence(FunctionCallInfo fcinfo);

/*
 * Reads the row of table relid whose one-column primary key equals key
 * (eqproc), as the running statement's snapshot shows it, straight from
 * the index: a read that costs an index lookup rather than a statement.
 * Calls read(slot, arg) on it and returns true; false when there is none.
 * No privilege is checked: for simba's own tables only.
 */
extern bool simba_read_row(Oid relid, RegProcedure eqproc, Datum key,
						   void (*read) (TupleTableSlot *slot, void *arg), void *arg);
/* The same lookup on open relations: the row in `snapshot`, stored in slot; false when there is none. */
extern bool simba_find_by_key(Relation rel, Relation idx, Snapshot snapshot, RegProcedure eqproc, Datum key,
							  TupleTableSlot *slot);
/*
 * simba_update_row (row_update.c): the row of table relid whose one-column
 * primary key equals key (eqproc) changed as an UPDATE by that key would
 * change it, without an executor. writer->change(old, values, nulls, arg)
 * decides on the row: values and nulls hold its columns, which it sets to
 * the new row's and returns true to write them. It may be called again on
 * a newer version of the row (one a concurrent transaction wrote, read
 * without a lock), and the last call's values are those written; a version
 * it refuses is left unlocked. The table's trigger writer->own_trigger does
 * not fire; AFTER ROW triggers besides it fire after the update (as the
 * calling function's owner, simba_as_owner). When the table carries what
 * only an executor does (a BEFORE ROW or statement trigger, a transition
 * table, a CHECK constraint, a generated column, an expression or partial
 * index; row_update.c), the row version decided on, locked, is written by
 * writer->write(tid, values, nulls, arg) instead, an UPDATE of that version
 * through SPI (true when it wrote it). With old_row, an update done here
 * sets *old_row and *new_row to copies of the two versions.
 */
typedef enum SimbaRowUpdate
{
	SIMBA_ROW_ABSENT,			/* no such row in the snapshot */
	SIMBA_ROW_KEPT,				/* change() refused it, or it was deleted meanwhile */
	SIMBA_ROW_UPDATED,			/* written here: the own trigger did not fire */
	SIMBA_ROW_WRITTEN			/* written by writer->write: its triggers fired */
} SimbaRowUpdate;
typedef struct SimbaRowWriter
{
	bool		(*change) (TupleTableSlot *old, Datum *values, bool *nulls, void *arg);
	bool		(*write) (ItemPointer tid, const Datum *values, const bool *nulls, void *arg);
	const char *own_trigger;
} SimbaRowWriter;
extern SimbaRowUpdate simba_update_row(FunctionCallInfo fcinfo, Oid relid, RegProcedure eqproc, Datum key,
									   const SimbaRowWriter *writer, void *arg, HeapTuple *old_row,
									   HeapTuple *new_row);

/* Byte equality of two texts: ids are compared so (deterministic collation). */
extern bool simba_same_text(Datum a, Datum b);

/* The plan simba_execute is running now (the history trigger reads it). */
extern SimbaPlan *simba_running_plan;

/*
 * Who a lease or permit belongs to: the role whose privileges the call runs
 * with (GetUserId() on entry, so a SECURITY DEFINER wrapper's owner), by OID
 * within this cluster and by name across clusters (a restore elsewhere), and
 * the name for display (docs/design.md, "Extension").
 */
typedef struct SimbaCaller
{
	Datum		role;			/* name */
	Datum		roleid;			/* oid */
	Datum		sysid;			/* int8: the cluster whose role OIDs these are */
} SimbaCaller;

/*
 * The entry check of every function that takes, keeps or checks a lease or
 * permit: refuses inside a security-restricted operation (42501), when this
 * connection overrode a superuser setting (42501), and, for a function that
 * locks or writes, in a read-only transaction or on a standby (25006). Marks
 * the transaction so that PREPARE TRANSACTION refuses it.
 */
extern SimbaCaller simba_enter(FunctionCallInfo fcinfo, bool writes);

/*
 * The same holder, in SQL: the rows' role columns against the caller's
 * parameters. A row whose sysid is another cluster's (restored there) is
 * matched by role name; a NULL role (taken before 1.3) matches nobody.
 */
#define SIMBA_SAME_ROLE(role_col, roleid_col, sysid_col, role, roleid, sysid) \
	"(CASE WHEN " sysid_col " = " sysid " THEN " roleid_col " = " roleid \
	" ELSE " role_col " = " role " END)"

/*
 * simba's clock (clock.c, docs/design.md "Clock"): the wall clock at an
 * origin instant advanced by the boot clock since, so a step of the wall
 * clock never moves a lease. The origin is fixed per install of the
 * extension, host boot and timeline; rows record the origin they were written under
 * (clock_origin). A row written under another origin counts from this
 * origin for its full length. On a standby, simba_now is the wall clock and
 * simba_clock_origin is 0 (no origin: rows are judged by their times).
 */
extern TimestampTz simba_now(FunctionCallInfo fcinfo);
extern TimestampTz simba_clock_origin(FunctionCallInfo fcinfo);
/* simba's transaction callback: refuse to commit what counted from an origin no longer the file's. */
extern void simba_clock_pre_commit(void);
extern void simba_clock_end_xact(void);
/* SIMBA_LEASE_END (below) in C, for a row's non-NULL col and since. */
extern TimestampTz simba_lease_end_at(TimestampTz col, TimestampTz since, bool clock_null, TimestampTz clock,
									  bool origin_null, TimestampTz origin);

/*
 * SIMBA_LEASE_END in C with SQL's NULLs: false where simba_lease_end
 * returns NULL (no col, or another clock's row without its since).
 */
typedef struct SimbaLeaseEnd
{
	TimestampTz col,
				since,
				clock,
				origin;
	bool		col_null,
				since_null,
				clock_null,
				origin_null;
} SimbaLeaseEnd;
extern bool simba_lease_end_of(const SimbaLeaseEnd *e, TimestampTz *end);

/* The null flag of an origin passed as a plan's parameter (none on a standby). */
#define SIMBA_ORIGIN_NULL(origin) ((origin) == 0 ? 'n' : ' ')

/*
 * In SQL: the row's end of lease `col` (from `since`, the last renewal) as
 * the clock of the parameter `origin` counts it: `col` itself when the
 * row's clock_origin is that clock's (or on a standby, where the parameter
 * is NULL), else origin + (col - since). A function (simba_lease_end,
 * clock.c) rather than that CASE: a statement compiles each of its
 * expressions every time it runs, and the CASE was a dozen steps.
 */
#define SIMBA_LEASE_END(col, since, clock_col, origin) \
	"simba_lease_end(" col ", " since ", " clock_col ", " origin ")"
/*
 * Sessions (session.c, docs/design.md "Sessions"): a tenure or permit taken
 * under a session (session_id not NULL) lives exactly as long as the
 * session row s; its own times are not used. A session row is deleted only
 * once no row refers to it (simba_session_close frees them first,
 * simba_session_gc skips sessions still referred to), so a reference whose
 * session row is absent from a statement's snapshot is one written after
 * the snapshot was taken: it counts as live.
 *
 * Ended: whether row `id_col`'s session has ended at t. `lock` is "true"
 * in every statement that writes on that answer (a takeover, a release, a
 * collection): it locks only the ended session row FOR SHARE, so that a
 * keepalive racing the statement either committed first (the lock follows
 * it to its new row, which is live) or waits and then finds the session
 * ended. A live session's row is never locked, so no acquirer can stall
 * its keepalive. It is a function (simba_session_ended, session.c), not a
 * subquery: a statement sets up every subquery it contains each time it
 * runs, whether it is evaluated or not, and that cost every call on a row
 * without a session twice the work of its UPDATE (bench/README.md). It
 * reads the session row from its primary key in the statement's snapshot,
 * and runs a locking statement only for a session that has ended there.
 */
#define SIMBA_SESSION_END(origin) SIMBA_LEASE_END("s.transition_at", "s.renewed_at", "s.clock_origin", origin)
#define SIMBA_SESSION_ENDED(id_col, t, origin, lock) \
	"simba_session_ended(" id_col ", " t ", " origin ", " lock ")"
/*
 * A time of a row that may be under a session, as this clock counts it: its
 * session's `session_col` (ttl_at or transition_at) when `id_col` names a
 * session row in the statement's snapshot, else `own`. A function
 * (simba_session_time, session.c) rather than a subquery, for the reason
 * above: the two subqueries of an owner's times cost every losing attempt
 * 38.5k instructions, session or not (bench/README.md).
 */
#define SIMBA_SESSION_TIME_OR(id_col, session_col, origin, own) \
	"COALESCE(simba_session_time(" id_col ", '" session_col "', " origin "), " own ")"
/*
 * SIMBA_SESSION_ENDED in C, inside SPI: whether session `id` has ended at
 * t in the active snapshot, and, with `lock`, its row locked FOR SHARE
 * when it has. Only a session that has ended in the snapshot is locked:
 * the lock reads its latest row (waiting for a keepalive in flight), which
 * a keepalive committed since makes live again.
 */
extern bool simba_session_has_ended(FunctionCallInfo fcinfo, Datum id, TimestampTz t, bool origin_null,
									TimestampTz origin, bool lock);
/* Session row s is the caller's: $1 its id, $2 role, $3 roleid, $4 sysid (SimbaCaller). */
#define SIMBA_CALLERS_SESSION \
	"s.session_id = $1 AND " SIMBA_SAME_ROLE("s.owner_role", "s.owner_roleid", "s.owner_sysid", "$2", "$3", "$4")
#define SIMBA_LIVE_UNDER(own_end, id_col, t, origin, lock) \
	"(CASE WHEN " id_col " IS NULL THEN " own_end " > " t \
	" ELSE NOT " SIMBA_SESSION_ENDED(id_col, t, origin, lock) " END)"

/*
 * Whether simba_mutex row m or simba_semaphore_permit row p holds a lease at
 * t; the _LOCKING forms for statements that write on the answer (above).
 * *_END is the row's own end of lease (not its session's).
 */
#define SIMBA_MUTEX_END(origin) SIMBA_LEASE_END("m.transition_at", "m.acquired_at", "m.clock_origin", origin)
#define SIMBA_MUTEX_LIVE_AS(t, origin, lock) \
	"(m.owner_id IS NOT NULL AND " SIMBA_LIVE_UNDER(SIMBA_MUTEX_END(origin), "m.session_id", t, origin, lock) ")"
#define SIMBA_MUTEX_LIVE(t, origin) SIMBA_MUTEX_LIVE_AS(t, origin, "false")
#define SIMBA_MUTEX_LIVE_LOCKING(t, origin) SIMBA_MUTEX_LIVE_AS(t, origin, "true")
#define SIMBA_PERMIT_END(origin) SIMBA_LEASE_END("p.expires_at", "p.renewed_at", "p.clock_origin", origin)
#define SIMBA_PERMIT_LIVE(t, origin) SIMBA_LIVE_UNDER(SIMBA_PERMIT_END(origin), "p.session_id", t, origin, "false")
#define SIMBA_PERMIT_LIVE_LOCKING(t, origin) \
	SIMBA_LIVE_UNDER(SIMBA_PERMIT_END(origin), "p.session_id", t, origin, "true")
/* The same for simba_rwlock_holder row h (a waiting writer's entry is never under a session). */
#define SIMBA_HOLDER_END(origin) SIMBA_LEASE_END("h.transition_at", "h.renewed_at", "h.clock_origin", origin)
#define SIMBA_HOLDER_LIVE(t, origin) SIMBA_LIVE_UNDER(SIMBA_HOLDER_END(origin), "h.session_id", t, origin, "false")
#define SIMBA_HOLDER_LIVE_LOCKING(t, origin) \
	SIMBA_LIVE_UNDER(SIMBA_HOLDER_END(origin), "h.session_id", t, origin, "true")

/*
 * Inside SPI, for an acquire whose argument `argno` (session_id) may name a
 * session: false if it is absent or NULL. Otherwise locks the caller's
 * session row against collection (FOR KEY SHARE: a keepalive still runs),
 * checks at simba's clock read after that lock that it is live (SB004
 * if not), and sets *session_id (and its *null flag for SPI) and the
 * session's *ttl_at and *transition_at (shown as the tenure's or permit's
 * own times, which its liveness ignores).
 */
extern bool simba_session_join(FunctionCallInfo fcinfo, int argno, const SimbaCaller *caller,
							   Datum *session_id, char *null, TimestampTz *ttl_at, TimestampTz *transition_at);

/*
 * Inside SPI: runs body(arg) in an internal subtransaction, kept when it
 * returns true and rolled back when it returns false, so a call that
 * changes nothing keeps no lock in the caller's transaction. An error rolls
 * it back before it leaves, so a caller that catches the error (PL/pgSQL, a
 * savepoint) is not left inside it. Returns what body returned.
 */
extern bool simba_in_subtransaction(bool (*body) (void *arg), void *arg);

/* Checked arguments: each raises 22004/22023 with the argument's name. */
extern void simba_check_chars(text *t, const char *what, int max_chars);
extern text *simba_name_arg(FunctionCallInfo fcinfo, int argno, const char *what);
/* An element of the text[] argument `what`, checked as simba_name_arg checks one (`one` names it). */
extern text *simba_array_name(Datum elem, bool isnull, const char *what, const char *one);
extern int64 simba_duration_arg(FunctionCallInfo fcinfo, int argno,
								const char *what, bool allow_zero);
extern int64 simba_int64_arg(FunctionCallInfo fcinfo, int argno, const char *what);
/* Raises 22023 when a lease of ttl + transition is longer than simba.max_lease. */
extern void simba_check_lease(int64 ttl, int64 transition);

/* The settings (module.c): simba.history logs changes of hands (history.c). */
extern bool simba_history;
extern int	simba_max_lease;
extern bool simba_drop_live_leases;

/*
 * Housekeeping (gc.c): simba.gc_idle_age (seconds; -1 off) and
 * simba.gc_interval (seconds). simba_gc_maybe_start, called by every
 * writing call with the calling function's schema and owner, looks once per
 * interval per connection at when the database was last collected and
 * starts the idle-row collector's background worker, as that owner, if that
 * was an interval ago or more.
 */
extern int	simba_gc_idle_age;
extern int	simba_gc_interval;
extern void simba_gc_maybe_start(Oid schema, Oid owner);

/* simba.notify (wake.c): which releases send their NOTIFY simba. */
typedef enum SimbaNotify
{
	SIMBA_NOTIFY_ALWAYS,		/* every release: plain LISTEN simba hears all */
	SIMBA_NOTIFY_REGISTERED		/* only while a waiter registered (simba_wait) */
} SimbaNotify;
extern int	simba_notify;
/* NOTIFY simba, name at commit, unless simba.notify lets it skip (wake.c). */
extern void simba_wake(const char *name);
/*
 * The fair lock's wake-ups (wake.c): the channel a fair waiter is woken on,
 * and, inside SPI, a NOTIFY to the head of each of these mutexes' queues
 * (its first live entry) on its channel, as simba_fair_release sends; for
 * releases that are not fair calls (a session's close, a forced release).
 */
extern char *simba_fair_channel(const char *mutex, const char *contender, const char *role);
extern void simba_fair_wake(FunctionCallInfo fcinfo, Datum *mutexes, int n, TimestampTz t);
/* Lease end of simba_mutex_queue entry q as the clock of `origin` counts it. */
#define SIMBA_QUEUE_ENTRY_END(origin) SIMBA_LEASE_END("q.transition_at", "q.renewed_at", "q.clock_origin", origin)
/*
 * While simba.history is on: log the change of simba_mutex row old to row
 * (old NULL: an insert) when it is a change of hands or a release (forced:
 * an admin's), as the history trigger does for simba's statements. For
 * writes that fire no trigger (simba_update_row).
 */
extern void simba_log_change(FunctionCallInfo fcinfo, TupleDesc desc, HeapTuple old, HeapTuple row, bool forced);
/* Inside SPI: log a release that found its lease over, once per tenure. */
extern void simba_log_late_release(FunctionCallInfo fcinfo, Datum mutex, Datum contender,
								   const SimbaCaller *caller, TimestampTz t);

/*
 * mutex.c, for the fair lock (fair.c): the acquire plans' arguments of a
 * call on one mutex (its mutex and contender_id arguments 0 and 1, ttl and
 * transition at ttl_arg and ttl_arg + 1), and one acquire attempt with
 * them, true when the caller holds the mutex afterwards (*owner is the
 * owner after it; values that are SPI's live until SPI_finish).
 */
/*
 * simba_owner's columns: mutex, owner_id, acquired_at, ttl_at, transition_at, version, fence, current_at,
 * owner_role, session_id.
 */
#define SIMBA_OWNER_NATTS 10
typedef struct SimbaOwner
{
	Datum		values[SIMBA_OWNER_NATTS];
	bool		nulls[SIMBA_OWNER_NATTS];
} SimbaOwner;
extern SimbaCaller simba_mutex_lease_args(FunctionCallInfo fcinfo, int ttl_arg, Datum *args, char *nulls);
extern bool simba_mutex_take(FunctionCallInfo fcinfo, Datum *args, char *nulls, SimbaOwner *owner);
/* A simba_owner tuple of *owner (its values may be SPI's: form it before SPI_finish), allocated in ctx. */
extern HeapTuple simba_owner_tuple(TupleDesc tupdesc, SimbaOwner *owner, MemoryContext ctx);
/*
 * Inside SPI, before any attempt: when argument argno (session_id) names a
 * session, the attempts' tenures join it (simba_session_join: SB004 if it
 * is not the caller's and live) and show its times, not ttl and transition.
 */
extern bool simba_mutex_join_session(FunctionCallInfo fcinfo, int argno, const SimbaCaller *caller,
									 Datum *args, char *nulls);
/* Inside SPI: releases the caller's live tenure of `mutex` (true), else logs a late release. */
extern bool simba_mutex_release(FunctionCallInfo fcinfo, Datum mutex, Datum contender, const SimbaCaller *caller,
								TimestampTz t);


/* t + usec, raising 22008 when the result leaves the timestamp range. */
extern TimestampTz simba_add_usec(TimestampTz t, int64 usec);

#endif							/* SIMBA_H */
