/*
 * enter.c — simba_enter, the entry check every SQL function that takes,
 * keeps or checks a lease or permit makes first, and the transaction
 * callback that ends what it marked (docs/design.md, "Extension").
 */
#include "simba.h"
#include "clock.h"
#include "enter.h"
#include "gc.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

const char *simba_overridden_setting = NULL;

/* Whether this transaction took, kept or checked a lease or permit. */
static bool simba_in_xact = false;

/*
 * PREPARE TRANSACTION would keep simba's row locks past any lease, across
 * restarts. A commit checks the clock's origin (clock.c).
 */
void
simba_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			simba_clock_pre_commit();
			break;
		case XACT_EVENT_PRE_PREPARE:
			if (simba_in_xact)
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("cannot PREPARE a transaction that used simba locks or permits"),
						 errdetail("A prepared transaction keeps its row locks until it is committed or "
								   "rolled back, even across restarts: it would hold a mutex or permit "
								   "past its lease.")));
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PREPARE:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PARALLEL_ABORT:
			simba_in_xact = false;
			simba_clock_end_xact();
			break;
		default:
			break;
	}
}

SimbaCaller
simba_enter(FunctionCallInfo fcinfo, bool writes)
{
	SimbaCaller caller;
	Oid			role = GetUserId();
	Name		name = (Name) palloc(NAMEDATALEN);

	if (InSecurityRestrictedOperation())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("cannot call %s() inside a security-restricted operation",
						get_func_name(fcinfo->flinfo->fn_oid)),
				 errdetail("Maintenance commands (VACUUM, ANALYZE, CREATE INDEX, REFRESH MATERIALIZED VIEW) "
						   "and index expressions run other roles' code: a lease taken there would not "
						   "be the caller's.")));
	if (simba_overridden_setting != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("this connection set %s, which only a superuser may set", simba_overridden_setting),
				 errdetail("The connection's startup options replaced the value the database administrator set, "
						   "so simba cannot know it and refuses to run."),
				 errhint("Remove -c %s from the connection's options (PGOPTIONS), or load simba with "
						 "shared_preload_libraries.", simba_overridden_setting)));
	if (writes)
	{
		Oid			schema,
					owner;

		if (XactReadOnly || RecoveryInProgress())
		{
			const char *fn = get_func_name(fcinfo->flinfo->fn_oid);

			PreventCommandDuringRecovery(fn);
			PreventCommandIfReadOnly(fn);
		}
		simba_in_xact = true;
		simba_calling_function(fcinfo, &schema, &owner);
		simba_gc_maybe_start(schema, owner);
	}
	namestrcpy(name, GetUserNameFromId(role, false));
	caller.role = NameGetDatum(name);
	caller.roleid = ObjectIdGetDatum(role);
	caller.sysid = Int64GetDatum((int64) GetSystemIdentifier());
	return caller;
}
