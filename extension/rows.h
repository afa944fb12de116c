/*
 * rows.h — reads and updates of one row of simba's own tables by its
 * primary key, without a statement (rows.c, row_update.c).
 */
#ifndef SIMBA_ROWS_H
#define SIMBA_ROWS_H

#include "simba.h"

/*
 * Reads the row of table relid whose one-column primary key equals key
 * (eqproc), as the running statement's snapshot shows it, straight from
 * the index: a read that costs an index lookup rather than a statement.
 * Calls read(slot, arg) on it and returns true; false when there is none.
 * No privilege is checked: for simba's own tables only.
 */
extern bool simba_read_row(Oid relid, RegProcedure eqproc, Datum key,
						   void (*read) (TupleTableSlot *slot, void *arg), void *arg);
/* The same lookup on open relations: the row in `snapshot`, stored in slot; false when there is none. */
extern bool simba_find_by_key(Relation rel, Relation idx, Snapshot snapshot, RegProcedure eqproc, Datum key,
							  TupleTableSlot *slot);
/*
 * simba_update_row (row_update.c): the row of table relid whose one-column
 * primary key equals key (eqproc) changed as an UPDATE by that key would
 * change it, without an executor. writer->change(old, values, nulls, arg)
 * decides on the row: values and nulls hold its columns, which it sets to
 * the new row's and returns true to write them. It may be called again on
 * a newer version of the row (one a concurrent transaction wrote, read
 * without a lock), and the last call's values are those written; a version
 * it refuses is left unlocked. The table's trigger writer->own_trigger does
 * not fire; AFTER ROW triggers besides it fire after the update (as the
 * calling function's owner, simba_as_owner). When the table carries what
 * only an executor does (a BEFORE ROW or statement trigger, a transition
 * table, a CHECK constraint, a generated column, an expression or partial
 * index; row_update.c), the row version decided on, locked, is written by
 * writer->write(tid, values, nulls, arg) instead, an UPDATE of that version
 * through SPI (true when it wrote it). With old_row, an update done here
 * sets *old_row and *new_row to copies of the two versions.
 */
typedef enum SimbaRowUpdate
{
	SIMBA_ROW_ABSENT,			/* no such row in the snapshot */
	SIMBA_ROW_KEPT,				/* change() refused it, or it was deleted meanwhile */
	SIMBA_ROW_UPDATED,			/* written here: the own trigger did not fire */
	SIMBA_ROW_WRITTEN			/* written by writer->write: its triggers fired */
} SimbaRowUpdate;
typedef struct SimbaRowWriter
{
	bool		(*change) (TupleTableSlot *old, Datum *values, bool *nulls, void *arg);
	bool		(*write) (ItemPointer tid, const Datum *values, const bool *nulls, void *arg);
	const char *own_trigger;
} SimbaRowWriter;
extern SimbaRowUpdate simba_update_row(FunctionCallInfo fcinfo, Oid relid, RegProcedure eqproc, Datum key,
									   const SimbaRowWriter *writer, void *arg, HeapTuple *old_row,
									   HeapTuple *new_row);

/* Byte equality of two texts: ids are compared so (deterministic collation). */
extern bool simba_same_text(Datum a, Datum b);

#endif							/* SIMBA_ROWS_H */
