/*
 * simba.h — shared pieces of the simba extension: argument checks, the
 * SQLSTATEs simba raises, and saved SPI plans bound to the extension schema.
 */
#ifndef SIMBA_H
#define SIMBA_H

#include "postgres.h"

#include "executor/spi.h"
#include "fmgr.h"
#include "utils/timestamp.h"

/* Longest mutex name or contender id, in characters (documented in README). */
#define SIMBA_MAX_NAME_CHARS 256

/* Fence-check failures, SQLSTATE class SB ("simba"). */
#define ERRCODE_SIMBA_NOT_OWNER     MAKE_SQLSTATE('S', 'B', '0', '0', '1')
#define ERRCODE_SIMBA_STALE_FENCE   MAKE_SQLSTATE('S', 'B', '0', '0', '2')
#define ERRCODE_SIMBA_LEASE_EXPIRED MAKE_SQLSTATE('S', 'B', '0', '0', '3')

/*
 * A statement prepared once per backend and kept. Its text names simba's
 * objects as @extschema@.name; the schema is filled in from the namespace of
 * the calling function, so the plan follows the extension wherever it lives.
 */
typedef struct SimbaPlan
{
	const char *sql;
	int			nargs;
	Oid			argtypes[6];
	SPIPlanPtr	plan;			/* NULL until first use */
	Oid			nsp;			/* schema the plan was prepared for */
} SimbaPlan;

/* Run a plan (inside SPI_connect) and return SPI_processed; nulls as SPI's. */
extern uint64 simba_execute(FunctionCallInfo fcinfo, SimbaPlan *plan,
							Datum *values, const char *nulls, int tcount);

/* Checked arguments: each raises 22004/22023 with the argument's name. */
extern void simba_check_chars(text *t, const char *what, int max_chars);
extern text *simba_name_arg(FunctionCallInfo fcinfo, int argno, const char *what);
extern int64 simba_duration_arg(FunctionCallInfo fcinfo, int argno,
								const char *what, bool allow_zero);
extern int64 simba_int64_arg(FunctionCallInfo fcinfo, int argno, const char *what);

/* The setting simba.history: log changes of hands (history.c). */
extern bool simba_history;
/* Inside SPI: log a release that found its lease over, if the caller held the latest tenure. */
extern void simba_log_late_release(FunctionCallInfo fcinfo, Datum mutex, Datum contender, TimestampTz t);

/* t + usec, raising 22008 when the result leaves the timestamp range. */
extern TimestampTz simba_add_usec(TimestampTz t, int64 usec);

#endif							/* SIMBA_H */
