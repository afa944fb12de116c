/*
 * mutex.c — the leased mutex: acquire/renew, release, owner, fence check.
 *
 * Protocol (docs/design.md, "Protocol"). t is simba's clock (clock.c) read
 * once per call, before any statement runs. acquire decides with one
 * conditional update of the row (take_row): a non-holder wins when the row
 * is free or transition_at <= t; the holder renews while transition_at > t.
 * Deciding at t is safe when the update first waits on a row lock: a
 * takeover then still needs the lease to have ended by t (it ended earlier
 * than the real time of the decision) and a renewal gets a lease counted
 * from t (shorter than asked, never longer).
 *
 * Holder: a contender id together with the role the call runs as (by OID,
 * see SimbaCaller), so a role that reads another role's contender id cannot
 * renew, release or fence-check with it; it is a different contender.
 *
 * Fence: a new value of the sequence simba_mutex_fence whenever the mutex
 * changes hands (free, expired or another holder), kept by a renewal inside
 * the lease. A sequence is not rolled back, so no fence the server ever
 * returned is returned again, whether its transaction committed or not.
 *
 * Session: a tenure taken under a session (session_id) lives as long as the
 * session (session.c); the row keeps the session's times at the acquire for
 * show, and reads the session's for its owner and fence check. The
 * multi-lock (multi.c) and the fair lock (fair.c) join sessions the same
 * way, through simba_mutex_take.
 *
 * Locking: acquire and release lock the row only through their update
 * (row_update.c, which waits and re-decides as an UPDATE would). A first
 * acquire inserts the row with ON CONFLICT DO NOTHING, so concurrent first
 * uses wait on each other and then retry the update instead of failing.
 * simba_fence_check locks the row FOR SHARE until the caller's transaction
 * ends, so a takeover (an update) waits for it.

 */
#include "simba.h"
#include "clock.h"
#include "history.h"
#include "mutex.h"
#include "rows.h"
#include "session.h"
#include "wake.h"

#include "access/table.h"
#include "catalog/pg_type.h"
#include "commands/sequence.h"
#include "common/int.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"

PG_FUNCTION_INFO_V1(simba_acquire_1_4);
PG_FUNCTION_INFO_V1(simba_renew_1_4);
PG_FUNCTION_INFO_V1(simba_release_1_4);
PG_FUNCTION_INFO_V1(simba_owner_1_4);
PG_FUNCTION_INFO_V1(simba_fence_check_1_4);
PG_FUNCTION_INFO_V1(simba_mutex_gc);

/*
 * Columns of simba_owner, in order; $3 of the acquire statements is t.
 * A tenure whose role is NULL (taken before 1.3) belongs to nobody: it is
 * never renewed, released or fence-checked, only taken over once it ends.
 */
#define OWNER_COLUMNS "m.mutex, m.owner_id, m.acquired_at, m.ttl_at, m.transition_at, m.version, m.fence"
#define SAME_HOLDER(id, role, roleid, sysid) \
	"(m.owner_id = " id " AND " SIMBA_SAME_ROLE("m.owner_role", "m.owner_roleid", "m.owner_sysid", role, roleid, sysid) ")"

/*
 * $1 mutex, $2 contender, $3 t, $4 ttl_at, $5 transition_at, $6 role, $7 roleid, $8 sysid, $9 origin,
 * $10 session (NULL: none)
 */
#define ACQUIRE_ARGS 10, {TEXTOID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID, NAMEOID, OIDOID, INT8OID, \
	TIMESTAMPTZOID, UUIDOID}
#define ACQUIRE_HOLDER SAME_HOLDER("$2", "$6", "$7", "$8")

/*
 * The acquire and the release change their row through the table AM
 * (simba_update_row), not an UPDATE: an executor's start-up cost each of
 * them more than its change (docs/design.md, "Row updates"). Their rules
 * are SAME_HOLDER and SIMBA_MUTEX_LIVE_LOCKING in C, with SQL's NULLs, so
 * that they agree with the statements that still decide in SQL (renewal,
 * owner, a session's losing read).
 */

/* Columns of simba_mutex (from 0), by name: their order depends on the upgrade path an install took. */
typedef struct MutexColumns
{
	int			owner_id,
				owner_role,
				owner_roleid,
				owner_sysid,
				session_id,
				acquired_at,
				ttl_at,
				transition_at,
				clock_origin,
				version,
				fence,
				released_at;
} MutexColumns;

/* One call's view of a mutex row: who calls, when, and for an acquire its new tenure. */
typedef struct MutexCall
{
	FunctionCallInfo fcinfo;
	Datum		contender;
	SimbaCaller caller;
	TimestampTz t;
	TimestampTz origin;			/* simba's clock; 0: none (a standby) */
	Datum	   *args;			/* an acquire's plan arguments (simba_mutex_fill_args) */
	const char *nulls;
	bool		have_columns;
	MutexColumns c;
	int64		version;		/* out: the row written */
	int64		fence;
} MutexCall;

