/*
 * semaphore.c — counting semaphores with leased, fenced permits (1.1).
 *
 * Grants of a key are serialized by the key row (the UPDATE that records
 * the limit locks it FOR NO KEY UPDATE). A grant keeps that lock until its
 * transaction ends: a later grant waits for grants in flight, but for one
 * left in an open transaction at most SIMBA_KEY_WAIT_MS, then fails with
 * 55P03 rather than wait for that transaction. A grant reads the clock, then locks
 * the key's expired permit rows with SKIP LOCKED and counts with a new
 * snapshot: a permit whose row another transaction holds locked (its
 * holder refreshing or fence-checking it) counts as taken, whatever its
 * time, so grants never over-allocate and never wait for a holder. A refresh
 * and a fence check lock only the caller's own permit row and read the clock
 * after that lock: a grant that took the slot over first leaves them nothing
 * to refresh, and one that comes later finds the row locked. A grant that
 * grants nothing rolls back its internal subtransaction, so it leaves no
 * lock behind in the caller's transaction: a role without a permit cannot
 * stall anyone. Release only shortens a permit.
 *
 * A permit belongs to its token and to the role that took it (as a mutex
 * tenure does, see mutex.c): another role's refresh, release or fence check
 * with the same token finds no permit, and locks nothing. A permit taken
 * under a session (session_id) lives as long as the session (session.c): a
 * refresh then changes nothing and answers whether it is live. See
 * simba--1.4.sql for the tables.
 */
#include "simba.h"
#include "clock.h"
#include "session.h"
#include "wake.h"

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/guc.h"

/* Largest permits argument (documented in docs/reference.md). */
#define SIMBA_MAX_PERMITS 10000
/* Longest context string, in characters. */
#define SIMBA_MAX_CONTEXT_CHARS 256
/*
 * How long a grant waits for the key row, in ms: grants in flight hold it
 * for one call each (a queue of a hundred takes well under this); a grant
 * left in an open transaction holds it until that ends, and is not waited
 * for (55P03).
 */
#define SIMBA_KEY_WAIT_MS 1000

PG_FUNCTION_INFO_V1(simba_semaphore_acquire_1_4);
PG_FUNCTION_INFO_V1(simba_semaphore_refresh_1_4);
PG_FUNCTION_INFO_V1(simba_semaphore_release_1_4);
PG_FUNCTION_INFO_V1(simba_semaphore_fence_check_1_4);
PG_FUNCTION_INFO_V1(simba_semaphore_gc_1_4);


static SimbaPlan key_lock_grant = {
	"UPDATE simba_semaphore SET permits = $2 WHERE key = $1",
	2, {TEXTOID, INT4OID}
};

static SimbaPlan key_insert = {
	"INSERT INTO simba_semaphore (key, permits) VALUES ($1, $2)"
	" ON CONFLICT (key) DO NOTHING",
	2, {TEXTOID, INT4OID}
};

/* The key's expired slots that no other transaction holds, locked, lowest first. $2 = t */
static SimbaPlan expired_slots = {
	"SELECT p.slot FROM simba_semaphore_permit AS p"
	" WHERE p.key = $1 AND NOT " SIMBA_PERMIT_LIVE_LOCKING("$2", "$3")
	" ORDER BY p.slot FOR UPDATE OF p SKIP LOCKED",
	3, {TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID}
};

/* slots of the key, the next new slot */
static SimbaPlan slots_count = {
	"SELECT pg_catalog.count(*), COALESCE(pg_catalog.max(slot) + 1, 0)"
	"  FROM simba_semaphore_permit WHERE key = $1",
	1, {TEXTOID}
};

/*
 * $1 key, $2 slot, $3 holder, $4 context, $5 t, $6 expires_at, $7 role, $8 roleid, $9 sysid, $10 origin,
 * $11 session (NULL: none)
 */
#define GRANT_ARGS 11, {TEXTOID, INT4OID, TEXTOID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID, NAMEOID, OIDOID, INT8OID, \
	TIMESTAMPTZOID, UUIDOID}
#define PERMIT_COLUMNS "key, slot, token, fence, expires_at"

static SimbaPlan slot_take_over = {
	"UPDATE simba_semaphore_permit"
	"   SET holder = $3, holder_role = $7, holder_roleid = $8, holder_sysid = $9, context = $4, session_id = $11,"
	"       acquired_at = $5, renewed_at = $5, expires_at = $6, clock_origin = $10,"
	"       token = pg_catalog.gen_random_uuid(),"
	"       fence = pg_catalog.nextval('simba_permit_fence')"
	" WHERE key = $1 AND slot = $2"
	" RETURNING " PERMIT_COLUMNS,
	GRANT_ARGS
};

