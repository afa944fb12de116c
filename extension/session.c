/*
 * session.c — sessions (1.4): one lease that keeps every tenure (of a
 * mutex, a multi-lock, a fair lock), permit and read-write hold taken under
 * it alive, so a process renews once per period whatever it holds, and a
 * dead process loses all of it together (docs/design.md, "Sessions").
 *
 * A session row carries the lease (renewed_at, ttl_at, transition_at on
 * simba's clock, counted again in full from a new clock origin as a mutex
 * lease is) and the lengths a keepalive renews it by. It belongs to the role
 * that opened it, as a tenure does (mutex.c). Rows under it refer to it by
 * session_id; simba.h says how their liveness is read and which statements
 * lock an ended session row.
 *
 * Races, each decided by a row lock and simba's clock read after it:
 * - keepalive vs a takeover of one of its mutexes or permits: the keepalive
 *   locks the row FOR NO KEY UPDATE, then reads the clock; a takeover locks
 *   the row FOR SHARE only once it has ended. Whichever locks first decides:
 *   a keepalive that waited finds the session ended (the takeover's clock
 *   was past its end, and the keepalive's is later); a takeover that waited
 *   finds the renewed row live.
 * - acquire under a session vs collection: the acquire locks the session
 *   FOR KEY SHARE (a keepalive still runs) before checking it is live, and
 *   collection locks only ended sessions FOR UPDATE SKIP LOCKED, then
 *   detaches every row that refers to them before deleting them. A session
 *   row is never deleted while a row refers to it.
 */
#include "simba.h"
#include "clock.h"
#include "rows.h"
#include "session.h"
#include "wake.h"

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/uuid.h"

PG_FUNCTION_INFO_V1(simba_session_open_1_4);
PG_FUNCTION_INFO_V1(simba_session_keepalive_1_4);
PG_FUNCTION_INFO_V1(simba_session_close_1_4);
PG_FUNCTION_INFO_V1(simba_session_gc_1_4);
PG_FUNCTION_INFO_V1(simba_wake_lapsed);
PG_FUNCTION_INFO_V1(simba_session_ended);
PG_FUNCTION_INFO_V1(simba_session_time);

/* The arguments of SIMBA_CALLERS_SESSION ($1..$4), then $5 origin. */
#define CALLER_ARGS UUIDOID, NAMEOID, OIDOID, INT8OID, TIMESTAMPTZOID
/* end of session, end of ttl, as this clock counts them */
#define SESSION_TIMES \
	SIMBA_SESSION_END("$5") ", " SIMBA_LEASE_END("s.ttl_at", "s.renewed_at", "s.clock_origin", "$5")

/* $1 role, $2 roleid, $3 sysid, $4 t, $5 ttl_at, $6 transition_at, $7 ttl, $8 transition, $9 origin */
static SimbaPlan session_insert = {
	"INSERT INTO simba_session_lease"
	"       (session_id, owner_role, owner_roleid, owner_sysid, opened_at, renewed_at, ttl_at, transition_at,"
	"        ttl, transition, clock_origin)"
	" VALUES (pg_catalog.gen_random_uuid(), $1, $2, $3, $4, $4, $5, $6, $7, $8, $9)"
	" RETURNING session_id, ttl_at, transition_at, $4, revoked",
	9, {NAMEOID, OIDOID, INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID, INTERVALOID, INTERVALOID,
	TIMESTAMPTZOID}
};

/* Keepalive: the row locked against takeovers' FOR SHARE, then its lengths. */
static SimbaPlan keepalive_lock = {
	"SELECT " SESSION_TIMES ", s.ttl, s.transition FROM simba_session_lease AS s"
	" WHERE " SIMBA_CALLERS_SESSION " FOR NO KEY UPDATE",
	5, {CALLER_ARGS}
};

