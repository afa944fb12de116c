/*
 * multi.c — the multi-lock: simba_acquire_all and simba_release_all, every
 * mutex of a set taken or released in one call, with mutex.c's attempt
 * (simba_mutex_take: the same tenures, fences and history).
 *
 * simba_acquire_all takes its mutexes one by one in byte order of their
 * names, inside a subtransaction it rolls back at the first one it cannot
 * take, so it holds all of them afterwards or changed nothing, and two
 * multi-locks over overlapping sets wait for each other in one order, never
 * in a cycle.
 */
#include "simba.h"
#include "clock.h"
#include "mutex.h"
#include "wake.h"

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(simba_acquire_all_1_4);
PG_FUNCTION_INFO_V1(simba_release_all_1_4);

/* Byte order of two names (qsort): the order a multi-lock takes its rows in. */
static int
compare_names(const void *a, const void *b)
{
	text	   *x = *(text *const *) a;
	text	   *y = *(text *const *) b;
	int			lx = VARSIZE_ANY_EXHDR(x);
	int			ly = VARSIZE_ANY_EXHDR(y);
	int			c = memcmp(VARDATA_ANY(x), VARDATA_ANY(y), Min(lx, ly));

	return c != 0 ? c : (lx > ly) - (lx < ly);
}

/*
 * The names of argument argno (a text[]), checked as simba_name_arg checks
 * one, in byte order, each once. Returns how many; *names gets them.
 */
static int
mutexes_arg(FunctionCallInfo fcinfo, int argno, text ***names)
{
	ArrayType  *array;
	Datum	   *elems;
	bool	   *elem_nulls;
	int			n;
	int			i;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("mutexes must not be null")));
	array = PG_GETARG_ARRAYTYPE_P(argno);
	if (ARR_NDIM(array) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("mutexes must be a one-dimensional array")));
	deconstruct_array(array, TEXTOID, -1, false, TYPALIGN_INT, &elems, &elem_nulls, &n);
	if (n == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("mutexes must not be empty")));
	if (n > SIMBA_MAX_MULTI_LOCK)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("mutexes must name at most %d mutexes", SIMBA_MAX_MULTI_LOCK),
				 errdetail("It names %d.", n)));
	*names = palloc(n * sizeof(text *));
	for (i = 0; i < n; i++)
		(*names)[i] = simba_array_name(elems[i], elem_nulls[i], "mutexes", "a mutex name");
	qsort(*names, n, sizeof(text *), compare_names);
	for (i = 1; i < n; i++)
		if (compare_names(&(*names)[i - 1], &(*names)[i]) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("mutexes must name each mutex once"),
					 errdetail("\"%s\" appears more than once.", text_to_cstring((*names)[i]))));
	return n;
}

/* simba_acquire_all's work inside its subtransaction: kept only when every mutex was taken. */
typedef struct TakeAll
{
	FunctionCallInfo fcinfo;
	const SimbaCaller *caller;
	text	  **names;
	int			n;
	Datum	   *args;
	char	   *nulls;
	HeapTuple  *rows;
	TupleDesc	desc;
	MemoryContext rowctx;
} TakeAll;

static bool
take_all(void *arg)
{
	TakeAll    *a = (TakeAll *) arg;
	int			i;

	/* The session row too is locked only when every mutex was taken. */
	simba_mutex_join_session(a->fcinfo, 4, a->caller, a->args, a->nulls);
	for (i = 0; i < a->n; i++)
	{
		SimbaOwner	owner;

		a->args[0] = PointerGetDatum(a->names[i]);
		if (!simba_mutex_take(a->fcinfo, a->args, a->nulls, &owner))
			return false;
		a->rows[i] = simba_owner_tuple(a->desc, &owner, a->rowctx);
	}
	return true;
}

/*
 * Whether a waiter under a session finds some member held live by another
 * holder, read without a lock as a single acquire does (lost_under_session):
 * then it loses without its subtransaction, which would lock its session
 * row (an xid and WAL) only to roll back.
 */
static bool
some_lost_under_session(TakeAll *a)
{
	int			i;

	for (i = 0; i < a->n; i++)
	{
		a->args[0] = PointerGetDatum(a->names[i]);
		if (simba_mutex_lost_under_session(a->fcinfo, 4, a->caller, a->args))
			return true;
	}
	return false;
}

Datum
simba_acquire_all_1_4(PG_FUNCTION_ARGS)
{
	SimbaCaller caller = simba_enter(fcinfo, true);
	text	  **names;
	int			n = mutexes_arg(fcinfo, 0, &names);
	Datum		args[10];
	char		nulls[11] = "";
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	HeapTuple  *rows = palloc(n * sizeof(HeapTuple));
	TakeAll		work = {fcinfo, &caller, names, n, args, nulls, rows, NULL, CurrentMemoryContext};
	int			i;

	simba_mutex_fill_args(fcinfo, &caller, simba_name_arg(fcinfo, 1, "contender_id"), 2, args, nulls);
	InitMaterializedSRF(fcinfo, 0);
	work.desc = rsinfo->setDesc;
	SPI_connect();
	/* Refused: every member as it stands now, unchanged by this call. */
	if (some_lost_under_session(&work) || !simba_in_subtransaction(take_all, &work))
		for (i = 0; i < n; i++)
			rows[i] = simba_mutex_owner_now(fcinfo, rsinfo->setDesc, PointerGetDatum(names[i]),
											DatumGetTimestampTz(args[2]), DatumGetTimestampTz(args[8]), work.rowctx);
	for (i = 0; i < n; i++)
		tuplestore_puttuple(rsinfo->setResult, rows[i]);
	SPI_finish();
	return (Datum) 0;
}

Datum
simba_release_all_1_4(PG_FUNCTION_ARGS)
{
	SimbaCaller caller = simba_enter(fcinfo, true);
	text	  **names;
	int			n = mutexes_arg(fcinfo, 0, &names);
	text	   *contender = simba_name_arg(fcinfo, 1, "contender_id");
	TimestampTz t = simba_now(fcinfo);
	bool	   *released = palloc(n * sizeof(bool));
	int			count = 0;
	int			i;

	SPI_connect();
	for (i = 0; i < n; i++)
	{
		released[i] = simba_mutex_release(fcinfo, PointerGetDatum(names[i]), PointerGetDatum(contender), &caller, t);
		count += released[i];
	}
	SPI_finish();
	/* One NOTIFY per mutex released, as simba_release sends. */
	for (i = 0; i < n; i++)
		if (released[i])
			simba_wake(text_to_cstring(names[i]));
	PG_RETURN_INT32(count);
}
