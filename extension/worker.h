/*
 * worker.h — how simba's background workers start and connect (worker.c):
 * dynamic workers (no shared_preload_libraries) that run in the caller's
 * database as the extension's owner. The idle-row collector (gc.c) and the
 * lapse waker (lapse.c) are two.
 */
#ifndef SIMBA_WORKER_H
#define SIMBA_WORKER_H

#include "simba.h"

#include "postmaster/bgworker.h"

/*
 * The first member of every worker's bgw_extra: whose install it serves.
 * The worker runs as owner; before PostgreSQL 17 a role that may not log
 * in cannot be connected as, so it then connects as the bootstrap
 * superuser and switches to the owner before it runs anything.
 */
typedef struct SimbaWorkerOwner
{
	Oid			schema;			/* the extension's schema */
	Oid			owner;			/* the extension's owner: the worker's role */
	bool		connect_as_owner;
} SimbaWorkerOwner;

/* The first key of simba's advisory locks ('SIMB'); each user has its second key. */
#define SIMBA_LOCK_CLASS 0x53494d42

/*
 * Registers a dynamic worker running simba's `function` in this database
 * for owner (filled in here) with extra (len bytes, starting with the
 * SimbaWorkerOwner); notify_pid as bgw_notify_pid. False when there is no
 * free worker slot or the owner is gone. *handle may be NULL.
 */
extern bool simba_worker_start(const char *function, const char *type, SimbaWorkerOwner *owner,
							   const void *extra, Size len, pid_t notify_pid, BackgroundWorkerHandle **handle);

/*
 * In the worker: copies bgw_extra to extra (len bytes), connects to the
 * database as the owner and stays the owner for good, with search_path
 * pg_catalog, pg_temp. Returns the extension's schema, quoted, or NULL when
 * it is gone (the caller exits).
 */
extern char *simba_worker_connect(Datum main_arg, void *extra, Size len);

/*
 * In the worker: runs sql with args in a transaction of its own and calls
 * row(tuple, desc, arg) for each row it returns (row may be NULL).
 * Returns the number of rows.
 */
extern uint64 simba_worker_transaction(const char *sql, int nargs, Oid *types, Datum *values,
									   void (*row) (HeapTuple tuple, TupleDesc desc, void *arg), void *arg);

#endif							/* SIMBA_WORKER_H */
