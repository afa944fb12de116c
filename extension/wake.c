/*
 * wake.c — the release's NOTIFY simba, and the registration that lets a
 * release skip it while nobody waits (simba.notify = registered).
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

#include "catalog/pg_type.h"
#include "commands/async.h"
#include "common/hashfn.h"
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
