/*
 * clock.c — simba's clock: leases that a step of the server's wall clock
 * never shortens or lengthens (docs/design.md, "Clock").
 *
 * simba_now() = origin + (boot clock now - boot clock at the origin), where
 * the origin is one reading of the wall clock and CLOCK_BOOTTIME taken
 * together. Every backend of a server must count from the same origin, and
 * an extension loaded without shared_preload_libraries has no shared memory,
 * so the first backend that needs it writes it to a file in the data
 * directory, simba_clock.<table>.<boot id>.<timeline>, and the others read
 * it:
 *
 * - the table is simba_mutex's OID: a new install of the extension (CREATE
 *   EXTENSION, a restore into a new database, pg_upgrade) starts a new
 *   origin, after every row it restored;
 * - the boot id names the boot clock (the same on every process of the host
 *   until it reboots), so a restart of PostgreSQL keeps counting exactly;
 * - the timeline changes at every promotion, so a promoted standby (or a
 *   primary that failed over and back) starts a new origin after every write
 *   of the primaries before it.
 *
 * Rows record the origin they were written under (clock_origin). A row of
 * another origin was last written before this origin began, so counting its
 * lease again in full from this origin never shortens it, and lengthens it
 * by at most one lease (as etcd extends leases on a leader change).
 *
 * A standby never writes leases and may not have an origin of its own yet:
 * there simba_now() is the wall clock and the origin is 0 (none).
 */
#include "simba.h"

#include <dirent.h>
#include <time.h>
#include <unistd.h>

#include "access/htup_details.h"
#include "access/xlog.h"
#include "common/int.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/fd.h"

/* This backend's origin: valid while `timeline` is the server's and `table` simba's. */
static TimestampTz origin_wall = 0;
static int64 origin_boot = 0;
static TimeLineID origin_timeline = 0;
static Oid	origin_table = InvalidOid;

static const char file_prefix[] = "simba_clock.";

/* Microseconds of the boot clock: monotonic, counting suspended time too. */
static int64
boot_usec(void)
{
	struct timespec ts;

#ifdef CLOCK_BOOTTIME
	if (clock_gettime(CLOCK_BOOTTIME, &ts) != 0)
#endif
		clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64) ts.tv_sec * USECS_PER_SEC + ts.tv_nsec / 1000;
}

/* The kernel's id of this boot; without one, the postmaster's start stands in. */
static void
boot_id(char *buf, size_t len)
{
	FILE	   *f = AllocateFile("/proc/sys/kernel/random/boot_id", "r");

	if (f != NULL && fgets(buf, (int) len, f) != NULL)
		buf[strcspn(buf, "\n")] = '\0';
	else
		snprintf(buf, len, "pm" INT64_FORMAT, (int64) PgStartTime);
	if (f != NULL)
		FreeFile(f);
}

static bool
read_origin(const char *path)
{
	FILE	   *f = AllocateFile(path, "r");
	bool		ok;

	if (f == NULL)
		return false;
	ok = fscanf(f, "simba clock 1 " INT64_FORMAT " " INT64_FORMAT, &origin_wall, &origin_boot) == 2;
	FreeFile(f);
	if (!ok)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("simba: clock origin file \"%s\" is not valid", path),
				 errhint("Remove it: the next call starts a new origin, and live leases count again in full.")));
	return true;
}

/* Origins of earlier boots: never read again. */
static void
remove_old_origins(const char *boot)
{
	DIR		   *dir = AllocateDir(DataDir);
	struct dirent *de;

	while ((de = ReadDir(dir, DataDir)) != NULL)
		if (strncmp(de->d_name, file_prefix, strlen(file_prefix)) == 0 &&
			strstr(de->d_name, boot) == NULL && strstr(de->d_name, ".tmp.") == NULL)
			unlink(psprintf("%s/%s", DataDir, de->d_name));
	FreeDir(dir);
}

/*
 * Read this timeline's origin, or write it: written whole to a file of
 * this backend's, then linked to its name, so a reader sees all of it and
 * exactly one of two racing backends creates it.
 */
static void
load_origin(Oid table, TimeLineID timeline)
{
	char		boot[64];
	char	   *name;
	char	   *path;
	char	   *tmp;
	FILE	   *f;

	boot_id(boot, sizeof(boot));
	name = psprintf("%s%u.%s.%u", file_prefix, table, boot, timeline);
	path = psprintf("%s/%s", DataDir, name);
	if (!read_origin(path))
	{
		tmp = psprintf("%s/%s.tmp.%d", DataDir, name, MyProcPid);
		f = AllocateFile(tmp, "w");
		if (f == NULL)
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("simba: could not create clock origin file \"%s\": %m", tmp)));
		origin_wall = GetCurrentTimestamp();
		origin_boot = boot_usec();
		fprintf(f, "simba clock 1 " INT64_FORMAT " " INT64_FORMAT "\n", origin_wall, origin_boot);
		if (FreeFile(f) != 0)
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("simba: could not write clock origin file \"%s\": %m", tmp)));
		if (link(tmp, path) == 0)
			remove_old_origins(boot);
		else if (errno != EEXIST || !read_origin(path))
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("simba: could not create clock origin file \"%s\": %m", path)));
		unlink(tmp);
	}
	origin_timeline = timeline;
	origin_table = table;
}

