/*
 * history.c — ownership history (1.2): the trigger that logs changes of
 * hands, late releases, retention, and the admin's forced release.
 *
 * The trigger sees the exact old and new mutex rows, so the log says who
 * held the mutex before (previous_owner) and why the holder changed:
 * 'acquired' (from free), 'taken_over' (another holder's lease had ended),
 * 'reacquired' (the same holder after its own lease ended), 'released' or
 * 'forced_release'. It returns at once for renewals and while simba.history
 * is off; it has no WHEN clause because PostgreSQL rebuilds a WHEN
 * expression for every statement, which costs more than this call
 * (bench/callgrind.sh measured it).
 */
#include "simba.h"

#include "catalog/pg_type.h"
#include "commands/async.h"
#include "commands/trigger.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(simba_history_trigger);
PG_FUNCTION_INFO_V1(simba_history_prune);
PG_FUNCTION_INFO_V1(simba_force_release);

bool		simba_history = false;

/* Set while simba_force_release runs, so its release is logged as forced. */
static bool forcing = false;

/* Columns of simba_mutex. */
#define COL_MUTEX 1
#define COL_OWNER 2
#define COL_ACQUIRED_AT 3
#define COL_FENCE 7

static SimbaPlan history_insert = {
	"INSERT INTO @extschema@.simba_mutex_history"
	"       (mutex, event, owner_id, fence, previous_owner, at)"
	" VALUES ($1, $2, $3, $4, $5, $6)",
	6, {TEXTOID, TEXTOID, TEXTOID, INT8OID, TEXTOID, TIMESTAMPTZOID}
};

/*
 * A release that found its lease over, by the holder of the latest tenure:
 * its lease lapsed and nobody took the mutex yet, or the current tenure took
 * over from it ($1 mutex, $2 contender, $3 t).
 */
static SimbaPlan late_release_insert = {
	"INSERT INTO @extschema@.simba_mutex_history"
	"       (mutex, event, owner_id, fence, previous_owner, at)"
	" SELECT m.mutex, 'late_release', $2,"
	"        CASE WHEN m.owner_id = $2 THEN m.fence ELSE m.fence - 1 END, NULL, $3"
	"   FROM @extschema@.simba_mutex AS m"
	"  WHERE m.mutex = $1"
	"    AND (m.owner_id = $2"
	"         OR EXISTS (SELECT 1 FROM @extschema@.simba_mutex_history AS h"
	"                     WHERE h.mutex = $1 AND h.fence = m.fence"
	"                       AND h.event = 'taken_over' AND h.previous_owner = $2))",
	3, {TEXTOID, TEXTOID, TIMESTAMPTZOID}
};

static SimbaPlan force_update = {
	"UPDATE @extschema@.simba_mutex AS m"
	"   SET owner_id = NULL, acquired_at = NULL, ttl_at = NULL,"
	"       transition_at = NULL, version = m.version + 1"
	" WHERE m.mutex = $1 AND m.owner_id IS NOT NULL AND m.transition_at > $2",
	2, {TEXTOID, TIMESTAMPTZOID}
};

static SimbaPlan prune_delete = {
	"DELETE FROM @extschema@.simba_mutex_history WHERE at < $1",
	1, {TIMESTAMPTZOID}
};

/* Byte equality: ids are compared as simba_acquire does (deterministic collation). */
static bool
same_text(Datum a, Datum b)
{
	text	   *x = DatumGetTextPP(a);
	text	   *y = DatumGetTextPP(b);

	return VARSIZE_ANY_EXHDR(x) == VARSIZE_ANY_EXHDR(y) &&
		memcmp(VARDATA_ANY(x), VARDATA_ANY(y), VARSIZE_ANY_EXHDR(x)) == 0;
}

static Datum
column(HeapTuple tuple, TupleDesc desc, int col, bool *isnull)
{
	return heap_getattr(tuple, col, desc, isnull);
}

