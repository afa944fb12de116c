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
 No thundering herd, and one durable commit per handoff:
 * simba_fair_release hands the mutex to the head of the queue in its own
 * transaction (the head's entry records the lease it asked for: its ttl and
 * transition, or its session, which must still be live) and wakes only the
 * head, with a NOTIFY on a channel of its own (simba_fair_channel, wake.c:
 * from the mutex, the contender id and its role), not the shared channel
 * simba. The head's next call finds it holds; under its session that call
 * writes nothing (a read), so the handoff's one commit is the release's. A
 * waiter keeps its entry by asking again within its lease (ttl +
 * transition of its last call); an entry that lapses (its waiter stopped,
 * died, froze) is dropped at the next call, so a dead head holds the queue
 * up for at most its entry's lease, and a dead head handed the mutex holds
 * it for at most its lease. The holder of a mutex that others queue for is
 * not released to the head by the server when its lease lapses: the head
 * takes it at its next call, which it times by the holder's transition_at
 * (or the lapse waker's NOTIFY).
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
	"       q.owner_id, q.owner_role, q.enqueued_at, " SIMBA_QUEUE_ENTRY_END("$7") " > $6 AS live,"
	"       q.owner_roleid, q.owner_sysid, q.ttl, q.transition, q.session_id, " SIMBA_QUEUE_ENTRY_END("$7") " AS ends"
	"  FROM simba_mutex_queue AS q WHERE q.mutex = $1) AS q"
	" WHERE q.mine OR q.live ORDER BY q.enqueued_at, q.owner_id",
	7, {TEXTOID, TEXTOID, NAMEOID, OIDOID, INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID}
};

/*
 * $1 mutex, $2 contender, $3 role, $4 roleid, $5 sysid, $6 t, $7 end, $8 origin; the lease a release hands
 * it: $9 ttl, $10 transition, $11 session
 */
#define ENTRY_ARGS TEXTOID, TEXTOID, NAMEOID, OIDOID, INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID, \
	INTERVALOID, INTERVALOID, UUIDOID
static SimbaPlan entry_insert = {
	"INSERT INTO simba_mutex_queue (mutex, owner_id, owner_role, owner_roleid, owner_sysid, enqueued_at,"
	"       renewed_at, transition_at, clock_origin, ttl, transition, session_id)"
	" VALUES ($1, $2, $3, $4, $5, $6, $6, $7, $8, $9, $10, $11)",
	11, {ENTRY_ARGS}
};

/* The caller's entry by ctid ($12), renewed in its place. */
static SimbaPlan entry_renew = {
	"UPDATE simba_mutex_queue AS q SET owner_role = $3, owner_roleid = $4, owner_sysid = $5,"
	"       renewed_at = $6, transition_at = $7, clock_origin = $8, ttl = $9, transition = $10, session_id = $11"
	" WHERE q.ctid = $12 AND q.mutex = $1 AND q.owner_id = $2",
	12, {ENTRY_ARGS, TIDOID}
};

/*
 * Whether another holder's live lease holds mutex $1 at $2 (origin $3; the
 * caller: $4 contender, $5 role, $6 roleid, $7 sysid): read, not locked.
 */
static SimbaPlan held_by_other = {
	"SELECT " SIMBA_MUTEX_LIVE("$2", "$3") " AND NOT (m.owner_id = $4 AND "
	SIMBA_SAME_ROLE("m.owner_role", "m.owner_roleid", "m.owner_sysid", "$5", "$6", "$7") ")"
	"  FROM simba_mutex AS m WHERE m.mutex = $1",
	7, {TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID, NAMEOID, OIDOID, INT8OID}
};

/*
 * Whether session $1 is the caller's ($2 role, $3 roleid, $4 sysid) and
 * live at $5 (origin $6): read, not locked. Otherwise the call takes the
 * locked path, whose join raises SB004 before anything changes.
 */
static SimbaPlan session_live_select = {
	"SELECT 1 FROM simba_session_lease AS s WHERE " SIMBA_CALLERS_SESSION " AND " SIMBA_SESSION_END("$6") " > $5",
	6, {UUIDOID, NAMEOID, OIDOID, INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID}
};