/*
 * The origin in force for the install of the calling function, 0 on a
 * standby; loads it on first use, after a promotion and after a new
 * install.
 */
TimestampTz
simba_clock_origin(FunctionCallInfo fcinfo)
{
	TimeLineID	timeline;
	Oid			table;

	if (RecoveryInProgress())
		return 0;
	timeline = GetWALInsertionTimeLine();
	table = simba_mutex_table(fcinfo);
	if (!OidIsValid(table))
		elog(ERROR, "simba: table simba_mutex is missing");
	if (timeline != origin_timeline || table != origin_table)
		load_origin(table, timeline);
	return origin_wall;
}

TimestampTz
simba_now(FunctionCallInfo fcinfo)
{
	if (simba_clock_origin(fcinfo) == 0)
		return GetCurrentTimestamp();
	return origin_wall + (boot_usec() - origin_boot);
}

PG_FUNCTION_INFO_V1(simba_clock);

/* simba_clock(): (now, origin) for the status views and for users' own queries. */
Datum
simba_clock(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	TimestampTz origin = simba_clock_origin(fcinfo);
	Datum		values[2] = {TimestampTzGetDatum(simba_now(fcinfo)), TimestampTzGetDatum(origin)};
	bool		nulls[2] = {false, origin == 0};

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "simba: return type must be a row");
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc), values, nulls)));
}

PG_FUNCTION_INFO_V1(simba_epoch_us);

/*
 * simba_epoch_us(t): t as microseconds since 1970-01-01 00:00 UTC, exactly.
 * Clients read lease times this way: extract(epoch ...) computes in numeric,
 * which cost the client's acquire statement 14k instructions of its 306k
 * (bench/README.md, "Extension 1.4"). No search_path to pin: it looks
 * nothing up.
 */
Datum
simba_epoch_us(PG_FUNCTION_ARGS)
{
	TimestampTz t = PG_GETARG_TIMESTAMPTZ(0);
	int64		us;

	if (TIMESTAMP_NOT_FINITE(t) ||
		pg_add_s64_overflow(t, (int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY, &us))
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("timestamp out of range for simba_epoch_us"),
				 errdetail("It takes finite timestamps up to 294247-01-10 04:00:54.775807 UTC.")));
	PG_RETURN_INT64(us);
}

TimestampTz
simba_lease_end_at(TimestampTz col, TimestampTz since, bool clock_null, TimestampTz clock, bool origin_null,
				   TimestampTz origin)
{
	TimestampTz length,
				end;

	/* The row's own clock (or a standby's): col itself. */
	if (origin_null || (!clock_null && clock == origin))
		return col;
	if (TIMESTAMP_NOT_FINITE(col) || TIMESTAMP_NOT_FINITE(since) ||
		pg_sub_s64_overflow(col, since, &length) || pg_add_s64_overflow(origin, length, &end) ||
		!IS_VALID_TIMESTAMP(end))
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("timestamp out of range")));
	return end;
}

PG_FUNCTION_INFO_V1(simba_lease_end);

/*
 * simba_lease_end(col, since, clock_origin, origin): SIMBA_LEASE_END
 * (simba.h). A row written under another clock than `origin` counts again
 * in full from `origin`: origin + (col - since), in exact microseconds.
 * 22008 where that leaves the range of timestamptz, as the SQL it replaces.
 */
bool
simba_lease_end_of(const SimbaLeaseEnd *e, TimestampTz *end)
{
	bool		foreign = !e->origin_null && (e->clock_null || e->clock != e->origin);

	if (e->col_null || (foreign && e->since_null))
		return false;
	*end = simba_lease_end_at(e->col, foreign ? e->since : 0, e->clock_null, e->clock, e->origin_null, e->origin);
	return true;
}

Datum
simba_lease_end(PG_FUNCTION_ARGS)
{
	SimbaLeaseEnd e = {
		.col_null = PG_ARGISNULL(0), .since_null = PG_ARGISNULL(1),
		.clock_null = PG_ARGISNULL(2), .origin_null = PG_ARGISNULL(3),
	};
	TimestampTz end;

	e.col = e.col_null ? 0 : PG_GETARG_TIMESTAMPTZ(0);
	e.since = e.since_null ? 0 : PG_GETARG_TIMESTAMPTZ(1);
	e.clock = e.clock_null ? 0 : PG_GETARG_TIMESTAMPTZ(2);
	e.origin = e.origin_null ? 0 : PG_GETARG_TIMESTAMPTZ(3);
	if (!simba_lease_end_of(&e, &end))
		PG_RETURN_NULL();
	PG_RETURN_TIMESTAMPTZ(end);
}
