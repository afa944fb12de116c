/*
 * simba.c — module entry, settings, argument checks and the plan runner
 * shared by every SQL function of the extension.
 *
 * Privileges: the SQL functions are SECURITY INVOKER, so a lease belongs to
 * the role whose privileges the call runs with (simba_enter reads it), and
 * each statement runs as the function's owner (simba_execute switches), as
 * SECURITY DEFINER would have done for the whole call.
 *
 * Plans: each statement is prepared with SPI on first use in a backend and
 * kept (SPI_keepplan). It names tables without a schema and runs under a
 * search path made of schema OIDs, so when PostgreSQL replans it (after any
 * DDL or a schema rename) it still reaches the extension's own objects: a
 * schema owner who renames the schema and plants look-alike tables reaches
 * nothing (docs/design.md, "Extension").
 */
#include "simba.h"

#include "access/genam.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/namespace.h"
#include "catalog/pg_namespace_d.h"
#include "catalog/pg_proc.h"
#include "common/int.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "optimizer/cost.h"
#include "utils/builtins.h"
#include "utils/resowner.h"
#include "utils/guc.h"
#include "utils/guc_tables.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/relcache.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

/* simba.max_lease, in seconds: the longest ttl + transition, or permit ttl. */
int			simba_max_lease = 7 * 24 * 3600;
/* simba.drop_live_leases: let DROP EXTENSION go ahead over live leases. */
bool		simba_drop_live_leases = false;

SimbaPlan  *simba_running_plan = NULL;

/*
 * The superuser settings whose value a connection's own startup options
 * replaced (see guard_placeholder), or NULL: simba then refuses to run.
 */
static const char *simba_overridden_setting = NULL;

/* Whether this transaction took, kept or checked a lease or permit. */
static bool simba_in_xact = false;

/*
 * Before the library loads, "simba.x" is a placeholder that any connection
 * may set, and a startup option (PGOPTIONS="-c simba.max_lease=1") replaces
 * the value postgresql.conf or ALTER DATABASE gave it. Defining the setting
 * then rejects the connection's value (the setting is superuser-only) and
 * falls back to the compiled default, not to the DBA's value, which is
 * lost. So: a placeholder whose reset value came from a source that the
 * definition did not accept means this connection cannot know the DBA's
 * value, and simba refuses to run in it (docs/design.md, "Extension").
 */
static GucSource
placeholder_reset_source(const char *name)
{
	struct config_generic **vars = get_guc_variables();
	int			n = GetNumConfigOptions();
	int			i;

	for (i = 0; i < n; i++)
		if (strcmp(vars[i]->name, name) == 0)
			return vars[i]->reset_source;
	return PGC_S_DEFAULT;
}

static void
guard_placeholder(const char *name, GucSource before)
{
	if (before != PGC_S_DEFAULT && placeholder_reset_source(name) != before)
		simba_overridden_setting = name;
}

/*
 * PREPARE TRANSACTION would keep simba's row locks past any lease, across
 * restarts. A commit checks the clock's origin (clock.c).
 */
static void
simba_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			simba_clock_pre_commit();
			break;
		case XACT_EVENT_PRE_PREPARE:
			if (simba_in_xact)
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("cannot PREPARE a transaction that used simba locks or permits"),
						 errdetail("A prepared transaction keeps its row locks until it is committed or "
								   "rolled back, even across restarts: it would hold a mutex or permit "
								   "past its lease.")));
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PREPARE:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PARALLEL_ABORT:
			simba_in_xact = false;
			simba_clock_end_xact();
			break;
		default:
			break;
	}
}

