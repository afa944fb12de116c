/*
 * row_update.c — one row of a simba table changed by its primary key
 * through the table AM, without an executor.
 *
 * An UPDATE run through SPI starts an executor on every call, and for a
 * statement that changes one row found by its key that start-up cost more
 * than the change itself (bench/NOTES.md, "Extension 1.4"). This does
 * what such an UPDATE does (docs/design.md, "Row updates"):
 *
 * - it reads the row from the primary key in a fresh snapshot, taken as
 *   simba_execute takes one (the latest committed data, also under
 *   REPEATABLE READ), after advancing the command counter as SPI does;
 * - the caller decides on the row and sets its new values;
 * - the update waits for a transaction that locked or changed the row; if
 *   one changed it, under READ COMMITTED the latest committed version is
 *   read again by the key, without a lock, and the caller decides again on
 *   it (the UPDATE's EvalPlanQual re-check, which would lock that version
 *   even for a caller that then changes nothing), and under REPEATABLE READ
 *   or SERIALIZABLE it raises 40001;
 * - an update that is not HOT inserts its index entries, as the
 *   extension's owner under simba's search path (an index's functions are
 *   a DBA's code).
 *
 * No privilege is checked: for simba's own tables only. The table's own
 * trigger does not fire: the caller does its work itself (history.c).
 * Triggers a DBA or a test adds fire as they did for the UPDATE: AFTER ROW
 * triggers (an audit trail) after the update here. A table that carries
 * what only an executor does (a BEFORE ROW or statement trigger, which may
 * change or refuse the row; a transition table; a CHECK constraint; a
 * stored generated column; an index on an expression or with a predicate
 * of its own; forced row security), or a new row with a NULL in a NOT NULL
 * column, is written by the caller's UPDATE of the row version decided on,
 * locked here first.
 */
#include "simba.h"
#include "rows.h"

#include "access/genam.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/sysattr.h"
#include "access/xact.h"
#include "catalog/pg_index.h"
#include "catalog/pg_trigger.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "nodes/execnodes.h"
#include "nodes/primnodes.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/rel.h"
#include "utils/relcache.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

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

/*
 * Whether every index of a table is one the update here maintains as an
 * UPDATE would: on columns, with no predicate but a column's IS [NOT] NULL
 * (simba_mutex_session), checked at once. Kept for one table until its
 * relcache entry is invalidated (an index created or dropped).
 */
static Oid	plain_relid = InvalidOid;
static bool plain_indexes;
static uint64 plain_generation;

static void
forget_plain_indexes(Datum arg, Oid relid)
{
	plain_generation++;
	if (relid == InvalidOid || relid == plain_relid)
		plain_relid = InvalidOid;
}

/*
 * The index's expressions and predicate as stored, not through
 * RelationGetIndexExpressions or RelationGetIndexPredicate: those inline
 * SQL functions under the current search path, which here is the caller's,
 * and keep the result in the relcache for the index's maintenance.
 */
static bool
index_plain(Relation ind)
{
	Node	   *pred;
	bool		isnull;
	Datum		raw;

	if (!heap_attisnull(ind->rd_indextuple, Anum_pg_index_indexprs, NULL) ||
		ind->rd_index->indisexclusion || !ind->rd_index->indimmediate)
		return false;
	raw = SysCacheGetAttr(INDEXRELID, ind->rd_indextuple, Anum_pg_index_indpred, &isnull);
	if (isnull)
		return true;
	pred = stringToNode(TextDatumGetCString(raw));
	return IsA(pred, NullTest) && IsA(((NullTest *) pred)->arg, Var);
}

static bool
indexes_plain(Relation rel)
{
	static bool registered = false;
	uint64		generation = plain_generation;
	List	   *list;
	ListCell   *lc;
	bool		plain = true;

	if (RelationGetRelid(rel) == plain_relid)
		return plain_indexes;
	if (!registered)
	{
		CacheRegisterRelcacheCallback(forget_plain_indexes, (Datum) 0);
		registered = true;
	}
	list = RelationGetIndexList(rel);
	foreach(lc, list)
	{
		Relation	ind = index_open(lfirst_oid(lc), AccessShareLock);

		if (!index_plain(ind))
			plain = false;
		index_close(ind, NoLock);
	}
	list_free(list);
	/* Not kept when an invalidation came while reading them: it may have been for this table. */
	if (generation == plain_generation)
	{
		plain_relid = RelationGetRelid(rel);
		plain_indexes = plain;
	}
	return plain;
}