static SimbaPlan slot_insert = {
	"INSERT INTO simba_semaphore_permit"
	"       (key, slot, holder, holder_role, holder_roleid, holder_sysid, context, acquired_at, renewed_at,"
	"        expires_at, clock_origin, session_id, token, fence)"
	" VALUES ($1, $2, $3, $7, $8, $9, $4, $5, $5, $6, $10, $11, pg_catalog.gen_random_uuid(),"
	"         pg_catalog.nextval('simba_permit_fence'))"
	" RETURNING " PERMIT_COLUMNS,
	GRANT_ARGS
};

/* The caller's permit: $1 key, $2 token, $3 role, $4 roleid, $5 sysid. */
#define CALLERS_PERMIT \
	"p.key = $1 AND p.token = $2 AND " \
	SIMBA_SAME_ROLE("p.holder_role", "p.holder_roleid", "p.holder_sysid", "$3", "$4", "$5")
#define CALLER_ARGS TEXTOID, UUIDOID, NAMEOID, OIDOID, INT8OID

/* Locks the caller's permit row, whatever its time; a wrong token locks nothing. */
static SimbaPlan permit_lock = {
	"SELECT 1 FROM simba_semaphore_permit AS p WHERE " CALLERS_PERMIT " FOR NO KEY UPDATE",
	5, {CALLER_ARGS}
};

/* $6 t, $7 expires_at, $8 origin; under a session, nothing changes */
static SimbaPlan permit_refresh = {
	"UPDATE simba_semaphore_permit AS p"
	"   SET expires_at = CASE WHEN p.session_id IS NULL THEN $7 ELSE p.expires_at END,"
	"       renewed_at = CASE WHEN p.session_id IS NULL THEN $6 ELSE p.renewed_at END,"
	"       clock_origin = CASE WHEN p.session_id IS NULL THEN $8 ELSE p.clock_origin END"
	" WHERE " CALLERS_PERMIT " AND " SIMBA_PERMIT_LIVE_LOCKING("$6", "$8"),
	8, {CALLER_ARGS, TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID}
};

/* $6 t, $7 origin */
static SimbaPlan permit_release = {
	"UPDATE simba_semaphore_permit AS p SET expires_at = $6, renewed_at = $6, clock_origin = $7, session_id = NULL"
	" WHERE " CALLERS_PERMIT " AND " SIMBA_PERMIT_LIVE_LOCKING("$6", "$7"),
	7, {CALLER_ARGS, TIMESTAMPTZOID, TIMESTAMPTZOID}
};

/*
 * $6 origin; locks the row FOR SHARE: its slot is not granted again until
 * the caller's transaction ends. The end is the session's under a session
 * (read in this statement: maybe older than its latest keepalive, never later).
 */
static SimbaPlan permit_read = {
	"SELECT p.fence, " SIMBA_SESSION_TIME_OR("p.session_id", "transition_at", "$6", SIMBA_PERMIT_END("$6"))
	"  FROM simba_semaphore_permit AS p WHERE " CALLERS_PERMIT " FOR SHARE OF p",
	6, {CALLER_ARGS, TIMESTAMPTZOID}
};

static SimbaPlan gc_keys = {
	"SELECT key FROM simba_semaphore ORDER BY key",
	0, {}, .scans = true
};

static SimbaPlan gc_lock = {
	"SELECT 1 FROM simba_semaphore WHERE key = $1 FOR UPDATE SKIP LOCKED",
	1, {TEXTOID}
};

