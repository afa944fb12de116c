/*
 * privileges.c — who may use simba: simba_grant, simba_revoke, and the
 * scrub the install and upgrade scripts end with.
 *
 * The lists below are the one statement of what simba_grant gives a role.
 * Everything else (the tables, sequences, the admin functions) is for the
 * extension's owner only, whatever ALTER DEFAULT PRIVILEGES said when the
 * objects were created: simba_strip_privileges revokes it.
 *
 * Names are built from the schema's current name at the moment of the call
 * and run at once; nothing here is kept and re-parsed later.
 */
#include "simba.h"

#include "catalog/pg_extension.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "storage/lmgr.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

PG_FUNCTION_INFO_V1(simba_grant_1_4);
PG_FUNCTION_INFO_V1(simba_revoke_1_4);
PG_FUNCTION_INFO_V1(simba_strip_privileges);

/* EXECUTE on these for a granted role: take, hold and check locks and permits. */
static const char *const granted_functions[] = {
	"simba_acquire(text, text, interval, interval, uuid)",
	"simba_renew(text, text, bigint, interval, interval)",
	"simba_release(text, text)",
	"simba_owner(text)",
	"simba_fence_check(text, text, bigint)",
	"simba_acquire_all(text[], text, interval, interval, uuid)",
	"simba_release_all(text[], text)",
	"simba_rwlock_acquire(text, text, text, interval, interval, uuid)",
	"simba_rwlock_release(text, text)",
	"simba_rwlock_fence_check(text, text, bigint)",
	"simba_fair_acquire(text, text, interval, interval, uuid)",
	"simba_fair_release(text, text)",
	"simba_semaphore_acquire(text, text, integer, interval, text, uuid)",
	"simba_semaphore_refresh(text, uuid, interval)",
	"simba_semaphore_release(text, uuid)",
	"simba_semaphore_fence_check(text, uuid, bigint)",
	"simba_session_open(interval, interval)",
	"simba_session_keepalive(uuid)",
	"simba_session_close(uuid)",
	"simba_wait(text[], boolean)",
	"simba_waker()",
	"simba_clock()",
	"simba_epoch_us(timestamptz)",
};

/* SELECT on these for a granted role: see state and history. */
static const char *const granted_relations[] = {
	"simba_mutex_status",
	"simba_semaphore_status",
	"simba_session_status",
	"simba_rwlock_status",
	"simba_mutex_stats",
	"simba_mutex_history",
};

static Oid
role_arg(FunctionCallInfo fcinfo)
{
	Oid			role;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("role must not be null")));
	role = PG_GETARG_OID(0);
	if (role == InvalidOid)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("role must name a role"),
				 errhint("simba grants to one role at a time, never to PUBLIC.")));
	if (GetUserNameFromId(role, true) == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("role with OID %u does not exist", role)));
	return role;
}

/* "s.a, s.b, ..." for a list of names in the extension's schema. */
static void
append_objects(StringInfo sql, const char *schema, const char *const *names, int n)
{
	int			i;

	for (i = 0; i < n; i++)
		appendStringInfo(sql, "%s%s.%s", i ? ", " : "", schema, names[i]);
}

static void
set_privileges(FunctionCallInfo fcinfo, bool allow)
{
	Oid			role = role_arg(fcinfo);
	const char *schema = quote_identifier(get_namespace_name(get_func_namespace(fcinfo->flinfo->fn_oid)));
	const char *grantee = quote_identifier(GetUserNameFromId(role, false));
	const char *verb = allow ? "GRANT" : "REVOKE";
	const char *dir = allow ? "TO" : "FROM";
	StringInfoData sql;

	initStringInfo(&sql);
	appendStringInfo(&sql, "%s EXECUTE ON FUNCTION ", verb);
	append_objects(&sql, schema, granted_functions, lengthof(granted_functions));
	appendStringInfo(&sql, " %s %s; %s SELECT ON ", dir, grantee, verb);
	append_objects(&sql, schema, granted_relations, lengthof(granted_relations));
	appendStringInfo(&sql, " %s %s;", dir, grantee);
	/* simba_revoke leaves USAGE: the role may use other objects of the schema. */
	if (allow)
		appendStringInfo(&sql, " GRANT USAGE ON SCHEMA %s TO %s;", schema, grantee);

	/*
	 * Every grant updates the same pg_proc and pg_class rows: a second one
	 * running beside an uncommitted first fails with "tuple concurrently
	 * updated". One at a time per database: the later waits for the earlier
	 * transaction's end, then sees its ACLs.
	 */
	LockDatabaseObject(ExtensionRelationId, get_extension_oid("simba", false), 0,
					   ShareUpdateExclusiveLock);
	SPI_connect();
	if (SPI_execute(sql.data, false, 0) < 0)
		elog(ERROR, "simba: could not run \"%s\"", sql.data);
	SPI_finish();
	pfree(sql.data);
}

Datum
simba_grant_1_4(PG_FUNCTION_ARGS)
{
	set_privileges(fcinfo, true);
	PG_RETURN_VOID();
}

