/*
 * fair.c — the fair (FIFO) lock: a mutex whose contenders queue.
 *
 * simba_fair_acquire takes the mutex (mutex.c's statements: same tenures,
 * fences and history) only when no other live queue entry is ahead of the
 * caller; otherwise it writes or renews the caller's entry in
 * simba_mutex_queue, keeping its place (enqueued_at). The decision locks
 * the mutex row FOR UPDATE, so fair calls on one mutex are decided one
 * after the other, inside an internal subtransaction kept only when the
 * caller holds the mutex afterwards: a call that queues keeps no lock on
 * the mutex row, and a holder's renewal, release or fence check never
 * waits for a waiter's transaction (docs/design.md, "Row locks"). The
 * entry is written after that, locking only the caller's own entry;
 * lapsed entries are dropped with SKIP LOCKED, and an entry another
 * transaction holds locked counts only while it is live.
 *
 * No thundering herd: simba_fair_release wakes only the head of the queue,
 * with a NOTIFY on a channel of its own (simba_fair_channel, wake.c: from the
 * mutex, the contender id and its role), not the shared channel simba. A
 * waiter keeps its entry by asking again within its lease (ttl +
 * transition of its last call); an entry that lapses (its waiter stopped,
 * died, froze) is dropped at the next call, so a dead head holds the queue
 * up for at most its entry's lease. The holder of a mutex that others
 * queue for is not released to the head by the server when its lease
 * lapses: the head takes it at its next call, which it times by the
 * holder's transition_at.
 *
 * A mutex is fair only for the callers that use these functions: a plain
 * simba_acquire does not look at the queue.
 *
 * Under a session (session_id) a tenure taken lives with the session, as
 * simba_acquire's does; the caller's queue entry keeps its own lease, since
 * only the waiter's own calls show it still waits. A session's close and a
 * forced release end a tenure without a fair call: they wake the head too
 * (simba_fair_wake, wake.c).
 */
#include "simba.h"
#include "clock.h"
#include "mutex.h"
#include "session.h"
#include "wake.h"

#include "catalog/pg_type.h"
#include "commands/async.h"
#include "funcapi.h"
#include "storage/itemptr.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(simba_fair_acquire_1_4);
PG_FUNCTION_INFO_V1(simba_fair_release_1_4);

/* $1 mutex, $2 t, $3 origin, the caller as $4 contender, $5 role, $6 roleid, $7 sysid */
static SimbaPlan row_lock = {
	"SELECT " SIMBA_MUTEX_LIVE("$2", "$3") " AND m.owner_id = $4 AND "
	SIMBA_SAME_ROLE("m.owner_role", "m.owner_roleid", "m.owner_sysid", "$5", "$6", "$7")
	"  FROM simba_mutex AS m WHERE m.mutex = $1 FOR UPDATE",
	7, {TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID, NAMEOID, OIDOID, INT8OID}
};

static SimbaPlan row_insert = {
	"INSERT INTO simba_mutex (mutex) VALUES ($1) ON CONFLICT (mutex) DO NOTHING",
	1, {TEXTOID}
};

/* $2 t, $3 origin; an entry another transaction holds locked is left to it (its waiter renewing it). */
static SimbaPlan drop_lapsed = {
	"DELETE FROM simba_mutex_queue AS d WHERE d.ctid = ANY (ARRAY("
	" SELECT q.ctid FROM simba_mutex_queue AS q WHERE q.mutex = $1 AND " SIMBA_QUEUE_ENTRY_END("$3") " <= $2"
	" FOR UPDATE SKIP LOCKED)) AND d.mutex = $1",
	3, {TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID}
};

/*
 * The queue in order; $2 contender, $3 role, $4 roleid, $5 sysid: which
 * entry is the caller's. Others count while live at $6 t ($7 origin): a
 * lapsed one drop_lapsed skipped is not ahead of anyone.
 */
static SimbaPlan queue_select = {
	"SELECT * FROM (SELECT q.ctid, q.owner_id = $2 AND "
	SIMBA_SAME_ROLE("q.owner_role", "q.owner_roleid", "q.owner_sysid", "$3", "$4", "$5") " AS mine,"
	"       q.owner_id, q.owner_role, q.enqueued_at, " SIMBA_QUEUE_ENTRY_END("$7") " > $6 AS live"
	"  FROM simba_mutex_queue AS q WHERE q.mutex = $1) AS q"
	" WHERE q.mine OR q.live ORDER BY q.enqueued_at, q.owner_id",
	7, {TEXTOID, TEXTOID, NAMEOID, OIDOID, INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID}
};

