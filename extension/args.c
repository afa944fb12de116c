/*
 * args.c — the checks of the SQL functions' arguments: each raises
 * 22004 or 22023 (22008 for a time out of range) naming the argument, before
 * anything changes.
 */
#include "simba.h"

#include "common/int.h"
#include "mb/pg_wchar.h"

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

/* simba.max_lease, in seconds: the longest ttl + transition, or permit ttl. */
int			simba_max_lease = 7 * 24 * 3600;

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
