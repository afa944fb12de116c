/*
 * gc.c — housekeeping without cron: idle mutex rows are collected by a
 * short-lived background worker that simba's own calls start.
 *
 * Every name ever used keeps its simba_mutex row, so an application that
 * makes names up (a lock per job) grows the table without end. While
 * simba.gc_idle_age is not -1, a backend that has run simba's writing
 * functions for simba.gc_interval looks, once per interval, at when its
 * database was last collected (simba_gc_state, one row: an index lookup)
 * and, when that is an interval ago or more, starts a dynamic background
 * worker in its database (no shared_preload_libraries needed). So a pool
 * of a thousand connections costs a thousand lookups an interval and about
 * one worker, not a thousand whole-table scans.
 *
 * The worker connects as the extension's owner (the owner of the SQL
 * function that started it) and runs as it, unable to change back
 * (worker.c): a trigger the owner put on simba_mutex runs with the owner's
 * rights, never a superuser's.
 *
 * Under a transaction-level advisory lock the worker claims the collection:
 * it records the time in simba_gc_state unless another worker did less than
 * an interval ago (or holds the lock), and then exits at once. A claimed
 * collection runs simba_mutex_gc(simba.gc_idle_age, batch) in transactions
 * of at most GC_BATCH rows each, every one under the advisory lock again,
 * and exits. The deletes are never in the caller's transaction: a caller
 * that keeps its transaction open keeps no lock on a collected row, which
 * an acquire of that name would wait for.
 *
 * Safety is simba_mutex_gc's (mutex.c): it removes only rows that are free
 * or whose lease (or session) ended at least the idle age ago, that no live
 * fair queue entry names and that no transaction holds locked (SKIP
 * LOCKED); a fence comes from a sequence, so a name used again after its
 * row went gets a fence above every earlier one (docs/design.md,
 * "Housekeeping").
 */
#include "simba.h"
#include "gc.h"
#include "rows.h"
#include "worker.h"

#include <sys/resource.h>

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/ipc.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

/* simba.gc_idle_age, in seconds; -1: never collect on its own. */
int			simba_gc_idle_age = 3600;
/* simba.gc_interval, in seconds: how often a database is collected at most. */
int			simba_gc_interval = 600;

/* Rows one transaction of the collector removes at most: an acquire of a collected name waits for that transaction. */
#define GC_BATCH 5000
/* Second key of the collector's advisory lock (the first is the wake-ups' "SIMB"). */
#define GC_LOCK_KEY 0x4743		/* "GC" */

/* What the worker needs, in bgw_extra. */
typedef struct GcArgs
{
	SimbaWorkerOwner install;
	int32		idle_age;		/* seconds, the launcher's simba.gc_idle_age */
	int32		interval;		/* seconds, the launcher's simba.gc_interval */
} GcArgs;

/* When this backend may start the collector next (0: not yet timed). */
static TimestampTz next_launch = 0;

PGDLLEXPORT void simba_gc_worker(Datum arg);

/* A collection at last_run is recent at now: within the interval before it (not after: a clock set back). */
static bool
gc_recent(TimestampTz last_run, TimestampTz now, int32 interval)
{
	return last_run <= now && now - last_run < (int64) interval * USECS_PER_SEC;
}

static void
read_last_run(TupleTableSlot *slot, void *arg)
{
	bool		isnull;
	Datum		d = slot_getattr(slot, 2, &isnull);

	*(TimestampTz *) arg = isnull ? DT_NOBEGIN : DatumGetTimestampTz(d);
}

void
simba_gc_maybe_start(Oid schema, Oid owner)
{
	TimestampTz now;
	TimestampTz last_run = DT_NOBEGIN;
	Oid			state;
	GcArgs		args;

	if (simba_gc_idle_age < 0 || !IsUnderPostmaster || IsBackgroundWorker)
		return;
	now = GetCurrentTimestamp();
	/*
	 * The first call of a backend only starts the clock: a connection that
	 * makes one call and goes (the simba command) never starts a worker.
	 */
	if (next_launch == 0 || now < next_launch - (int64) simba_gc_interval * USECS_PER_SEC)
	{
		next_launch = now + (int64) simba_gc_interval * USECS_PER_SEC;
		return;
	}
	if (now < next_launch)
		return;
	next_launch = now + (int64) simba_gc_interval * USECS_PER_SEC;

	/* An install before 1.4 has no state table, nor the simba_mutex_gc the worker calls. */
	state = get_relname_relid("simba_gc_state", schema);
	if (!OidIsValid(state))
		return;
	/* Collected lately by another connection's worker: nothing to start. */
	if (ActiveSnapshotSet() &&
		simba_read_row(state, F_BOOLEQ, BoolGetDatum(true), read_last_run, &last_run) &&
		gc_recent(last_run, now, simba_gc_interval))
	{
		ereport(DEBUG1,
				(errmsg("simba: the idle-row collector ran less than simba.gc_interval ago, not starting it"),
				 errdetail("It last ran at %s.", timestamptz_to_str(last_run))));
		return;
	}

	memset(&args, 0, sizeof args);
	args.install.schema = schema;
	args.install.owner = owner;
	args.idle_age = simba_gc_idle_age;
	args.interval = simba_gc_interval;
	/* No free worker slot: try again at the next interval. */
	if (!simba_worker_start("simba_gc_worker", "simba gc", &args.install, &args, sizeof args, 0, NULL))
		ereport(DEBUG1,
				(errmsg("simba: no background worker slot for the idle-row collector"),
				 errhint("Raise max_worker_processes, or collect with simba_mutex_gc() from a schedule.")));
	else
		ereport(DEBUG1, (errmsg("simba: started the idle-row collector")));
}