void
_PG_init(void)
{
	GucSource	history_before = placeholder_reset_source("simba.history");
	GucSource	max_lease_before = placeholder_reset_source("simba.max_lease");
	GucSource	drop_before = placeholder_reset_source("simba.drop_live_leases");
	GucSource	notify_before = placeholder_reset_source("simba.notify");
	GucSource	gc_idle_before = placeholder_reset_source("simba.gc_idle_age");
	GucSource	gc_interval_before = placeholder_reset_source("simba.gc_interval");
	static const struct config_enum_entry notify_options[] = {
		{"always", SIMBA_NOTIFY_ALWAYS, false},
		{"registered", SIMBA_NOTIFY_REGISTERED, false},
		{NULL, 0, false}
	};

	DefineCustomBoolVariable("simba.history",
							 "Logs changes of hands of simba mutexes to simba_mutex_history.",
							 "Off by default: each change of hands then costs one insert.",
							 &simba_history,
							 false,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);
	DefineCustomIntVariable("simba.max_lease",
							"Longest lease simba grants: ttl + transition of a mutex, ttl of a permit.",
							"A longer one raises 22023. A lease outlives its holder, so a huge one "
							"locks others out for as long.",
							&simba_max_lease,
							7 * 24 * 3600, 1, INT_MAX,
							PGC_SUSET,
							GUC_UNIT_S,
							NULL, NULL, NULL);
	DefineCustomBoolVariable("simba.drop_live_leases",
							 "Lets DROP EXTENSION simba go ahead while leases or permits are live.",
							 "Off by default: a re-created extension starts fences again at 1.",
							 &simba_drop_live_leases,
							 false,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);
	DefineCustomEnumVariable("simba.notify",
							 "Which releases send their NOTIFY simba: always, or only while a waiter is registered.",
							 "registered skips the NOTIFY of a release nobody registered with simba_wait() "
							 "waits for; a plain LISTEN simba that does not register then misses it.",
							 &simba_notify,
							 SIMBA_NOTIFY_REGISTERED,
							 notify_options,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);
	DefineCustomIntVariable("simba.gc_idle_age",
							"How long a mutex must have been free before simba removes its row on its own; -1: never.",
							"A row is free from its release or the end of its lease (or its session's). Collected "
							"by a short-lived background worker that simba's calls start every simba.gc_interval "
							"(gc.c); fences never go back.",
							&simba_gc_idle_age,
							3600, -1, INT_MAX,
							PGC_SUSET,
							GUC_UNIT_S,
							NULL, NULL, NULL);
	DefineCustomIntVariable("simba.gc_interval",
							"How often a connection that calls simba starts the idle-row collector.",
							"Each connection that has called simba's lock functions for this long starts it at "
							"most once per interval; concurrent collectors of a database do not overlap.",
							&simba_gc_interval,
							600, 1, INT_MAX / 2,
							PGC_SUSET,
							GUC_UNIT_S,
							NULL, NULL, NULL);
	MarkGUCPrefixReserved("simba");
	guard_placeholder("simba.history", history_before);
	guard_placeholder("simba.max_lease", max_lease_before);
	guard_placeholder("simba.drop_live_leases", drop_before);
	guard_placeholder("simba.notify", notify_before);
	guard_placeholder("simba.gc_idle_age", gc_idle_before);
	guard_placeholder("simba.gc_interval", gc_interval_before);
	RegisterXactCallback(simba_xact_callback, NULL);
}

/*
 * The schema and owner of the calling SQL function, looked up once per call
 * site, and its install's simba_mutex, simba_session_lease and fence
 * sequence, looked up on first use: only some calls need them, and a lock
 * statement sets up its call sites afresh each time it runs (a new install
 * has new functions, so nothing here goes stale).
 */
typedef struct SimbaFunction
{
	Oid			schema;
	Oid			owner;
	Oid			mutex_table;	/* InvalidOid until first use */
	Oid			session_table;	/* InvalidOid until first use */
	Oid			fence_sequence; /* InvalidOid until first use */
} SimbaFunction;