Datum
simba_history_trigger(PG_FUNCTION_ARGS)
{
	TriggerData *trigger = (TriggerData *) fcinfo->context;
	TupleDesc	desc;
	HeapTuple	row;
	HeapTuple	old = NULL;
	Datum		values[6];
	char		nulls[7] = "      ";
	bool		isnull;
	bool		old_owner_null = true;
	const char *event;

	if (!CALLED_AS_TRIGGER(fcinfo))
		elog(ERROR, "simba_history_trigger: not called as a trigger");
	if (!simba_history)
		return PointerGetDatum(NULL);

	desc = trigger->tg_relation->rd_att;
	if (TRIGGER_FIRED_BY_UPDATE(trigger->tg_event))
	{
		bool		new_owner_null;
		Datum		old_owner;
		Datum		new_owner;

		old = trigger->tg_trigtuple;
		row = trigger->tg_newtuple;
		old_owner = column(old, desc, COL_OWNER, &old_owner_null);
		new_owner = column(row, desc, COL_OWNER, &new_owner_null);
		/* A renewal: same holder, same fence. Not logged. */
		if (old_owner_null == new_owner_null &&
			(old_owner_null || same_text(old_owner, new_owner)) &&
			DatumGetInt64(column(old, desc, COL_FENCE, &isnull)) ==
			DatumGetInt64(column(row, desc, COL_FENCE, &isnull)))
			return PointerGetDatum(NULL);
	}
	else
		row = trigger->tg_trigtuple;

	values[0] = column(row, desc, COL_MUTEX, &isnull);
	values[2] = column(row, desc, COL_OWNER, &isnull);
	if (isnull)
	{
		/* A release: the old holder, its fence, now. */
		event = forcing ? "forced_release" : "released";
		values[2] = column(old, desc, COL_OWNER, &isnull);
		values[3] = column(old, desc, COL_FENCE, &isnull);
		nulls[4] = 'n';
		values[5] = TimestampTzGetDatum(GetCurrentTimestamp());
	}
	else
	{
		/* A new tenure, decided at its acquired_at. */
		values[3] = column(row, desc, COL_FENCE, &isnull);
		values[5] = column(row, desc, COL_ACQUIRED_AT, &isnull);
		if (old_owner_null)
		{
			event = "acquired";
			nulls[4] = 'n';
		}
		else
		{
			values[4] = column(old, desc, COL_OWNER, &isnull);
			event = same_text(values[4], values[2]) ? "reacquired" : "taken_over";
		}
	}
	values[1] = CStringGetTextDatum(event);
	if (nulls[4] == 'n')
		values[4] = (Datum) 0;

	SPI_connect();
	simba_execute(fcinfo, &history_insert, values, nulls, 0);
	SPI_finish();
	return PointerGetDatum(NULL);
}

void
simba_log_late_release(FunctionCallInfo fcinfo, Datum mutex, Datum contender, TimestampTz t)
{
	simba_execute(fcinfo, &late_release_insert,
				  (Datum[]) {mutex, contender, TimestampTzGetDatum(t)}, NULL, 0);
}

Datum
simba_force_release(PG_FUNCTION_ARGS)
{
	text	   *mutex = simba_name_arg(fcinfo, 0, "mutex");
	bool		released;

	SPI_connect();
	forcing = true;
	PG_TRY();
	{
		released = simba_execute(fcinfo, &force_update,
								 (Datum[]) {PointerGetDatum(mutex),
			TimestampTzGetDatum(GetCurrentTimestamp())}, NULL, 1) == 1;
	}
	PG_FINALLY();
	{
		forcing = false;
	}
	PG_END_TRY();
	SPI_finish();
	if (released)
		Async_Notify("simba", text_to_cstring(mutex));
	PG_RETURN_BOOL(released);
}

Datum
simba_history_prune(PG_FUNCTION_ARGS)
{
	Interval   *keep;
	TimestampTz cutoff;
	uint64		deleted;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("keep must not be null")));
	keep = PG_GETARG_INTERVAL_P(0);
	if (keep->month < 0 || keep->day < 0 || keep->time < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("keep must not be negative")));
	/* Days and months are fine here: "keep 30 days" means calendar days. */
	cutoff = DatumGetTimestampTz(DirectFunctionCall2(timestamptz_mi_interval,
													 TimestampTzGetDatum(GetCurrentTimestamp()),
													 IntervalPGetDatum(keep)));
	SPI_connect();
	deleted = simba_execute(fcinfo, &prune_delete, (Datum[]) {TimestampTzGetDatum(cutoff)}, NULL, 0);
	SPI_finish();
	PG_RETURN_INT64((int64) deleted);
}
