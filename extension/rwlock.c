/*
 * rwlock.c — the fenced read-write lock: many readers or one writer.
 *
 * A grant decides under its lock's row in simba_rwlock, locked FOR UPDATE,
 * so grants on one lock are decided one after the other. Holders are rows
 * of simba_rwlock_holder, each with its own lease on simba's clock (as a
 * mutex tenure, see mutex.c): mode 'read', 'write', or 'waiting' — a writer
 * queued behind the holders.
 *
 * Row locks (docs/design.md, "Row locks"): a holder's renewal, release and
 * fence check touch only the holder's own row, never the lock's row, so
 * they never wait for another caller's transaction: a new grant left in an
 * open transaction (which keeps the lock's row) delays only other grants.
 * A fence check locks the holder's own row FOR SHARE until its transaction
 * ends: a grant drops lapsed holds with SKIP LOCKED and counts a hold it
 * could not drop as held, so no conflicting grant is made until then.
 *
 * Writer preference: while a writer waits, new readers are refused, so a
 * stream of readers cannot starve it. A waiting writer keeps its place only
 * by asking again within its lease: one that stops asking lapses and drops
 * out. Writers are granted in the order they started waiting.
 *
 * Fences: a writer takes a new value of simba_rwlock_fence (never reused,
 * as simba_mutex_fence); the lock row keeps it as write_fence, the write
 * epoch, which is a reader's fence. A writer may downgrade to a reader
 * (ask for 'read' while writing: no gap, its fence stays); a reader asking
 * for 'write' is refused with SB005, never left to deadlock with another.
 * A hold's acquired_at is kept by its renewals and its downgrade (with its
 * fence), and is new for a new hold: clients tell a lost read hold by it.
 *
 * Sessions: a read or write hold taken under a session (session_id) lives
 * exactly as long as the session, as a mutex tenure does (session.c,
 * simba.h); dropping one whose session ended locks the session row, so a
 * keepalive in flight either renews it first or finds the session ended. A
 * waiting writer's entry is never under a session: it keeps its own lease,
 * renewed by its writer asking again.
 *
 * A call that changes nothing (a reader refused, a release or fence check
 * of a non-holder) rolls back its internal subtransaction or fails, so it
 * keeps no lock on the row in the caller's transaction: a role that holds
 * nothing cannot stall the lock. A writer that starts waiting writes its
 * queue entry, which holds the row like a grant until its transaction ends.
 */
#include "simba.h"
#include "clock.h"
#include "session.h"
#include "wake.h"

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "storage/itemptr.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(simba_rwlock_acquire_1_4);
PG_FUNCTION_INFO_V1(simba_rwlock_release_1_4);
PG_FUNCTION_INFO_V1(simba_rwlock_fence_check_1_4);

static SimbaPlan lock_update = {
	"SELECT write_fence FROM simba_rwlock WHERE rwlock = $1 FOR UPDATE",
	1, {TEXTOID}
};

static SimbaPlan lock_insert = {
	"INSERT INTO simba_rwlock (rwlock) VALUES ($1) ON CONFLICT (rwlock) DO NOTHING",
	1, {TEXTOID}
};

/*
 * $2 t, $3 origin; a hold under a session that ended locks its row
 * (simba.h). A hold another transaction holds locked (a fence check, its
 * holder renewing it) is left, and counted as held.
 */
static SimbaPlan drop_lapsed = {
	"DELETE FROM simba_rwlock_holder AS d WHERE d.ctid = ANY (ARRAY("
	" SELECT h.ctid FROM simba_rwlock_holder AS h WHERE h.rwlock = $1 AND NOT " SIMBA_HOLDER_LIVE_LOCKING("$2", "$3")
	" FOR UPDATE OF h SKIP LOCKED)) AND d.rwlock = $1",
	3, {TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID}
};

/*
 * Every holder row of the lock in queue order, with its lease end `end`:
 * $1 rwlock, the caller as $2 contender, $3 role, $4 roleid, $5 sysid; $6
 * origin.
 */
