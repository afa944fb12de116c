/*
 * lapse.c — the lapse waker: the end of a session announced as its close
 * would be, so that a waiter need not poll to learn that its holder died.
 *
 * A holder that dies, freezes or loses its network stops its keepalives,
 * and its session lapses at its transition_at with no call to say so: a
 * waiter learns it only by asking again, once per lease (benchmark 7:
 * 10,000 waiters of a million locks, 1,000 losing attempts a second). The
 * waker is one background worker per database (worker.c) that sleeps until
 * the next session's end and then sends what that session's close would
 * send: NOTIFY simba for each mutex, read-write lock and semaphore key held
 * under it, and a NOTIFY to the head of each fair queue
 * (simba_wake_lapsed, session.c). A waiter that knows the waker runs
 * (simba_waker()) and registered its name (simba_wait) polls only as a
 * backstop. Leases of their own (no session) are not announced: finding
 * their ends would take an index on a column every renewal writes, so
 * their waiters poll as before (docs/design.md, "Wake-ups").
 *
 * It runs while someone waits: a waiter registers (simba_wait) and then
 * asks simba_waker(), which starts the waker if none runs and says whether
 * one does; the clients ask in every exchange that registers a name and in
 * their LISTEN connection's pings. It exits once no connection is
 * registered, so it never keeps DROP DATABASE waiting on a database nobody
 * waits in. "Runs" means it holds a session-level advisory lock (SIMW,
 * 'LW') exclusively. To exit it lets the lock go first and then looks at
 * the registrations once more: a connection that saw it running had
 * registered before it let go, so that last look finds it and the waker
 * stays (takes the lock again, or leaves it to a waker started meanwhile).
 *
 * Each round announces the sessions whose end lies in (since, t], since
 * being the previous round's t: a live session's end only moves later, and
 * a lapsed one's never moves again (a keepalive after it fails with SB004),
 * so each lapse is announced once. A new waker starts a minute back, for
 * lapses while none ran.
 */
#include "simba.h"
#include "lapse.h"
#include "wake.h"
#include "worker.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lock.h"
#include "utils/builtins.h"
#include "utils/guc.h"

/* simba.lapse_waker */
bool		simba_lapse_waker = true;

/*
 * The waker's advisory lock: a first key of its own ("SIMW"), so that
 * pg_locks' rows of class "SIMB" stay registrations (and the collector's).
 */
#define LAPSE_LOCK_CLASS 0x53494d57
#define LAPSE_LOCK_KEY 0x4c57		/* "LW" */
/* Held by the one call that starts a waker: callers at once do not fill the worker slots. */
#define LAPSE_START_KEY 0x5354		/* "ST" */
/* The longest sleep between rounds: a session opened meanwhile may end sooner than any seen. */
#define LAPSE_MAX_SLEEP_MS 1000
/* How long a waker tries for its lock (a probe holds it shared for a moment), and simba_waker() for a start. */
#define LAPSE_START_MS 1000

typedef struct LapseArgs
{
	SimbaWorkerOwner install;
} LapseArgs;

PGDLLEXPORT void simba_lapse_worker(Datum arg);

static void
lapse_tag(LOCKTAG *tag, uint32 key)
{
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, LAPSE_LOCK_CLASS, key, 2);
}

static bool
waker_runs(void)
{
	LOCKTAG		tag;

	lapse_tag(&tag, LAPSE_LOCK_KEY);
	if (LockAcquire(&tag, ShareLock, false, true) == LOCKACQUIRE_NOT_AVAIL)
		return true;
	LockRelease(&tag, ShareLock, false);
	return false;
}

static bool
lapse_start(FunctionCallInfo fcinfo, pid_t notify_pid, BackgroundWorkerHandle **handle)
{
	LapseArgs	args;

	memset(&args, 0, sizeof args);
	simba_calling_function(fcinfo, &args.install.schema, &args.install.owner);
	if (simba_worker_start("simba_lapse_worker", "simba lapse waker", &args.install, &args, sizeof args,
						   notify_pid, handle))
		return true;
	ereport(DEBUG1,
			(errmsg("simba: no background worker slot for the lapse waker"),
			 errhint("Raise max_worker_processes: without the waker, waiters poll at each lease's end.")));
	return false;
}

PG_FUNCTION_INFO_V1(simba_waker);

/*
 * simba_waker() → boolean: whether this database's lapse waker runs, so
 * that the end of every session is announced. Starts it when it does not
 * (and simba.lapse_waker allows), waiting up to a second for it; false at
 * once while another call is starting one.
 */
