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
 * That holds only while every backend counts from the file's origin. The
 * file can be removed or replaced while backends run (security review,
 * finding 4), and a backend still on its cached origin would count a row of
 * the new one from its own, older origin, and another's row the other way
 * round: ended early, a second holder. So a backend checks that its origin
 * is still the file's (check_origin) where it counts on it:
 *
 * - before a transaction that used it commits (simba_clock_pre_commit):
 *   every time the transaction wrote was read before, so an origin made
 *   after this check began after every one of them, and counting those rows
 *   in full from it never shortens them;
 * - when it meets a row of another origin (simba_lease_end_at): that row's
 *   writer checked its origin before committing, so if this backend's is
 *   still the file's now, the other one went before it.
 *
 * Where it is not, the backend forgets its origin and fails with 40001: the
 * next call reads the file's. Only putting an older file back (one that
 * was removed) can still mislead a backend.
 *
 * A standby never writes leases and may not have an origin of its own yet:
 * there simba_now() is the wall clock and the origin is 0 (none).
 */
#include "simba.h"
#include "clock.h"

#include <dirent.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "access/htup_details.h"
#include "access/xact.h"
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

/*
 * The file it came from (in TopMemoryContext), as that file was when last
 * read: the same inode with the same change time is the same content, as
 * the file is never written in place. ctime to the nanosecond, so an inode
 * reused by a new file does not pass for the old one.
 */
static char *origin_path = NULL;
static struct stat origin_file;
static bool origin_file_known = false;

/* Other origins this one was found to follow (while it is in force). */
#define OLDER_ORIGINS 8
static TimestampTz older_origins[OLDER_ORIGINS];
static int	n_older_origins = 0;

/*
 * Whether this transaction used the origin (simba_clock_pre_commit), and
 * whether it used one it then dropped (its error caught in a subtransaction).
 */
static bool origin_in_xact = false;
static bool origin_dropped_in_xact = false;

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

/* Whether stat `st` is the file the origin was last read from. */
static bool
same_file(const struct stat *st)
{
	return origin_file_known && st->st_dev == origin_file.st_dev && st->st_ino == origin_file.st_ino &&
		st->st_ctim.tv_sec == origin_file.st_ctim.tv_sec && st->st_ctim.tv_nsec == origin_file.st_ctim.tv_nsec;
}

/* The origin in `path` into wall, boot and st (its stat); false if there is no file. */
static bool
read_origin(const char *path, TimestampTz *wall, int64 *boot, struct stat *st)
{
	FILE	   *f = AllocateFile(path, "r");
	bool		ok;

	if (f == NULL)
		return false;
	ok = fstat(fileno(f), st) == 0 &&
		fscanf(f, "simba clock 1 " INT64_FORMAT " " INT64_FORMAT, wall, boot) == 2;
	FreeFile(f);
	if (!ok)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("simba: clock origin file \"%s\" is not valid", path),
				 errhint("Remove it: the next call starts a new origin, and live leases count again in full "
						 "from it; backends on the old origin fail once (40001) and then count from the new one.")));
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
	origin_table = InvalidOid;	/* until loaded whole */
	if (origin_path != NULL)
		pfree(origin_path);
	origin_path = MemoryContextStrdup(TopMemoryContext, path);
	origin_file_known = false;
	n_older_origins = 0;
	if (read_origin(path, &origin_wall, &origin_boot, &origin_file))
		origin_file_known = true;
	else
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
		/* Linked, the file's ctime is not the one written: the first check reads it back. */
		if (link(tmp, path) == 0)
			remove_old_origins(boot);
		else if (errno != EEXIST || !read_origin(path, &origin_wall, &origin_boot, &origin_file))
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("simba: could not create clock origin file \"%s\": %m", path)));
		else
			origin_file_known = true;
		unlink(tmp);
	}
	origin_timeline = timeline;
	origin_table = table;
}

/*
 * Whether this backend's origin is still the file's: the file unchanged
 * since it was read, or holding the same origin. A corrupt file raises
 * XX001 (read_origin).
 */
static bool
origin_in_force(void)
{
	struct stat st;
	TimestampTz wall;
	int64		boot;

	if (stat(origin_path, &st) == 0 && same_file(&st))
		return true;
	if (!read_origin(origin_path, &wall, &boot, &st) || wall != origin_wall || boot != origin_boot)
		return false;
	origin_file = st;
	origin_file_known = true;
	return true;
}

/* Fails with 40001 unless the origin is still the file's; forgets it if not, for the next call to reload. */
static void
check_origin(void)
{
	if (origin_in_force())
		return;
	origin_dropped_in_xact |= origin_in_xact;
	origin_table = InvalidOid;
	origin_timeline = 0;
	n_older_origins = 0;
	ereport(ERROR,
			(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
			 errmsg("simba: the clock origin file was removed or replaced while in use"),
			 errdetail("This backend counted leases from the origin \"%s\" held before; "
					   "a lease taken under the new one cannot be compared with it.", origin_path),
			 errhint("Retry: the next call counts from the new origin.")));
}

/*
 * XACT_EVENT_PRE_COMMIT (enter.c): a transaction that wrote while using
 * the origin commits only if the origin is still the file's. One stat().
 */
void
simba_clock_pre_commit(void)
{
	if (!TransactionIdIsValid(GetTopTransactionIdIfAny()))
		return;
	if (origin_dropped_in_xact)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("simba: the clock origin file was removed or replaced while in use"),
				 errdetail("This transaction wrote times counted from the origin the file held before."),
				 errhint("Retry: the next call counts from the new origin.")));
	if (origin_in_xact && OidIsValid(origin_table))
		check_origin();
}

void
simba_clock_end_xact(void)
{
	origin_in_xact = false;
	origin_dropped_in_xact = false;
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
	origin_in_xact = true;
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
 * (bench/NOTES.md, "Extension 1.4"). No search_path to pin: it looks
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
	/*
	 * Another origin's row counts from this one only if this one came after
	 * it (see the top). Only a backend that loaded `origin` can tell (a
	 * parallel worker cannot: simba's own statements are never parallel).
	 */
	if (origin == origin_wall && OidIsValid(origin_table))
	{
		TimestampTz other = clock_null ? 0 : clock;
		int			i;

		for (i = 0; i < n_older_origins && older_origins[i] != other; i++)
			;
		if (i == n_older_origins)
		{
			check_origin();
			if (n_older_origins < OLDER_ORIGINS)
				older_origins[n_older_origins++] = other;
		}
	}
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
