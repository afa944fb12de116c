/*
 * history.h — the record of changes of hands (history.c).
 */
#ifndef SIMBA_HISTORY_H
#define SIMBA_HISTORY_H

#include "simba.h"

/*
 * While simba.history is on: log the change of simba_mutex row old to row
 * (old NULL: an insert) when it is a change of hands or a release (forced:
 * an admin's), as the history trigger does for simba's statements. For
 * writes that fire no trigger (simba_update_row).
 */
extern void simba_log_change(FunctionCallInfo fcinfo, TupleDesc desc, HeapTuple old, HeapTuple row, bool forced);
/* Inside SPI: log a release that found its lease over, once per tenure. */
extern void simba_log_late_release(FunctionCallInfo fcinfo, Datum mutex, Datum contender,
								   const SimbaCaller *caller, TimestampTz t);

#endif							/* SIMBA_HISTORY_H */
