/*
 * module.c — the library's load: it defines simba's settings (each one's
 * variable lives in the file that reads it), notices a connection that
 * overrode one of them (enter.c then refuses to run) and registers the
 * transaction callback (docs/design.md, "Extension"). Nothing calls into
 * this file: it is the top of the extension's call graph.
 */
#include "simba.h"
#include "enter.h"
#include "gc.h"
#include "lapse.h"
#include "wake.h"

#include "utils/guc.h"
#include "utils/guc_tables.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

/*
 * Before the library loads, "simba.x" is a placeholder that any connection
 * may set, and a startup option (PGOPTIONS="-c simba.max_lease=1") replaces
 * the value postgresql.conf or ALTER DATABASE gave it. Defining the setting
 * then rejects the connection's value (the setting is superuser-only) and
 * falls back to the compiled default, not to the DBA's value, which is
 * lost. So: a placeholder whose reset value came from a source that the
 * definition did not accept means this connection cannot know the DBA's
 * value, and simba refuses to run in it (docs/design.md, "Extension").
 */
static GucSource
placeholder_reset_source(const char *name)
{
	struct config_generic **vars = get_guc_variables();
	int			n = GetNumConfigOptions();
	int			i;

	for (i = 0; i < n; i++)
		if (strcmp(vars[i]->name, name) == 0)
			return vars[i]->reset_source;
	return PGC_S_DEFAULT;
}

static void
guard_placeholder(const char *name, GucSource before)
{
	if (before != PGC_S_DEFAULT && placeholder_reset_source(name) != before)
		simba_overridden_setting = name;
}

void
_PG_init(void)
{
	GucSource	history_before = placeholder_reset_source("simba.history");
	GucSource	max_lease_before = placeholder_reset_source("simba.max_lease");
	GucSource	drop_before = placeholder_reset_source("simba.drop_live_leases");
	GucSource	notify_before = placeholder_reset_source("simba.notify");
	GucSource	gc_idle_before = placeholder_reset_source("simba.gc_idle_age");
	GucSource	gc_interval_before = placeholder_reset_source("simba.gc_interval");
	GucSource	lapse_before = placeholder_reset_source("simba.lapse_waker");
	static const struct config_enum_entry notify_options[] = {
		{"always", SIMBA_NOTIFY_ALWAYS, false},
		{"registered", SIMBA_NOTIFY_REGISTERED, false},
		{NULL, 0, false}
	};

	DefineCustomBoolVariable("simba.history",
							 "Logs changes of hands of simba mutexes to simba_mutex_history.",
							 "Off by default: each change of hands then costs one insert.",
							 &simba_history,
							 false,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);
	DefineCustomIntVariable("simba.max_lease",
							"Longest lease simba grants: ttl + transition of a mutex, ttl of a permit.",
							"A longer one raises 22023. A lease outlives its holder, so a huge one "
							"locks others out for as long.",
							&simba_max_lease,
							7 * 24 * 3600, 1, INT_MAX,
							PGC_SUSET,
							GUC_UNIT_S,
							NULL, NULL, NULL);
	DefineCustomBoolVariable("simba.drop_live_leases",
							 "Lets DROP EXTENSION simba go ahead while leases or permits are live.",
							 "Off by default: a re-created extension starts fences again at 1.",
							 &simba_drop_live_leases,
							 false,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);
	DefineCustomEnumVariable("simba.notify",
							 "Which releases send their NOTIFY simba: always, or only while a waiter is registered.",
							 "registered skips the NOTIFY of a release nobody registered with simba_wait() "
							 "waits for; a plain LISTEN simba that does not register then misses it.",
							 &simba_notify,
							 SIMBA_NOTIFY_REGISTERED,
							 notify_options,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);
	DefineCustomIntVariable("simba.gc_idle_age",
							"How long a mutex must have been free before simba removes its row on its own; -1: never.",
							"A row is free from its release or the end of its lease (or its session's). Collected "
							"by a short-lived background worker that simba's calls start every simba.gc_interval "
							"(gc.c); fences never go back.",
							&simba_gc_idle_age,
							3600, -1, INT_MAX,
							PGC_SUSET,
							GUC_UNIT_S,
							NULL, NULL, NULL);
	DefineCustomIntVariable("simba.gc_interval",
							"How often a connection that calls simba starts the idle-row collector.",
							"Each connection that has called simba's lock functions for this long starts it at "
							"most once per interval; concurrent collectors of a database do not overlap.",
							&simba_gc_interval,
							600, 1, INT_MAX / 2,
							PGC_SUSET,
							GUC_UNIT_S,
							NULL, NULL, NULL);
	DefineCustomBoolVariable("simba.lapse_waker",
							 "Announces the end of every session while anyone waits, from a background worker.",
							 "The waker (lapse.c) sends what a close of a lapsed session would, so that waiters "
							 "need not poll at each lease's end; simba_waker() starts it. Off: waiters poll.",
							 &simba_lapse_waker,
							 true,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);
	MarkGUCPrefixReserved("simba");
	guard_placeholder("simba.history", history_before);
	guard_placeholder("simba.max_lease", max_lease_before);
	guard_placeholder("simba.drop_live_leases", drop_before);
	guard_placeholder("simba.notify", notify_before);
	guard_placeholder("simba.gc_idle_age", gc_idle_before);
	guard_placeholder("simba.gc_interval", gc_interval_before);
	guard_placeholder("simba.lapse_waker", lapse_before);
	RegisterXactCallback(simba_xact_callback, NULL);
}
