/*
 * worker.c — simba's background workers: started by simba's own calls as
 * dynamic workers (no shared_preload_libraries), each in the caller's
 * database as the extension's owner, and unable to become anyone else: a
 * trigger the owner put on simba's tables runs with the owner's rights,
 * never a superuser's (docs/design.md, "Housekeeping").
 */
#include "simba.h"
#include "worker.h"

#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/interrupt.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

bool
simba_worker_start(const char *function, const char *type, SimbaWorkerOwner *owner, const void *extra,
				   Size len, pid_t notify_pid, BackgroundWorkerHandle **handle)
{
	BackgroundWorker worker;
	BackgroundWorkerHandle *ignored;

	Assert(len >= sizeof(SimbaWorkerOwner) && len <= BGW_EXTRALEN);
#ifdef BGWORKER_BYPASS_ROLELOGINCHECK
	owner->connect_as_owner = true;
#else
	{
		HeapTuple	role = SearchSysCache1(AUTHOID, ObjectIdGetDatum(owner->owner));

		if (!HeapTupleIsValid(role))
			return false;
		owner->connect_as_owner = ((Form_pg_authid) GETSTRUCT(role))->rolcanlogin;
		ReleaseSysCache(role);
	}
#endif
	memset(&worker, 0, sizeof worker);
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "simba");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "%s", function);
	snprintf(worker.bgw_name, BGW_MAXLEN, "%s of database %u", type, MyDatabaseId);
	snprintf(worker.bgw_type, BGW_MAXLEN, "%s", type);
	worker.bgw_main_arg = ObjectIdGetDatum(MyDatabaseId);
	memcpy(worker.bgw_extra, extra, len);
	worker.bgw_notify_pid = notify_pid;
	return RegisterDynamicBackgroundWorker(&worker, handle ? handle : &ignored);
}

char *
simba_worker_connect(Datum main_arg, void *extra, Size len)
{
	SimbaWorkerOwner *owner = (SimbaWorkerOwner *) extra;
	char	   *schema;

	memcpy(extra, MyBgworkerEntry->bgw_extra, len);
	/* A long-lived worker rereads its settings (ConfigReloadPending). */
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	/*
	 * SIGTERM (pg_terminate_backend, DROP DATABASE, a shutdown) ends the
	 * worker at its next CHECK_FOR_INTERRUPTS. The default handler raises
	 * FATAL inside the signal handler: one that interrupts malloc corrupts
	 * the heap, and the abort that follows restarts the whole server.
	 */
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnectionByOid(DatumGetObjectId(main_arg),
											  owner->connect_as_owner ? owner->owner : InvalidOid,
#ifdef BGWORKER_BYPASS_ROLELOGINCHECK
											  BGWORKER_BYPASS_ROLELOGINCHECK
#else
											  0
#endif
		);
	/*
	 * From here on everything runs as the owner, who cannot become the
	 * session's user again (SET ROLE and SET SESSION AUTHORIZATION refuse),
	 * as in a simba call (simba_as_owner).
	 */
	SetUserIdAndSecContext(owner->owner, SECURITY_LOCAL_USERID_CHANGE);
	/* Only pg_catalog's operators and functions; simba's by schema. */
	SetConfigOption("search_path", "pg_catalog, pg_temp", PGC_SUSET, PGC_S_SESSION);
	/* A keepalive's row lock is short; anything longer is not worth waiting for. */
	SetConfigOption("lock_timeout", "1s", PGC_SUSET, PGC_S_SESSION);

	StartTransactionCommand();
	schema = get_namespace_name(owner->schema);
	if (schema != NULL)
		schema = MemoryContextStrdup(TopMemoryContext, quote_identifier(schema));
	CommitTransactionCommand();
	return schema;
}

uint64
simba_worker_transaction(const char *sql, int nargs, Oid *types, Datum *values,
						 void (*row) (HeapTuple tuple, TupleDesc desc, void *arg), void *arg)
{
	uint64		n;
	uint64		i;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	SPI_connect();
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, sql);
	if (SPI_execute_with_args(sql, nargs, types, values, NULL, false, 0) < 0)
		elog(ERROR, "simba: could not run \"%s\"", sql);
	n = SPI_processed;
	for (i = 0; row != NULL && i < n; i++)
		row(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, arg);
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_activity(STATE_IDLE, NULL);
	return n;
}
