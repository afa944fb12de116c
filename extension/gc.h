/*
 * gc.h — the idle-row collector's settings and its start (gc.c).
 */
#ifndef SIMBA_GC_H
#define SIMBA_GC_H

#include "simba.h"

/*
 * Housekeeping (gc.c): simba.gc_idle_age (seconds; -1 off) and
 * simba.gc_interval (seconds). simba_gc_maybe_start, called by every
 * writing call with the calling function's schema and owner, looks once per
 * interval per connection at when the database was last collected and
 * starts the idle-row collector's background worker, as that owner, if that
 * was an interval ago or more.
 */
extern int	simba_gc_idle_age;
extern int	simba_gc_interval;
extern void simba_gc_maybe_start(Oid schema, Oid owner);

#endif							/* SIMBA_GC_H */