static int
mutex_column(TupleDesc desc, const char *name)
{
	int			col = SPI_fnumber(desc, name);

	if (col <= 0)
		elog(ERROR, "simba: simba_mutex has no column \"%s\"", name);
	return col - 1;
}

static const MutexColumns *
mutex_columns(MutexCall *m, TupleDesc desc)
{
	if (!m->have_columns)
	{
		m->c.owner_id = mutex_column(desc, "owner_id");
		m->c.owner_role = mutex_column(desc, "owner_role");
		m->c.owner_roleid = mutex_column(desc, "owner_roleid");
		m->c.owner_sysid = mutex_column(desc, "owner_sysid");
		m->c.session_id = mutex_column(desc, "session_id");
		m->c.acquired_at = mutex_column(desc, "acquired_at");
		m->c.ttl_at = mutex_column(desc, "ttl_at");
		m->c.transition_at = mutex_column(desc, "transition_at");
		m->c.clock_origin = mutex_column(desc, "clock_origin");
		m->c.version = mutex_column(desc, "version");
		m->c.fence = mutex_column(desc, "fence");
		m->c.released_at = mutex_column(desc, "released_at");
		m->have_columns = true;
	}
	return &m->c;
}

/* SAME_HOLDER: the row's holder is the caller's contender under the caller's role (NULL: not). */
static bool
same_holder(const MutexCall *m, const MutexColumns *c, const Datum *v, const bool *n)
{
	if (n[c->owner_id] || !simba_same_text(v[c->owner_id], m->contender))
		return false;
	if (!n[c->owner_sysid] && DatumGetInt64(v[c->owner_sysid]) == DatumGetInt64(m->caller.sysid))
		return !n[c->owner_roleid] && DatumGetObjectId(v[c->owner_roleid]) == DatumGetObjectId(m->caller.roleid);
	return !n[c->owner_role] &&
		namestrcmp(DatumGetName(v[c->owner_role]), NameStr(*DatumGetName(m->caller.role))) == 0;
}

/* SQL's three values: a row without the times its lease needs is neither live nor over. */
typedef enum Liveness
{
	LEASE_OVER,
	LEASE_LIVE,
	LEASE_UNKNOWN
} Liveness;

/* SIMBA_MUTEX_LIVE_LOCKING at the call's t: an ended session's row is locked (simba_session_has_ended). */
static Liveness
live_locking(const MutexCall *m, const MutexColumns *c, const Datum *v, const bool *n)
{
	SimbaLeaseEnd e;
	TimestampTz end;

	if (n[c->owner_id])
		return LEASE_OVER;
	if (!n[c->session_id])
		return simba_session_has_ended(m->fcinfo, v[c->session_id], m->t, m->origin == 0, m->origin, true)
			? LEASE_OVER : LEASE_LIVE;
	e = (SimbaLeaseEnd) {
		.col = n[c->transition_at] ? 0 : DatumGetTimestampTz(v[c->transition_at]),
		.since = n[c->acquired_at] ? 0 : DatumGetTimestampTz(v[c->acquired_at]),
		.clock = n[c->clock_origin] ? 0 : DatumGetTimestampTz(v[c->clock_origin]),
		.origin = m->origin,
		.col_null = n[c->transition_at], .since_null = n[c->acquired_at],
		.clock_null = n[c->clock_origin], .origin_null = m->origin == 0,
	};
	if (!simba_lease_end_of(&e, &end))
		return LEASE_UNKNOWN;
	return end > m->t ? LEASE_LIVE : LEASE_OVER;
}

/* version + 1, as int8's + raises on overflow. */
static Datum
next_version(const MutexColumns *c, const Datum *v)
{
	int64		version;

	if (pg_add_s64_overflow(DatumGetInt64(v[c->version]), 1, &version))
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("bigint out of range")));
	return Int64GetDatum(version);
}

/*
 * The acquire (a SimbaRowWriter's change): a non-holder takes a free or ended
 * tenure; the holder renews and keeps its fence while its lease is live
 * (Protocol). A new holder gets a fence from the sequence: never reused,
 * even after a rollback.
 */