Datum
simba_waker(PG_FUNCTION_ARGS)
{
	BackgroundWorkerHandle *handle;
	pid_t		pid;
	int			waited;
	LOCKTAG		starter;

	simba_enter(fcinfo, false);
	if (waker_runs())
		PG_RETURN_BOOL(true);
	/* One start at a time per database, the starter's lock kept to its transaction's end. */
	lapse_tag(&starter, LAPSE_START_KEY);
	if (!simba_lapse_waker || !IsUnderPostmaster || RecoveryInProgress() ||
		LockAcquire(&starter, ExclusiveLock, false, true) == LOCKACQUIRE_NOT_AVAIL ||
		!lapse_start(fcinfo, MyProcPid, &handle) ||
		WaitForBackgroundWorkerStartup(handle, &pid) != BGWH_STARTED)
		PG_RETURN_BOOL(false);
	for (waited = 0; waited < LAPSE_START_MS; waited += 10)
	{
		if (waker_runs())
			PG_RETURN_BOOL(true);
		if (GetBackgroundWorkerPid(handle, &pid) != BGWH_STARTED)
			break;				/* it exited: another waker had the lock, or it failed */
		pg_usleep(10000L);
		CHECK_FOR_INTERRUPTS();
	}
	PG_RETURN_BOOL(waker_runs());
}

/* The waker's lock, tried for up to LAPSE_START_MS (a backend's probe holds it shared for a moment). */
static bool
lapse_lock(void)
{
	LOCKTAG		tag;
	int			waited;

	lapse_tag(&tag, LAPSE_LOCK_KEY);
	for (waited = 0; waited < LAPSE_START_MS; waited += 10)
	{
		if (LockAcquire(&tag, ExclusiveLock, true, true) != LOCKACQUIRE_NOT_AVAIL)
			return true;
		pg_usleep(10000L);
		CHECK_FOR_INTERRUPTS();
	}
	return false;
}

/* A round's answer: simba_wake_lapsed's scanned_to and next_end. */
typedef struct LapseRound
{
	TimestampTz scanned_to;
	TimestampTz next_end;		/* DT_NOEND: no live session */
} LapseRound;

static void
read_round(HeapTuple tuple, TupleDesc desc, void *arg)
{
	LapseRound *r = (LapseRound *) arg;
	bool		isnull;
	Datum		next;

	r->scanned_to = DatumGetTimestampTz(SPI_getbinval(tuple, desc, 1, &isnull));
	next = SPI_getbinval(tuple, desc, 2, &isnull);
	r->next_end = isnull ? DT_NOEND : DatumGetTimestampTz(next);
}

/* Whether to go on: the setting still on, the extension still there, someone registered. */
static bool
lapse_wanted(void)
{
	LOCKTAG		tag;
	bool		installed;

	if (ConfigReloadPending)
	{
		ConfigReloadPending = false;
		ProcessConfigFile(PGC_SIGHUP);
	}
	if (!simba_lapse_waker)
		return false;
	StartTransactionCommand();
	installed = OidIsValid(get_extension_oid("simba", true));
	CommitTransactionCommand();
	if (!installed)
		return false;
	if (simba_wake_registered())
		return true;
	/* Let go, then look once more (see the top of the file). */
	lapse_tag(&tag, LAPSE_LOCK_KEY);
	LockRelease(&tag, ExclusiveLock, true);
	if (!simba_wake_registered())
		return false;
	return lapse_lock();
}

void
simba_lapse_worker(Datum arg)
{
	LapseArgs	args;
	char	   *schema;
	char	   *round_sql;
	LapseRound	r = {DT_NOBEGIN, DT_NOEND};

	schema = simba_worker_connect(arg, &args, sizeof args);
	if (schema == NULL || !lapse_lock())
		proc_exit(0);
	ereport(DEBUG1, (errmsg("simba: the lapse waker runs")));
	/* By exact argument types: no overload in the schema can match better. */
	round_sql = psprintf("SELECT w.scanned_to, w.next_end FROM %s.simba_wake_lapsed($1::timestamptz) AS w",
						 schema);
	while (lapse_wanted())
	{
		int64		sleep_us;

		simba_worker_transaction(round_sql, 1, (Oid[]) {TIMESTAMPTZOID},
								 (Datum[]) {TimestampTzGetDatum(r.scanned_to)}, read_round, &r);
		/* Just past the next end, so that the round then finds it ended. */
		sleep_us = r.next_end == DT_NOEND ? INT64_MAX : r.next_end - r.scanned_to + 1000;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 Max(1, Min(sleep_us / 1000, LAPSE_MAX_SLEEP_MS)), PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
	ereport(DEBUG1, (errmsg("simba: the lapse waker exits: nobody waits")));
	proc_exit(0);
}
