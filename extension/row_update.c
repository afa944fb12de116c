/*
 * row_update.c — one row of a simba table changed by its primary key
 * through the table AM, without an executor.
 *
 * An UPDATE run through SPI starts an executor on every call, and for a
 * statement that changes one row found by its key that start-up cost more
 * than the change itself (bench/README.md, "Extension 1.4"). This does
 * what such an UPDATE does (docs/design.md, "Row updates"):
 *
 * - it reads the row from the primary key in a fresh snapshot, taken as
 *   simba_execute takes one (the latest committed data, also under
 *   REPEATABLE READ), after advancing the command counter as SPI does;
 * - the caller decides on the row and sets its new values;
 * - the update waits for a transaction that locked or changed the row; if
 *   one changed it, under READ COMMITTED the latest version is locked and
 *   the caller decides again on it (the UPDATE's EvalPlanQual re-check),
 *   and under REPEATABLE READ or SERIALIZABLE it raises 40001;
 * - an update that is not HOT inserts its index entries.
 *
 * No trigger fires and no privilege is checked: for simba's own tables
 * only, whose one trigger's work the caller does itself (history.c).
 */
#include "simba.h"

#include "access/genam.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/sysattr.h"
#include "access/xact.h"
#include "executor/executor.h"
#include "nodes/execnodes.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

/*
 * Writes the index entries of a row version that an update did not make
 * HOT. The update is described as one setting every column but the key,
 * as simba's UPDATEs did: an index on the key alone is then known to be
 * unchanged, which lets the btree delete old versions bottom-up.
 */
static void
insert_index_entries(Relation rel, AttrNumber key, TupleTableSlot *slot)
{
	EState	   *estate = CreateExecutorState();
	RangeTblEntry *rte = makeNode(RangeTblEntry);
	ResultRelInfo *info = makeNode(ResultRelInfo);
	AttrNumber	col;

	rte->rtekind = RTE_RELATION;
	rte->relid = RelationGetRelid(rel);
	rte->relkind = rel->rd_rel->relkind;
	rte->rellockmode = RowExclusiveLock;
	for (col = 1; col <= RelationGetDescr(rel)->natts; col++)
		if (col != key)
			rte->updatedCols = bms_add_member(rte->updatedCols, col - FirstLowInvalidHeapAttributeNumber);
	ExecInitRangeTable(estate, list_make1(rte));
	InitResultRelInfo(info, rel, 1, NULL, 0);
	ExecOpenIndices(info, false);
	list_free(ExecInsertIndexTuples(info, slot, estate, true, false, NULL, NIL));
	ExecCloseIndices(info);
	FreeExecutorState(estate);
}

/* A row a transaction changed after the snapshot, under an isolation level that refuses to follow it. */
static void
refuse_concurrent_change(TM_Result result)
{
	ereport(ERROR,
			(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
			 errmsg("could not serialize access due to concurrent %s",
					result == TM_Deleted ? "delete" : "update")));
}

/* The current command changed the row already: only a trigger of it could have (as ExecUpdate says). */
static void
check_self_modified(const TM_FailureData *tmfd, CommandId cid)
{
	if (tmfd->cmax != cid)
		ereport(ERROR,
				(errcode(ERRCODE_TRIGGERED_DATA_CHANGE_VIOLATION),
				 errmsg("tuple to be updated was already modified by an operation triggered by the current command")));
}

SimbaRowUpdate
simba_update_row(Oid relid, RegProcedure eqproc, Datum key, SimbaRowChange change, void *arg,
				 HeapTuple *old_row, HeapTuple *new_row)
{
	Relation	rel;
	Relation	idx;
	Snapshot	snapshot;
	TupleTableSlot *slot;
	TupleTableSlot *newslot;
	IndexScanDesc scan;
	ScanKeyData skey;
	TupleDesc	desc;
	CommandId	cid;
	SimbaRowUpdate result = SIMBA_ROW_ABSENT;

	CommandCounterIncrement();
	snapshot = IsolationUsesXactSnapshot() ? GetLatestSnapshot() : GetTransactionSnapshot();
	PushActiveSnapshot(snapshot);
	snapshot = GetActiveSnapshot();
	cid = GetCurrentCommandId(true);

	rel = table_open(relid, RowExclusiveLock);
	idx = index_open(RelationGetPrimaryKeyIndex(rel), RowExclusiveLock);
	desc = RelationGetDescr(rel);
	slot = table_slot_create(rel, NULL);
	newslot = MakeSingleTupleTableSlot(desc, &TTSOpsVirtual);

	/* The index's collation: a text key's btree is ordered by it. */
	ScanKeyEntryInitialize(&skey, 0, 1, BTEqualStrategyNumber, InvalidOid, idx->rd_indcollation[0], eqproc, key);
	scan = index_beginscan(rel, idx, snapshot, 1, 0);
	index_rescan(scan, &skey, 1, NULL, 0);
	if (index_getnext_slot(scan, ForwardScanDirection, slot))
		result = SIMBA_ROW_KEPT;
	index_endscan(scan);

	while (result == SIMBA_ROW_KEPT)
	{
		ItemPointerData tid;
		TM_FailureData tmfd;
		LockTupleMode lockmode;
		bool		update_indexes;
		TM_Result	tm;

		/* The old row stays readable while the caller runs statements (a session's lock). */
		ExecMaterializeSlot(slot);
		slot_getallattrs(slot);
		tid = slot->tts_tid;
		ExecClearTuple(newslot);
		memcpy(newslot->tts_values, slot->tts_values, desc->natts * sizeof(Datum));
		memcpy(newslot->tts_isnull, slot->tts_isnull, desc->natts * sizeof(bool));
		if (!change(slot, newslot->tts_values, newslot->tts_isnull, arg))
			break;
		ExecStoreVirtualTuple(newslot);

		tm = table_tuple_update(rel, &tid, newslot, cid, snapshot, InvalidSnapshot, true,
								&tmfd, &lockmode, &update_indexes);
		if (tm == TM_Ok)
		{
			if (update_indexes && RelationGetForm(rel)->relhasindex)
				insert_index_entries(rel, idx->rd_index->indkey.values[0], newslot);
			result = SIMBA_ROW_UPDATED;
			break;
		}
		if (tm == TM_SelfModified)
		{
			check_self_modified(&tmfd, cid);
			break;
		}
		if (tm != TM_Updated && tm != TM_Deleted)
			elog(ERROR, "simba: unexpected table_tuple_update status %d", (int) tm);
		if (IsolationUsesXactSnapshot())
			refuse_concurrent_change(tm);
		if (tm == TM_Deleted)
			break;

		/* Changed since the snapshot: decide again on its latest version, locked (EvalPlanQual). */
		tm = table_tuple_lock(rel, &tid, snapshot, slot, cid, lockmode, LockWaitBlock,
							  TUPLE_LOCK_FLAG_FIND_LAST_VERSION, &tmfd);
		if (tm == TM_SelfModified)
			check_self_modified(&tmfd, cid);
		else if (tm != TM_Ok && tm != TM_Deleted)
			elog(ERROR, "simba: unexpected table_tuple_lock status %d", (int) tm);
		if (tm != TM_Ok)
			break;
	}

	if (result == SIMBA_ROW_UPDATED && old_row != NULL)
	{
		*old_row = ExecCopySlotHeapTuple(slot);
		*new_row = ExecCopySlotHeapTuple(newslot);
	}
	ExecDropSingleTupleTableSlot(newslot);
	ExecDropSingleTupleTableSlot(slot);
	index_close(idx, NoLock);
	table_close(rel, NoLock);
	PopActiveSnapshot();
	return result;
}