/* $1 id, $2 t, $3 ttl_at, $4 transition_at, $5 origin */
static SimbaPlan keepalive_update = {
	"UPDATE simba_session_lease SET renewed_at = $2, ttl_at = $3, transition_at = $4, clock_origin = $5"
	" WHERE session_id = $1"
	" RETURNING session_id, ttl_at, transition_at, $2, revoked",
	5, {UUIDOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID}
};

/* Acquire under a session: kept from collection, not from keepalives. */
static SimbaPlan join_lock = {
	"SELECT " SESSION_TIMES " FROM simba_session_lease AS s WHERE " SIMBA_CALLERS_SESSION " FOR KEY SHARE",
	5, {CALLER_ARGS}
};

static SimbaPlan close_lock = {
	"SELECT " SESSION_TIMES " FROM simba_session_lease AS s WHERE " SIMBA_CALLERS_SESSION " FOR UPDATE",
	5, {CALLER_ARGS}
};

/* A live session's close releases what it holds, as simba_release would ($1 id, $2 t). */
static SimbaPlan close_mutexes = {
	"UPDATE simba_mutex AS m"
	"   SET owner_id = NULL, owner_role = NULL, owner_roleid = NULL, owner_sysid = NULL, session_id = NULL,"
	"       acquired_at = NULL, ttl_at = NULL, transition_at = NULL, released_at = $2, version = m.version + 1"
	" WHERE m.session_id = $1 AND m.owner_id IS NOT NULL"
	" RETURNING m.mutex",
	2, {UUIDOID, TIMESTAMPTZOID}
};

/*
 * Read-write holds end as simba_rwlock_release ends them: each lock's name
 * once, and whether to NOTIFY simba (a writer released, or a writer waits;
 * nobody waits for a reader otherwise). A waiting writer's entry is never
 * under a session ($1 id).
 */
static SimbaPlan close_rwlocks = {
	"WITH released AS (DELETE FROM simba_rwlock_holder AS h WHERE h.session_id = $1 RETURNING h.rwlock, h.mode)"
	" SELECT r.rwlock, pg_catalog.count(*),"
	"        pg_catalog.bool_or(r.mode = 'write')"
	"        OR EXISTS (SELECT 1 FROM simba_rwlock_holder AS w WHERE w.rwlock = r.rwlock AND w.mode = 'waiting')"
	"   FROM released AS r GROUP BY r.rwlock",
	1, {UUIDOID}
};

static SimbaPlan close_permits = {
	"UPDATE simba_semaphore_permit AS p SET expires_at = $2, renewed_at = $2, clock_origin = $3, session_id = NULL"
	" WHERE p.session_id = $1"
	" RETURNING p.key",
	3, {UUIDOID, TIMESTAMPTZOID, TIMESTAMPTZOID}
};

/*
 * An ended session's rows become ordinary leases that ended with it (the
 * same holder and fence: not a change of hands), so it can be deleted. $1 ids.
 */
static SimbaPlan detach_mutexes = {
	"UPDATE simba_mutex AS m"
	"   SET session_id = NULL, acquired_at = s.renewed_at, ttl_at = s.ttl_at, transition_at = s.transition_at,"
	"       clock_origin = s.clock_origin"
	"  FROM simba_session_lease AS s WHERE s.session_id = ANY ($1) AND m.session_id = s.session_id",
	1, {UUIDARRAYOID}
};

static SimbaPlan detach_permits = {
	"UPDATE simba_semaphore_permit AS p"
	"   SET session_id = NULL, renewed_at = s.renewed_at, expires_at = s.transition_at, clock_origin = s.clock_origin"
	"  FROM simba_session_lease AS s WHERE s.session_id = ANY ($1) AND p.session_id = s.session_id",
	1, {UUIDARRAYOID}
};

static SimbaPlan detach_rwlocks = {
	"UPDATE simba_rwlock_holder AS h"
	"   SET session_id = NULL, renewed_at = s.renewed_at, ttl_at = s.ttl_at, transition_at = s.transition_at,"
	"       clock_origin = s.clock_origin"
	"  FROM simba_session_lease AS s WHERE s.session_id = ANY ($1) AND h.session_id = s.session_id",
	1, {UUIDARRAYOID}
};