/* $1 mutex, $2 contender, $3 role, $4 roleid, $5 sysid, $6 t, $7 end, $8 origin */
static SimbaPlan entry_insert = {
	"INSERT INTO simba_mutex_queue (mutex, owner_id, owner_role, owner_roleid, owner_sysid, enqueued_at,"
	"       renewed_at, transition_at, clock_origin)"
	" VALUES ($1, $2, $3, $4, $5, $6, $6, $7, $8)",
	8, {TEXTOID, TEXTOID, NAMEOID, OIDOID, INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID}
};

/* The caller's entry by ctid ($9), renewed in its place. */
static SimbaPlan entry_renew = {
	"UPDATE simba_mutex_queue AS q SET owner_role = $3, owner_roleid = $4, owner_sysid = $5,"
	"       renewed_at = $6, transition_at = $7, clock_origin = $8"
	" WHERE q.ctid = $9 AND q.mutex = $1 AND q.owner_id = $2",
	9, {TEXTOID, TEXTOID, NAMEOID, OIDOID, INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TIDOID}
};

static SimbaPlan entry_delete = {
	"DELETE FROM simba_mutex_queue AS q WHERE q.ctid = $2 AND q.mutex = $1",
	2, {TEXTOID, TIDOID}
};

/* The owner as it stands ($2 t, $3 origin), a simba_owner: for a caller who queues. */
static SimbaPlan owner_read = {
	"SELECT o.* FROM simba_owner($1) AS o",
	1, {TEXTOID}
};

/* The caller's place: its entry (if any) and how many entries are ahead of it (all, if none). */
typedef struct Place
{
	bool		queued;
	ItemPointerData tid;
	int			ahead;
	char	   *next_id;		/* the first entry not the caller's: whom a release wakes */
	char	   *next_role;
} Place;

static Place
read_place(FunctionCallInfo fcinfo, Datum mutex, Datum contender, const SimbaCaller *caller, TimestampTz t,
		   TimestampTz origin)
{
	Place		p = {0};
	uint64		i;

	simba_execute(fcinfo, &queue_select,
				  (Datum[]) {mutex, contender, caller->role, caller->roleid, caller->sysid, TimestampTzGetDatum(t),
		TimestampTzGetDatum(origin)},
				  (char[]) {' ', ' ', ' ', ' ', ' ', ' ', SIMBA_ORIGIN_NULL(origin)}, 0);
	for (i = 0; i < SPI_processed; i++)
	{
		HeapTuple	row = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;

		if (!p.queued && DatumGetBool(SPI_getbinval(row, desc, 2, &isnull)))
		{
			p.queued = true;
			p.tid = *(ItemPointer) DatumGetPointer(SPI_getbinval(row, desc, 1, &isnull));
			continue;
		}
		if (!p.queued)
			p.ahead++;
		if (p.next_id == NULL)
		{
			p.next_id = SPI_getvalue(row, desc, 3);
			p.next_role = SPI_getvalue(row, desc, 4);
		}
	}
	return p;
}

/* A fair acquire's decision, inside its subtransaction: kept only when the caller holds the mutex. */
typedef struct FairTake
{
	FunctionCallInfo fcinfo;
	SimbaCaller *caller;
	Datum	   *args;
	char	   *nulls;
	Place		place;			/* out: the caller's place, read under the row lock */
	SimbaOwner	owner;			/* out, when taken: SPI's values, valid until SPI_finish */
} FairTake;

static bool
fair_take(void *arg)
{
	FairTake   *f = (FairTake *) arg;
	FunctionCallInfo fcinfo = f->fcinfo;
	Datum	   *args = f->args;
	TimestampTz origin = DatumGetTimestampTz(args[8]);
	bool		holds;
	bool		unknown;

	/* Under a session, its row first (as simba_acquire): a tenure taken lives with it. */
	simba_mutex_join_session(fcinfo, 4, f->caller, args, f->nulls);
	/* The mutex row, locked (made on first use): one fair decision at a time. */
	while (simba_execute(fcinfo, &row_lock,
						 (Datum[]) {args[0], args[2], args[8], args[1], f->caller->role, f->caller->roleid,
		f->caller->sysid},
						 (char[]) {' ', ' ', SIMBA_ORIGIN_NULL(origin), ' ', ' ', ' ', ' '}, 1) == 0)
		simba_execute(fcinfo, &row_insert, args, NULL, 0);
	holds = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &unknown)) && !unknown;
	f->place = read_place(fcinfo, args[0], args[1], f->caller, DatumGetTimestampTz(args[2]), origin);
	/* The holder renews; the head (or anyone, with nobody queued ahead) takes a free mutex. */
	if (!(holds || f->place.ahead == 0) || !simba_mutex_take(fcinfo, args, f->nulls, &f->owner))
		return false;
	/* Its turn came: it leaves the queue. */
	if (f->place.queued)
		simba_execute(fcinfo, &entry_delete, (Datum[]) {args[0], PointerGetDatum(&f->place.tid)}, NULL, 0);
	return true;
}

