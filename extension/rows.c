/*
 * rows.c — reads of one row of simba's own tables by its primary key,
 * straight from the index (a lookup, not a statement), and the byte
 * equality its ids are compared with.
 */
#include "simba.h"
#include "rows.h"

#include "access/genam.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

bool
simba_read_row(Oid relid, RegProcedure eqproc, Datum key, void (*read) (TupleTableSlot *slot, void *arg), void *arg)
{
	Relation	rel = table_open(relid, AccessShareLock);
	Relation	idx = index_open(RelationGetPrimaryKeyIndex(rel), AccessShareLock);
	TupleTableSlot *slot = table_slot_create(rel, NULL);
	bool		found = simba_find_by_key(rel, idx, GetActiveSnapshot(), eqproc, key, slot);

	if (found)
		read(slot, arg);
	ExecDropSingleTupleTableSlot(slot);
	index_close(idx, AccessShareLock);
	table_close(rel, AccessShareLock);
	return found;
}

bool
simba_find_by_key(Relation rel, Relation idx, Snapshot snapshot, RegProcedure eqproc, Datum key,
				  TupleTableSlot *slot)
{
	IndexScanDesc scan = index_beginscan(rel, idx, snapshot, 1, 0);
	ScanKeyData skey;
	bool		found;

	/* The index's collation: a text key's btree is ordered by it. */
	ScanKeyEntryInitialize(&skey, 0, 1, BTEqualStrategyNumber, InvalidOid, idx->rd_indcollation[0], eqproc, key);
	index_rescan(scan, &skey, 1, NULL, 0);
	found = index_getnext_slot(scan, ForwardScanDirection, slot);
	index_endscan(scan);
	return found;
}

bool
simba_same_text(Datum a, Datum b)
{
	text	   *x = DatumGetTextPP(a);
	text	   *y = DatumGetTextPP(b);

	return VARSIZE_ANY_EXHDR(x) == VARSIZE_ANY_EXHDR(y) &&
		memcmp(VARDATA_ANY(x), VARDATA_ANY(y), VARSIZE_ANY_EXHDR(x)) == 0;
}