static SimbaPlan session_delete = {
	"DELETE FROM simba_session_lease WHERE session_id = ANY ($1)",
	1, {UUIDARRAYOID}
};

/* Ended sessions nobody is acquiring under or closing; $1 t, $2 origin. */
static SimbaPlan gc_lock = {
	"SELECT pg_catalog.array_agg(l.session_id) FROM"
	" (SELECT s.session_id FROM simba_session_lease AS s WHERE " SIMBA_SESSION_END("$2") " <= $1"
	"  FOR UPDATE SKIP LOCKED) AS l",
	2, {TIMESTAMPTZOID, TIMESTAMPTZOID}, .scans = true
};

/*
 * The lapse waker's round (lapse.c): the sessions that ended in ($1, $2]
 * and the next end after $2, at origin $3. Sessions are few (one per
 * process): a scan.
 */
static SimbaPlan lapsed_select = {
	"SELECT pg_catalog.array_agg(e.session_id) FILTER (WHERE e.ends <= $2),"
	"       pg_catalog.min(e.ends) FILTER (WHERE e.ends > $2)"
	"  FROM (SELECT s.session_id, " SIMBA_SESSION_END("$3") " AS ends FROM simba_session_lease AS s) AS e"
	" WHERE e.ends > $1",
	3, {TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID}, .scans = true
};

/* What these sessions ($1) hold: mutexes (mutex true), semaphore keys and read-write locks. */
static SimbaPlan lapsed_holds = {
	"SELECT m.mutex, true FROM simba_mutex AS m WHERE m.session_id = ANY ($1) AND m.owner_id IS NOT NULL"
	" UNION SELECT p.key, false FROM simba_semaphore_permit AS p WHERE p.session_id = ANY ($1)"
	" UNION SELECT h.rwlock, false FROM simba_rwlock_holder AS h WHERE h.session_id = ANY ($1)",
	1, {UUIDARRAYOID}
};

static Datum
session_id_arg(FunctionCallInfo fcinfo, int argno)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("session_id must not be null")));
	return PG_GETARG_DATUM(argno);
}

static char *
session_name(Datum session_id)
{
	return DatumGetCString(DirectFunctionCall1(uuid_out, session_id));
}

/* $1..$5 of the plans on the caller's session */
static void
caller_args(FunctionCallInfo fcinfo, Datum *args, Datum session_id, const SimbaCaller *caller)
{
	args[0] = session_id;
	args[1] = caller->role;
	args[2] = caller->roleid;
	args[3] = caller->sysid;
	args[4] = TimestampTzGetDatum(simba_clock_origin(fcinfo));
}

static TimestampTz
column_time(int col)
{
	bool		isnull;

	return DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, col, &isnull));
}

static void
no_session(Datum session_id, bool found, TimestampTz end)
{
	ereport(ERROR,
			(errcode(ERRCODE_SIMBA_NO_SESSION),
			 found ? errmsg("session %s has ended", session_name(session_id))
			 : errmsg("session %s does not exist", session_name(session_id)),
			 found ? errdetail("It ended at %s; nothing it held is held any more.", timestamptz_to_str(end))
			 : errdetail("It was closed, collected after it ended, never opened, or belongs to another role."),
			 errhint("Open a new session; what it acquires gets new fences.")));
}

/* The session row a keepalive or acquire returned, as a simba_session datum. */
static Datum
returned_session(FunctionCallInfo fcinfo)
{
	TupleDesc	tupdesc;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "simba: return type must be simba_session");
	return PointerGetDatum(SPI_returntuple(SPI_tuptable->vals[0], BlessTupleDesc(tupdesc)));
}

