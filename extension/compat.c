/*
 * compat.c — the C entry points of older SQL definitions (1.0 to 1.3).
 *
 * After `make install` of a newer library and before ALTER EXTENSION simba
 * UPDATE, the database still has the old function definitions, which name
 * these symbols. The old definitions do not match the new tables' rules
 * (holder roles, the fence sequence), so each refuses with 55000 and says
 * what to run, instead of failing on a missing column or table halfway.
 * simba_history_prune and simba_history_trigger_1_3 kept their symbols:
 * they work on every schema that has their tables.
 */
#include "simba.h"

#define REFUSE_OLD_DEFINITION(name) \
	PG_FUNCTION_INFO_V1(name); \
	Datum name(PG_FUNCTION_ARGS); \
	Datum name(PG_FUNCTION_ARGS) \
	{ \
		ereport(ERROR, \
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE), \
				 errmsg("extension simba must be updated to run %s()", #name), \
				 errdetail("The simba library is version %s; this database has an older version of the extension.", \
						   SIMBA_VERSION), \
				 errhint("Run ALTER EXTENSION simba UPDATE."))); \
		PG_RETURN_NULL(); \
	}

REFUSE_OLD_DEFINITION(simba_acquire)
REFUSE_OLD_DEFINITION(simba_release)
REFUSE_OLD_DEFINITION(simba_owner)
REFUSE_OLD_DEFINITION(simba_fence_check)
REFUSE_OLD_DEFINITION(simba_semaphore_acquire)
REFUSE_OLD_DEFINITION(simba_semaphore_refresh)
REFUSE_OLD_DEFINITION(simba_semaphore_release)
REFUSE_OLD_DEFINITION(simba_semaphore_fence_check)
REFUSE_OLD_DEFINITION(simba_force_release)
REFUSE_OLD_DEFINITION(simba_semaphore_gc)
/* 1.3: SECURITY DEFINER, holders by role name, the wall clock */
REFUSE_OLD_DEFINITION(simba_acquire_1_3)
REFUSE_OLD_DEFINITION(simba_release_1_3)
REFUSE_OLD_DEFINITION(simba_owner_1_3)
REFUSE_OLD_DEFINITION(simba_fence_check_1_3)
REFUSE_OLD_DEFINITION(simba_semaphore_acquire_1_3)
REFUSE_OLD_DEFINITION(simba_semaphore_refresh_1_3)
REFUSE_OLD_DEFINITION(simba_semaphore_release_1_3)
REFUSE_OLD_DEFINITION(simba_semaphore_fence_check_1_3)
REFUSE_OLD_DEFINITION(simba_force_release_1_3)
REFUSE_OLD_DEFINITION(simba_grant_1_3)
REFUSE_OLD_DEFINITION(simba_revoke_1_3)

/*
 * The old history trigger logs nothing: it would only ever see direct
 * writes (every old write function above refuses), and history records
 * simba's own writes only (history.c). So a superuser can still fix rows
 * by hand before the update.
 */
PG_FUNCTION_INFO_V1(simba_history_trigger);
Datum		simba_history_trigger(PG_FUNCTION_ARGS);
Datum
simba_history_trigger(PG_FUNCTION_ARGS)
{
	return PointerGetDatum(NULL);
}