static bool
take_row(TupleTableSlot *old, Datum *v, bool *n, void *arg)
{
	MutexCall  *m = arg;
	const MutexColumns *c = mutex_columns(m, old->tts_tupleDescriptor);
	bool		free = n[c->owner_id];
	bool		same = same_holder(m, c, v, n);
	Liveness	live = free ? LEASE_OVER : live_locking(m, c, v, n);

	if (!free && !same && live != LEASE_OVER)
		return false;
	m->fence = same && live == LEASE_LIVE ? DatumGetInt64(v[c->fence])
		: nextval_internal(simba_fence_sequence(m->fcinfo), false);
	v[c->fence] = Int64GetDatum(m->fence);
	v[c->version] = next_version(c, v);
	m->version = DatumGetInt64(v[c->version]);
	v[c->owner_id] = m->args[1];
	v[c->acquired_at] = m->args[2];
	v[c->ttl_at] = m->args[3];
	v[c->transition_at] = m->args[4];
	v[c->owner_role] = m->args[5];
	v[c->owner_roleid] = m->args[6];
	v[c->owner_sysid] = m->args[7];
	v[c->clock_origin] = m->args[8];
	v[c->session_id] = m->args[9];
	n[c->owner_id] = n[c->acquired_at] = n[c->ttl_at] = n[c->transition_at] = false;
	n[c->owner_role] = n[c->owner_roleid] = n[c->owner_sysid] = false;
	n[c->clock_origin] = m->nulls[8] == 'n';
	n[c->session_id] = m->nulls[9] == 'n';
	return true;
}

/* The release (a SimbaRowWriter's change): only the caller's live tenure; an ended or foreign one is left alone. */
static bool
free_row(TupleTableSlot *old, Datum *v, bool *n, void *arg)
{
	MutexCall  *m = arg;
	const MutexColumns *c = mutex_columns(m, old->tts_tupleDescriptor);

	if (!same_holder(m, c, v, n) || live_locking(m, c, v, n) != LEASE_LIVE)
		return false;
	v[c->version] = next_version(c, v);
	n[c->owner_id] = n[c->owner_role] = n[c->owner_roleid] = n[c->owner_sysid] = n[c->session_id] = true;
	n[c->acquired_at] = n[c->ttl_at] = n[c->transition_at] = true;
	/* When it became free: how long it has been idle (simba_mutex_gc, simba_mutex_status.idle_since). */
	v[c->released_at] = TimestampTzGetDatum(m->t);
	n[c->released_at] = false;
	return true;
}

/*
 * The write of a decided row version as an UPDATE, for a simba_mutex that
 * carries what only an executor does, such as a DBA's triggers, CHECK
 * constraints or expression indexes (simba_update_row): $1 the version's
 * ctid, then the columns an acquire or a release sets. A BEFORE trigger
 * may change the new row or skip it: RETURNING says what was written.
 */
static SimbaPlan tid_update = {
	"UPDATE simba_mutex AS m"
	"   SET owner_id = $2, owner_role = $3, owner_roleid = $4, owner_sysid = $5, session_id = $6,"
	"       acquired_at = $7, ttl_at = $8, transition_at = $9, clock_origin = $10, version = $11, fence = $12,"
	"       released_at = $13"
	" WHERE m.ctid = $1"
	" RETURNING m.version, m.fence",
	13, {TIDOID, TEXTOID, NAMEOID, OIDOID, INT8OID, UUIDOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID,
	TIMESTAMPTZOID, INT8OID, INT8OID, TIMESTAMPTZOID}
};

static bool
write_by_statement(ItemPointer tid, const Datum *v, const bool *n, void *arg)
{
	MutexCall  *m = arg;
	const MutexColumns *c = &m->c;
	const int	cols[12] = {c->owner_id, c->owner_role, c->owner_roleid, c->owner_sysid, c->session_id,
	c->acquired_at, c->ttl_at, c->transition_at, c->clock_origin, c->version, c->fence, c->released_at};
	Datum		args[13] = {PointerGetDatum(tid)};
	char		nulls[13] = {' '};
	bool		isnull;
	int			i;

	for (i = 0; i < 12; i++)
	{
		args[i + 1] = v[cols[i]];
		nulls[i + 1] = n[cols[i]] ? 'n' : ' ';
	}
	if (simba_execute(m->fcinfo, &tid_update, args, nulls, 1) != 1)
		return false;
	m->version = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	m->fence = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	return true;
}

/* simba's own trigger on the row updates: change_mutex logs the history itself. */
#define HISTORY_TRIGGER "simba_mutex_history_update"
static const SimbaRowWriter take_writer = {take_row, write_by_statement, HISTORY_TRIGGER};
static const SimbaRowWriter free_writer = {free_row, write_by_statement, HISTORY_TRIGGER};

/*
 * Row `mutex` changed by `writer`. While simba.history is on, a change that
 * fired no trigger is logged as the history trigger would log it.
 */
static bool
change_mutex(MutexCall *m, Datum mutex, const SimbaRowWriter *writer)
{
	Oid			relid = simba_mutex_table(m->fcinfo);
	HeapTuple	old = NULL;
	HeapTuple	row = NULL;
	bool		log = simba_history;

	switch (simba_update_row(m->fcinfo, relid, F_TEXTEQ, mutex, writer, m, log ? &old : NULL, &row))
	{
		case SIMBA_ROW_WRITTEN:
			return true;
		case SIMBA_ROW_UPDATED:
			break;
		default:
			return false;
	}
	if (log)
	{
		Relation	rel = table_open(relid, NoLock);

		simba_log_change(m->fcinfo, RelationGetDescr(rel), old, row, false);
		table_close(rel, NoLock);
	}
	return true;
}

