/*
 * semaphore.c — counting semaphores with leased, fenced permits (1.1).
 *
 * A grant locks the key row (FOR NO KEY UPDATE, via the UPDATE that records
 * the limit), reads the clock, then counts live permits with a new snapshot:
 * every earlier grant of the key has committed by then, so the count is exact
 * and grants never over-allocate. Refresh and fence check lock the key row
 * FOR SHARE before reading the clock, so each of them is ordered against the
 * grants: a grant never counts as expired a permit that its holder refreshed
 * or fenced "at the same time". Release only shortens a permit.
 *
 * A permit belongs to its token and to the role that took it (as a mutex
 * tenure does, see mutex.c): another role's refresh, release or fence check
 * with the same token finds no permit. A refresh locks the key row only once
 * it has found the caller's live permit, so a wrong token holds no lock.
 * See simba--1.3.sql for the tables.
 */
#include "simba.h"

#include "catalog/pg_type.h"
#include "commands/async.h"
#include "funcapi.h"
#include "utils/builtins.h"

/* Largest permits argument (documented in README). */
#define SIMBA_MAX_PERMITS 10000
/* Longest context string, in characters. */
#define SIMBA_MAX_CONTEXT_CHARS 256

PG_FUNCTION_INFO_V1(simba_semaphore_acquire_1_3);
PG_FUNCTION_INFO_V1(simba_semaphore_refresh_1_3);
PG_FUNCTION_INFO_V1(simba_semaphore_release_1_3);
PG_FUNCTION_INFO_V1(simba_semaphore_fence_check_1_3);
PG_FUNCTION_INFO_V1(simba_semaphore_gc);

static SimbaPlan key_lock_grant = {
	"UPDATE simba_semaphore SET permits = $2 WHERE key = $1",
	2, {TEXTOID, INT4OID}
};

static SimbaPlan key_insert = {
	"INSERT INTO simba_semaphore (key, permits) VALUES ($1, $2)"
	" ON CONFLICT (key) DO NOTHING",
	2, {TEXTOID, INT4OID}
};

static SimbaPlan key_lock_share = {
	"SELECT 1 FROM simba_semaphore WHERE key = $1 FOR SHARE",
	1, {TEXTOID}
};

/* live permits, the lowest reusable slot, the next new slot; $2 = t */
static SimbaPlan slots_count = {
	"SELECT pg_catalog.count(*) FILTER (WHERE expires_at > $2),"
	"       pg_catalog.min(slot) FILTER (WHERE expires_at <= $2),"
	"       COALESCE(pg_catalog.max(slot) + 1, 0)"
	"  FROM simba_semaphore_permit WHERE key = $1",
	2, {TEXTOID, TIMESTAMPTZOID}
};

/* $1 key, $2 slot, $3 holder, $4 context, $5 t, $6 expires_at, $7 role */
#define GRANT_ARGS 7, {TEXTOID, INT4OID, TEXTOID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID, NAMEOID}
/* The caller's permit ($1 key, $2 token, role as given); NULL role: taken before 1.3. */
#define CALLERS_PERMIT(role) "key = $1 AND token = $2 AND COALESCE(holder_role, " role ") = " role
#define PERMIT_COLUMNS "key, slot, token, fence, expires_at"

static SimbaPlan slot_take_over = {
	"UPDATE simba_semaphore_permit"
	"   SET holder = $3, holder_role = $7, context = $4, acquired_at = $5, expires_at = $6,"
	"       token = pg_catalog.gen_random_uuid(),"
	"       fence = pg_catalog.nextval('simba_permit_fence')"
	" WHERE key = $1 AND slot = $2 AND expires_at <= $5"
	" RETURNING " PERMIT_COLUMNS,
	GRANT_ARGS
};

static SimbaPlan slot_insert = {
	"INSERT INTO simba_semaphore_permit"
	"       (key, slot, holder, holder_role, context, acquired_at, expires_at, token, fence)"
	" VALUES ($1, $2, $3, $7, $4, $5, $6, pg_catalog.gen_random_uuid(),"
	"         pg_catalog.nextval('simba_permit_fence'))"
	" RETURNING " PERMIT_COLUMNS,
	GRANT_ARGS
};

/* $1 key, $2 token, $3 t, $4 role */
static SimbaPlan permit_live = {
	"SELECT 1 FROM simba_semaphore_permit"
	" WHERE " CALLERS_PERMIT("$4") " AND expires_at > $3",
	4, {TEXTOID, UUIDOID, TIMESTAMPTZOID, NAMEOID}
};

/* $1 key, $2 token, $3 t, $4 expires_at, $5 role */
static SimbaPlan permit_refresh = {
	"UPDATE simba_semaphore_permit SET expires_at = $4, holder_role = $5"
	" WHERE " CALLERS_PERMIT("$5") " AND expires_at > $3",
	5, {TEXTOID, UUIDOID, TIMESTAMPTZOID, TIMESTAMPTZOID, NAMEOID}
};

