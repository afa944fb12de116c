/*
 * wake.h — what a release sends: NOTIFY simba, and a fair queue's head
 * woken (wake.c).
 */
#ifndef SIMBA_WAKE_H
#define SIMBA_WAKE_H

#include "simba.h"
#include "clock.h"

/* simba.notify (wake.c): which releases send their NOTIFY simba. */
typedef enum SimbaNotify
{
	SIMBA_NOTIFY_ALWAYS,		/* every release: plain LISTEN simba hears all */
	SIMBA_NOTIFY_REGISTERED		/* only while a waiter registered (simba_wait) */
} SimbaNotify;
extern int	simba_notify;
/* NOTIFY simba, name at commit, unless simba.notify lets it skip (wake.c). */
extern void simba_wake(const char *name);
/* simba_wake for each of these names (C strings), in byte order of the names. */
extern void simba_wake_all(List *names);
/* Whether any connection of this database is registered as a waiter (simba_wait). */
extern bool simba_wake_registered(void);
/*
 * The fair lock's wake-ups (wake.c): the channel a fair waiter is woken on,
 * and, inside SPI, a NOTIFY to the head of each of these mutexes' queues
 * (its first live entry) on its channel, as simba_fair_release sends; for
 * releases that are not fair calls (a session's close, a forced release).
 */
extern char *simba_fair_channel(const char *mutex, const char *contender, const char *role);
extern void simba_fair_wake(FunctionCallInfo fcinfo, Datum *mutexes, int n, TimestampTz t);
/* Lease end of simba_mutex_queue entry q as the clock of `origin` counts it. */
#define SIMBA_QUEUE_ENTRY_END(origin) SIMBA_LEASE_END("q.transition_at", "q.renewed_at", "q.clock_origin", origin)

#endif							/* SIMBA_WAKE_H */