Datum
simba_fair_acquire_1_4(PG_FUNCTION_ARGS)
{
	Datum		args[10];
	char		nulls[11] = "";
	SimbaCaller caller = simba_mutex_lease_args(fcinfo, 2, args, nulls);
	Datum		entry_end = args[4];	/* the queue entry's own lease, under a session too */
	TupleDesc	tupdesc;
	MemoryContext callctx = CurrentMemoryContext;
	MemoryContext old;
	HeapTuple	result;
	Datum		values[SIMBA_OWNER_NATTS + 2];
	bool		isnull[SIMBA_OWNER_NATTS + 2];
	TimestampTz origin = DatumGetTimestampTz(args[8]);
	FairTake	f = {fcinfo, &caller, args, nulls};
	bool		mine;
	int			position = 0;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "simba: return type must be simba_fair_owner");
	tupdesc = BlessTupleDesc(tupdesc);

	SPI_connect();
	/* Entries judged at t, read before the lock: an entry may count as live a little longer, never shorter. */
	simba_execute(fcinfo, &drop_lapsed, (Datum[]) {args[0], args[2], args[8]},
				  (char[]) {' ', ' ', SIMBA_ORIGIN_NULL(origin)}, 0);
	mine = simba_in_subtransaction(fair_take, &f);
	if (!mine)
	{
		Datum		entry[9] = {args[0], args[1], caller.role, caller.roleid, caller.sysid, args[2], entry_end,
		args[8], PointerGetDatum(&f.place.tid)};
		char		entry_nulls[9] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', SIMBA_ORIGIN_NULL(origin), ' '};

		/* Its entry, written or renewed in its place (dropped meanwhile as lapsed: written anew). */
		if (!f.place.queued || simba_execute(fcinfo, &entry_renew, entry, entry_nulls, 0) == 0)
			simba_execute(fcinfo, &entry_insert, entry, entry_nulls, 0);
		position = f.place.ahead + 1;
		simba_execute(fcinfo, &owner_read, args, NULL, 1);
		heap_deform_tuple(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, f.owner.values, f.owner.nulls);
	}

	/* simba_owner's columns, then the caller's place and its channel. */
	old = MemoryContextSwitchTo(callctx);
	memcpy(values, f.owner.values, sizeof(f.owner.values));
	memcpy(isnull, f.owner.nulls, sizeof(f.owner.nulls));
	values[SIMBA_OWNER_NATTS] = Int32GetDatum(position);
	isnull[SIMBA_OWNER_NATTS] = position == 0;
	values[SIMBA_OWNER_NATTS + 1] = CStringGetTextDatum(simba_fair_channel(TextDatumGetCString(args[0]),
																		   TextDatumGetCString(args[1]),
																		   NameStr(*DatumGetName(caller.role))));
	isnull[SIMBA_OWNER_NATTS + 1] = false;
	result = heap_form_tuple(tupdesc, values, isnull);
	MemoryContextSwitchTo(old);
	SPI_finish();
	PG_RETURN_DATUM(HeapTupleGetDatum(result));
}

Datum
simba_fair_release_1_4(PG_FUNCTION_ARGS)
{
	SimbaCaller caller = simba_enter(fcinfo, true);
	text	   *mutex = simba_name_arg(fcinfo, 0, "mutex");
	text	   *contender = simba_name_arg(fcinfo, 1, "contender_id");
	TimestampTz t = simba_now(fcinfo);
	TimestampTz origin = simba_clock_origin(fcinfo);
	MemoryContext callctx = CurrentMemoryContext;
	char	   *wake = NULL;
	Place		place;
	bool		released;

	SPI_connect();
	released = simba_mutex_release(fcinfo, PointerGetDatum(mutex), PointerGetDatum(contender), &caller, t);
	simba_execute(fcinfo, &drop_lapsed,
				  (Datum[]) {PointerGetDatum(mutex), TimestampTzGetDatum(t), TimestampTzGetDatum(origin)},
				  (char[]) {' ', ' ', SIMBA_ORIGIN_NULL(origin)}, 0);
	/* A waiter that gives up leaves the queue (its place goes to the next). */
	place = read_place(fcinfo, PointerGetDatum(mutex), PointerGetDatum(contender), &caller, t, origin);
	if (place.queued)
		simba_execute(fcinfo, &entry_delete, (Datum[]) {PointerGetDatum(mutex), PointerGetDatum(&place.tid)}, NULL, 0);
	/* Whose turn it is now is woken, and nobody else. */
	if (place.next_id != NULL && (released || (place.queued && place.ahead == 0)))
		wake = MemoryContextStrdup(callctx,
								   simba_fair_channel(text_to_cstring(mutex), place.next_id, place.next_role));
	SPI_finish();
	if (wake != NULL)
		Async_Notify(wake, text_to_cstring(mutex));
	PG_RETURN_BOOL(released);
}