/*
 * Whether the caller holds mutex $1 under its session $8 at $3 (origin $4;
 * $2 contender, $5 role, $6 roleid, $7 sysid): read, not locked. Such a
 * holder's call (a head the release handed the mutex to) writes nothing.
 */
static SimbaPlan held_select = {
	"SELECT " SIMBA_MUTEX_LIVE("$3", "$4") " AND m.owner_id = $2 AND m.session_id = $8 AND "
	SIMBA_SAME_ROLE("m.owner_role", "m.owner_roleid", "m.owner_sysid", "$5", "$6", "$7")
	"  FROM simba_mutex AS m WHERE m.mutex = $1",
	8, {TEXTOID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID, NAMEOID, OIDOID, INT8OID, UUIDOID}
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

/* The first live entry that is not the caller's: whom a release hands the mutex to and wakes. */
typedef struct Head
{
	ItemPointerData tid;
	char	   *id;
	char	   *role;
	SimbaCaller holder;			/* its role as a caller of its own */
	Datum		ttl;			/* the lease it asked for: an interval each */
	Datum		transition;
	Datum		session;		/* uuid, or none */
	bool		no_session;
	bool		asked;			/* its entry records a lease (else it is only woken) */
	TimestampTz ends;			/* its entry's end: a lease of its own is handed over until then at most */
} Head;

/* The caller's place: its entry (if any) and how many entries are ahead of it (all, if none). */
typedef struct Place
{
	bool		queued;
	ItemPointerData tid;
	int			ahead;
	bool		has_next;
	Head		next;			/* when has_next; its values are SPI's, valid until SPI_finish */
} Place;

/* Inside SPI, after a statement that returned `rows`: its first row's first column, a boolean, is true. */
static bool
first_bool(uint64 rows)
{
	bool		isnull;

	return rows == 1 && DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)) &&
		!isnull;
}

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
		if (!p.has_next)
		{
			Head	   *h = &p.next;

			p.has_next = true;
			h->tid = *(ItemPointer) DatumGetPointer(SPI_getbinval(row, desc, 1, &isnull));
			h->id = SPI_getvalue(row, desc, 3);
			h->role = SPI_getvalue(row, desc, 4);
			h->holder.role = SPI_getbinval(row, desc, 4, &isnull);
			h->holder.roleid = SPI_getbinval(row, desc, 7, &isnull);
			h->holder.sysid = SPI_getbinval(row, desc, 8, &isnull);
			h->ttl = SPI_getbinval(row, desc, 9, &isnull);
			h->asked = !isnull;
			h->transition = SPI_getbinval(row, desc, 10, &isnull);
			h->asked = h->asked && !isnull;
			h->session = SPI_getbinval(row, desc, 11, &h->no_session);
			h->ends = DatumGetTimestampTz(SPI_getbinval(row, desc, 12, &isnull));
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
	uint64		rows;
	bool		holds;

	/* Under a session, its row first (as simba_acquire): a tenure taken lives with it. */
	simba_mutex_join_session(fcinfo, 4, f->caller, args, f->nulls);
	/* The mutex row, locked (made on first use): one fair decision at a time. */
	while ((rows = simba_execute(fcinfo, &row_lock,
								 (Datum[]) {args[0], args[2], args[8], args[1], f->caller->role, f->caller->roleid,
		f->caller->sysid},
								 (char[]) {' ', ' ', SIMBA_ORIGIN_NULL(origin), ' ', ' ', ' ', ' '}, 1)) == 0)
		simba_execute(fcinfo, &row_insert, args, NULL, 0);
	holds = first_bool(rows);
	f->place = read_place(fcinfo, args[0], args[1], f->caller, DatumGetTimestampTz(args[2]), origin);
	/* The holder renews; the head (or anyone, with nobody queued ahead) takes a free mutex. */
	if (!(holds || f->place.ahead == 0) || !simba_mutex_take(fcinfo, args, f->nulls, &f->owner))
		return false;
	/* Its turn came: it leaves the queue. */
	if (f->place.queued)
		simba_execute(fcinfo, &entry_delete, (Datum[]) {args[0], PointerGetDatum(&f->place.tid)}, NULL, 0);
	return true;
}

