/*
 * history.c — ownership history (1.2): the trigger that logs changes of
 * hands, late releases, retention, and the admin's forced release.
 *
 * The trigger sees the exact old and new mutex rows (the acquire's and the
 * release's row updates, which do not fire it, pass them to
 * simba_log_change themselves), so the log says who
 * held the mutex before (previous_owner, previous_role, previous_fence) and
 * why the holder changed: 'acquired' (from free), 'taken_over' (another
 * holder's lease had ended), 'reacquired' (the same holder after its own
 * lease ended), 'released' or 'forced_release'. It logs only what simba's own
 * functions write (simba_running_plan is set): rows a restore COPYs in, or a
 * superuser writes by hand, are not changes of hands. It returns at once for
 * renewals and while simba.history is off; it has no WHEN clause because
 * PostgreSQL rebuilds a WHEN expression for every statement, which costs
 * more than this call (bench/callgrind.sh measured it).
 */
#include "simba.h"
#include "clock.h"
#include "history.h"
#include "rows.h"
#include "session.h"
#include "wake.h"

#include "catalog/pg_type.h"
#include "commands/async.h"
#include "commands/trigger.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(simba_history_trigger_1_3);
PG_FUNCTION_INFO_V1(simba_history_prune);
PG_FUNCTION_INFO_V1(simba_force_release_1_4);

bool		simba_history = false;

/* $1 mutex, $2 event, $3 owner, $4 role, $5 fence, $6 previous owner, $7 previous role, $8 previous fence, $9 at */
static SimbaPlan history_insert = {
	"INSERT INTO simba_mutex_history"
	"       (mutex, event, owner_id, owner_role, fence, previous_owner, previous_role, previous_fence, at)"
	" VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
	9, {TEXTOID, TEXTOID, TEXTOID, NAMEOID, INT8OID, TEXTOID, NAMEOID, INT8OID, TIMESTAMPTZOID}
};

/*
 * A release that found its lease over, by the holder (id and role) of the
 * latest tenure: its lease lapsed and nobody took the mutex yet, or the
 * current tenure took over from it. Logged once per tenure: the unique index
 * simba_mutex_history_late_release drops a repeat ($1 mutex, $2 contender,
 * $3 t, $4 role, $5 roleid, $6 sysid). The history keeps role names only:
 * an earlier tenure is matched by name.
 */
static SimbaPlan late_release_insert = {
	"INSERT INTO simba_mutex_history AS h"
	"       (mutex, event, owner_id, owner_role, fence, at)"
	" SELECT m.mutex, 'late_release', $2, $4, tenure.fence, $3"
	"   FROM simba_mutex AS m,"
	"        LATERAL (SELECT m.fence"
	"                  WHERE m.owner_id = $2"
	"                    AND " SIMBA_SAME_ROLE("m.owner_role", "m.owner_roleid", "m.owner_sysid", "$4", "$5", "$6")
	"                 UNION ALL"
	"                 SELECT t.previous_fence FROM simba_mutex_history AS t"
	"                  WHERE t.mutex = $1 AND t.fence = m.fence AND t.event = 'taken_over'"
	"                    AND t.previous_owner = $2"
	"                    AND t.previous_role = $4) AS tenure(fence)"
	"  WHERE m.mutex = $1 AND tenure.fence IS NOT NULL"
	" ON CONFLICT (mutex, fence) WHERE event = 'late_release' DO NOTHING",
	6, {TEXTOID, TEXTOID, TIMESTAMPTZOID, NAMEOID, OIDOID, INT8OID}
};

/*
 * A forced release of a tenure under a session counts in the session's
 * `revoked`, which every keepalive returns: a client that renews many
 * tenures with one keepalive learns that one was taken without renewing
 * each. The mutex row is locked first (as the release then updates it); the
 * session row after, as an acquire under it does ($1 mutex).
 */
static SimbaPlan force_lock = {
	"SELECT m.session_id FROM simba_mutex AS m WHERE m.mutex = $1 FOR UPDATE",
	1, {TEXTOID}
};

static SimbaPlan revoke_update = {
	"UPDATE simba_session_lease SET revoked = revoked + 1 WHERE session_id = $1",
	1, {UUIDOID}
};

/* $1 mutex, $2 t, $3 origin: a live lease, on simba's clock (clock.c), or its session's */
static SimbaPlan force_update = {
	"UPDATE simba_mutex AS m"
	"   SET owner_id = NULL, owner_role = NULL, owner_roleid = NULL, owner_sysid = NULL, session_id = NULL,"
	"       acquired_at = NULL, ttl_at = NULL, transition_at = NULL, released_at = $2, version = m.version + 1"
	" WHERE m.mutex = $1 AND " SIMBA_MUTEX_LIVE_LOCKING("$2", "$3"),
	3, {TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID}
};

static SimbaPlan prune_delete = {
	"DELETE FROM simba_mutex_history WHERE at < $1",
	1, {TIMESTAMPTZOID}, .scans = true
};

/* A column of a simba_mutex row, by name: the trigger does not depend on column order. */
static Datum
column(HeapTuple tuple, TupleDesc desc, const char *name, bool *isnull)
{
	int			col = SPI_fnumber(desc, name);

	if (col <= 0)
		elog(ERROR, "simba: simba_mutex has no column \"%s\"", name);
	return heap_getattr(tuple, col, desc, isnull);
}

