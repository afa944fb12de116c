/*
 * drop_guard.c — DROP EXTENSION simba (or DROP SCHEMA ... CASCADE of its
 * schema, or DROP OWNED BY the owner of either) refuses while a lease (of a
 * mutex or a read-write lock) or a permit is live.
 *
 * A re-created extension starts its fence sequences again at 1, so it could
 * hand a (mutex, contender, role, fence) that a live holder of the dropped
 * install still uses to someone else, and that holder's fence check would
 * pass. The event trigger simba_drop_guard runs at ddl_command_start, while
 * simba's tables still exist, and counts live leases on simba's clock. The
 * way out (docs/design.md, "Extension"; docs/reference.md, "Housekeeping,
 * dropping, simba's clock"): release or force-release
 * them, or a superuser sets simba.drop_live_leases = on.
 */
#include "simba.h"
#include "clock.h"
#include "session.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "catalog/indexing.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_type.h"
#include "commands/event_trigger.h"
#include "nodes/parsenodes.h"
#include "utils/acl.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"

PG_FUNCTION_INFO_V1(simba_drop_guard);

/* $1 t, $2 origin */
static SimbaPlan live_leases = {
	"SELECT (SELECT pg_catalog.count(*) FROM simba_mutex AS m WHERE " SIMBA_MUTEX_LIVE("$1", "$2") ")"
	"     + (SELECT pg_catalog.count(*) FROM simba_rwlock_holder AS h WHERE h.mode <> 'waiting' AND "
	SIMBA_HOLDER_LIVE("$1", "$2") "),"
	"       (SELECT pg_catalog.count(*) FROM simba_semaphore_permit AS p WHERE " SIMBA_PERMIT_LIVE("$1", "$2") ")",
	2, {TIMESTAMPTZOID, TIMESTAMPTZOID}, .scans = true
};

static bool
names(List *objects, const char *name)
{
	ListCell   *lc;

	foreach(lc, objects)
		if (IsA(lfirst(lc), String) && strcmp(strVal(lfirst(lc)), name) == 0)
			return true;
	return false;
}

/* The role that owns extension simba. */
static Oid
extension_owner(void)
{
	Relation	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tuple;
	Oid			owner = InvalidOid;

	ScanKeyInit(&key, Anum_pg_extension_extname, BTEqualStrategyNumber, F_NAMEEQ, CStringGetDatum("simba"));
	scan = systable_beginscan(rel, ExtensionNameIndexId, true, NULL, 1, &key);
	tuple = systable_getnext(scan);
	if (HeapTupleIsValid(tuple))
		owner = ((Form_pg_extension) GETSTRUCT(tuple))->extowner;
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return owner;
}

static Oid
schema_owner(Oid schema)
{
	HeapTuple	tuple = SearchSysCache1(NAMESPACEOID, ObjectIdGetDatum(schema));
	Oid			owner = InvalidOid;

	if (HeapTupleIsValid(tuple))
	{
		owner = ((Form_pg_namespace) GETSTRUCT(tuple))->nspowner;
		ReleaseSysCache(tuple);
	}
	return owner;
}

/*
 * DROP OWNED BY roles drops what they own: the extension if one owns it
 * (its members go with it), its schema with CASCADE if one owns that. A
 * member object alone cannot go (the extension requires it), so those are
 * the ways it drops simba. Roles that do not exist are the command's to
 * report.
 */
static bool
drop_owned_drops_simba(DropOwnedStmt *drop, Oid schema)
{
	Oid			ext_owner = extension_owner();
	Oid			nsp_owner = drop->behavior == DROP_CASCADE ? schema_owner(schema) : InvalidOid;
	ListCell   *lc;

	foreach(lc, drop->roles)
	{
		Oid			role = get_rolespec_oid(lfirst_node(RoleSpec, lc), true);

		if (OidIsValid(role) && (role == ext_owner || role == nsp_owner))
			return true;
	}
	return false;
}

/*
 * Whether the statement drops simba: the extension, its schema with
 * CASCADE, or DROP OWNED BY the owner of either (drop_owned_drops_simba).
 */
static bool
drops_simba(Node *parsetree, Oid schema)
{
	DropStmt   *drop;

	if (IsA(parsetree, DropOwnedStmt))
		return drop_owned_drops_simba((DropOwnedStmt *) parsetree, schema);
	if (!IsA(parsetree, DropStmt))
		return false;
	drop = (DropStmt *) parsetree;
	if (drop->removeType == OBJECT_EXTENSION)
		return names(drop->objects, "simba");
	return drop->removeType == OBJECT_SCHEMA && drop->behavior == DROP_CASCADE &&
		names(drop->objects, get_namespace_name(schema));
}

/* simba.drop_live_leases: let DROP EXTENSION go ahead over live leases. */
bool		simba_drop_live_leases = false;

Datum
simba_drop_guard(PG_FUNCTION_ARGS)
{
	EventTriggerData *trigger = (EventTriggerData *) fcinfo->context;
	int64		leases;
	int64		permits;
	bool		isnull;

	if (!CALLED_AS_EVENT_TRIGGER(fcinfo))
		elog(ERROR, "simba_drop_guard: not called as an event trigger");
	if (simba_drop_live_leases ||
		!drops_simba(trigger->parsetree, get_func_namespace(fcinfo->flinfo->fn_oid)))
		PG_RETURN_VOID();

	SPI_connect();
	simba_execute(fcinfo, &live_leases,
				  (Datum[]) {TimestampTzGetDatum(simba_now(fcinfo)), TimestampTzGetDatum(simba_clock_origin(fcinfo))},
				  (char[]) {' ', SIMBA_ORIGIN_NULL(simba_clock_origin(fcinfo))}, 1);
	leases = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	permits = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	SPI_finish();
	if (leases > 0 || permits > 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("extension simba has " INT64_FORMAT " live leases and " INT64_FORMAT " live permits",
						leases, permits),
				 errdetail("A re-created extension starts fences again at 1: a holder of the dropped "
						   "install could pass a fence check of the new one."),
				 errhint("Stop the holders, or force-release their mutexes and let permits expire "
						 "(SELECT simba_force_release(mutex) FROM simba_mutex_status WHERE owner_id IS NOT NULL); "
						 "or, as a superuser, SET simba.drop_live_leases = on to drop them anyway.")));
	PG_RETURN_VOID();
}