/* Inside SPI: whether the caller holds the mutex of args under the session it passed (held_select). */
static bool
held_under_session(FunctionCallInfo fcinfo, const SimbaCaller *caller, Datum *args)
{
	TimestampTz origin = DatumGetTimestampTz(args[8]);

	return !PG_ARGISNULL(4) &&
		first_bool(simba_execute(fcinfo, &held_select,
								 (Datum[]) {args[0], args[1], args[2], args[8], caller->role, caller->roleid,
			caller->sysid, PG_GETARG_DATUM(4)},
								 (char[]) {' ', ' ', ' ', SIMBA_ORIGIN_NULL(origin), ' ', ' ', ' ', ' '}, 1));
}

/*
 * Inside SPI: whether a waiter's call loses without deciding under the
 * mutex row's lock, *place its place read without locks: another holder's
 * live lease holds the mutex, and the caller either has an entry already
 * (a release that hands the mutex over sees it) or others are ahead of it
 * (the mutex is theirs first), and the session it passed, if any, is its
 * own and live. A new arrival at the head of the queue decides under the
 * lock: a release committing meanwhile would not see its entry, and it
 * takes the mutex that release frees.
 */
static bool
loses_unlocked(FunctionCallInfo fcinfo, const SimbaCaller *caller, Datum *args, Place *place)
{
	TimestampTz origin = DatumGetTimestampTz(args[8]);

	*place = read_place(fcinfo, args[0], args[1], caller, DatumGetTimestampTz(args[2]), origin);
	if (!place->queued && place->ahead == 0)
		return false;
	if (!PG_ARGISNULL(4) &&
		simba_execute(fcinfo, &session_live_select,
					  (Datum[]) {PG_GETARG_DATUM(4), caller->role, caller->roleid, caller->sysid, args[2], args[8]},
					  (char[]) {' ', ' ', ' ', ' ', ' ', SIMBA_ORIGIN_NULL(origin)}, 1) != 1)
		return false;
	return first_bool(simba_execute(fcinfo, &held_by_other,
									(Datum[]) {args[0], args[2], args[8], args[1], caller->role, caller->roleid,
		caller->sysid},
									(char[]) {' ', ' ', SIMBA_ORIGIN_NULL(origin), ' ', ' ', ' ', ' '}, 1));
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
	if (held_under_session(fcinfo, &caller, args))
	{
		/* The head a release handed the mutex to, or a holder re-checking: the row as it stands. */
		simba_execute(fcinfo, &owner_read, args, NULL, 1);
		heap_deform_tuple(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, f.owner.values, f.owner.nulls);
		mine = true;
	}
	else if (loses_unlocked(fcinfo, &caller, args, &f.place))
		mine = false;			/* a waiter asking again, or behind others: no lock taken */
	else
	{
		/* Entries judged at t, read before the lock: an entry may count as live a little longer, never shorter. */
		simba_execute(fcinfo, &drop_lapsed, (Datum[]) {args[0], args[2], args[8]},
					  (char[]) {' ', ' ', SIMBA_ORIGIN_NULL(origin)}, 0);
		mine = simba_in_subtransaction(fair_take, &f);
	}
	if (!mine)
	{
		/* with the lease a release hands it: its ttl and transition, or its session */
		Datum		entry[12] = {args[0], args[1], caller.role, caller.roleid, caller.sysid, args[2], entry_end,
		args[8], PG_GETARG_DATUM(2), PG_GETARG_DATUM(3), PG_ARGISNULL(4) ? (Datum) 0 : PG_GETARG_DATUM(4),
		PointerGetDatum(&f.place.tid)};
		char		entry_nulls[12] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', SIMBA_ORIGIN_NULL(origin), ' ', ' ',
		PG_ARGISNULL(4) ? 'n' : ' ', ' '};

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

/*
 * Inside SPI, in the release's transaction: the mutex the caller freed goes
 * to the head of its queue on the lease its entry asked for, counted from
 * t (under its session: the session's), and its entry goes. A head whose
 * session has ended (or is not its role's) is only woken: its next call
 * gets SB004 and asks again under a new session, keeping its place. False
 * when its entry was gone, withdrawn by a transaction that committed while
 * this one waited for it: the next head's turn.
 */
static bool
hand_over(FunctionCallInfo fcinfo, Datum mutex, const Head *head, TimestampTz t, TimestampTz origin)
{
	Datum		args[10];
	char		nulls[11];
	TimestampTz ttl_at;
	TimestampTz transition_at;
	SimbaOwner	owner;

	if (!head->asked)
		return true;
	/*
	 * A lease of its own ends with its entry at the latest: a head that
	 * stopped asking (died, gave up) holds the mutex no longer than it would
	 * have held up the queue. Under its session the tenure lives with the
	 * session, which its process keeps alive while it runs.
	 */
	transition_at = Min(simba_add_usec(simba_add_usec(t, DatumGetIntervalP(head->ttl)->time),
									   DatumGetIntervalP(head->transition)->time), head->ends);
	ttl_at = Min(simba_add_usec(t, DatumGetIntervalP(head->ttl)->time), transition_at);
	if (head->no_session ? transition_at <= t :
		!simba_session_join_for(fcinfo, head->session, &head->holder, &ttl_at, &transition_at))
		return true;			/* its entry lapses now, or its session has ended: only woken */
	/*
	 * Its entry first: a withdrawal deletes it too, and whichever deletes
	 * first decides. Had the mutex gone first, a withdrawal committing
	 * meanwhile would leave it to a waiter that asks no more.
	 */
	if (simba_execute(fcinfo, &entry_delete, (Datum[]) {mutex, PointerGetDatum(&head->tid)}, NULL, 0) == 0)
		return false;
	args[0] = mutex;
	args[1] = CStringGetTextDatum(head->id);
	args[2] = TimestampTzGetDatum(t);
	args[3] = TimestampTzGetDatum(ttl_at);
	args[4] = TimestampTzGetDatum(transition_at);
	args[5] = head->holder.role;
	args[6] = head->holder.roleid;
	args[7] = head->holder.sysid;
	args[8] = TimestampTzGetDatum(origin);
	args[9] = head->session;
	memset(nulls, ' ', 10);
	nulls[9] = head->no_session ? 'n' : ' ';
	nulls[10] = '\0';
	/* Taken: this transaction freed the mutex and holds its row. */
	simba_mutex_take(fcinfo, args, nulls, &owner);
	return true;
}

/* Heads withdrawn under one release that it passes over, at most, before it only wakes the next. */
#define HAND_OVER_TRIES 16

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
	int			tries;

	SPI_connect();
	simba_execute(fcinfo, &drop_lapsed,
				  (Datum[]) {PointerGetDatum(mutex), TimestampTzGetDatum(t), TimestampTzGetDatum(origin)},
				  (char[]) {' ', ' ', SIMBA_ORIGIN_NULL(origin)}, 0);
	/*
	 * A waiter that gives up leaves the queue (its place goes to the next).
	 * Before the release: a release handing it the mutex deletes its entry,
	 * so this waits for that one, and the release below sees what it got.
	 */
	place = read_place(fcinfo, PointerGetDatum(mutex), PointerGetDatum(contender), &caller, t, origin);
	if (place.queued)
		simba_execute(fcinfo, &entry_delete, (Datum[]) {PointerGetDatum(mutex), PointerGetDatum(&place.tid)}, NULL, 0);
	released = simba_mutex_release(fcinfo, PointerGetDatum(mutex), PointerGetDatum(contender), &caller, t);
	/* Whose turn it is now has the mutex, if the caller freed it, and is woken; nobody else is. */
	for (tries = 0; place.has_next && released && tries < HAND_OVER_TRIES; tries++)
	{
		if (hand_over(fcinfo, PointerGetDatum(mutex), &place.next, t, origin))
			break;
		place = read_place(fcinfo, PointerGetDatum(mutex), PointerGetDatum(contender), &caller, t, origin);
	}
	if (place.has_next && (released || (place.queued && place.ahead == 0)))
		wake = MemoryContextStrdup(callctx,
								   simba_fair_channel(text_to_cstring(mutex), place.next.id, place.next.role));
	SPI_finish();
	if (wake != NULL)
		Async_Notify(wake, text_to_cstring(mutex));
	PG_RETURN_BOOL(released);
}
