/*
 * mutex.c — the leased mutex: acquire/renew, release, owner, fence check.
 *
 * Protocol (docs/design.md, "Protocol"). t is the server clock read once
 * per call, before any statement runs. acquire decides with one conditional
 * UPDATE: a non-holder wins when the row is free or transition_at <= t; the
 * holder renews while transition_at > t. Deciding at t is safe when the
 * UPDATE first waits on a row lock: a takeover then still needs the lease to
 * have ended by t (it ended earlier than the real time of the decision) and
 * a renewal gets a lease counted from t (shorter than asked, never longer).
 *
 * Holder: a contender id together with the role that called (outside simba's
 * SECURITY DEFINER), so a role that reads another role's contender id cannot
 * renew, release or fence-check with it; it is a different contender.
 *
 * Fence: a new value of the sequence simba_mutex_fence whenever the mutex
 * changes hands (free, expired or another holder), kept by a renewal inside
 * the lease. A sequence is not rolled back, so no fence the server ever
 * returned is returned again, whether its transaction committed or not.
 *
 * Locking: acquire and release lock the row only through their UPDATE. A
 * first acquire inserts the row with ON CONFLICT DO NOTHING, so concurrent
 * first uses wait on each other and then retry the UPDATE instead of failing.
 * simba_fence_check locks the row FOR SHARE until the caller's transaction
 * ends, so a takeover (an UPDATE) waits for it.
 */
#include "simba.h"

#include "catalog/pg_type.h"
#include "commands/async.h"
#include "funcapi.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(simba_acquire_1_3);
PG_FUNCTION_INFO_V1(simba_release_1_3);
PG_FUNCTION_INFO_V1(simba_owner_1_3);
PG_FUNCTION_INFO_V1(simba_fence_check_1_3);

/*
 * Columns of simba_owner, in order; $3 of the acquire statements is t.
 * owner_role is NULL only for a tenure taken before 1.3; the first role that
 * renews it adopts it (coalesce(m.owner_role, $6) = $6).
 */
#define OWNER_COLUMNS "m.mutex, m.owner_id, m.acquired_at, m.ttl_at, m.transition_at, m.version, m.fence"
#define SAME_HOLDER(id, role) "m.owner_id = " id " AND COALESCE(m.owner_role, " role ") = " role

/* $1 mutex, $2 contender, $3 t, $4 ttl_at, $5 transition_at, $6 role */
#define ACQUIRE_ARGS 6, {TEXTOID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID, NAMEOID}

/* A new holder gets a fence from the sequence: never reused, even after a rollback. */
static SimbaPlan acquire_update = {
	"UPDATE simba_mutex AS m"
	"   SET owner_id = $2, owner_role = $6, acquired_at = $3, ttl_at = $4, transition_at = $5,"
	"       version = m.version + 1,"
	"       fence = CASE WHEN " SAME_HOLDER("$2", "$6") " AND m.transition_at > $3"
	"                    THEN m.fence ELSE pg_catalog.nextval('simba_mutex_fence') END"
	" WHERE m.mutex = $1"
	"   AND (m.owner_id IS NULL OR (" SAME_HOLDER("$2", "$6") ") OR m.transition_at <= $3)"
	" RETURNING " OWNER_COLUMNS ", $3, m.owner_role",
	ACQUIRE_ARGS
};

static SimbaPlan acquire_insert = {
	"INSERT INTO simba_mutex AS m"
	"       (mutex, owner_id, owner_role, acquired_at, ttl_at, transition_at, version, fence)"
	" VALUES ($1, $2, $6, $3, $4, $5, 1, pg_catalog.nextval('simba_mutex_fence'))"
	" ON CONFLICT (mutex) DO NOTHING"
	" RETURNING " OWNER_COLUMNS ", $3, m.owner_role",
	ACQUIRE_ARGS
};

/* The row as it stands, owner NULL once the lease has ended. $2 = t. */
static SimbaPlan owner_select = {
	"SELECT m.mutex, CASE WHEN m.transition_at > $2 THEN m.owner_id END,"
	"       m.acquired_at, m.ttl_at, m.transition_at, m.version, m.fence, $2,"
	"       CASE WHEN m.transition_at > $2 THEN m.owner_role END"
	"  FROM simba_mutex AS m WHERE m.mutex = $1",
	2, {TEXTOID, TIMESTAMPTZOID}
};

/* Only a live lease of the caller is released; an expired or foreign one is left alone. */
static SimbaPlan release_update = {
	"UPDATE simba_mutex AS m"
	"   SET owner_id = NULL, owner_role = NULL, acquired_at = NULL, ttl_at = NULL,"
	"       transition_at = NULL, version = m.version + 1"
	" WHERE m.mutex = $1 AND " SAME_HOLDER("$2", "$4") " AND m.transition_at > $3",
	4, {TEXTOID, TEXTOID, TIMESTAMPTZOID, NAMEOID}
};