/* join_lock for session_id of caller: whether it was found, its end and ttl_at. */
static bool
join_locked(FunctionCallInfo fcinfo, Datum session_id, const SimbaCaller *caller, TimestampTz *end,
			TimestampTz *ttl_at)
{
	Datum		args[5];

	caller_args(fcinfo, args, session_id, caller);
	if (simba_execute(fcinfo, &join_lock, args, NULL, 1) != 1)
		return false;
	*end = column_time(1);
	*ttl_at = column_time(2);
	return true;
}

bool
simba_session_join(FunctionCallInfo fcinfo, int argno, const SimbaCaller *caller,
				   Datum *session_id, char *null, TimestampTz *ttl_at, TimestampTz *transition_at)
{
	bool		found;
	TimestampTz end = 0;

	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return false;
	*session_id = PG_GETARG_DATUM(argno);
	*null = ' ';
	found = join_locked(fcinfo, *session_id, caller, &end, ttl_at);
	*transition_at = end;
	/* The clock after the lock: the session must be live now. */
	if (!found || end <= simba_now(fcinfo))
		no_session(*session_id, found, end);
	return true;
}

bool
simba_session_join_for(FunctionCallInfo fcinfo, Datum session_id, const SimbaCaller *holder,
					   TimestampTz *ttl_at, TimestampTz *transition_at)
{
	return join_locked(fcinfo, session_id, holder, transition_at, ttl_at) && *transition_at > simba_now(fcinfo);
}

Datum
simba_session_open_1_4(PG_FUNCTION_ARGS)
{
	SimbaCaller caller = simba_enter(fcinfo, true);
	int64		ttl = simba_duration_arg(fcinfo, 0, "ttl", false);
	int64		transition = simba_duration_arg(fcinfo, 1, "transition", true);
	TimestampTz t = simba_now(fcinfo);
	TimestampTz ttl_at;
	Datum		result;

	simba_check_lease(ttl, transition);
	ttl_at = simba_add_usec(t, ttl);
	SPI_connect();
	simba_execute(fcinfo, &session_insert,
				  (Datum[]) {caller.role, caller.roleid, caller.sysid, TimestampTzGetDatum(t),
		TimestampTzGetDatum(ttl_at), TimestampTzGetDatum(simba_add_usec(ttl_at, transition)),
		PG_GETARG_DATUM(0), PG_GETARG_DATUM(1), TimestampTzGetDatum(simba_clock_origin(fcinfo))}, NULL, 1);
	result = returned_session(fcinfo);
	SPI_finish();
	PG_RETURN_DATUM(result);
}

Datum
simba_session_keepalive_1_4(PG_FUNCTION_ARGS)
{
	SimbaCaller caller = simba_enter(fcinfo, true);
	Datum		session_id = session_id_arg(fcinfo, 0);
	Datum		args[5];
	bool		found;
	bool		isnull;
	TimestampTz end = 0;
	TimestampTz t;
	TimestampTz ttl_at;
	Datum		result;

	caller_args(fcinfo, args, session_id, &caller);
	SPI_connect();
	found = simba_execute(fcinfo, &keepalive_lock, args, NULL, 1) == 1;
	t = simba_now(fcinfo);
	if (found)
		end = column_time(1);
	if (!found || end <= t)
		no_session(session_id, found, end);
	ttl_at = simba_add_usec(t, DatumGetIntervalP(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
															   3, &isnull))->time);
	end = simba_add_usec(ttl_at, DatumGetIntervalP(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
																 4, &isnull))->time);
	simba_execute(fcinfo, &keepalive_update,
				  (Datum[]) {session_id, TimestampTzGetDatum(t), TimestampTzGetDatum(ttl_at), TimestampTzGetDatum(end),
		args[4]}, NULL, 1);
	result = returned_session(fcinfo);
	SPI_finish();
	PG_RETURN_DATUM(result);
}