/*
 * Renewal only: the caller's live tenure with fence $11, never a new one. A
 * holder that lost its tenure (forced release, lease end) learns it from the
 * row without taking the mutex again (docs/design.md, "Client"). A tenure
 * under a session is renewed by its session's keepalive: the owner as it
 * stands is the answer.
 */
static SimbaPlan renew_update = {
	"UPDATE simba_mutex AS m"
	"   SET acquired_at = $3, ttl_at = $4, transition_at = $5, clock_origin = $9, version = m.version + 1"
	" WHERE m.mutex = $1 AND m.fence = $11 AND m.session_id IS NULL AND " ACQUIRE_HOLDER
	"   AND " SIMBA_MUTEX_END("$9") " > $3"
	" RETURNING " OWNER_COLUMNS ", $3, m.owner_role, m.session_id",
	11, {TEXTOID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID, NAMEOID, OIDOID, INT8OID, TIMESTAMPTZOID,
	UUIDOID, INT8OID}
};

static SimbaPlan acquire_insert = {
	"INSERT INTO simba_mutex AS m"
	"       (mutex, owner_id, owner_role, owner_roleid, owner_sysid, acquired_at, ttl_at, transition_at,"
	"        clock_origin, session_id, version, fence)"
	" VALUES ($1, $2, $6, $7, $8, $3, $4, $5, $9, $10, 1, pg_catalog.nextval('simba_mutex_fence'))"
	" ON CONFLICT (mutex) DO NOTHING"
	" RETURNING " OWNER_COLUMNS ", $3, m.owner_role, m.session_id",
	ACQUIRE_ARGS
};

/* A time of row m's lease as this clock counts it: its session's, or its own (since acquired_at). */
#define TENURE_TIME(col, origin) \
	SIMBA_SESSION_TIME_OR("m.session_id", #col, origin, SIMBA_LEASE_END("m." #col, "m.acquired_at", "m.clock_origin", origin))
/* acquired_at, ttl_at and transition_at of row m as this clock counts them, as simba_owner shows them. */
#define TENURE_TIMES(origin) \
	SIMBA_LEASE_END("m.acquired_at", "m.acquired_at", "m.clock_origin", origin) ", " \
	TENURE_TIME(ttl_at, origin) ", " TENURE_TIME(transition_at, origin)

/*
 * The row as it stands, owner NULL once the lease has ended. A lease of
 * another clock is shown as this clock counts it. $2 = t, $3 = origin.
 */
static SimbaPlan owner_select = {
	"SELECT m.mutex, CASE WHEN " SIMBA_MUTEX_LIVE("$2", "$3") " THEN m.owner_id END, " TENURE_TIMES("$3") ","
	"       m.version, m.fence, $2,"
	"       CASE WHEN " SIMBA_MUTEX_LIVE("$2", "$3") " THEN m.owner_role END,"
	"       CASE WHEN " SIMBA_MUTEX_LIVE("$2", "$3") " THEN m.session_id END"
	"  FROM simba_mutex AS m WHERE m.mutex = $1",
	3, {TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID}
};

/*
 * A waiter's attempt under a session, on a mutex another holder's lease
 * holds live: lost, read in the statement's snapshot without a lock. The
 * full path locks the session row FOR KEY SHARE before writing a reference
 * to it, which makes a transaction that only loses take an xid and write
 * and flush WAL (96 bytes). Any other case (free, ended, the caller's own,
 * the session unknown, foreign or ended) returns no row and takes the full
 * path, which decides and raises its errors. $1 session, $2 role, $3
 * roleid, $4 sysid, $5 origin, $6 mutex, $7 contender, $8 t.
 */
static SimbaPlan session_lost_select = {
	"SELECT m.mutex, m.owner_id, " TENURE_TIMES("$5") ", m.version, m.fence, $8, m.owner_role, m.session_id"
	"  FROM simba_session_lease AS s, simba_mutex AS m"
	" WHERE " SIMBA_CALLERS_SESSION " AND " SIMBA_SESSION_END("$5") " > $8"
	"   AND m.mutex = $6 AND NOT " SAME_HOLDER("$7", "$2", "$3", "$4") " AND " SIMBA_MUTEX_LIVE("$8", "$5"),
	8, {UUIDOID, NAMEOID, OIDOID, INT8OID, TIMESTAMPTZOID, TEXTOID, TEXTOID, TIMESTAMPTZOID}
};

/*
 * $1 mutex, $2 role, $3 roleid, $4 sysid, $5 origin. A session's end read in
 * this statement may be older than its latest keepalive, never later.
 */
static SimbaPlan fence_lock = {
	"SELECT m.owner_id, m.fence, " TENURE_TIME(transition_at, "$5") ", m.owner_role,"
	"       COALESCE(" SIMBA_SAME_ROLE("m.owner_role", "m.owner_roleid", "m.owner_sysid", "$2", "$3", "$4") ", false)"
	"  FROM simba_mutex AS m WHERE m.mutex = $1 FOR SHARE",
	5, {TEXTOID, NAMEOID, OIDOID, INT8OID, TIMESTAMPTZOID}
};

/*
 * Rows of mutexes idle since $3 or earlier, at most $4 of them (NULL: all):
 * free since a release at or before $3 (or one before 1.4, which did not
 * record when), or a lease, its own or its session's, that ended at or
 * before $3; with no live entry in the fair queue, and no transaction
 * holding them locked ($1 t, $2 origin). The liveness test is the locking
 * one (an ended session's row FOR SHARE, as any collection): a keepalive in
 * flight either committed first, and the row is live again when FOR UPDATE
 * re-reads it, or finds its session ended. A row a holder or an acquire has
 * locked is skipped, never waited for. Fences come from a sequence, so a
 * mutex used again after its row was removed still gets a fence above every
 * earlier one.
 */
static SimbaPlan gc_delete = {
	"DELETE FROM simba_mutex AS d WHERE d.mutex IN"
	" (SELECT m.mutex FROM simba_mutex AS m"
	"   WHERE CASE WHEN m.owner_id IS NULL THEN m.released_at IS NULL OR m.released_at <= $3"
	"              ELSE " SIMBA_SESSION_TIME_OR("m.session_id", "transition_at", "$2", SIMBA_MUTEX_END("$2")) " <= $3 END"
	"     AND NOT " SIMBA_MUTEX_LIVE_LOCKING("$1", "$2")
	"     AND NOT EXISTS (SELECT 1 FROM simba_mutex_queue AS q WHERE q.mutex = m.mutex"
	"                        AND " SIMBA_LEASE_END("q.transition_at", "q.renewed_at", "q.clock_origin", "$2") " > $1)"
	"   LIMIT $4 FOR UPDATE SKIP LOCKED)",
	4, {TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID, INT8OID}, .scans = true
};

static TupleDesc
owner_tupdesc(FunctionCallInfo fcinfo)
{
	TupleDesc	tupdesc;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "simba: return type must be simba_owner");
	return BlessTupleDesc(tupdesc);
}

