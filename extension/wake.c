/*
 * wake.c — what a release sends: NOTIFY simba, and the registration that
 * lets a release skip it while nobody waits (simba.notify = registered);
 * for a fair mutex, a NOTIFY to the head of its queue alone.
 *
 * A NOTIFY serialises every committing transaction that sent one, cluster
 * wide (PreCommit_Notify takes one lock for the whole queue), so a release
 * that notifies nobody still waits its turn behind every other. A waiter
 * registers on the connection it LISTENs on: simba_wait(names) takes a
 * session-level ShareLock on an advisory lock per bucket of names
 * (hash of the name mod SIMBA_WAKE_BUCKETS). A release try-locks its name's
 * bucket in RowExclusiveLock, which conflicts with ShareLock only, and
 * keeps it until its transaction ends: taken, nobody registered waits on a
 * name of the bucket, and the NOTIFY is skipped; refused, it is sent.
 *
 * Why no wake-up is lost: a waiter that registered before the release's
 * try-lock hears the NOTIFY. One that registers after it cannot take its
 * ShareLock before the release's transaction has ended, and so sees the
 * release in the attempt it makes once registered (the client makes one
 * then). Nothing is written, a release never waits, and releases do not
 * conflict with each other (docs/design.md, "Wake-ups").
 */
#include "simba.h"
#include "clock.h"
#include "wake.h"

#include "catalog/pg_type.h"
#include "commands/async.h"
#include "common/hashfn.h"
#include "common/md5.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "utils/array.h"
#include "utils/builtins.h"

/* simba.notify */
int			simba_notify = SIMBA_NOTIFY_REGISTERED;

/* The first key of simba's advisory locks ('SIMB'); the second is the bucket. */
#define SIMBA_WAKE_CLASS 0x53494d42
/* Each LISTEN connection holds at most this many locks, half its share of the lock table. */
#define SIMBA_WAKE_BUCKETS 32
StaticAssertDecl(SIMBA_WAKE_BUCKETS <= 32, "simba_wait keeps its busy buckets in 32 bits");
/* Registrations refused by releases under way try again for this long in all (1 ms steps). */
#define SIMBA_WAIT_TRIES 20

static uint32
wake_tag(LOCKTAG *tag, const char *name, int len)
{
	uint32		bucket = hash_bytes((const unsigned char *) name, len) % SIMBA_WAKE_BUCKETS;

	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, SIMBA_WAKE_CLASS, bucket, 2);
	return bucket;
}

void
simba_wake(const char *name)
{
	if (simba_notify == SIMBA_NOTIFY_REGISTERED)
	{
		LOCKTAG		tag;

		wake_tag(&tag, name, strlen(name));
		if (LockAcquire(&tag, RowExclusiveLock, false, true) != LOCKACQUIRE_NOT_AVAIL)
			return;				/* nobody registered: kept until commit (see above) */
	}
	Async_Notify("simba", name);
}

static int
compare_names(const ListCell *a, const ListCell *b)
{
	return strcmp(lfirst(a), lfirst(b));
}

void
simba_wake_all(List *names)
{
	ListCell   *lc;

	list_sort(names, compare_names);
	foreach(lc, names)
		simba_wake((char *) lfirst(lc));
}

bool
simba_wake_registered(void)
{
	uint32		bucket;

	for (bucket = 0; bucket < SIMBA_WAKE_BUCKETS; bucket++)
	{
		LOCKTAG		tag;

		/* RowExclusiveLock conflicts with a registration's ShareLock only, as a release's try-lock. */
		SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, SIMBA_WAKE_CLASS, bucket, 2);
		if (LockAcquire(&tag, RowExclusiveLock, true, true) == LOCKACQUIRE_NOT_AVAIL)
			return true;
		LockRelease(&tag, RowExclusiveLock, true);
	}
	return false;
}

PG_FUNCTION_INFO_V1(simba_wait);

/*
 * simba_wait(names text[], waiting boolean) → text[]: registers (waiting)
 * this connection as a waiter on each name, or drops registrations it made.
 * Registrations count: each name registered n times is dropped n times.
 * Returns the names it could not register (a release of their bucket was
 * under way, and stayed so for the call's SIMBA_WAIT_TRIES ms): call again
 * for those.
 */