/* A uuid[] of one id, for the plans that take several. */
static Datum
one_id(Datum session_id)
{
	return PointerGetDatum(construct_array(&session_id, 1, UUIDOID, UUID_LEN, false, TYPALIGN_CHAR));
}

/* Detach the rows of these ended, locked sessions and delete them. */
static void
collect(FunctionCallInfo fcinfo, Datum ids)
{
	simba_execute(fcinfo, &detach_mutexes, &ids, NULL, 0);
	simba_execute(fcinfo, &detach_permits, &ids, NULL, 0);
	simba_execute(fcinfo, &detach_rwlocks, &ids, NULL, 0);
	simba_execute(fcinfo, &session_delete, &ids, NULL, 0);
}

Datum
simba_session_close_1_4(PG_FUNCTION_ARGS)
{
	SimbaCaller caller = simba_enter(fcinfo, true);
	Datum		session_id = session_id_arg(fcinfo, 0);
	Datum		args[5];
	List	   *woken = NIL;
	int64		released = 0;
	TimestampTz t;

	caller_args(fcinfo, args, session_id, &caller);
	SPI_connect();
	/* Unknown or another role's: nothing to close (as simba_release returns false). */
	if (simba_execute(fcinfo, &close_lock, args, NULL, 1) == 1)
	{
		t = simba_now(fcinfo);
		if (column_time(1) <= t)
			collect(fcinfo, one_id(session_id));
		else
		{
			uint64		i;
			uint64		n = simba_execute(fcinfo, &close_mutexes,
										  (Datum[]) {session_id, TimestampTzGetDatum(t)}, NULL, 0);
			Datum	   *mutexes = palloc((n + 1) * sizeof(Datum));
			bool		isnull;

			for (i = 0; i < n; i++)
			{
				woken = lappend(woken, SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1));
				mutexes[i] = SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull);
			}
			released = (int64) n;
			/* A fair queue's head is woken on its own channel: it does not listen on simba. */
			simba_fair_wake(fcinfo, mutexes, (int) n, t);
			n = simba_execute(fcinfo, &close_permits,
							  (Datum[]) {session_id, TimestampTzGetDatum(t), args[4]}, NULL, 0);
			for (i = 0; i < n; i++)
				woken = lappend(woken, SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1));
			released += (int64) n;
			n = simba_execute(fcinfo, &close_rwlocks, &session_id, NULL, 0);
			for (i = 0; i < n; i++)
			{
				HeapTuple	row = SPI_tuptable->vals[i];

				released += DatumGetInt64(SPI_getbinval(row, SPI_tuptable->tupdesc, 2, &isnull));
				if (DatumGetBool(SPI_getbinval(row, SPI_tuptable->tupdesc, 3, &isnull)))
					woken = lappend(woken, SPI_getvalue(row, SPI_tuptable->tupdesc, 1));
			}
			simba_execute(fcinfo, &session_delete, (Datum[]) {one_id(session_id)}, NULL, 0);
		}
	}
	/*
	 * Wake the waiters of each mutex, key and rwlock (delivered at commit;
	 * repeats fold into one), in byte order of the names as
	 * simba_release_all does, not in the order the rows happened to be read.
	 */
	simba_wake_all(woken);
	SPI_finish();
	PG_RETURN_INT64(released);
}

Datum
simba_session_gc_1_4(PG_FUNCTION_ARGS)
{
	Datum		ids;
	bool		isnull;
	int64		removed = 0;

	simba_enter(fcinfo, true);
	SPI_connect();
	simba_execute(fcinfo, &gc_lock,
				  (Datum[]) {TimestampTzGetDatum(simba_now(fcinfo)), TimestampTzGetDatum(simba_clock_origin(fcinfo))},
				  NULL, 1);
	ids = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	if (!isnull)
	{
		collect(fcinfo, ids);
		removed = (int64) SPI_processed;
	}
	SPI_finish();
	PG_RETURN_INT64(removed);
}