/* The first row SPI returned, as a simba_owner datum outside SPI's memory. */
static Datum
returned_owner(TupleDesc tupdesc)
{
	return PointerGetDatum(SPI_returntuple(SPI_tuptable->vals[0], tupdesc));
}

/*
 * $2..$9 of the acquire and renew plans from the caller, its contender id,
 * ttl and transition, at simba's clock now; $10, the session, NULL. $1, the
 * mutex, is the caller's to set.
 */
void
simba_mutex_fill_args(FunctionCallInfo fcinfo, const SimbaCaller *caller, text *contender,
				int ttl_arg, Datum *args, char *nulls)
{
	int64		ttl = simba_duration_arg(fcinfo, ttl_arg, "ttl", false);
	int64		transition = simba_duration_arg(fcinfo, ttl_arg + 1, "transition", true);
	TimestampTz t = simba_now(fcinfo);
	TimestampTz ttl_at;

	simba_check_lease(ttl, transition);
	ttl_at = simba_add_usec(t, ttl);
	args[1] = PointerGetDatum(contender);
	args[2] = TimestampTzGetDatum(t);
	args[3] = TimestampTzGetDatum(ttl_at);
	args[4] = TimestampTzGetDatum(simba_add_usec(ttl_at, transition));
	args[5] = caller->role;
	args[6] = caller->roleid;
	args[7] = caller->sysid;
	args[8] = TimestampTzGetDatum(simba_clock_origin(fcinfo));
	args[9] = (Datum) 0;
	memset(nulls, ' ', 10);
	nulls[9] = 'n';
}

/*
 * The lease arguments of a call on one mutex: its mutex and contender_id
 * (arguments 0 and 1), ttl and transition (arguments ttl_arg and ttl_arg + 1).
 */
SimbaCaller
simba_mutex_lease_args(FunctionCallInfo fcinfo, int ttl_arg, Datum *args, char *nulls)
{
	SimbaCaller caller = simba_enter(fcinfo, true);
	text	   *mutex = simba_name_arg(fcinfo, 0, "mutex");

	simba_mutex_fill_args(fcinfo, &caller, simba_name_arg(fcinfo, 1, "contender_id"), ttl_arg, args, nulls);
	args[0] = PointerGetDatum(mutex);
	return caller;
}

/* The owner row the last SPI statement returned (OWNER_COLUMNS ...), valid until SPI_finish. */
static void
spi_owner(SimbaOwner *owner)
{
	heap_deform_tuple(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, owner->values, owner->nulls);
}