#define HOLDERS_SELECT(end) \
	"SELECT h.ctid, h.mode, h.fence, h.owner_id = $2 AND " \
	SIMBA_SAME_ROLE("h.owner_role", "h.owner_roleid", "h.owner_sysid", "$3", "$4", "$5") "," \
	"       h.acquired_at, " end ", h.owner_id, h.owner_role" \
	"  FROM simba_rwlock_holder AS h WHERE h.rwlock = $1" \
	" ORDER BY h.acquired_at, h.owner_id"
#define HOLDERS_ARGS 6, {TEXTOID, TEXTOID, NAMEOID, OIDOID, INT8OID, TIMESTAMPTZOID}

/* Grants and releases: the row's own end (a grant has dropped the lapsed holds it could). */
static SimbaPlan holders_select = {
	HOLDERS_SELECT(SIMBA_HOLDER_END("$6")),
	HOLDERS_ARGS
};

/*
 * Fence checks: a hold's end is its session's under a session (read in this
 * statement: maybe older than its latest keepalive, never later).
 */
static SimbaPlan holders_check = {
	HOLDERS_SELECT(SIMBA_SESSION_TIME_OR("h.session_id", "transition_at", "$6", SIMBA_HOLDER_END("$6"))),
	HOLDERS_ARGS
};

/*
 * $1 rwlock, $2 contender, $3 role, $4 roleid, $5 sysid, $6 mode, $7 fence,
 * $8 acquired_at, $9 t, $10 ttl_at, $11 transition_at, $12 origin, $13
 * session (NULL: none)
 */
#define HOLDER_ARGS 13, {TEXTOID, TEXTOID, NAMEOID, OIDOID, INT8OID, TEXTOID, INT8OID, TIMESTAMPTZOID, \
	TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID, UUIDOID}

static SimbaPlan holder_insert = {
	"INSERT INTO simba_rwlock_holder (rwlock, owner_id, owner_role, owner_roleid, owner_sysid, mode, fence,"
	"       acquired_at, renewed_at, ttl_at, transition_at, clock_origin, session_id)"
	" VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
	HOLDER_ARGS
};

/*
 * The caller's row, by ctid ($14): its role columns become this cluster's
 * (after a restore); it moves onto the session of the call, or off sessions.
 */
static SimbaPlan holder_update = {
	"UPDATE simba_rwlock_holder AS h"
	"   SET owner_role = $3, owner_roleid = $4, owner_sysid = $5, mode = $6, fence = $7, acquired_at = $8,"
	"       renewed_at = $9, ttl_at = $10, transition_at = $11, clock_origin = $12, session_id = $13"
	" WHERE h.ctid = $14 AND h.rwlock = $1 AND h.owner_id = $2",
	14, {TEXTOID, TEXTOID, NAMEOID, OIDOID, INT8OID, TEXTOID, INT8OID, TIMESTAMPTZOID,
	TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID, UUIDOID, TIDOID}
};

/* The caller's row ($2 ctid) while it is live at $3 t ($4 origin), as simba_release decides. */
static SimbaPlan holder_release = {
	"DELETE FROM simba_rwlock_holder AS h WHERE h.ctid = $2 AND h.rwlock = $1 AND "
	SIMBA_HOLDER_LIVE_LOCKING("$3", "$4"),
	4, {TEXTOID, TIDOID, TIMESTAMPTZOID, TIMESTAMPTZOID}
};

/*
 * A renewal outside sessions: the caller's live hold in mode $6, its times
 * from $7 t ($8 ttl_at, $9 transition_at, $10 origin); nothing else read
 * or locked. $1 rwlock, $2 contender, $3 role, $4 roleid, $5 sysid.
 */
