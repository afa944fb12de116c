/*
 * mutex.h — one mutex's acquire and release, for the fair lock and the
 * multi-lock (mutex.c).
 */
#ifndef SIMBA_MUTEX_H
#define SIMBA_MUTEX_H

#include "simba.h"

/*
 * mutex.c, for the fair lock (fair.c): the acquire plans' arguments of a
 * call on one mutex (its mutex and contender_id arguments 0 and 1, ttl and
 * transition at ttl_arg and ttl_arg + 1), and one acquire attempt with
 * them, true when the caller holds the mutex afterwards (*owner is the
 * owner after it; values that are SPI's live until SPI_finish).
 */
/*
 * simba_owner's columns: mutex, owner_id, acquired_at, ttl_at, transition_at, version, fence, current_at,
 * owner_role, session_id.
 */
#define SIMBA_OWNER_NATTS 10
typedef struct SimbaOwner
{
	Datum		values[SIMBA_OWNER_NATTS];
	bool		nulls[SIMBA_OWNER_NATTS];
} SimbaOwner;
extern SimbaCaller simba_mutex_lease_args(FunctionCallInfo fcinfo, int ttl_arg, Datum *args, char *nulls);
extern bool simba_mutex_take(FunctionCallInfo fcinfo, Datum *args, char *nulls, SimbaOwner *owner);
/* A simba_owner tuple of *owner (its values may be SPI's: form it before SPI_finish), allocated in ctx. */
extern HeapTuple simba_owner_tuple(TupleDesc tupdesc, SimbaOwner *owner, MemoryContext ctx);
/*
 * Inside SPI, before any attempt: when argument argno (session_id) names a
 * session, the attempts' tenures join it (simba_session_join: SB004 if it
 * is not the caller's and live) and show its times, not ttl and transition.
 */
extern bool simba_mutex_join_session(FunctionCallInfo fcinfo, int argno, const SimbaCaller *caller,
									 Datum *args, char *nulls);
/*
 * Arguments 1..9 of the acquire plans from the caller, its contender id and
 * its ttl and transition (arguments ttl_arg and ttl_arg + 1), at simba's
 * clock now; argument 9, the session, NULL. Argument 0, the mutex, is the
 * caller's to set (simba_mutex_lease_args does both for one mutex).
 */
extern void simba_mutex_fill_args(FunctionCallInfo fcinfo, const SimbaCaller *caller, text *contender, int ttl_arg,
								  Datum *args, char *nulls);
/*
 * Inside SPI, for an attempt with these arguments under the session of
 * argument argno: whether another holder's live lease holds it (read
 * without a lock; then the attempt loses without locking its session row).
 */
extern bool simba_mutex_lost_under_session(FunctionCallInfo fcinfo, int argno, const SimbaCaller *caller,
										   Datum *args);
/* Inside SPI: the owner of `mutex` as it stands at t (origin), a simba_owner tuple allocated in ctx. */
extern HeapTuple simba_mutex_owner_now(FunctionCallInfo fcinfo, TupleDesc tupdesc, Datum mutex, TimestampTz t,
									   TimestampTz origin, MemoryContext ctx);
/* Inside SPI: releases the caller's live tenure of `mutex` (true), else logs a late release. */
extern bool simba_mutex_release(FunctionCallInfo fcinfo, Datum mutex, Datum contender, const SimbaCaller *caller,
								TimestampTz t);

#endif							/* SIMBA_MUTEX_H */