/* How a change of rel is written, given what the table carries besides the trigger named own. */
typedef enum RowWay
{
	WRITE_HERE,					/* by the update here, nothing else to run */
	WRITE_HERE_AFTER_ROW,		/* by the update here, then its AFTER ROW triggers fired */
	WRITE_BY_STATEMENT			/* by the writer's UPDATE, whose executor does the rest */
} RowWay;

static RowWay
row_way(Relation rel, const char *own)
{
	TriggerDesc *triggers = rel->trigdesc;
	TupleConstr *constr = RelationGetDescr(rel)->constr;
	RowWay		way = WRITE_HERE;
	int			i;

	/* What only an executor checks or computes: a DBA's constraints, generated columns, policies. */
	if (constr != NULL && (constr->num_check > 0 || constr->has_generated_stored))
		return WRITE_BY_STATEMENT;
	if (rel->rd_rel->relrowsecurity && rel->rd_rel->relforcerowsecurity)
		return WRITE_BY_STATEMENT;
	/* Transition tables are filled by the executor's statement-level trigger state. */
	if (triggers != NULL && (triggers->trig_update_new_table || triggers->trig_update_old_table))
		return WRITE_BY_STATEMENT;
	for (i = 0; triggers != NULL && i < triggers->numtriggers; i++)
	{
		int16		type = triggers->triggers[i].tgtype;

		if (!TRIGGER_FOR_UPDATE(type) || strcmp(triggers->triggers[i].tgname, own) == 0)
			continue;
		if (!TRIGGER_FOR_ROW(type) || !TRIGGER_FOR_AFTER(type))
			return WRITE_BY_STATEMENT;
		way = WRITE_HERE_AFTER_ROW;
	}
	if (!indexes_plain(rel))
		return WRITE_BY_STATEMENT;
	return way;
}

/* A NULL for a NOT NULL column (a DBA's): the UPDATE raises its error. */
static bool
breaks_not_null(TupleDesc desc, const bool *nulls)
{
	int			i;

	if (desc->constr == NULL || !desc->constr->has_not_null)
		return false;
	for (i = 0; i < desc->natts; i++)
		if (nulls[i] && TupleDescAttr(desc, i)->attnotnull)
			return true;
	return false;
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
	RowWay		way;
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
	way = row_way(rel, writer->own_trigger);

	if (simba_find_by_key(rel, idx, snapshot, eqproc, key, slot))
		result = SIMBA_ROW_KEPT;

	/*
	 * No version is locked here but one the caller decided to change: a
	 * caller that changes nothing leaves nothing a holder's renewal,
	 * release or fence check would wait on.
	 */
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

		if (way == WRITE_BY_STATEMENT || breaks_not_null(desc, newslot->tts_isnull))
		{
			/*
			 * The version decided on, locked as the UPDATE will lock it: its
			 * statement then finds it. Not a newer one (no
			 * TUPLE_LOCK_FLAG_FIND_LAST_VERSION): that is decided on first.
			 */
			if (locked == NULL)
				locked = table_slot_create(rel, NULL);
			tm = table_tuple_lock(rel, &tid, snapshot, locked, cid, LockTupleNoKeyExclusive, LockWaitBlock,
								  0, &tmfd);
			if (tm == TM_Ok)
			{
				result = writer->write(&tid, newslot->tts_values, newslot->tts_isnull, arg)
					? SIMBA_ROW_WRITTEN : SIMBA_ROW_KEPT;
				break;
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
				update_indexes && RelationGetForm(rel)->relhasindex, way == WRITE_HERE_AFTER_ROW};

				/*
				 * A DBA's triggers, and an index's functions or operators,
				 * run as for an UPDATE of simba's statements: as the owner,
				 * under simba's path, not the caller's.
				 */
				if (finish.fire || finish.update_indexes)
					simba_as_owner(fcinfo, finish_update, &finish);
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

		/*
		 * Changed since the snapshot by a transaction that has committed
		 * (the update or lock waited for it): decide again on the latest
		 * committed version, read by the key in a new snapshot.
		 */
		PopActiveSnapshot();
		PushActiveSnapshot(GetLatestSnapshot());
		snapshot = GetActiveSnapshot();
		if (!simba_find_by_key(rel, idx, snapshot, eqproc, key, slot))
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
