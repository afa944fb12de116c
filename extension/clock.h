/*
 * clock.h — simba's clock and the end of a lease as it counts it (clock.c).
 */
#ifndef SIMBA_CLOCK_H
#define SIMBA_CLOCK_H

#include "simba.h"

/*
 * simba's clock (clock.c, docs/design.md "Clock"): the wall clock at an
 * origin instant advanced by the boot clock since, so a step of the wall
 * clock never moves a lease. The origin is fixed per install of the
 * extension, host boot and timeline; rows record the origin they were written under
 * (clock_origin). A row written under another origin counts from this
 * origin for its full length. On a standby, simba_now is the wall clock and
 * simba_clock_origin is 0 (no origin: rows are judged by their times).
 */
extern TimestampTz simba_now(FunctionCallInfo fcinfo);
extern TimestampTz simba_clock_origin(FunctionCallInfo fcinfo);
/* simba's transaction callback: refuse to commit what counted from an origin no longer the file's. */
extern void simba_clock_pre_commit(void);
extern void simba_clock_end_xact(void);
/* SIMBA_LEASE_END (below) in C, for a row's non-NULL col and since. */
extern TimestampTz simba_lease_end_at(TimestampTz col, TimestampTz since, bool clock_null, TimestampTz clock,
									  bool origin_null, TimestampTz origin);

/*
 * SIMBA_LEASE_END in C with SQL's NULLs: false where simba_lease_end
 * returns NULL (no col, or another clock's row without its since).
 */
typedef struct SimbaLeaseEnd
{
	TimestampTz col,
				since,
				clock,
				origin;
	bool		col_null,
				since_null,
				clock_null,
				origin_null;
} SimbaLeaseEnd;
extern bool simba_lease_end_of(const SimbaLeaseEnd *e, TimestampTz *end);

/* The null flag of an origin passed as a plan's parameter (none on a standby). */
#define SIMBA_ORIGIN_NULL(origin) ((origin) == 0 ? 'n' : ' ')

/*
 * In SQL: the row's end of lease `col` (from `since`, the last renewal) as
 * the clock of the parameter `origin` counts it: `col` itself when the
 * row's clock_origin is that clock's (or on a standby, where the parameter
 * is NULL), else origin + (col - since). A function (simba_lease_end,
 * clock.c) rather than that CASE: a statement compiles each of its
 * expressions every time it runs, and the CASE was a dozen steps.
 */
#define SIMBA_LEASE_END(col, since, clock_col, origin) \
	"simba_lease_end(" col ", " since ", " clock_col ", " origin ")"

#endif							/* SIMBA_CLOCK_H */