/* The first column of a claim's or collection's one row (a bigint). */
static void
first_int8(HeapTuple tuple, TupleDesc desc, void *arg)
{
	bool		isnull;

	*(int64 *) arg = DatumGetInt64(SPI_getbinval(tuple, desc, 1, &isnull));
}

void
simba_gc_worker(Datum arg)
{
	GcArgs		args;
	char	   *schema;
	char	   *claim;
	char	   *collect;
	TimestampTz now;
	Interval	idle;
	int64		removed = 0;
	int64		total = 0;
	bool		claimed;
	TimestampTz connected;
	struct rusage usage;

	schema = simba_worker_connect(arg, &args, sizeof args);
	connected = GetCurrentTimestamp();
	/* The extension went (DROP SCHEMA, DROP EXTENSION) since the call that started us. */
	if (schema == NULL)
		proc_exit(0);

	/*
	 * The claim: the time goes in simba_gc_state unless a collection was
	 * claimed less than an interval ago; nothing (and exit) then, or while
	 * another collector holds the lock.
	 */
	now = GetCurrentTimestamp();
	claim = psprintf("INSERT INTO %s.simba_gc_state AS s (last_run) SELECT $1"
					 " WHERE pg_try_advisory_xact_lock($3, $4)"
					 " ON CONFLICT (id) DO UPDATE SET last_run = excluded.last_run"
					 " WHERE s.last_run > excluded.last_run OR s.last_run <= excluded.last_run - $2"
					 " RETURNING 0::bigint", schema);
	claimed = simba_worker_transaction(claim, 4, (Oid[]) {TIMESTAMPTZOID, INTERVALOID, INT4OID, INT4OID},
									   (Datum[]) {TimestampTzGetDatum(now),
		IntervalPGetDatum(&(Interval) {.time = (int64) args.interval * USECS_PER_SEC}),
		Int32GetDatum(SIMBA_LOCK_CLASS), Int32GetDatum(GC_LOCK_KEY)}, NULL, NULL) == 1;

	/*
	 * By exact argument types: an overload another role may have put in the
	 * schema cannot match better, so only simba's own function runs.
	 */
	idle = (Interval) {.time = (int64) args.idle_age * USECS_PER_SEC};
	collect = psprintf("SELECT %s.simba_mutex_gc($1, $2) WHERE pg_try_advisory_xact_lock($3, $4)", schema);
	while (claimed)
	{
		if (simba_worker_transaction(collect, 4, (Oid[]) {INTERVALOID, INT8OID, INT4OID, INT4OID},
									 (Datum[]) {IntervalPGetDatum(&idle), Int64GetDatum(GC_BATCH),
			Int32GetDatum(SIMBA_LOCK_CLASS), Int32GetDatum(GC_LOCK_KEY)}, first_int8, &removed) != 1)
			break;				/* another collector is at work */
		total += removed;
		CHECK_FOR_INTERRUPTS();
		if (removed < GC_BATCH)
			break;
	}
	if (total > 0)
		ereport(LOG,
				(errmsg("simba: removed " INT64_FORMAT " mutex rows idle for at least %d s", total, args.idle_age)));
	getrusage(RUSAGE_SELF, &usage);
	ereport(DEBUG1,
			(errmsg("simba: the idle-row collector %s in %.1f ms (%.1f ms to connect), %.1f ms of CPU",
					claimed ? "collected" : "found the last collection recent",
					(double) (GetCurrentTimestamp() - MyStartTimestamp) / 1000.0,
					(double) (connected - MyStartTimestamp) / 1000.0,
					(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1000.0 +
					(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1000.0)));
	proc_exit(0);
}