/*
 * One acquire attempt with the plans' arguments: true when the caller holds
 * the mutex afterwards. *owner is the owner after it.
 *
 * Won by the row's change, lost if the row exists, won by the INSERT if it
 * does not. An INSERT that meets a concurrent first use returns nothing
 * once that one commits: the next round's change then sees its row.
 */
bool
simba_mutex_take(FunctionCallInfo fcinfo, Datum *args, char *nulls, SimbaOwner *owner)
{
	MutexCall	m = {
		.fcinfo = fcinfo, .contender = args[1], .caller = {args[5], args[6], args[7]},
		.t = DatumGetTimestampTz(args[2]), .origin = DatumGetTimestampTz(args[8]), .args = args, .nulls = nulls,
	};
	int			attempt;

	for (attempt = 0;; attempt++)
	{
		if (change_mutex(&m, args[0], &take_writer))
		{
			*owner = (SimbaOwner) {
				.values = {args[0], args[1], args[2], args[3], args[4], Int64GetDatum(m.version),
				Int64GetDatum(m.fence), args[2], args[5], args[9]},
				.nulls = {[9] = nulls[9] == 'n'},
			};
			return true;
		}
		if (simba_execute(fcinfo, &owner_select, (Datum[]) {args[0], args[2], args[8]}, NULL, 1) == 1)
		{
			spi_owner(owner);
			return false;
		}
		if (simba_execute(fcinfo, &acquire_insert, args, nulls, 1) == 1)
		{
			spi_owner(owner);
			return true;
		}
		if (attempt > 0)
			elog(ERROR, "simba: mutex row vanished while acquiring");
	}
}

/* A simba_owner tuple of *owner, allocated in ctx. */
HeapTuple
simba_owner_tuple(TupleDesc tupdesc, SimbaOwner *owner, MemoryContext ctx)
{
	MemoryContext old = MemoryContextSwitchTo(ctx);
	HeapTuple	tuple = heap_form_tuple(tupdesc, owner->values, owner->nulls);

	MemoryContextSwitchTo(old);
	return tuple;
}

bool
simba_mutex_join_session(FunctionCallInfo fcinfo, int argno, const SimbaCaller *caller, Datum *args, char *nulls)
{
	TimestampTz ttl_at;
	TimestampTz transition_at;

	if (!simba_session_join(fcinfo, argno, caller, &args[9], &nulls[9], &ttl_at, &transition_at))
		return false;
	args[3] = TimestampTzGetDatum(ttl_at);
	args[4] = TimestampTzGetDatum(transition_at);
	return true;
}

/* A mutex never used: free, version and fence still 0 (in the current memory context). */
static HeapTuple
unused_owner_tuple(TupleDesc tupdesc, Datum mutex, TimestampTz t)
{
	Datum		values[SIMBA_OWNER_NATTS] = {
		mutex, 0, 0, 0, 0, Int64GetDatum(0), Int64GetDatum(0), TimestampTzGetDatum(t), 0, 0,
	};
	bool		nulls[SIMBA_OWNER_NATTS] = {false, true, true, true, true, false, false, false, true, true};

	return heap_form_tuple(tupdesc, values, nulls);
}

static Datum
unused_owner(TupleDesc tupdesc, Datum mutex, TimestampTz t)
{
	return HeapTupleGetDatum(unused_owner_tuple(tupdesc, mutex, t));
}

/* Whether a mutex row names a holder other than `contender` (simba_read_row). */
typedef struct HeldByOther
{
	Datum		contender;
	bool		other;			/* out */
} HeldByOther;

static void
read_held_by_other(TupleTableSlot *slot, void *arg)
{
	HeldByOther *h = arg;
	bool		isnull;
	Datum		owner = slot_getattr(slot, SPI_fnumber(slot->tts_tupleDescriptor, "owner_id"), &isnull);

	h->other = !isnull && !simba_same_text(owner, h->contender);
}

/*
 * Whether an attempt under session argument argno lost without a lock
 * (session_lost_select). An attempt on a row that is absent, free or its
 * own contender's (a first use, a win, a holder's repeat) skips that read:
 * its index lookup here costs a tenth of the statement.
 */
bool
simba_mutex_lost_under_session(FunctionCallInfo fcinfo, int argno, const SimbaCaller *caller, Datum *args)
{
	HeldByOther held = {args[1], false};

	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return false;
	if (!simba_read_row(simba_mutex_table(fcinfo), F_TEXTEQ, args[0], read_held_by_other, &held) || !held.other)
		return false;
	return simba_execute(fcinfo, &session_lost_select,
						 (Datum[]) {PG_GETARG_DATUM(argno), caller->role, caller->roleid, caller->sysid, args[8],
		args[0], args[1], args[2]}, NULL, 1) == 1;
}

