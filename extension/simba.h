/*
 * simba.h — what every file of the extension shares: the limits and the
 * SQLSTATEs simba raises, the plan runner (execute.c), the caller and the
 * entry check (enter.c), the settings, and the argument checks
 * (args.c). Each subsystem has a header of its own beside its file:
 * clock.h, session.h, mutex.h, history.h, wake.h, gc.h, rows.h, enter.h.
 */
#ifndef SIMBA_H
#define SIMBA_H

#include "postgres.h"

#include "executor/spi.h"
#include "executor/tuptable.h"
#include "fmgr.h"
#include "utils/timestamp.h"

/* Longest mutex name or contender id, in characters (documented in docs/reference.md). */
#define SIMBA_MAX_NAME_CHARS 256
/* Mutexes in one simba_acquire_all / simba_release_all call. */
#define SIMBA_MAX_MULTI_LOCK 1000

/* Fence-check failures, SQLSTATE class SB ("simba"). */
#define ERRCODE_SIMBA_NOT_OWNER     MAKE_SQLSTATE('S', 'B', '0', '0', '1')
#define ERRCODE_SIMBA_STALE_FENCE   MAKE_SQLSTATE('S', 'B', '0', '0', '2')
#define ERRCODE_SIMBA_LEASE_EXPIRED MAKE_SQLSTATE('S', 'B', '0', '0', '3')
/* A session that has ended (closed or past transition_at), is unknown, or is another role's. */
#define ERRCODE_SIMBA_NO_SESSION    MAKE_SQLSTATE('S', 'B', '0', '0', '4')
/* A reader of a read-write lock asked to write (rwlock.c): refused, never a deadlock. */
#define ERRCODE_SIMBA_UPGRADE_REFUSED MAKE_SQLSTATE('S', 'B', '0', '0', '5')

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
	Oid			argtypes[14];
	bool		scans;			/* an admin's whole-table statement: may scan sequentially */
	SPIPlanPtr	plan;			/* NULL until first use */
} SimbaPlan;

/*
 * Run a plan (inside SPI_connect) and return SPI_processed; nulls as SPI's.
 * Unless the plan scans, it is planned (and replanned) without sequential
 * scans: kept from a table of a few rows, a plan must not scan the table
 * whole once it has grown (docs/design.md, "Plans and growth").
 * The statement runs as the owner of the calling SQL function (simba's
 * functions are not SECURITY DEFINER: see SimbaCaller). Under REPEATABLE
 * READ and SERIALIZABLE it reads the latest committed data, not the
 * transaction's snapshot: simba decides on fresh data, and a write that
 * races another raises 40001.
 */
extern uint64 simba_execute(FunctionCallInfo fcinfo, SimbaPlan *plan,
							Datum *values, const char *nulls, int tcount);

/*
 * Runs body(arg) as simba_execute runs a statement: as the owner of the
 * calling SQL function, under a search path of pg_catalog and the
 * extension's schema by OID. For work that is not a statement but runs a
 * DBA's code, such as a row update's triggers (row_update.c).
 */
extern void simba_as_owner(FunctionCallInfo fcinfo, void (*body) (void *arg), void *arg);

/* The schema and owner of the calling SQL function (its install). */
extern void simba_calling_function(FunctionCallInfo fcinfo, Oid *schema, Oid *owner);
/* The OID of simba_mutex in the install of the calling SQL function. */
extern Oid	simba_mutex_table(FunctionCallInfo fcinfo);
extern Oid	simba_session_table(FunctionCallInfo fcinfo);
extern Oid	simba_fence_sequence(FunctionCallInfo fcinfo);

/* The plan simba_execute is running now (the history trigger reads it). */
extern SimbaPlan *simba_running_plan;

/*
 * Who a lease or permit belongs to: the role whose privileges the call runs
 * with (GetUserId() on entry, so a SECURITY DEFINER wrapper's owner), by OID
 * within this cluster and by name across clusters (a restore elsewhere), and
 * the name for display (docs/design.md, "Extension").
 */
typedef struct SimbaCaller
{
	Datum		role;			/* name */
	Datum		roleid;			/* oid */
	Datum		sysid;			/* int8: the cluster whose role OIDs these are */
} SimbaCaller;

/*
 * The entry check of every function that takes, keeps or checks a lease or
 * permit: refuses inside a security-restricted operation (42501), when this
 * connection overrode a superuser setting (42501), and, for a function that
 * locks or writes, in a read-only transaction or on a standby (25006). Marks
 * the transaction so that PREPARE TRANSACTION refuses it.
 */
extern SimbaCaller simba_enter(FunctionCallInfo fcinfo, bool writes);

/*
 * The same holder, in SQL: the rows' role columns against the caller's
 * parameters. A row whose sysid is another cluster's (restored there) is
 * matched by role name; a NULL role (taken before 1.3) matches nobody.
 */
#define SIMBA_SAME_ROLE(role_col, roleid_col, sysid_col, role, roleid, sysid) \
	"(CASE WHEN " sysid_col " = " sysid " THEN " roleid_col " = " roleid \
	" ELSE " role_col " = " role " END)"

/*
 * Inside SPI: runs body(arg) in an internal subtransaction, kept when it
 * returns true and rolled back when it returns false, so a call that
 * changes nothing keeps no lock in the caller's transaction. An error rolls
 * it back before it leaves, so a caller that catches the error (PL/pgSQL, a
 * savepoint) is not left inside it. Returns what body returned.
 */
extern bool simba_in_subtransaction(bool (*body) (void *arg), void *arg);

/* Checked arguments: each raises 22004/22023 with the argument's name. */
extern void simba_check_chars(text *t, const char *what, int max_chars);
extern text *simba_name_arg(FunctionCallInfo fcinfo, int argno, const char *what);
/* An element of the text[] argument `what`, checked as simba_name_arg checks one (`one` names it). */
extern text *simba_array_name(Datum elem, bool isnull, const char *what, const char *one);
extern int64 simba_duration_arg(FunctionCallInfo fcinfo, int argno,
								const char *what, bool allow_zero);
extern int64 simba_int64_arg(FunctionCallInfo fcinfo, int argno, const char *what);
/* Raises 22023 when a lease of ttl + transition is longer than simba.max_lease. */
extern void simba_check_lease(int64 ttl, int64 transition);

/*
 * Settings that _PG_init defines (module.c), each kept beside its reader:
 * simba.history logs changes of hands (history.c), simba.max_lease bounds
 * a lease (args.c), simba.drop_live_leases lets DROP EXTENSION go ahead
 * over live leases (drop_guard.c).
 */
extern bool simba_history;
extern int	simba_max_lease;
extern bool simba_drop_live_leases;

/* t + usec, raising 22008 when the result leaves the timestamp range. */
extern TimestampTz simba_add_usec(TimestampTz t, int64 usec);

#endif							/* SIMBA_H */