static SimbaPlan fence_lock = {
	"SELECT m.owner_id, m.fence, m.transition_at, m.owner_role"
	"  FROM simba_mutex AS m WHERE m.mutex = $1 FOR SHARE",
	1, {TEXTOID}
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

Datum
simba_acquire_1_3(PG_FUNCTION_ARGS)
{
	text	   *mutex = simba_name_arg(fcinfo, 0, "mutex");
	text	   *contender = simba_name_arg(fcinfo, 1, "contender_id");
	int64		ttl = simba_duration_arg(fcinfo, 2, "ttl", false);
	int64		transition = simba_duration_arg(fcinfo, 3, "transition", true);
	TupleDesc	tupdesc = owner_tupdesc(fcinfo);
	TimestampTz t = GetCurrentTimestamp();
	TimestampTz ttl_at;
	Datum		args[6];
	Datum		result;
	int			attempt;

	simba_check_lease(ttl, transition);
	ttl_at = simba_add_usec(t, ttl);
	args[0] = PointerGetDatum(mutex);
	args[1] = PointerGetDatum(contender);
	args[2] = TimestampTzGetDatum(t);
	args[3] = TimestampTzGetDatum(ttl_at);
	args[4] = TimestampTzGetDatum(simba_add_usec(ttl_at, transition));
	args[5] = simba_caller_role();

	SPI_connect();
	/*
	 * Won by the UPDATE, lost if the row exists, won by the INSERT if it does
	 * not. An INSERT that meets a concurrent first use returns nothing once
	 * that one commits: the next round's UPDATE then sees its row.
	 */
	for (attempt = 0;; attempt++)
	{
		if (simba_execute(fcinfo, &acquire_update, args, NULL, 1) == 1)
			break;
		if (simba_execute(fcinfo, &owner_select, (Datum[]) {args[0], args[2]}, NULL, 1) == 1)
			break;
		if (simba_execute(fcinfo, &acquire_insert, args, NULL, 1) == 1)
			break;
		if (attempt > 0)
			elog(ERROR, "simba: mutex row vanished while acquiring");
	}
	result = returned_owner(tupdesc);
	SPI_finish();
	PG_RETURN_DATUM(result);
}

Datum
simba_release_1_3(PG_FUNCTION_ARGS)
{
	text	   *mutex = simba_name_arg(fcinfo, 0, "mutex");
	text	   *contender = simba_name_arg(fcinfo, 1, "contender_id");
	Datum		args[4];
	bool		released;

	args[0] = PointerGetDatum(mutex);
	args[1] = PointerGetDatum(contender);
	args[2] = TimestampTzGetDatum(GetCurrentTimestamp());
	args[3] = simba_caller_role();

	SPI_connect();
	released = simba_execute(fcinfo, &release_update, args, NULL, 1) == 1;
	if (!released && simba_history)
		simba_log_late_release(fcinfo, args[0], args[1], args[3], DatumGetTimestampTz(args[2]));
	SPI_finish();

	/* Wake the waiters (delivered at commit, like NOTIFY). */
	if (released)
		Async_Notify("simba", text_to_cstring(mutex));
	PG_RETURN_BOOL(released);
}

Datum
simba_owner_1_3(PG_FUNCTION_ARGS)
{
	text	   *mutex = simba_name_arg(fcinfo, 0, "mutex");
	TupleDesc	tupdesc = owner_tupdesc(fcinfo);
	TimestampTz t = GetCurrentTimestamp();
	Datum		result = (Datum) 0;
	bool		found;

	SPI_connect();
	found = simba_execute(fcinfo, &owner_select,
						  (Datum[]) {PointerGetDatum(mutex), TimestampTzGetDatum(t)}, NULL, 1) == 1;
	if (found)
		result = returned_owner(tupdesc);
	SPI_finish();
	if (!found)
	{
		/* Never used: free, version and fence still 0. Formed after
		 * SPI_finish, in the caller's memory, which outlives this call. */
		Datum		values[9] = {PointerGetDatum(mutex), 0, 0, 0, 0,
		Int64GetDatum(0), Int64GetDatum(0), TimestampTzGetDatum(t), 0};
		bool		nulls[9] = {false, true, true, true, true, false, false, false, true};

		result = HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls));
	}
	PG_RETURN_DATUM(result);
}

Datum
simba_fence_check_1_3(PG_FUNCTION_ARGS)
{
	text	   *mutex = simba_name_arg(fcinfo, 0, "mutex");
	text	   *contender = simba_name_arg(fcinfo, 1, "contender_id");
	int64		fence = simba_int64_arg(fcinfo, 2, "fence");
	char	   *mutex_name = text_to_cstring(mutex);
	char	   *contender_name = text_to_cstring(contender);
	char	   *caller_role = NameStr(*DatumGetName(simba_caller_role()));
	char	   *owner = NULL;
	char	   *owner_role = NULL;
	int64		current_fence = 0;
	TimestampTz transition_at = 0;
	TimestampTz t;

	if (fence <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("fence must be positive")));

	SPI_connect();
	if (simba_execute(fcinfo, &fence_lock, (Datum[]) {PointerGetDatum(mutex)}, NULL, 1) == 1)
	{
		HeapTuple	row = SPI_tuptable->vals[0];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;

		owner = SPI_getvalue(row, desc, 1);
		current_fence = DatumGetInt64(SPI_getbinval(row, desc, 2, &isnull));
		transition_at = DatumGetTimestampTz(SPI_getbinval(row, desc, 3, &isnull));
		owner_role = SPI_getvalue(row, desc, 4);
	}
	/* Read after the row lock: the lease must still hold now. */
	t = GetCurrentTimestamp();

	if (owner == NULL || strcmp(owner, contender_name) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_SIMBA_NOT_OWNER),
				 errmsg("contender \"%s\" does not hold mutex \"%s\"", contender_name, mutex_name),
				 owner ? errdetail("It is held by \"%s\".", owner)
				 : errdetail("The mutex is free.")));
	if (owner_role != NULL && strcmp(owner_role, caller_role) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_SIMBA_NOT_OWNER),
				 errmsg("contender \"%s\" of role \"%s\" does not hold mutex \"%s\"",
						contender_name, caller_role, mutex_name),
				 errdetail("It is held by \"%s\" of role \"%s\".", owner, owner_role),
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