Datum
simba_revoke_1_4(PG_FUNCTION_ARGS)
{
	set_privileges(fcinfo, false);
	PG_RETURN_VOID();
}

/*
 * One REVOKE per privilege that a role other than the owner holds on a
 * function, table, view or sequence of the extension (a NULL ACL is the
 * default one: EXECUTE for PUBLIC on a function), except, when $2, the
 * kinds simba_grant gives ($3 function names, $4 relations) to a role that
 * holds nothing else. A role holding anything else (EXECUTE on an admin
 * function, any right on a table or sequence) got it from default
 * privileges or by hand, not from simba_grant: it keeps nothing. PUBLIC
 * never keeps anything.
 */
static const char *const strip_query =
"WITH acl AS ("
"  SELECT o.kind, o.object, a.grantee, a.privilege_type,"
"         (o.kind = 'FUNCTION' AND a.privilege_type = 'EXECUTE' AND o.name = ANY ($3))"
"          OR (o.kind = 'TABLE' AND a.privilege_type = 'SELECT' AND o.name = ANY ($4)) AS granted_kind"
"    FROM (SELECT 'FUNCTION', p.oid::pg_catalog.regprocedure::pg_catalog.text, p.proname,"
"                 COALESCE(p.proacl, pg_catalog.acldefault('f', p.proowner)), p.proowner"
"            FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_proc p ON p.oid = d.objid"
"           WHERE d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass"
"             AND d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass"
"             AND d.refobjid = $1 AND d.deptype = 'e'"
"          UNION ALL"
"          SELECT CASE c.relkind WHEN 'S' THEN 'SEQUENCE' ELSE 'TABLE' END,"
"                 c.oid::pg_catalog.regclass::pg_catalog.text, c.relname,"
"                 COALESCE(c.relacl, pg_catalog.acldefault(CASE c.relkind WHEN 'S' THEN 's' ELSE 'r' END::pg_catalog.\"char\","
"                                                          c.relowner)), c.relowner"
"            FROM pg_catalog.pg_class c"
"           WHERE c.oid IN (SELECT d.objid FROM pg_catalog.pg_depend d"
"                            WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass"
"                              AND d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass"
"                              AND d.refobjid = $1 AND d.deptype = 'e')"
"         ) AS o(kind, object, name, acl, owner),"
"         LATERAL pg_catalog.aclexplode(o.acl) AS a"
"   WHERE a.grantee <> o.owner)"
"SELECT pg_catalog.format('REVOKE %s ON %s %s FROM %s CASCADE', acl.privilege_type, acl.kind, acl.object,"
"         CASE WHEN acl.grantee = 0::pg_catalog.oid THEN 'PUBLIC' ELSE pg_catalog.quote_ident(r.rolname) END)"
"  FROM acl LEFT JOIN pg_catalog.pg_roles r ON r.oid = acl.grantee"
" WHERE NOT ($2 AND acl.granted_kind AND acl.grantee <> 0::pg_catalog.oid"
"            AND NOT EXISTS (SELECT 1 FROM acl AS other"
"                             WHERE other.grantee = acl.grantee AND NOT other.granted_kind))"
" ORDER BY 1";

/* A text[] of the object names (function names without their arguments). */
static Datum
names_array(const char *const *names, int n)
{
	Datum	   *items = palloc(n * sizeof(Datum));
	int			i;

	for (i = 0; i < n; i++)
	{
		size_t		len = strcspn(names[i], "(");

		items[i] = PointerGetDatum(cstring_to_text_with_len(names[i], len));
	}
	return PointerGetDatum(construct_array(items, n, TEXTOID, -1, false, TYPALIGN_INT));
}

/*
 * simba_strip_privileges(keep_grants): what the install script (false) and
 * the upgrade scripts (true, so roles granted with simba_grant keep what it
 * gave them) end with; a DBA may call it too. Returns the REVOKEs it ran.
 */
Datum
simba_strip_privileges(PG_FUNCTION_ARGS)
{
	bool		keep_grants = PG_ARGISNULL(0) ? false : PG_GETARG_BOOL(0);
	Oid			ext = get_extension_oid("simba", false);
	Datum		args[4];
	uint64		i;
	uint64		n;
	SPITupleTable *revokes;

	args[0] = ObjectIdGetDatum(ext);
	args[1] = BoolGetDatum(keep_grants);
	args[2] = names_array(granted_functions, lengthof(granted_functions));
	args[3] = names_array(granted_relations, lengthof(granted_relations));

	SPI_connect();
	if (SPI_execute_with_args(strip_query, 4, (Oid[]) {OIDOID, BOOLOID, TEXTARRAYOID, TEXTARRAYOID},
							  args, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "simba: could not list privileges");
	revokes = SPI_tuptable;
	n = SPI_processed;
	for (i = 0; i < n; i++)
	{
		char	   *revoke = SPI_getvalue(revokes->vals[i], revokes->tupdesc, 1);

		if (SPI_execute(revoke, false, 0) < 0)
			elog(ERROR, "simba: could not run \"%s\"", revoke);
	}
	SPI_finish();
	PG_RETURN_INT64((int64) n);
}
