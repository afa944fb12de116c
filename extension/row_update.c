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
 * No privilege is checked: for simba's own tables only. The table's own
 * trigger does not fire: the caller does its work itself (history.c).
 * Triggers a DBA or a test adds fire as they did for the UPDATE: AFTER ROW
 * triggers (an audit trail) after the update here; with a BEFORE ROW or a
 * statement trigger (which may change or refuse the row), the row version
 * decided on is locked here and written by the caller's UPDATE of that
 * version, whose executor fires them all.
 */
#include "simba.h"

#include "access/genam.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/sysattr.h"
#include "access/xact.h"
#include "catalog/pg_trigger.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "nodes/execnodes.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

/*
 * After an update here: the index entries of a row version that it did not
 * make HOT, and the AFTER ROW triggers of the table when it has some of
 * its own (fire). The update is described as one setting every column but
 * the key, as simba's UPDATEs did: an index on the key alone is then known
 * to be unchanged (the btree deletes old versions bottom-up), and a
 * trigger's column list matches as it did.
 */
typedef struct Finish
{
	Relation	rel;
	AttrNumber	key;
	ItemPointer old_tid;
	TupleTableSlot *slot;
	bool		update_indexes;
	bool		fire;
} Finish;

static void
finish_update(void *arg)
{
	Finish	   *f = arg;
	Relation	rel = f->rel;
	AttrNumber	key = f->key;
	TupleTableSlot *slot = f->slot;
	bool		update_indexes = f->update_indexes;
	bool		fire = f->fire;
	EState	   *estate = CreateExecutorState();
	RangeTblEntry *rte = makeNode(RangeTblEntry);
	ResultRelInfo *info = makeNode(ResultRelInfo);
	List	   *recheck = NIL;
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
	estate->es_opened_result_relations = list_make1(info);
	if (fire)
		AfterTriggerBeginQuery();
	if (update_indexes)
	{
		ExecOpenIndices(info, false);
		recheck = ExecInsertIndexTuples(info, slot, estate, true, false, NULL, NIL);
	}
	if (fire)
	{
		ExecARUpdateTriggers(estate, info, NULL, NULL, f->old_tid, NULL, slot, recheck, NULL, false);
		AfterTriggerEndQuery(estate);
	}
	list_free(recheck);
	ExecResetTupleTable(estate->es_tupleTable, false);
	ExecCloseResultRelations(estate);
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

/* How a change of rel fires the triggers on UPDATE it has besides the one named own. */
typedef enum TriggerWay
{
	TRIGGERS_NONE,				/* it has none */
	TRIGGERS_AFTER_ROW,			/* AFTER ROW only: fired after the update here */
	TRIGGERS_BY_STATEMENT		/* BEFORE ROW or per statement: the writer's UPDATE fires them */
} TriggerWay;

static TriggerWay
trigger_way(Relation rel, const char *own)
{
	TriggerDesc *triggers = rel->trigdesc;
	TriggerWay	way = TRIGGERS_NONE;
	int			i;

	for (i = 0; triggers != NULL && i < triggers->numtriggers; i++)
	{
		int16		type = triggers->triggers[i].tgtype;

		if (!TRIGGER_FOR_UPDATE(type) || strcmp(triggers->triggers[i].tgname, own) == 0)
			continue;
		if (!TRIGGER_FOR_ROW(type) || !TRIGGER_FOR_AFTER(type))
			return TRIGGERS_BY_STATEMENT;
		way = TRIGGERS_AFTER_ROW;
	}
	return way;
}

SimbaRowUpdate
simba_update_row(FunctionCallInfo fcinfo, Oid relid, RegProcedure eqproc, Datum key, const SimbaRowWriter *writer,
				 void *arg, HeapTuple *old_row, HeapTuple *new_row)
{
	Relation	rel;
	Relation	idx;
	Snapshot	snapshot;
	TupleTableSlot *slot;
	TupleTableSlot *newslot;
	TupleTableSlot *locked = NULL;
	TupleDesc	desc;
	CommandId	cid;
	TriggerWay	way;
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
	way = trigger_way(rel, writer->own_trigger);
	if (way == TRIGGERS_BY_STATEMENT)
		locked = table_slot_create(rel, NULL);

	if (simba_find_by_key(rel, idx, snapshot, eqproc, key, slot))
		result = SIMBA_ROW_KEPT;

	while (result == SIMBA_ROW_KEPT)
	{
		ItemPointerData tid;
		TM_FailureData tmfd;
		LockTupleMode lockmode = LockTupleNoKeyExclusive;
		bool		update_indexes;
		TM_Result	tm;

		/* The old row stays readable while the caller runs statements (a session's lock). */
		ExecMaterializeSlot(slot);
		slot_getallattrs(slot);
		tid = slot->tts_tid;
		ExecClearTuple(newslot);
		memcpy(newslot->tts_values, slot->tts_values, desc->natts * sizeof(Datum));
		memcpy(newslot->tts_isnull, slot->tts_isnull, desc->natts * sizeof(bool));
		if (!writer->change(slot, newslot->tts_values, newslot->tts_isnull, arg))
			break;

		if (locked != NULL)
		{
			/* The version decided on, locked as the UPDATE will lock it: its statement then finds it. */
			tm = table_tuple_lock(rel, &tid, snapshot, locked, cid, LockTupleNoKeyExclusive, LockWaitBlock,
								  IsolationUsesXactSnapshot() ? 0 : TUPLE_LOCK_FLAG_FIND_LAST_VERSION, &tmfd);
			if (tm == TM_Ok && !tmfd.traversed)
			{
				result = writer->write(&tid, newslot->tts_values, newslot->tts_isnull, arg)
					? SIMBA_ROW_WRITTEN : SIMBA_ROW_KEPT;
				break;
			}
			if (tm == TM_Ok)
			{
				/* A newer version, now locked: decide again on it. */
				ExecCopySlot(slot, locked);
				slot->tts_tid = locked->tts_tid;
				continue;
			}
		}
		else
		{
			ExecStoreVirtualTuple(newslot);
			tm = table_tuple_update(rel, &tid, newslot, cid, snapshot, InvalidSnapshot, true,
									&tmfd, &lockmode, &update_indexes);
			if (tm == TM_Ok)
			{
				Finish		finish = {rel, idx->rd_index->indkey.values[0], &tid, newslot,
				update_indexes && RelationGetForm(rel)->relhasindex, way == TRIGGERS_AFTER_ROW};

				/* A DBA's triggers run as an UPDATE of simba's statements ran them. */
				if (finish.fire)
					simba_as_owner(fcinfo, finish_update, &finish);
				else if (finish.update_indexes)
					finish_update(&finish);
				result = SIMBA_ROW_UPDATED;
				break;
			}
		}

		if (tm == TM_SelfModified)
		{
			check_self_modified(&tmfd, cid);
			break;
		}
		if (tm != TM_Updated && tm != TM_Deleted)
			elog(ERROR, "simba: unexpected row update status %d", (int) tm);
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
	if (locked != NULL)
		ExecDropSingleTupleTableSlot(locked);
	index_close(idx, NoLock);
	table_close(rel, NoLock);
	PopActiveSnapshot();
	return result;
}
