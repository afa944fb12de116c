/*
 * enter.h — what module.c, the library's load, hands the entry check
 * (enter.c); simba_enter itself is in simba.h, as every file calls it.
 */
#ifndef SIMBA_ENTER_H
#define SIMBA_ENTER_H

#include "simba.h"

#include "access/xact.h"

/*
 * The superuser setting whose value this connection's own startup options
 * replaced (module.c's guard_placeholder), or NULL: simba_enter refuses to
 * run while it is set.
 */
extern const char *simba_overridden_setting;

/*
 * Registered by _PG_init: refuses PREPARE TRANSACTION of a transaction
 * simba_enter marked, checks the clock's origin at commit (clock.c).
 */
extern void simba_xact_callback(XactEvent event, void *arg);

#endif							/* SIMBA_ENTER_H */