/* $1 key, $2 token, $3 t, $4 role */
static SimbaPlan permit_release = {
	"UPDATE simba_semaphore_permit SET expires_at = $3"
	" WHERE " CALLERS_PERMIT("$4") " AND expires_at > $3",
	4, {TEXTOID, UUIDOID, TIMESTAMPTZOID, NAMEOID}
};

/* $1 key, $2 token, $3 role */
static SimbaPlan permit_read = {
	"SELECT fence, expires_at FROM simba_semaphore_permit"
	" WHERE " CALLERS_PERMIT("$3"),
	3, {TEXTOID, UUIDOID, NAMEOID}
};

static SimbaPlan gc_keys = {
	"SELECT key FROM simba_semaphore ORDER BY key",
	0, {}
};

static SimbaPlan gc_lock = {
	"SELECT 1 FROM simba_semaphore WHERE key = $1 FOR UPDATE SKIP LOCKED",
	1, {TEXTOID}
};

static SimbaPlan gc_delete = {
	"DELETE FROM simba_semaphore s WHERE s.key = $1"
	"   AND NOT EXISTS (SELECT 1 FROM simba_semaphore_permit p"
	"                    WHERE p.key = $1 AND p.expires_at > $2)",
	2, {TEXTOID, TIMESTAMPTZOID}
};

static Datum
uuid_arg(FunctionCallInfo fcinfo, int argno)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("token must not be null")));
	return PG_GETARG_DATUM(argno);
}

static int64
column_int64(int col, bool *isnull)
{
	return DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, col, isnull));
}

Datum
simba_semaphore_acquire_1_3(PG_FUNCTION_ARGS)
{
	text	   *key = simba_name_arg(fcinfo, 0, "key");
	text	   *holder = simba_name_arg(fcinfo, 1, "holder");
	int32		permits;
	int64		ttl = simba_duration_arg(fcinfo, 3, "ttl", false);
	text	   *context = PG_ARGISNULL(4) ? NULL : PG_GETARG_TEXT_PP(4);
	TupleDesc	tupdesc;
	TimestampTz t;
	Datum		lock_args[2];
	Datum		grant_args[7];
	bool		isnull;
	Datum		result = (Datum) 0;
	bool		granted = false;

	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("permits must not be null")));
	permits = PG_GETARG_INT32(2);
	if (permits < 1 || permits > SIMBA_MAX_PERMITS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("permits must be between 1 and %d", SIMBA_MAX_PERMITS)));
	if (context != NULL)
		simba_check_chars(context, "context", SIMBA_MAX_CONTEXT_CHARS);
	simba_check_lease(ttl, 0);
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "simba: return type must be simba_permit");
	tupdesc = BlessTupleDesc(tupdesc);

	lock_args[0] = PointerGetDatum(key);
	lock_args[1] = Int32GetDatum(permits);

	SPI_connect();
	/* Lock the key row, creating it on first use (a concurrent creator wins). */
	while (simba_execute(fcinfo, &key_lock_grant, lock_args, NULL, 1) == 0)
		simba_execute(fcinfo, &key_insert, lock_args, NULL, 1);

	/* Time and count after the lock: every earlier grant is visible now. */
	t = GetCurrentTimestamp();
	simba_execute(fcinfo, &slots_count, (Datum[]) {PointerGetDatum(key), TimestampTzGetDatum(t)}, NULL, 1);
	if (column_int64(1, &isnull) < permits)
	{
		/* Take over the lowest expired slot, or open the next one. */
		int64		slot = column_int64(2, &isnull);
		SimbaPlan  *grant = &slot_take_over;

		if (isnull)
		{
			slot = column_int64(3, &isnull);
			grant = &slot_insert;
		}
		grant_args[0] = PointerGetDatum(key);
		grant_args[1] = Int32GetDatum((int32) slot);
		grant_args[2] = PointerGetDatum(holder);
		grant_args[3] = PointerGetDatum(context);
		grant_args[4] = TimestampTzGetDatum(t);
		grant_args[5] = TimestampTzGetDatum(simba_add_usec(t, ttl));
		grant_args[6] = simba_caller_role();
		granted = simba_execute(fcinfo, grant, grant_args, context ? NULL : "   n   ", 1) == 1;
		if (granted)
			result = PointerGetDatum(SPI_returntuple(SPI_tuptable->vals[0], tupdesc));
	}
	SPI_finish();
	if (!granted)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(result);
}