Datum
simba_wait(PG_FUNCTION_ARGS)
{
	ArrayType  *array;
	Datum	   *elems;
	bool	   *elem_nulls;
	int			n;
	int			i;
	bool		waiting;
	ArrayBuildState *refused = NULL;
	uint32		busy = 0;		/* buckets given up on in this call */
	int			tries = 0;

	simba_enter(fcinfo, false);
	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", PG_ARGISNULL(0) ? "names" : "waiting")));
	array = PG_GETARG_ARRAYTYPE_P(0);
	waiting = PG_GETARG_BOOL(1);
	if (ARR_NDIM(array) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("names must be a one-dimensional array")));
	deconstruct_array(array, TEXTOID, -1, false, TYPALIGN_INT, &elems, &elem_nulls, &n);
	/* All checked first: bad input registers nothing. */
	for (i = 0; i < n; i++)
		elems[i] = PointerGetDatum(simba_array_name(elems[i], elem_nulls[i], "names", "a name"));
	for (i = 0; i < n; i++)
	{
		text	   *t = (text *) DatumGetPointer(elems[i]);
		LOCKTAG		tag;
		uint32		bucket = wake_tag(&tag, VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));

		if (!waiting)
		{
			/* Only what this connection registered: LockRelease would warn otherwise. */
			if (LockHeldByMe(&tag, ShareLock))
				LockRelease(&tag, ShareLock, true);
			continue;
		}
		while ((busy & (1u << bucket)) || LockAcquire(&tag, ShareLock, true, true) == LOCKACQUIRE_NOT_AVAIL)
		{
			if ((busy & (1u << bucket)) || ++tries >= SIMBA_WAIT_TRIES)
			{
				busy |= 1u << bucket;
				refused = accumArrayResult(refused, elems[i], false, TEXTOID, CurrentMemoryContext);
				break;
			}
			pg_usleep(1000L);
			CHECK_FOR_INTERRUPTS();
		}
	}
	if (refused == NULL)
		PG_RETURN_ARRAYTYPE_P(construct_empty_array(TEXTOID));
	PG_RETURN_DATUM(makeArrayResult(refused, CurrentMemoryContext));
}

/* The head of each of the mutexes' queues ($1 text[]): its first live entry at $2 t ($3 origin). */
static SimbaPlan heads_select = {
	"SELECT r.mutex, h.owner_id, h.owner_role FROM pg_catalog.unnest($1) AS r(mutex),"
	" LATERAL (SELECT q.owner_id, q.owner_role FROM simba_mutex_queue AS q"
	"           WHERE q.mutex = r.mutex AND " SIMBA_QUEUE_ENTRY_END("$3") " > $2"
	"           ORDER BY q.enqueued_at, q.owner_id LIMIT 1) AS h",
	3, {TEXTARRAYOID, TIMESTAMPTZOID, TIMESTAMPTZOID}
};

/*
 * "simba_fair_" and 16 hex digits of the MD5 of the mutex, contender id and
 * role name: a channel per waiter (not secret: anyone may LISTEN or NOTIFY
 * on any channel; a wake-up only brings an attempt forward).
 */
char *
simba_fair_channel(const char *mutex, const char *contender, const char *role)
{
	StringInfoData key;
	char		hex[33];
	const char *errstr = NULL;

	initStringInfo(&key);
	appendStringInfo(&key, "%s%c%s%c%s", mutex, '\1', contender, '\1', role);
	if (!pg_md5_hash(key.data, key.len, hex, &errstr))
		elog(ERROR, "simba: could not hash a wake channel: %s", errstr ? errstr : "out of memory");
	hex[16] = '\0';
	return psprintf("simba_fair_%s", hex);
}

void
simba_fair_wake(FunctionCallInfo fcinfo, Datum *mutexes, int n, TimestampTz t)
{
	TimestampTz origin = simba_clock_origin(fcinfo);
	uint64		i;

	if (n == 0)
		return;
	simba_execute(fcinfo, &heads_select,
				  (Datum[]) {PointerGetDatum(construct_array(mutexes, n, TEXTOID, -1, false, TYPALIGN_INT)),
		TimestampTzGetDatum(t), TimestampTzGetDatum(origin)},
				  (char[]) {' ', ' ', SIMBA_ORIGIN_NULL(origin)}, 0);
	/* Delivered at commit, as every NOTIFY; Async_Notify copies its strings. */
	for (i = 0; i < SPI_processed; i++)
	{
		HeapTuple	row = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		char	   *mutex = SPI_getvalue(row, desc, 1);

		Async_Notify(simba_fair_channel(mutex, SPI_getvalue(row, desc, 2), SPI_getvalue(row, desc, 3)), mutex);
	}
}