void
simba_log_change(FunctionCallInfo fcinfo, TupleDesc desc, HeapTuple old, HeapTuple row, bool forced)
{
	Datum		values[9];
	char		nulls[10] = "         ";
	bool		isnull;
	bool		old_owner_null = true;
	const char *event;

	if (old != NULL)
	{
		bool		new_owner_null;
		Datum		old_owner = column(old, desc, "owner_id", &old_owner_null);
		Datum		new_owner = column(row, desc, "owner_id", &new_owner_null);

		/* A renewal: same holder, same fence. Not logged. */
		if (old_owner_null == new_owner_null &&
			(old_owner_null || simba_same_text(old_owner, new_owner)) &&
			DatumGetInt64(column(old, desc, "fence", &isnull)) ==
			DatumGetInt64(column(row, desc, "fence", &isnull)))
			return;
	}

	values[0] = column(row, desc, "mutex", &isnull);
	values[2] = column(row, desc, "owner_id", &isnull);
	if (isnull)
	{
		/* A free row inserted, or a release: only a release has a holder to log. */
		if (old == NULL || old_owner_null)
			return;
		event = forced ? "forced_release" : "released";
		values[2] = column(old, desc, "owner_id", &isnull);
		values[3] = column(old, desc, "owner_role", &isnull);
		nulls[3] = isnull ? 'n' : ' ';
		values[4] = column(old, desc, "fence", &isnull);
		nulls[5] = nulls[6] = nulls[7] = 'n';
		values[8] = TimestampTzGetDatum(simba_now(fcinfo));
	}
	else
	{
		/* A new tenure, decided at its acquired_at. */
		values[3] = column(row, desc, "owner_role", &isnull);
		nulls[3] = isnull ? 'n' : ' ';
		values[4] = column(row, desc, "fence", &isnull);
		values[8] = column(row, desc, "acquired_at", &isnull);
		if (old_owner_null)
		{
			event = "acquired";
			nulls[5] = nulls[6] = nulls[7] = 'n';
		}
		else
		{
			values[5] = column(old, desc, "owner_id", &isnull);
			values[6] = column(old, desc, "owner_role", &isnull);
			nulls[6] = isnull ? 'n' : ' ';
			values[7] = column(old, desc, "fence", &isnull);
			/* The same holder is the same id and role (no role: before 1.3). */
			event = simba_same_text(values[5], values[2]) &&
				(nulls[3] == 'n' || nulls[6] == 'n' ||
				 namestrcmp(DatumGetName(values[3]), NameStr(*DatumGetName(values[6]))) == 0)
				? "reacquired" : "taken_over";
		}
	}
	values[1] = CStringGetTextDatum(event);

	SPI_connect();
	simba_execute(fcinfo, &history_insert, values, nulls, 0);
	SPI_finish();
}

Datum
simba_history_trigger_1_3(PG_FUNCTION_ARGS)
{
	TriggerData *trigger = (TriggerData *) fcinfo->context;
	bool		update;

	if (!CALLED_AS_TRIGGER(fcinfo))
		elog(ERROR, "simba_history_trigger: not called as a trigger");
	/* Off, or not a write of simba's own functions (a restore, a manual fix). */
	if (!simba_history || simba_running_plan == NULL)
		return PointerGetDatum(NULL);
	update = TRIGGER_FIRED_BY_UPDATE(trigger->tg_event);
	simba_log_change(fcinfo, trigger->tg_relation->rd_att, update ? trigger->tg_trigtuple : NULL,
					 update ? trigger->tg_newtuple : trigger->tg_trigtuple, simba_running_plan == &force_update);
	return PointerGetDatum(NULL);
}

void
simba_log_late_release(FunctionCallInfo fcinfo, Datum mutex, Datum contender, const SimbaCaller *caller,
					   TimestampTz t)
{
	simba_execute(fcinfo, &late_release_insert,
				  (Datum[]) {mutex, contender, TimestampTzGetDatum(t), caller->role, caller->roleid,
		caller->sysid}, NULL, 0);
}

Datum
simba_force_release_1_4(PG_FUNCTION_ARGS)
{
	text	   *mutex;
	bool		released;
	Datum		session_id = (Datum) 0;
	bool		no_session = true;
	TimestampTz t;

	simba_enter(fcinfo, true);
	mutex = simba_name_arg(fcinfo, 0, "mutex");
	SPI_connect();
	if (simba_execute(fcinfo, &force_lock, (Datum[]) {PointerGetDatum(mutex)}, NULL, 1) == 1)
		session_id = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &no_session);
	t = simba_now(fcinfo);
	released = simba_execute(fcinfo, &force_update,
							 (Datum[]) {PointerGetDatum(mutex), TimestampTzGetDatum(t),
		TimestampTzGetDatum(simba_clock_origin(fcinfo))}, NULL, 1) == 1;
	if (released && !no_session)
		simba_execute(fcinfo, &revoke_update, &session_id, NULL, 0);
	/* The head of a fair queue is woken on its own channel, as simba_fair_release would. */
	if (released)
		simba_fair_wake(fcinfo, (Datum[]) {PointerGetDatum(mutex)}, 1, t);
	SPI_finish();
	/* Always, whatever simba.notify says: the holder that lost it may not be registered. */
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