static SimbaPlan holder_renew = {
	"UPDATE simba_rwlock_holder AS h"
	"   SET owner_role = $3, owner_roleid = $4, owner_sysid = $5,"
	"       renewed_at = $7, ttl_at = $8, transition_at = $9, clock_origin = $10"
	" WHERE h.rwlock = $1 AND h.owner_id = $2 AND "
	SIMBA_SAME_ROLE("h.owner_role", "h.owner_roleid", "h.owner_sysid", "$3", "$4", "$5")
	"   AND h.mode = $6 AND h.session_id IS NULL AND " SIMBA_HOLDER_END("$10") " > $7"
	" RETURNING h.fence, h.acquired_at",
	10, {TEXTOID, TEXTOID, NAMEOID, OIDOID, INT8OID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID,
	TIMESTAMPTZOID}
};

/* A queued writer's entry, written after its grant's rollback: new, renewed, or anew over its lapsed row. */
static SimbaPlan waiting_upsert = {
	"INSERT INTO simba_rwlock_holder AS h (rwlock, owner_id, owner_role, owner_roleid, owner_sysid, mode, fence,"
	"       acquired_at, renewed_at, ttl_at, transition_at, clock_origin, session_id)"
	" VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)"
	" ON CONFLICT (rwlock, owner_id, owner_roleid, owner_sysid) DO UPDATE"
	"   SET owner_role = $3, mode = $6, fence = $7, acquired_at = $8, renewed_at = $9, ttl_at = $10,"
	"       transition_at = $11, clock_origin = $12, session_id = $13",
	HOLDER_ARGS
};

/* The caller's row locked FOR SHARE (a fence check): $1 rwlock, $2 contender, $3 role, $4 roleid, $5 sysid. */
static SimbaPlan holder_share = {
	"SELECT 1 FROM simba_rwlock_holder AS h WHERE h.rwlock = $1 AND h.owner_id = $2 AND "
	SIMBA_SAME_ROLE("h.owner_role", "h.owner_roleid", "h.owner_sysid", "$3", "$4", "$5") " FOR SHARE",
	5, {TEXTOID, TEXTOID, NAMEOID, OIDOID, INT8OID}
};

static SimbaPlan next_write_fence = {
	"UPDATE simba_rwlock SET write_fence = pg_catalog.nextval('simba_rwlock_fence'), version = version + 1"
	" WHERE rwlock = $1 RETURNING write_fence",
	1, {TEXTOID}
};

/* What the holder rows of a lock say, seen by one caller. */
typedef struct Holders
{
	bool		mine;			/* the caller has a row: */
	ItemPointerData mine_tid;
	char	   *mine_mode;
	int64		mine_fence;
	TimestampTz mine_since;		/* its acquired_at */
	TimestampTz mine_end;		/* by the plan read_holders ran */
	int			readers;		/* other live rows by mode */
	int			writers;
	int			waiting;
	int			waiting_ahead;	/* other waiting writers before the caller's entry (all, if none) */
	char	   *writer;			/* the other writer, for messages */
} Holders;

static int64
value_int64(HeapTuple row, int col)
{
	bool		isnull;
	Datum		d = SPI_getbinval(row, SPI_tuptable->tupdesc, col, &isnull);

	return isnull ? 0 : DatumGetInt64(d);
}