static SimbaPlan gc_delete = {
	"DELETE FROM simba_semaphore s WHERE s.key = $1"
	"   AND NOT EXISTS (SELECT 1 FROM simba_semaphore_permit p"
	"                    WHERE p.key = $1 AND " SIMBA_PERMIT_LIVE_LOCKING("$2", "$3") ")",
	3, {TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID}
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

/* key, token and the caller: the first five parameters of the permit plans */
static void
caller_args(Datum *args, text *key, Datum token, const SimbaCaller *caller)
{
	args[0] = PointerGetDatum(key);
	args[1] = token;
	args[2] = caller->role;
	args[3] = caller->roleid;
	args[4] = caller->sysid;
}

/*
 * Under the key lock: the permit granted to grant_args' holder as a
 * simba_permit datum, or 0 when every slot is live or held by another
 * transaction. Fills in grant_args' slot, times and origin.
 */
static Datum
grant(FunctionCallInfo fcinfo, TupleDesc tupdesc, Datum *grant_args, int32 permits, int64 ttl,
	  const char *nulls)
{
	/* Time after the lock: every earlier grant is visible now. */
	TimestampTz t = simba_now(fcinfo);
	TimestampTz origin = simba_clock_origin(fcinfo);
	SimbaPlan  *plan = &slot_take_over;
	uint64		reusable;
	int64		slots;
	bool		isnull;

	reusable = simba_execute(fcinfo, &expired_slots,
							 (Datum[]) {grant_args[0], TimestampTzGetDatum(t), TimestampTzGetDatum(origin)},
							 NULL, 0);
	if (reusable > 0)
		grant_args[1] = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	simba_execute(fcinfo, &slots_count, grant_args, NULL, 1);
	slots = column_int64(1, &isnull);
	if (slots - (int64) reusable >= permits)
		return (Datum) 0;
	/* Take over the lowest expired slot, or open the next one. */
	if (reusable == 0)
	{
		grant_args[1] = Int32GetDatum((int32) column_int64(2, &isnull));
		plan = &slot_insert;
	}
	grant_args[4] = TimestampTzGetDatum(t);
	/* under a session, its end (set by the caller) */
	if (nulls[10] == 'n')
		grant_args[5] = TimestampTzGetDatum(simba_add_usec(t, ttl));
	grant_args[9] = TimestampTzGetDatum(origin);
	if (simba_execute(fcinfo, plan, grant_args, nulls, 1) != 1)
		elog(ERROR, "simba: permit slot vanished while granting");
	return PointerGetDatum(SPI_returntuple(SPI_tuptable->vals[0], tupdesc));
}

/* A grant's work inside its subtransaction: kept only when it granted a permit. */
typedef struct Grant
{
	FunctionCallInfo fcinfo;
	SimbaCaller *caller;
	TupleDesc	tupdesc;
	Datum	   *lock_args;
	Datum	   *grant_args;
	char	   *grant_nulls;
	int32		permits;
	int64		ttl;
	Datum		result;			/* the permit, or 0 */
	/* Waiting for the key row: a 55P03 now is another grant's open transaction. */
	volatile bool waiting_for_key;
} Grant;

static bool
grant_in_subtransaction(void *arg)
{
	Grant	   *g = (Grant *) arg;
	TimestampTz ttl_at;
	TimestampTz end;
	int			nest;

	/* Under a session: its end. */
	if (simba_session_join(g->fcinfo, 5, g->caller, &g->grant_args[10], &g->grant_nulls[10], &ttl_at, &end))
		g->grant_args[5] = TimestampTzGetDatum(end);
	/*
	 * Lock the key row, creating it on first use (a concurrent creator
	 * wins), waiting at most SIMBA_KEY_WAIT_MS (or the caller's shorter
	 * lock_timeout); the subtransaction's end restores the setting.
	 */
	nest = NewGUCNestLevel();
	if (LockTimeout == 0 || LockTimeout > SIMBA_KEY_WAIT_MS)
		(void) set_config_option("lock_timeout", CppAsString2(SIMBA_KEY_WAIT_MS), PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);
	g->waiting_for_key = true;
	while (simba_execute(g->fcinfo, &key_lock_grant, g->lock_args, NULL, 1) == 0)
		simba_execute(g->fcinfo, &key_insert, g->lock_args, NULL, 1);
	g->waiting_for_key = false;
	AtEOXact_GUC(true, nest);
	g->result = grant(g->fcinfo, g->tupdesc, g->grant_args, g->permits, g->ttl, g->grant_nulls);
	return g->result != (Datum) 0;
}

Datum
simba_semaphore_acquire_1_4(PG_FUNCTION_ARGS)
{
	SimbaCaller caller = simba_enter(fcinfo, true);
	text	   *key = simba_name_arg(fcinfo, 0, "key");
	text	   *holder = simba_name_arg(fcinfo, 1, "holder");
	int32		permits;
	int64		ttl = simba_duration_arg(fcinfo, 3, "ttl", false);
	text	   *context = PG_ARGISNULL(4) ? NULL : PG_GETARG_TEXT_PP(4);
	TupleDesc	tupdesc;
	Datum		lock_args[2];
	Datum		grant_args[11];
	char		grant_nulls[12] = "           ";
	MemoryContext callctx = CurrentMemoryContext;
	Grant		g;

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
	grant_args[0] = PointerGetDatum(key);
	grant_args[2] = PointerGetDatum(holder);
	grant_args[3] = PointerGetDatum(context);
	grant_args[6] = caller.role;
	grant_args[7] = caller.roleid;
	grant_args[8] = caller.sysid;
	grant_args[10] = (Datum) 0;
	grant_nulls[3] = context != NULL ? ' ' : 'n';
	grant_nulls[10] = 'n';
	g = (Grant) {fcinfo, &caller, tupdesc, lock_args, grant_args, grant_nulls, permits, ttl, (Datum) 0, false};

	SPI_connect();
	/* A subtransaction, so that a grant of nothing leaves no lock behind. */
	PG_TRY();
	{
		simba_in_subtransaction(grant_in_subtransaction, &g);
	}
	PG_CATCH();
	{
		MemoryContext errctx = MemoryContextSwitchTo(callctx);
		ErrorData  *e = CopyErrorData();

		MemoryContextSwitchTo(errctx);
		if (e->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE || !g.waiting_for_key)
			PG_RE_THROW();
		/* Rolled back already (simba_in_subtransaction): say which wait it was. */
		FlushErrorState();
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("could not grant a permit of key \"%s\": another transaction holds the key",
						text_to_cstring(key)),
				 errdetail("A permit granted in a transaction that is still open keeps its key until that "
						   "transaction ends; grants wait for it at most %d ms.", SIMBA_KEY_WAIT_MS),
				 errhint("Acquire permits in autocommit, or retry.")));
	}
	PG_END_TRY();
	SPI_finish();
	if (g.result == (Datum) 0)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(g.result);
}

