/*
 * simba.c — module entry, argument checks and the plan cache shared by the
 * mutex functions (mutex.c).
 *
 * Plans: each statement is prepared with SPI on first use in a backend and
 * kept (SPI_keepplan). PostgreSQL's plan cache replans it when the table
 * changes; we only re-prepare when the extension's schema differs from the
 * one the plan was made for (DROP + CREATE EXTENSION in another schema).
 */
#include "simba.h"

#include "common/int.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

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
	MarkGUCPrefixReserved("simba");
}

static SPIPlanPtr
simba_prepare(SimbaPlan *p, Oid nsp)
{
	const char *schema = quote_identifier(get_namespace_name(nsp));
	StringInfoData sql;
	const char *s;
	const char *hit;
	SPIPlanPtr	plan;

	/* Fill in every @extschema@ with the quoted schema name. */
	initStringInfo(&sql);
	for (s = p->sql; (hit = strstr(s, "@extschema@")) != NULL; s = hit + strlen("@extschema@"))
	{
		appendBinaryStringInfo(&sql, s, hit - s);
		appendStringInfoString(&sql, schema);
	}
	appendStringInfoString(&sql, s);

	plan = SPI_prepare(sql.data, p->nargs, (Oid *) p->argtypes);
	if (plan == NULL)
		elog(ERROR, "simba: could not prepare \"%s\": %s", sql.data,
			 SPI_result_code_string(SPI_result));
	if (SPI_keepplan(plan) != 0)
		elog(ERROR, "simba: could not keep plan for \"%s\"", sql.data);
	pfree(sql.data);
	return plan;
}

uint64
simba_execute(FunctionCallInfo fcinfo, SimbaPlan *p, Datum *values, const char *nulls, int tcount)
{
	Oid			nsp = get_func_namespace(fcinfo->flinfo->fn_oid);
	int			rc;

	if (p->plan == NULL || p->nsp != nsp)
	{
		if (p->plan != NULL)
			SPI_freeplan(p->plan);
		p->plan = NULL;
		p->plan = simba_prepare(p, nsp);
		p->nsp = nsp;
	}
	rc = SPI_execute_plan(p->plan, values, nulls, false, tcount);
	if (rc < 0)
		elog(ERROR, "simba: statement failed: %s", SPI_result_code_string(rc));
	return SPI_processed;
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