/* Inside SPI, under the lock row: the holder rows (all live when lapsed ones were dropped). */
static Holders
read_holders(FunctionCallInfo fcinfo, SimbaPlan *plan, text *rwlock, text *contender, const SimbaCaller *caller,
			 TimestampTz origin)
{
	Holders		h = {0};
	uint64		i;

	simba_execute(fcinfo, plan,
				  (Datum[]) {PointerGetDatum(rwlock), PointerGetDatum(contender), caller->role, caller->roleid,
		caller->sysid, TimestampTzGetDatum(origin)},
				  (char[]) {' ', ' ', ' ', ' ', ' ', SIMBA_ORIGIN_NULL(origin)}, 0);
	for (i = 0; i < SPI_processed; i++)
	{
		HeapTuple	row = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		char	   *mode = SPI_getvalue(row, desc, 2);
		bool		isnull;

		if (DatumGetBool(SPI_getbinval(row, desc, 4, &isnull)))
		{
			h.mine = true;
			h.mine_tid = *(ItemPointer) DatumGetPointer(SPI_getbinval(row, desc, 1, &isnull));
			h.mine_mode = mode;
			h.mine_fence = value_int64(row, 3);
			h.mine_since = DatumGetTimestampTz(SPI_getbinval(row, desc, 5, &isnull));
			h.mine_end = DatumGetTimestampTz(SPI_getbinval(row, desc, 6, &isnull));
		}
		else if (strcmp(mode, "read") == 0)
			h.readers++;
		else if (strcmp(mode, "write") == 0)
		{
			h.writers++;
			h.writer = psprintf("\"%s\" of role \"%s\"", SPI_getvalue(row, desc, 7), SPI_getvalue(row, desc, 8));
		}
		else
		{
			h.waiting++;
			if (!h.mine || strcmp(h.mine_mode, "waiting") != 0)
				h.waiting_ahead++;
		}
	}
	return h;
}

/* The lock's row locked FOR UPDATE, made on first use; returns its write_fence. */
static int64
lock_for_update(FunctionCallInfo fcinfo, text *rwlock)
{
	while (simba_execute(fcinfo, &lock_update, (Datum[]) {PointerGetDatum(rwlock)}, NULL, 1) == 0)
		simba_execute(fcinfo, &lock_insert, (Datum[]) {PointerGetDatum(rwlock)}, NULL, 0);
	return value_int64(SPI_tuptable->vals[0], 1);
}

static bool
mode_is(const Holders *h, const char *mode)
{
	return h->mine && strcmp(h->mine_mode, mode) == 0;
}

/*
 * A grant's inputs, and what it decided (mode NULL: a reader refused,
 * nothing changed; "waiting": args and argnulls are the entry to write).
 */
typedef struct Grant
{
	FunctionCallInfo fcinfo;
	SimbaCaller caller;
	text	   *rwlock;
	text	   *contender;
	bool		write;
	int64		ttl;
	int64		transition;
	const char *mode;
	int64		fence;
	int			position;
	TimestampTz t;
	TimestampTz since;
	TimestampTz ttl_at;
	TimestampTz transition_at;
	Datum		args[14];		/* the holder plans' arguments */
	char		argnulls[15];
} Grant;

/*
 * Under the lock's row: decides and writes the caller's hold (true), or
 * refuses a reader or queues a writer (false: the subtransaction is rolled
 * back, and the caller writes a queued writer's entry after it).
 */