Datum
simba_semaphore_refresh_1_4(PG_FUNCTION_ARGS)
{
	SimbaCaller caller = simba_enter(fcinfo, true);
	text	   *key = simba_name_arg(fcinfo, 0, "key");
	Datum		token = uuid_arg(fcinfo, 1);
	int64		ttl = simba_duration_arg(fcinfo, 2, "ttl", false);
	Datum		args[8];
	TimestampTz t;
	bool		refreshed = false;

	simba_check_lease(ttl, 0);
	caller_args(args, key, token, &caller);
	SPI_connect();
	/* The clock after the row lock: a grant that took the slot first has changed the token. */
	if (simba_execute(fcinfo, &permit_lock, args, NULL, 1) == 1)
	{
		t = simba_now(fcinfo);
		args[5] = TimestampTzGetDatum(t);
		args[6] = TimestampTzGetDatum(simba_add_usec(t, ttl));
		args[7] = TimestampTzGetDatum(simba_clock_origin(fcinfo));
		refreshed = simba_execute(fcinfo, &permit_refresh, args, NULL, 1) == 1;
	}
	SPI_finish();
	PG_RETURN_BOOL(refreshed);
}

Datum
simba_semaphore_release_1_4(PG_FUNCTION_ARGS)
{
	SimbaCaller caller = simba_enter(fcinfo, true);
	text	   *key = simba_name_arg(fcinfo, 0, "key");
	Datum		token = uuid_arg(fcinfo, 1);
	Datum		args[7];
	bool		released;

	caller_args(args, key, token, &caller);
	args[5] = TimestampTzGetDatum(simba_now(fcinfo));
	args[6] = TimestampTzGetDatum(simba_clock_origin(fcinfo));
	SPI_connect();
	released = simba_execute(fcinfo, &permit_release, args, NULL, 1) == 1;
	SPI_finish();
	/* Wake the waiters (delivered at commit, like NOTIFY). */
	if (released)
		simba_wake(text_to_cstring(key));
	PG_RETURN_BOOL(released);
}

Datum
simba_semaphore_fence_check_1_4(PG_FUNCTION_ARGS)
{
	SimbaCaller caller = simba_enter(fcinfo, true);
	text	   *key = simba_name_arg(fcinfo, 0, "key");
	Datum		token = uuid_arg(fcinfo, 1);
	int64		fence = simba_int64_arg(fcinfo, 2, "fence");
	char	   *key_name = text_to_cstring(key);
	Datum		args[6];
	bool		found;
	int64		current_fence = 0;
	TimestampTz expires_at = 0;
	TimestampTz t;
	bool		isnull;

	if (fence <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("fence must be positive")));

	caller_args(args, key, token, &caller);
	args[5] = TimestampTzGetDatum(simba_clock_origin(fcinfo));
	SPI_connect();
	/* Locks the permit's row: its slot is not granted again until the caller's transaction ends. */
	found = simba_execute(fcinfo, &permit_read, args, NULL, 1) == 1;
	t = simba_now(fcinfo);
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
simba_semaphore_gc_1_4(PG_FUNCTION_ARGS)
{
	uint64		nkeys;
	uint64		i;
	int64		removed = 0;
	SPITupleTable *keys;

	simba_enter(fcinfo, true);
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
									 (Datum[]) {key, TimestampTzGetDatum(simba_now(fcinfo)),
				TimestampTzGetDatum(simba_clock_origin(fcinfo))}, NULL, 1);
	}
	SPI_finish();
	PG_RETURN_INT64(removed);
}
