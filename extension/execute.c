/*
 * execute.c — how simba's SQL functions run their statements: as the
 * calling function's owner, under a search path bound to its install, from
 * plans kept per backend; and an internal subtransaction for a call that
 * must change nothing unless it decides to.
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

#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_namespace_d.h"
#include "catalog/pg_proc.h"
#include "miscadmin.h"
#include "optimizer/cost.h"
#include "utils/lsyscache.h"
#include "utils/resowner.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

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

SimbaPlan  *simba_running_plan = NULL;

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

void
simba_calling_function(FunctionCallInfo fcinfo, Oid *schema, Oid *owner)
{
	SimbaFunction *f = calling_function(fcinfo);

	*schema = f->schema;
	*owner = f->owner;
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