static bool
grant(void *arg)
{
	Grant	   *g = (Grant *) arg;
	FunctionCallInfo fcinfo = g->fcinfo;
	int64		write_fence;
	TimestampTz origin;
	Datum	   *args = g->args;
	char	   *argnulls = g->argnulls;
	TimestampTz session_ttl_at = 0;
	TimestampTz session_end = 0;
	bool		joined;
	Holders		h;

	/*
	 * Under a session, its row first (as simba_acquire); inside the
	 * subtransaction, so a refused reader keeps no lock on it either.
	 */
	joined = simba_session_join(fcinfo, 5, &g->caller, &args[12], &argnulls[12], &session_ttl_at, &session_end);
	write_fence = lock_for_update(fcinfo, g->rwlock);
	/* The clock after the lock: every earlier grant is visible now. */
	g->t = g->since = simba_now(fcinfo);
	origin = simba_clock_origin(fcinfo);
	g->ttl_at = simba_add_usec(g->t, g->ttl);
	g->transition_at = simba_add_usec(g->ttl_at, g->transition);
	simba_execute(fcinfo, &drop_lapsed,
				  (Datum[]) {PointerGetDatum(g->rwlock), TimestampTzGetDatum(g->t), TimestampTzGetDatum(origin)},
				  (char[]) {' ', ' ', SIMBA_ORIGIN_NULL(origin)}, 0);
	h = read_holders(fcinfo, &holders_select, g->rwlock, g->contender, &g->caller, origin);

	if (g->write && mode_is(&h, "read"))
		ereport(ERROR,
				(errcode(ERRCODE_SIMBA_UPGRADE_REFUSED),
				 errmsg("contender \"%s\" holds rwlock \"%s\" for reading and cannot upgrade to writing",
						text_to_cstring(g->contender), text_to_cstring(g->rwlock)),
				 errdetail("Two readers upgrading at once would wait for each other forever."),
				 errhint("Release it, then acquire it for writing: the write gets a new fence.")));
	if (g->write && mode_is(&h, "write"))
	{
		g->mode = "write";		/* a renewal */
		g->fence = h.mine_fence;
		g->since = h.mine_since;
	}
	else if (g->write && h.readers == 0 && h.writers == 0 && h.waiting_ahead == 0)
	{
		g->mode = "write";
		simba_execute(fcinfo, &next_write_fence, (Datum[]) {PointerGetDatum(g->rwlock)}, NULL, 1);
		g->fence = value_int64(SPI_tuptable->vals[0], 1);
	}
	else if (g->write)
	{
		g->mode = "waiting";
		g->position = h.waiting_ahead + 1;
		if (h.mine)
			g->since = h.mine_since;	/* its place in the queue */
	}
	else if (mode_is(&h, "read") || mode_is(&h, "write"))
	{
		g->mode = "read";		/* a renewal, or a downgrade without a gap */
		g->fence = h.mine_fence;
		g->since = h.mine_since;
	}
	else if (h.writers == 0 && h.waiting == 0)
	{
		g->mode = "read";
		g->fence = write_fence;
	}
	else
		return false;

	/* A hold lives with the session and shows its times; a waiting writer's entry keeps its own lease. */
	if (joined && strcmp(g->mode, "waiting") != 0)
	{
		g->ttl_at = session_ttl_at;
		g->transition_at = session_end;
	}
	else
		argnulls[12] = 'n';
	args[0] = PointerGetDatum(g->rwlock);
	args[1] = PointerGetDatum(g->contender);
	args[2] = g->caller.role;
	args[3] = g->caller.roleid;
	args[4] = g->caller.sysid;
	args[5] = CStringGetTextDatum(g->mode);
	args[6] = Int64GetDatum(g->fence);
	args[7] = TimestampTzGetDatum(g->since);
	args[8] = TimestampTzGetDatum(g->t);
	args[9] = TimestampTzGetDatum(g->ttl_at);
	args[10] = TimestampTzGetDatum(g->transition_at);
	args[11] = TimestampTzGetDatum(origin);
	argnulls[11] = SIMBA_ORIGIN_NULL(origin);
	/* A queued writer keeps its place, not the lock's row: its entry is written after the rollback. */
	if (strcmp(g->mode, "waiting") == 0)
		return false;
	args[13] = PointerGetDatum(&h.mine_tid);
	if (simba_execute(fcinfo, h.mine ? &holder_update : &holder_insert, args, argnulls, 0) != 1)
		elog(ERROR, "simba: rwlock holder row vanished while granting");
	return true;
}

/*
 * A holder's renewal outside sessions, of its live hold in the mode it
 * asks for: its own row only, not the lock's row (true). Anything else (a
 * new hold, a downgrade, a lapsed hold, a queued writer) takes grant().
 */