Datum
simba_acquire_1_4(PG_FUNCTION_ARGS)
{
	Datum		args[10];
	char		nulls[11] = "";
	SimbaCaller caller = simba_mutex_lease_args(fcinfo, 2, args, nulls);
	TupleDesc	tupdesc = owner_tupdesc(fcinfo);
	MemoryContext callctx = CurrentMemoryContext;
	SimbaOwner	owner;
	HeapTuple	result;

	SPI_connect();
	if (simba_mutex_lost_under_session(fcinfo, 4, &caller, args))
		spi_owner(&owner);
	else
	{
		simba_mutex_join_session(fcinfo, 4, &caller, args, nulls);
		(void) simba_mutex_take(fcinfo, args, nulls, &owner);
	}
	result = simba_owner_tuple(tupdesc, &owner, callctx);
	SPI_finish();
	PG_RETURN_DATUM(HeapTupleGetDatum(result));
}

Datum
simba_renew_1_4(PG_FUNCTION_ARGS)
{
	Datum		args[11];
	char		nulls[12] = "";
	int64		fence;
	TupleDesc	tupdesc;
	Datum		result = (Datum) 0;
	bool		found;

	simba_mutex_lease_args(fcinfo, 3, args, nulls);
	fence = simba_int64_arg(fcinfo, 2, "fence");
	if (fence <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("fence must be positive")));
	args[10] = Int64GetDatum(fence);
	nulls[10] = ' ';
	tupdesc = owner_tupdesc(fcinfo);
	SPI_connect();
	found = simba_execute(fcinfo, &renew_update, args, nulls, 1) == 1 ||
		simba_execute(fcinfo, &owner_select, (Datum[]) {args[0], args[2], args[8]}, NULL, 1) == 1;
	if (found)
		result = returned_owner(tupdesc);
	SPI_finish();
	PG_RETURN_DATUM(found ? result : unused_owner(tupdesc, args[0], DatumGetTimestampTz(args[2])));
}

bool
simba_mutex_release(FunctionCallInfo fcinfo, Datum mutex, Datum contender, const SimbaCaller *caller, TimestampTz t)
{
	MutexCall	m = {
		.fcinfo = fcinfo, .contender = contender, .caller = *caller, .t = t, .origin = simba_clock_origin(fcinfo),
	};
	bool		released = change_mutex(&m, mutex, &free_writer);

	if (!released && simba_history)
		simba_log_late_release(fcinfo, mutex, contender, caller, t);
	return released;
}

Datum
simba_release_1_4(PG_FUNCTION_ARGS)
{
	SimbaCaller caller = simba_enter(fcinfo, true);
	text	   *mutex = simba_name_arg(fcinfo, 0, "mutex");
	text	   *contender = simba_name_arg(fcinfo, 1, "contender_id");
	TimestampTz t = simba_now(fcinfo);
	bool		released;

	SPI_connect();
	released = simba_mutex_release(fcinfo, PointerGetDatum(mutex), PointerGetDatum(contender), &caller, t);
	SPI_finish();

	/* Wake the waiters (delivered at commit, like NOTIFY). */
	if (released)
		simba_wake(text_to_cstring(mutex));
	PG_RETURN_BOOL(released);
}

Datum
simba_owner_1_4(PG_FUNCTION_ARGS)
{
	text	   *mutex;
	TupleDesc	tupdesc = owner_tupdesc(fcinfo);
	TimestampTz t;
	TimestampTz origin;
	Datum		result = (Datum) 0;
	bool		found;

	simba_enter(fcinfo, false);
	mutex = simba_name_arg(fcinfo, 0, "mutex");
	t = simba_now(fcinfo);
	origin = simba_clock_origin(fcinfo);
	SPI_connect();
	found = simba_execute(fcinfo, &owner_select,
						  (Datum[]) {PointerGetDatum(mutex), TimestampTzGetDatum(t), TimestampTzGetDatum(origin)},
						  (char[]) {' ', ' ', SIMBA_ORIGIN_NULL(origin)}, 1) == 1;
	if (found)
		result = returned_owner(tupdesc);
	SPI_finish();
	if (!found)
		result = unused_owner(tupdesc, PointerGetDatum(mutex), t);	/* after SPI_finish: outlives the call */
	PG_RETURN_DATUM(result);
}

