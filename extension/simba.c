/*
 * simba.c — module entry, settings, argument checks and the plan runner
 * shared by every SQL function of the extension.
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
#include "common/int.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

/* simba.max_lease, in seconds: the longest ttl + transition, or permit ttl. */
static int	simba_max_lease = 7 * 24 * 3600;

SimbaPlan  *simba_running_plan = NULL;

void
_PG_init(void)
{
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
	MarkGUCPrefixReserved("simba");
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

uint64
simba_execute(FunctionCallInfo fcinfo, SimbaPlan *p, Datum *values, const char *nulls, int tcount)
{
	OverrideSearchPath path = {0};
	SimbaPlan  *outer = simba_running_plan;
	volatile int rc = 0;

	/*
	 * pg_catalog first, so no function or operator in the extension's schema
	 * (which its owner may write to) shadows a built-in one; no pg_temp.
	 */
	path.schemas = list_make2_oid(PG_CATALOG_NAMESPACE,
								  get_func_namespace(fcinfo->flinfo->fn_oid));
	PushOverrideSearchPath(&path);
	simba_running_plan = p;
	PG_TRY();
	{
		if (p->plan == NULL)
			p->plan = simba_prepare(p);
		if (IsolationUsesXactSnapshot())
			rc = SPI_execute_snapshot(p->plan, values, nulls, GetLatestSnapshot(),
									  InvalidSnapshot, false, true, tcount);
		else
			rc = SPI_execute_plan(p->plan, values, nulls, false, tcount);
	}
	PG_FINALLY();
	{
		simba_running_plan = outer;
		PopOverrideSearchPath();
	}
	PG_END_TRY();
	list_free(path.schemas);
	if (rc < 0)
		elog(ERROR, "simba: statement failed: %s", SPI_result_code_string(rc));
	return SPI_processed;
}

Datum
simba_caller_role(void)
{
	Name		role = (Name) palloc(NAMEDATALEN);

	namestrcpy(role, GetUserNameFromId(GetOuterUserId(), false));
	return NameGetDatum(role);
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