static bool
renew(Grant *g, const char *want)
{
	FunctionCallInfo fcinfo = g->fcinfo;
	TimestampTz origin = simba_clock_origin(fcinfo);
	bool		isnull;

	g->t = simba_now(fcinfo);
	g->ttl_at = simba_add_usec(g->t, g->ttl);
	g->transition_at = simba_add_usec(g->ttl_at, g->transition);
	if (simba_execute(fcinfo, &holder_renew,
					  (Datum[]) {PointerGetDatum(g->rwlock), PointerGetDatum(g->contender), g->caller.role,
		g->caller.roleid, g->caller.sysid, CStringGetTextDatum(want), TimestampTzGetDatum(g->t),
		TimestampTzGetDatum(g->ttl_at), TimestampTzGetDatum(g->transition_at), TimestampTzGetDatum(origin)},
					  (char[]) {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', SIMBA_ORIGIN_NULL(origin)}, 1) != 1)
		return false;
	g->mode = g->write ? "write" : "read";
	g->fence = value_int64(SPI_tuptable->vals[0], 1);
	g->since = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	return true;
}

Datum
simba_rwlock_acquire_1_4(PG_FUNCTION_ARGS)
{
	Grant		g = {fcinfo, simba_enter(fcinfo, true)};
	char	   *want;
	TupleDesc	tupdesc;
	Datum		values[10];
	bool		nulls[10] = {false};
	bool		granted;

	g.rwlock = simba_name_arg(fcinfo, 0, "rwlock");
	g.contender = simba_name_arg(fcinfo, 1, "contender_id");
	want = text_to_cstring(simba_name_arg(fcinfo, 2, "mode"));
	g.write = strcmp(want, "write") == 0;
	g.ttl = simba_duration_arg(fcinfo, 3, "ttl", false);
	g.transition = simba_duration_arg(fcinfo, 4, "transition", true);
	if (!g.write && strcmp(want, "read") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("mode must be 'read' or 'write', not \"%s\"", want)));
	simba_check_lease(g.ttl, g.transition);
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "simba: return type must be simba_rwlock_grant");
	tupdesc = BlessTupleDesc(tupdesc);

	memset(g.argnulls, ' ', sizeof(g.argnulls) - 1);
	SPI_connect();
	granted = (PG_ARGISNULL(5) && renew(&g, want)) || simba_in_subtransaction(grant, &g);
	/* A reader refused changed nothing and keeps no lock; a queued writer keeps only its entry. */
	if (!granted && g.mode != NULL)
		granted = simba_execute(fcinfo, &waiting_upsert, g.args, g.argnulls, 0) == 1;
	SPI_finish();

	values[0] = PointerGetDatum(g.rwlock);
	values[1] = PointerGetDatum(g.contender);
	values[2] = granted ? CStringGetTextDatum(g.mode) : (Datum) 0;
	nulls[2] = !granted;
	values[3] = BoolGetDatum(granted && strcmp(g.mode, "waiting") != 0);
	values[4] = Int64GetDatum(g.fence);
	nulls[4] = !granted || strcmp(g.mode, "waiting") == 0;
	values[5] = TimestampTzGetDatum(g.since);
	values[6] = TimestampTzGetDatum(g.ttl_at);
	values[7] = TimestampTzGetDatum(g.transition_at);
	nulls[5] = nulls[6] = nulls[7] = !granted;
	values[8] = TimestampTzGetDatum(g.t);
	values[9] = Int32GetDatum(g.position);
	nulls[9] = g.position == 0;
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

/* A release's work: kept only when it ended a hold or withdrew a place. */
typedef struct Release
{
	FunctionCallInfo fcinfo;
	SimbaCaller caller;
	text	   *rwlock;
	text	   *contender;
	bool		released;
	bool		notify;
} Release;

static bool
release(void *arg)
{
	Release    *r = (Release *) arg;
	FunctionCallInfo fcinfo = r->fcinfo;
	TimestampTz t;
	TimestampTz origin;
	Holders		h;

	/* Its own row only: a release never waits for another caller's grant. */
	t = simba_now(fcinfo);
	origin = simba_clock_origin(fcinfo);
	h = read_holders(fcinfo, &holders_select, r->rwlock, r->contender, &r->caller, origin);
	/* A live hold is released (under a session: while the session lives); a queued writer's entry is withdrawn. */
	if (!h.mine ||
		simba_execute(fcinfo, &holder_release,
					  (Datum[]) {PointerGetDatum(r->rwlock), PointerGetDatum(&h.mine_tid), TimestampTzGetDatum(t),
		TimestampTzGetDatum(origin)}, (char[]) {' ', ' ', ' ', SIMBA_ORIGIN_NULL(origin)}, 0) == 0)
		return false;
	r->released = !mode_is(&h, "waiting");
	/*
	 * Nobody waits for a reader unless a writer does: readers are refused
	 * only by a writer holding or waiting. So a reader's release with no
	 * writer queued sends nothing (a NOTIFY serializes commits cluster-wide).
	 */
	r->notify = !mode_is(&h, "read") || h.waiting > 0;
	return true;
}

Datum
simba_rwlock_release_1_4(PG_FUNCTION_ARGS)
{
	Release		r = {fcinfo, simba_enter(fcinfo, true)};
	bool		changed;

	r.rwlock = simba_name_arg(fcinfo, 0, "rwlock");
	r.contender = simba_name_arg(fcinfo, 1, "contender_id");
	SPI_connect();
	changed = simba_in_subtransaction(release, &r);
	SPI_finish();
	/* Whoever waits for it may be granted now (delivered at commit). */
	if (changed && r.notify)
		simba_wake(text_to_cstring(r.rwlock));
	PG_RETURN_BOOL(r.released);
}

Datum
simba_rwlock_fence_check_1_4(PG_FUNCTION_ARGS)
{
	SimbaCaller caller = simba_enter(fcinfo, true);
	text	   *rwlock = simba_name_arg(fcinfo, 0, "rwlock");
	text	   *contender = simba_name_arg(fcinfo, 1, "contender_id");
	int64		fence = simba_int64_arg(fcinfo, 2, "fence");
	char	   *name = text_to_cstring(rwlock);
	char	   *who = text_to_cstring(contender);
	Holders		h = {0};
	TimestampTz t;

	if (fence < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("fence must not be negative")));
	SPI_connect();
	/*
	 * Its own row FOR SHARE until the transaction ends: a grant cannot drop
	 * it, so no conflicting grant is made until then (see drop_lapsed).
	 */
	simba_execute(fcinfo, &holder_share,
				  (Datum[]) {PointerGetDatum(rwlock), PointerGetDatum(contender), caller.role, caller.roleid,
		caller.sysid}, NULL, 0);
	h = read_holders(fcinfo, &holders_check, rwlock, contender, &caller, simba_clock_origin(fcinfo));
	/* Read after the lock: the lease must still hold now. */
	t = simba_now(fcinfo);
	if (!mode_is(&h, "read") && !mode_is(&h, "write"))
		ereport(ERROR,
				(errcode(ERRCODE_SIMBA_NOT_OWNER),
				 errmsg("contender \"%s\" does not hold rwlock \"%s\"", who, name),
				 h.writer ? errdetail("It is held for writing by %s.", h.writer)
				 : mode_is(&h, "waiting") ? errdetail("The contender is waiting to write.") : 0));
	if (fence != h.mine_fence)
		ereport(ERROR,
				(errcode(ERRCODE_SIMBA_STALE_FENCE),
				 errmsg("stale fence " INT64_FORMAT " for rwlock \"%s\"", fence, name),
				 errdetail("The contender holds it for %s with fence " INT64_FORMAT ".", h.mine_mode, h.mine_fence)));
	if (h.mine_end <= t)
		ereport(ERROR,
				(errcode(ERRCODE_SIMBA_LEASE_EXPIRED),
				 errmsg("lease of contender \"%s\" on rwlock \"%s\" has expired", who, name),
				 errdetail("It ended at %s.", timestamptz_to_str(h.mine_end)),
				 errhint("Acquire the rwlock again.")));
	SPI_finish();
	PG_RETURN_VOID();
}