Datum
simba_fence_check_1_4(PG_FUNCTION_ARGS)
{
	SimbaCaller caller = simba_enter(fcinfo, true);
	text	   *mutex = simba_name_arg(fcinfo, 0, "mutex");
	text	   *contender = simba_name_arg(fcinfo, 1, "contender_id");
	int64		fence = simba_int64_arg(fcinfo, 2, "fence");
	char	   *mutex_name = text_to_cstring(mutex);
	char	   *contender_name = text_to_cstring(contender);
	char	   *owner = NULL;
	char	   *owner_role = NULL;
	bool		same_role = false;
	int64		current_fence = 0;
	TimestampTz transition_at = 0;
	TimestampTz t;

	if (fence <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("fence must be positive")));

	SPI_connect();
	if (simba_execute(fcinfo, &fence_lock,
					  (Datum[]) {PointerGetDatum(mutex), caller.role, caller.roleid, caller.sysid,
		TimestampTzGetDatum(simba_clock_origin(fcinfo))}, NULL, 1) == 1)
	{
		HeapTuple	row = SPI_tuptable->vals[0];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;

		owner = SPI_getvalue(row, desc, 1);
		current_fence = DatumGetInt64(SPI_getbinval(row, desc, 2, &isnull));
		transition_at = DatumGetTimestampTz(SPI_getbinval(row, desc, 3, &isnull));
		owner_role = SPI_getvalue(row, desc, 4);
		same_role = DatumGetBool(SPI_getbinval(row, desc, 5, &isnull));
	}
	/* Read after the row lock: the lease must still hold now. */
	t = simba_now(fcinfo);

	if (owner == NULL || strcmp(owner, contender_name) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_SIMBA_NOT_OWNER),
				 errmsg("contender \"%s\" does not hold mutex \"%s\"", contender_name, mutex_name),
				 owner ? errdetail("It is held by \"%s\".", owner)
				 : errdetail("The mutex is free.")));
	if (!same_role)
		ereport(ERROR,
				(errcode(ERRCODE_SIMBA_NOT_OWNER),
				 errmsg("contender \"%s\" of role \"%s\" does not hold mutex \"%s\"",
						contender_name, NameStr(*DatumGetName(caller.role)), mutex_name),
				 owner_role ? errdetail("It is held by \"%s\" of role \"%s\".", owner, owner_role)
				 : errdetail("It is held by \"%s\", taken before version 1.3 without a role.", owner),
				 errhint("A lease belongs to the role that took it.")));
	if (fence != current_fence)
		ereport(ERROR,
				(errcode(ERRCODE_SIMBA_STALE_FENCE),
				 errmsg("stale fence " INT64_FORMAT " for mutex \"%s\"", fence, mutex_name),
				 errdetail("The current fence is " INT64_FORMAT ".", current_fence)));
	if (transition_at <= t)
		ereport(ERROR,
				(errcode(ERRCODE_SIMBA_LEASE_EXPIRED),
				 errmsg("lease of contender \"%s\" on mutex \"%s\" has expired", contender_name, mutex_name),
				 errdetail("It ended at %s.", timestamptz_to_str(transition_at)),
				 errhint("Acquire the mutex again; the new lease gets a new fence.")));
	SPI_finish();
	PG_RETURN_VOID();
}

/*
 * simba_mutex_gc(idle_for, max_rows): removes the rows of mutexes idle for
 * idle_for or longer (gc_delete), at most max_rows (NULL: no limit), and
 * returns how many. The collector simba starts on its own (gc.c) calls it.
 */
Datum
simba_mutex_gc(PG_FUNCTION_ARGS)
{
	int64		idle;
	int64		max_rows = 0;
	TimestampTz t;
	TimestampTz origin;
	TimestampTz cutoff;
	uint64		deleted;

	simba_enter(fcinfo, true);
	idle = simba_duration_arg(fcinfo, 0, "idle_for", true);
	if (!PG_ARGISNULL(1))
	{
		max_rows = PG_GETARG_INT64(1);
		if (max_rows <= 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("max_rows must be positive"),
					 errhint("Pass NULL to remove every idle row.")));
	}
	t = simba_now(fcinfo);
	/* Nothing can be idle for longer than the timestamp range reaches back. */
	if (pg_sub_s64_overflow(t, idle, &cutoff) || cutoff < MIN_TIMESTAMP)
		cutoff = MIN_TIMESTAMP;
	origin = simba_clock_origin(fcinfo);
	SPI_connect();
	deleted = simba_execute(fcinfo, &gc_delete,
							(Datum[]) {TimestampTzGetDatum(t), TimestampTzGetDatum(origin),
		TimestampTzGetDatum(cutoff), Int64GetDatum(max_rows)},
							(char[]) {' ', SIMBA_ORIGIN_NULL(origin), ' ', PG_ARGISNULL(1) ? 'n' : ' '}, 0);
	SPI_finish();
	PG_RETURN_INT64((int64) deleted);
}

HeapTuple
simba_mutex_owner_now(FunctionCallInfo fcinfo, TupleDesc tupdesc, Datum mutex, TimestampTz t, TimestampTz origin,
					  MemoryContext ctx)
{
	bool		found = simba_execute(fcinfo, &owner_select,
									  (Datum[]) {mutex, TimestampTzGetDatum(t), TimestampTzGetDatum(origin)},
									  (char[]) {' ', ' ', SIMBA_ORIGIN_NULL(origin)}, 1) == 1;
	MemoryContext old = MemoryContextSwitchTo(ctx);
	HeapTuple	row = found ? heap_copytuple(SPI_tuptable->vals[0]) : unused_owner_tuple(tupdesc, mutex, t);

	MemoryContextSwitchTo(old);
	return row;
}
