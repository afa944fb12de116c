/*
 * gc.c — housekeeping without cron: idle mutex rows are collected by a
 * short-lived background worker that simba's own calls start.
 *
 * Every name ever used keeps its simba_mutex row, so an application that
 * makes names up (a lock per job) grows the table without end. While
 * simba.gc_idle_age is not -1, a backend that has run simba's writing
 * functions for simba.gc_interval starts, once per interval, a dynamic
 * background worker in its database (no shared_preload_libraries needed).
 * The worker runs simba_mutex_gc(simba.gc_idle_age, batch) as the
 * bootstrap superuser, in transactions of at most GC_BATCH rows each, and
 * exits. The deletes are never in the caller's transaction: a caller that
 * keeps its transaction open keeps no lock on a collected row, which an
 * acquire of that name would wait for. Two workers of one database do not
 * overlap: each batch first takes a transaction-level advisory lock, and a
 * worker that cannot take it leaves the work to the one that holds it.
 *
 * Safety is simba_mutex_gc's (mutex.c): it removes only rows that are free
 * or whose lease (or session) ended at least the idle age ago, that no live
 * fair queue entry names and that no transaction holds locked (SKIP
 * LOCKED); a fence comes from a sequence, so a name used again after its
 * row went gets a fence above every earlier one (docs/design.md,
 * "Housekeeping").
 */
#include "simba.h"

#include "access/xact.h"
#include "catalog/pg_authid_d.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "storage/ipc.h"
#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

/* simba.gc_idle_age, in seconds; -1: never collect on its own. */
int			simba_gc_idle_age = 3600;
/* simba.gc_interval, in seconds: how often one backend starts the collector. */
int			simba_gc_interval = 600;

/* Rows one transaction of the collector removes at most: an acquire of a collected name waits for that transaction. */
#define GC_BATCH 5000
/* Second key of the collector's advisory lock (the first is the wake-ups' "SIMB"). */
#define GC_LOCK_KEY 0x4743		/* "GC" */
#define SIMBA_LOCK_CLASS 0x53494d42

/* What the worker needs, in bgw_extra. */
typedef struct GcArgs
{
	Oid			schema;			/* the extension's schema */
	int32		idle_age;		/* seconds, the launcher's simba.gc_idle_age */
} GcArgs;

/* When this backend may start the collector next (0: not yet timed). */
static TimestampTz next_launch = 0;

PGDLLEXPORT void simba_gc_worker(Datum arg);

void
simba_gc_maybe_start(FunctionCallInfo fcinfo)
{
	TimestampTz now;
	BackgroundWorker worker;
	BackgroundWorkerHandle *handle;
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

	memset(&worker, 0, sizeof worker);
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "simba");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "simba_gc_worker");
	snprintf(worker.bgw_name, BGW_MAXLEN, "simba gc of database %u", MyDatabaseId);
	snprintf(worker.bgw_type, BGW_MAXLEN, "simba gc");
	worker.bgw_main_arg = ObjectIdGetDatum(MyDatabaseId);
	args.schema = get_func_namespace(fcinfo->flinfo->fn_oid);
	args.idle_age = simba_gc_idle_age;
	memcpy(worker.bgw_extra, &args, sizeof args);
	worker.bgw_notify_pid = 0;
	/* No free worker slot: try again at the next interval. */
	if (!RegisterDynamicBackgroundWorker(&worker, &handle))
		ereport(DEBUG1,
				(errmsg("simba: no background worker slot for the idle-row collector"),
				 errhint("Raise max_worker_processes, or collect with simba_mutex_gc() from a schedule.")));
}

/* One batch in its own transaction: how many rows it removed, or -1 when another collector is at work. */
static int64
gc_batch(const char *schema, int32 idle_age)
{
	char	   *sql;
	int64		removed = -1;
	bool		isnull;
	Interval	idle = {.time = (int64) idle_age * USECS_PER_SEC};

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	SPI_connect();
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, "simba gc");
	/* A keepalive's row lock is short; anything longer is not worth waiting for. */
	SPI_execute("SET LOCAL lock_timeout = '1s'", false, 0);
	/*
	 * By exact argument types: an overload another role may have put in the
	 * schema cannot match better, so only simba's own function runs as the
	 * superuser.
	 */
	sql = psprintf("SELECT %s.simba_mutex_gc($1, $2) WHERE pg_catalog.pg_try_advisory_xact_lock($3, $4)",
				   quote_identifier(schema));
	if (SPI_execute_with_args(sql, 4, (Oid[]) {INTERVALOID, INT8OID, INT4OID, INT4OID},
							  (Datum[]) {IntervalPGetDatum(&idle), Int64GetDatum(GC_BATCH),
		Int32GetDatum(SIMBA_LOCK_CLASS), Int32GetDatum(GC_LOCK_KEY)},
							  NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "simba: could not run simba_mutex_gc");
	if (SPI_processed == 1)
		removed = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_activity(STATE_IDLE, NULL);
	return removed;
}

void
simba_gc_worker(Datum arg)
{
	GcArgs		args;
	char	   *schema;
	int64		removed;
	int64		total = 0;

	memcpy(&args, MyBgworkerEntry->bgw_extra, sizeof args);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnectionByOid(DatumGetObjectId(arg), BOOTSTRAP_SUPERUSERID, 0);

	StartTransactionCommand();
	schema = get_namespace_name(args.schema);
	if (schema != NULL)
		schema = MemoryContextStrdup(TopMemoryContext, schema);
	CommitTransactionCommand();
	/* The extension went (DROP SCHEMA, DROP EXTENSION) since the call that started us. */
	if (schema == NULL)
		proc_exit(0);
	do
	{
		removed = gc_batch(schema, args.idle_age);
		if (removed > 0)
			total += removed;
		CHECK_FOR_INTERRUPTS();
	} while (removed == GC_BATCH);
	if (total > 0)
		ereport(LOG,
				(errmsg("simba: removed " INT64_FORMAT " mutex rows idle for at least %d s", total, args.idle_age)));
	proc_exit(0);
}
