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
 * objects without a schema and every function as pg_catalog.f: it is parsed,
 * and re-parsed whenever PostgreSQL replans it, under a search path of schema
 * OIDs (pg_catalog, then the extension's schema), never under a name that a
 * schema owner could rename and replace (docs/design.md, "Extension").
 */
typedef struct SimbaPlan
{
	const char *sql;
	int			nargs;
	Oid			argtypes[9];
	SPIPlanPtr	plan;			/* NULL until first use */
} SimbaPlan;

/*
 * Run a plan (inside SPI_connect) and return SPI_processed; nulls as SPI's.
 * Under REPEATABLE READ and SERIALIZABLE the statement reads the latest
 * committed data, not the transaction's snapshot: simba decides on fresh
 * data, and a write that races another raises 40001.
 */
extern uint64 simba_execute(FunctionCallInfo fcinfo, SimbaPlan *plan,
							Datum *values, const char *nulls, int tcount);

/* The plan simba_execute is running now (the history trigger reads it). */
extern SimbaPlan *simba_running_plan;

/*
 * The role a lease or permit is bound to: the caller's role outside simba's
 * SECURITY DEFINER functions, as a name Datum.
 */
extern Datum simba_caller_role(void);

/* Checked arguments: each raises 22004/22023 with the argument's name. */
extern void simba_check_chars(text *t, const char *what, int max_chars);
extern text *simba_name_arg(FunctionCallInfo fcinfo, int argno, const char *what);
extern int64 simba_duration_arg(FunctionCallInfo fcinfo, int argno,
								const char *what, bool allow_zero);
extern int64 simba_int64_arg(FunctionCallInfo fcinfo, int argno, const char *what);
/* Raises 22023 when a lease of ttl + transition is longer than simba.max_lease. */
extern void simba_check_lease(int64 ttl, int64 transition);

/* The setting simba.history: log changes of hands (history.c). */
extern bool simba_history;
/* Inside SPI: log a release that found its lease over, once per tenure. */
extern void simba_log_late_release(FunctionCallInfo fcinfo, Datum mutex, Datum contender,
								   Datum role, TimestampTz t);

/* t + usec, raising 22008 when the result leaves the timestamp range. */
extern TimestampTz simba_add_usec(TimestampTz t, int64 usec);

#endif							/* SIMBA_H */