static SimbaFunction *
calling_function(FunctionCallInfo fcinfo)
{
	SimbaFunction *f = (SimbaFunction *) fcinfo->flinfo->fn_extra;

	if (f == NULL)
	{
		HeapTuple	tuple = SearchSysCache1(PROCOID, ObjectIdGetDatum(fcinfo->flinfo->fn_oid));

		if (!HeapTupleIsValid(tuple))
			elog(ERROR, "simba: cache lookup failed for function %u", fcinfo->flinfo->fn_oid);
		f = MemoryContextAllocZero(fcinfo->flinfo->fn_mcxt, sizeof(SimbaFunction));
		f->schema = ((Form_pg_proc) GETSTRUCT(tuple))->pronamespace;
		f->owner = ((Form_pg_proc) GETSTRUCT(tuple))->proowner;
		ReleaseSysCache(tuple);
		fcinfo->flinfo->fn_extra = f;
	}
	return f;
}

SimbaCaller
simba_enter(FunctionCallInfo fcinfo, bool writes)
{
	SimbaCaller caller;
	Oid			role = GetUserId();
	Name		name = (Name) palloc(NAMEDATALEN);

	if (InSecurityRestrictedOperation())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("cannot call %s() inside a security-restricted operation",
						get_func_name(fcinfo->flinfo->fn_oid)),
				 errdetail("Maintenance commands (VACUUM, ANALYZE, CREATE INDEX, REFRESH MATERIALIZED VIEW) "
						   "and index expressions run other roles' code: a lease taken there would not "
						   "be the caller's.")));
	if (simba_overridden_setting != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("this connection set %s, which only a superuser may set", simba_overridden_setting),
				 errdetail("The connection's startup options replaced the value the database administrator set, "
						   "so simba cannot know it and refuses to run."),
				 errhint("Remove -c %s from the connection's options (PGOPTIONS), or load simba with "
						 "shared_preload_libraries.", simba_overridden_setting)));
	if (writes)
	{
		if (XactReadOnly || RecoveryInProgress())
		{
			const char *fn = get_func_name(fcinfo->flinfo->fn_oid);

			PreventCommandDuringRecovery(fn);
			PreventCommandIfReadOnly(fn);
		}
		simba_in_xact = true;
		simba_gc_maybe_start(calling_function(fcinfo)->schema, calling_function(fcinfo)->owner);
	}
	namestrcpy(name, GetUserNameFromId(role, false));
	caller.role = NameGetDatum(name);
	caller.roleid = ObjectIdGetDatum(role);
	caller.sysid = Int64GetDatum((int64) GetSystemIdentifier());
	return caller;
}

static SPIPlanPtr
simba_prepare(SimbaPlan *p)
{
	SPIPlanPtr	plan = SPI_prepare(p->sql, p->nargs, (Oid *) p->argtypes);

	if (plan == NULL)
		elog(ERROR, "simba: could not prepare \"%s\": %s", p->sql,
			 SPI_result_code_string(SPI_result));
	if (SPI_keepplan(plan) != 0)
		elog(ERROR, "simba: could not keep plan for \"%s\"", p->sql);
	return plan;
}

/* Relation `name` of the calling function's install, kept in *cache. */
static Oid
install_table(FunctionCallInfo fcinfo, Oid *cache, const char *name)
{
	if (*cache == InvalidOid)
		*cache = get_relname_relid(name, calling_function(fcinfo)->schema);
	return *cache;
}

Oid
simba_mutex_table(FunctionCallInfo fcinfo)
{
	return install_table(fcinfo, &calling_function(fcinfo)->mutex_table, "simba_mutex");
}

Oid
simba_session_table(FunctionCallInfo fcinfo)
{
	return install_table(fcinfo, &calling_function(fcinfo)->session_table, "simba_session_lease");
}

Oid
simba_fence_sequence(FunctionCallInfo fcinfo)
{
	return install_table(fcinfo, &calling_function(fcinfo)->fence_sequence, "simba_mutex_fence");
}