Datum
simba_semaphore_refresh_1_3(PG_FUNCTION_ARGS)
{
	text	   *key = simba_name_arg(fcinfo, 0, "key");
	Datum		token = uuid_arg(fcinfo, 1);
	int64		ttl = simba_duration_arg(fcinfo, 2, "ttl", false);
	Datum		role = simba_caller_role();
	TimestampTz t;
	bool		refreshed = false;

	simba_check_lease(ttl, 0);
	SPI_connect();
	/* No key lock for a token that holds nothing: it must not stall grants. */
	if (simba_execute(fcinfo, &permit_live,
					  (Datum[]) {PointerGetDatum(key), token,
		TimestampTzGetDatum(GetCurrentTimestamp()), role}, NULL, 1) == 1)
	{
		simba_execute(fcinfo, &key_lock_share, (Datum[]) {PointerGetDatum(key)}, NULL, 1);
		t = GetCurrentTimestamp();
		refreshed = simba_execute(fcinfo, &permit_refresh,
								  (Datum[]) {PointerGetDatum(key), token, TimestampTzGetDatum(t),
			TimestampTzGetDatum(simba_add_usec(t, ttl)), role}, NULL, 1) == 1;
	}
	SPI_finish();
	PG_RETURN_BOOL(refreshed);
}

Datum
simba_semaphore_release_1_3(PG_FUNCTION_ARGS)
{
	text	   *key = simba_name_arg(fcinfo, 0, "key");
	Datum		token = uuid_arg(fcinfo, 1);
	bool		released;

	SPI_connect();
	released = simba_execute(fcinfo, &permit_release,
							 (Datum[]) {PointerGetDatum(key), token,
		TimestampTzGetDatum(GetCurrentTimestamp()), simba_caller_role()}, NULL, 1) == 1;
	SPI_finish();
	/* Wake the waiters (delivered at commit, like NOTIFY). */
	if (released)
		Async_Notify("simba", text_to_cstring(key));
	PG_RETURN_BOOL(released);
}

Datum
simba_semaphore_fence_check_1_3(PG_FUNCTION_ARGS)
{
	text	   *key = simba_name_arg(fcinfo, 0, "key");
	Datum		token = uuid_arg(fcinfo, 1);
	int64		fence = simba_int64_arg(fcinfo, 2, "fence");
	char	   *key_name = text_to_cstring(key);
	bool		found;
	int64		current_fence = 0;
	TimestampTz expires_at = 0;
	TimestampTz t;
	bool		isnull;

	if (fence <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("fence must be positive")));

	SPI_connect();
	/* Blocks new grants of the key until the caller's transaction ends. */
	simba_execute(fcinfo, &key_lock_share, (Datum[]) {PointerGetDatum(key)}, NULL, 1);
	t = GetCurrentTimestamp();
	found = simba_execute(fcinfo, &permit_read,
						  (Datum[]) {PointerGetDatum(key), token, simba_caller_role()}, NULL, 1) == 1;
	if (found)
	{
		current_fence = column_int64(1, &isnull);
		expires_at = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[0],
													   SPI_tuptable->tupdesc, 2, &isnull));
	}
	if (!found)
		ereport(ERROR,
				(errcode(ERRCODE_SIMBA_NOT_OWNER),
				 errmsg("the token holds no permit of key \"%s\"", key_name),
				 errdetail("The permit was taken over after it expired, never existed, or belongs to another role.")));
	if (fence != current_fence)
		ereport(ERROR,
				(errcode(ERRCODE_SIMBA_STALE_FENCE),
				 errmsg("stale fence " INT64_FORMAT " for the permit of key \"%s\"", fence, key_name),
				 errdetail("The permit's fence is " INT64_FORMAT ".", current_fence)));
	if (expires_at <= t)
		ereport(ERROR,
				(errcode(ERRCODE_SIMBA_LEASE_EXPIRED),
				 errmsg("the permit of key \"%s\" has expired", key_name),
				 errdetail("It ended at %s.", timestamptz_to_str(expires_at)),
				 errhint("Acquire a new permit; it gets a new token and fence.")));
	SPI_finish();
	PG_RETURN_VOID();
}

Datum
simba_semaphore_gc(PG_FUNCTION_ARGS)
{
	uint64		nkeys;
	uint64		i;
	int64		removed = 0;
	SPITupleTable *keys;

	SPI_connect();
	nkeys = simba_execute(fcinfo, &gc_keys, NULL, NULL, 0);
	keys = SPI_tuptable;
	for (i = 0; i < nkeys; i++)
	{
		bool		isnull;
		Datum		key = SPI_getbinval(keys->vals[i], keys->tupdesc, 1, &isnull);

		/* Skip keys being granted right now; check liveness after the lock. */
		if (simba_execute(fcinfo, &gc_lock, &key, NULL, 1) == 1)
			removed += simba_execute(fcinfo, &gc_delete,
									 (Datum[]) {key, TimestampTzGetDatum(GetCurrentTimestamp())},
									 NULL, 1);
	}
	SPI_finish();
	PG_RETURN_INT64(removed);
}