/*
 * simba_wake_lapsed(since) → (scanned_to, next_end, sessions): sends what
 * a close of each session that ended after since (at most a minute back)
 * and by now would send, without changing anything: NOTIFY simba for what
 * it held, and to the head of each of its mutexes' fair queues. The lapse
 * waker's round (lapse.c); scanned_to is the since of the next round,
 * next_end the next session's end (NULL: none).
 */
Datum
simba_wake_lapsed(PG_FUNCTION_ARGS)
{
	TimestampTz since = PG_GETARG_TIMESTAMPTZ(0);
	TimestampTz t;
	TimestampTz origin;
	TupleDesc	tupdesc;
	Datum		values[3];
	bool		isnull[3] = {false, false, false};
	Datum		ids;
	bool		none;
	int64		sessions = 0;

	simba_enter(fcinfo, false);
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "simba: return type must be a row type");
	t = simba_now(fcinfo);
	origin = simba_clock_origin(fcinfo);
	since = Max(since, t - 60 * USECS_PER_SEC);
	SPI_connect();
	simba_execute(fcinfo, &lapsed_select,
				  (Datum[]) {TimestampTzGetDatum(since), TimestampTzGetDatum(t), TimestampTzGetDatum(origin)},
				  (char[]) {' ', ' ', SIMBA_ORIGIN_NULL(origin)}, 1);
	ids = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &none);
	values[1] = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull[1]);
	if (!none)
	{
		List	   *woken = NIL;
		Datum	   *mutexes;
		int			n = 0;
		uint64		i;

		sessions = ArrayGetNItems(ARR_NDIM(DatumGetArrayTypeP(ids)), ARR_DIMS(DatumGetArrayTypeP(ids)));
		simba_execute(fcinfo, &lapsed_holds, &ids, NULL, 0);
		mutexes = palloc((SPI_processed + 1) * sizeof(Datum));
		for (i = 0; i < SPI_processed; i++)
		{
			HeapTuple	row = SPI_tuptable->vals[i];
			bool		null;

			woken = lappend(woken, SPI_getvalue(row, SPI_tuptable->tupdesc, 1));
			if (DatumGetBool(SPI_getbinval(row, SPI_tuptable->tupdesc, 2, &null)))
				mutexes[n++] = SPI_getbinval(row, SPI_tuptable->tupdesc, 1, &null);
		}
		/* As simba_session_close: a fair queue's head on its own channel, the rest on simba. */
		simba_fair_wake(fcinfo, mutexes, n, t);
		simba_wake_all(woken);
	}
	values[0] = TimestampTzGetDatum(t);
	values[2] = Int64GetDatum(sessions);
	SPI_finish();
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc), values, isnull)));
}

/* $1 session, $2 t, $3 origin: SIMBA_SESSION_ENDED's lock (simba.h). */
static SimbaPlan ended_lock = {
	"SELECT 1 FROM simba_session_lease AS s"
	" WHERE s.session_id = $1 AND " SIMBA_SESSION_END("$3") " <= $2 FOR SHARE",
	3, {UUIDOID, TIMESTAMPTZOID, TIMESTAMPTZOID}
};

/* A session row's lease end `column` as the clock of origin counts it (simba_read_row). */
typedef struct SessionTime
{
	const char *column;
	bool		origin_null;
	TimestampTz origin;
	TimestampTz time;			/* out */
} SessionTime;

static void
read_session_time(TupleTableSlot *slot, void *arg)
{
	SessionTime *st = arg;
	TupleDesc	desc = slot->tts_tupleDescriptor;
	bool		isnull,
				clock_null;
	TimestampTz end = DatumGetTimestampTz(slot_getattr(slot, SPI_fnumber(desc, st->column), &isnull));
	TimestampTz renewed = DatumGetTimestampTz(slot_getattr(slot, SPI_fnumber(desc, "renewed_at"), &isnull));
	Datum		clock = slot_getattr(slot, SPI_fnumber(desc, "clock_origin"), &clock_null);

	st->time = simba_lease_end_at(end, renewed, clock_null, clock_null ? 0 : DatumGetTimestampTz(clock),
								  st->origin_null, st->origin);
}