void
simba_as_owner(FunctionCallInfo fcinfo, void (*body) (void *arg), void *arg)
{
	OverrideSearchPath path = {0};
	SimbaFunction *f = calling_function(fcinfo);
	Oid			save_user;
	int			save_sec;

	/*
	 * pg_catalog first, so no function or operator in the extension's schema
	 * (which its owner may write to) shadows a built-in one; no pg_temp.
	 */
	path.schemas = list_make2_oid(PG_CATALOG_NAMESPACE, f->schema);
	PushOverrideSearchPath(&path);
	/* The tables are the owner's: the statement runs as the owner, as SECURITY DEFINER would. */
	GetUserIdAndSecContext(&save_user, &save_sec);
	SetUserIdAndSecContext(f->owner, save_sec | SECURITY_LOCAL_USERID_CHANGE);
	PG_TRY();
	{
		body(arg);
	}
	PG_FINALLY();
	{
		SetUserIdAndSecContext(save_user, save_sec);
		PopOverrideSearchPath();
	}
	PG_END_TRY();
	list_free(path.schemas);
}

/* simba_execute's statement, run by simba_as_owner. */
typedef struct Execution
{
	SimbaPlan  *plan;
	Datum	   *values;
	const char *nulls;
	int			tcount;
	int			rc;				/* out */
} Execution;

static void
execute_plan(void *arg)
{
	Execution  *e = arg;
	SimbaPlan  *outer = simba_running_plan;
	bool		save_seqscan = enable_seqscan;

	simba_running_plan = e->plan;
	/*
	 * Only the planner reads it, so it is set directly for this statement
	 * rather than through the GUC machinery: a SET clause on each function
	 * cost every call a save and restore of the setting.
	 */
	enable_seqscan = e->plan->scans;
	PG_TRY();
	{
		if (e->plan->plan == NULL)
			e->plan->plan = simba_prepare(e->plan);
		if (IsolationUsesXactSnapshot())
			e->rc = SPI_execute_snapshot(e->plan->plan, e->values, e->nulls, GetLatestSnapshot(),
										 InvalidSnapshot, false, true, e->tcount);
		else
			e->rc = SPI_execute_plan(e->plan->plan, e->values, e->nulls, false, e->tcount);
	}
	PG_FINALLY();
	{
		simba_running_plan = outer;
		enable_seqscan = save_seqscan;
	}
	PG_END_TRY();
}

uint64
simba_execute(FunctionCallInfo fcinfo, SimbaPlan *p, Datum *values, const char *nulls, int tcount)
{
	Execution	e = {p, values, nulls, tcount, 0};

	simba_as_owner(fcinfo, execute_plan, &e);
	if (e.rc < 0)
		elog(ERROR, "simba: statement failed: %s", SPI_result_code_string(e.rc));
	return SPI_processed;
}

bool
simba_read_row(Oid relid, RegProcedure eqproc, Datum key, void (*read) (TupleTableSlot *slot, void *arg), void *arg)
{
	Relation	rel = table_open(relid, AccessShareLock);
	Relation	idx = index_open(RelationGetPrimaryKeyIndex(rel), AccessShareLock);
	TupleTableSlot *slot = table_slot_create(rel, NULL);
	bool		found = simba_find_by_key(rel, idx, GetActiveSnapshot(), eqproc, key, slot);

	if (found)
		read(slot, arg);
	ExecDropSingleTupleTableSlot(slot);
	index_close(idx, AccessShareLock);
	table_close(rel, AccessShareLock);
	return found;
}

bool
simba_find_by_key(Relation rel, Relation idx, Snapshot snapshot, RegProcedure eqproc, Datum key,
				  TupleTableSlot *slot)
{
	IndexScanDesc scan = index_beginscan(rel, idx, snapshot, 1, 0);
	ScanKeyData skey;
	bool		found;

	/* The index's collation: a text key's btree is ordered by it. */
	ScanKeyEntryInitialize(&skey, 0, 1, BTEqualStrategyNumber, InvalidOid, idx->rd_indcollation[0], eqproc, key);
	index_rescan(scan, &skey, 1, NULL, 0);
	found = index_getnext_slot(scan, ForwardScanDirection, slot);
	index_endscan(scan);
	return found;
}