/*
 * Session `id`'s lease end `column` (transition_at or ttl_at) as the clock
 * of origin counts it, in the running statement's snapshot: false when the
 * snapshot has no such row. A lock held under a live session, which every
 * waiter's poll meets, costs an index lookup rather than a statement.
 */
static bool
session_time_in_snapshot(FunctionCallInfo fcinfo, Datum id, const char *column, bool origin_null,
						 TimestampTz origin, TimestampTz *time)
{
	SessionTime st = {column, origin_null, origin, 0};

	if (!simba_read_row(simba_session_table(fcinfo), F_UUID_EQ, id, read_session_time, &st))
		return false;
	*time = st.time;
	return true;
}

/* Whether session `id` has ended at t in the running statement's snapshot (absent: not ended, simba.h). */
static bool
ended_in_snapshot(FunctionCallInfo fcinfo, Datum id, TimestampTz t, bool origin_null, TimestampTz origin)
{
	TimestampTz end;

	return session_time_in_snapshot(fcinfo, id, "transition_at", origin_null, origin, &end) && end <= t;
}

bool
simba_session_has_ended(FunctionCallInfo fcinfo, Datum id, TimestampTz t, bool origin_null, TimestampTz origin,
						bool lock)
{
	uint64		ended;

	if (!ended_in_snapshot(fcinfo, id, t, origin_null, origin))
		return false;
	if (!lock)
		return true;
	SPI_connect();
	ended = simba_execute(fcinfo, &ended_lock,
						  (Datum[]) {id, TimestampTzGetDatum(t), TimestampTzGetDatum(origin)},
						  origin_null ? "  n" : NULL, 1);
	SPI_finish();
	return ended > 0;
}

/*
 * simba_session_ended(session_id, t, origin, lock): simba_session_has_ended
 * in SQL. Internal (the owner's only): the lock path's statements call it
 * for a row under a session (simba.h).
 */
Datum
simba_session_ended(PG_FUNCTION_ARGS)
{
	bool		origin_null = PG_ARGISNULL(2);

	if (PG_ARGISNULL(0))
		PG_RETURN_BOOL(false);
	if (PG_ARGISNULL(1) || PG_ARGISNULL(3))
		elog(ERROR, "simba: simba_session_ended needs t and lock");
	PG_RETURN_BOOL(simba_session_has_ended(fcinfo, PG_GETARG_DATUM(0), PG_GETARG_TIMESTAMPTZ(1), origin_null,
										   origin_null ? 0 : PG_GETARG_TIMESTAMPTZ(2), PG_GETARG_BOOL(3)));
}

/*
 * simba_session_time(session_id, column, origin): the session's ttl_at or
 * transition_at as the clock of origin counts it, NULL for no session or
 * one the statement's snapshot does not show. Internal (the owner's only):
 * SIMBA_SESSION_TIME_OR (simba.h), in place of a subquery.
 */
Datum
simba_session_time(PG_FUNCTION_ARGS)
{
	bool		origin_null = PG_ARGISNULL(2);
	char	   *column;
	TimestampTz time;

	if (PG_ARGISNULL(0))
		PG_RETURN_NULL();
	column = PG_ARGISNULL(1) ? "" : text_to_cstring(PG_GETARG_TEXT_PP(1));
	if (strcmp(column, "ttl_at") != 0 && strcmp(column, "transition_at") != 0)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("simba: col must be ttl_at or transition_at")));
	if (!session_time_in_snapshot(fcinfo, PG_GETARG_DATUM(0), column, origin_null,
								  origin_null ? 0 : PG_GETARG_TIMESTAMPTZ(2), &time))
		PG_RETURN_NULL();
	PG_RETURN_TIMESTAMPTZ(time);
}