bool
simba_same_text(Datum a, Datum b)
{
	text	   *x = DatumGetTextPP(a);
	text	   *y = DatumGetTextPP(b);

	return VARSIZE_ANY_EXHDR(x) == VARSIZE_ANY_EXHDR(y) &&
		memcmp(VARDATA_ANY(x), VARDATA_ANY(y), VARSIZE_ANY_EXHDR(x)) == 0;
}

bool
simba_in_subtransaction(bool (*body) (void *arg), void *arg)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	bool		keep = false;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		keep = body(arg);
		if (keep)
			ReleaseCurrentSubTransaction();
		else
			RollbackAndReleaseCurrentSubTransaction();
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		RollbackAndReleaseCurrentSubTransaction();
		CurrentResourceOwner = owner;
		PG_RE_THROW();
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;
	return keep;
}

void
simba_check_chars(text *t, const char *what, int max_chars)
{
	int			bytes = VARSIZE_ANY_EXHDR(t);

	/* Characters never outnumber bytes: count them only when it matters. */
	if (bytes > max_chars)
	{
		int			chars = pg_mbstrlen_with_len(VARDATA_ANY(t), bytes);

		if (chars > max_chars)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("%s must be at most %d characters", what, max_chars),
					 errdetail("It has %d characters.", chars)));
	}
}

text *
simba_name_arg(FunctionCallInfo fcinfo, int argno, const char *what)
{
	text	   *t;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", what)));
	t = PG_GETARG_TEXT_PP(argno);
	if (VARSIZE_ANY_EXHDR(t) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be empty", what)));
	simba_check_chars(t, what, SIMBA_MAX_NAME_CHARS);
	return t;
}

text *
simba_array_name(Datum elem, bool isnull, const char *what, const char *one)
{
	text	   *t;

	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not contain null", what)));
	t = DatumGetTextPP(elem);
	if (VARSIZE_ANY_EXHDR(t) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not contain an empty name", what)));
	simba_check_chars(t, one, SIMBA_MAX_NAME_CHARS);
	return t;
}

int64
simba_duration_arg(FunctionCallInfo fcinfo, int argno, const char *what, bool allow_zero)
{
	Interval   *iv;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", what)));
	iv = PG_GETARG_INTERVAL_P(argno);
	/* A day or a month has no fixed length (DST, calendars): refuse them. */
	if (iv->month != 0 || iv->day != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a fixed duration", what),
				 errdetail("Days and months have no fixed length."),
				 errhint("Write it in hours, minutes or seconds, for example '48 hours'.")));
	if (allow_zero ? iv->time < 0 : iv->time <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg(allow_zero ? "%s must not be negative" : "%s must be positive", what)));
	return iv->time;
}

int64
simba_int64_arg(FunctionCallInfo fcinfo, int argno, const char *what)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", what)));
	return PG_GETARG_INT64(argno);
}

void
simba_check_lease(int64 ttl, int64 transition)
{
	int64		usec;

	if (pg_add_s64_overflow(ttl, transition, &usec) ||
		usec > (int64) simba_max_lease * USECS_PER_SEC)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lease must be at most simba.max_lease (%d s)", simba_max_lease),
				 errhint("Ask for a shorter ttl or transition, or have a superuser raise simba.max_lease.")));
}

TimestampTz
simba_add_usec(TimestampTz t, int64 usec)
{
	TimestampTz result;

	if (pg_add_s64_overflow(t, usec, &result) || !IS_VALID_TIMESTAMP(result))
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("lease end is out of the timestamp range"),
				 errhint("Use a shorter ttl or transition.")));
	return result;
}
