/*
 * clockshift.c — an LD_PRELOAD shim that steps a process's wall clock (tests only).
 *
 * Why: simba's leases must not follow steps of the server's wall clock
 * (security review, finding 7). test/clock/step.sh starts PostgreSQL with
 * this library preloaded (test/with-cluster.sh, SIMBA_PG_PRELOAD) and steps
 * the server's clock forward and back without touching the machine's clock.
 *
 * What: every wall-clock read gets an offset added —
 *   clock_gettime(CLOCK_REALTIME), clock_gettime(CLOCK_REALTIME_COARSE),
 *   gettimeofday(), time().
 * Every other clock (CLOCK_MONOTONIC, CLOCK_BOOTTIME, CPU-time clocks, ...)
 * is passed through untouched, as is the system call layer (a program that
 * issues syscall(SYS_clock_gettime) itself is not shifted; PostgreSQL does not).
 *
 * The offset, in seconds (may be negative, may have up to 9 decimals, e.g.
 * "3600", "-3600", "1.5"), is read from the file named by the environment
 * variable SIMBA_CLOCK_OFFSET_FILE. No variable or no file: offset 0. A file
 * whose content does not parse (say, caught half written) leaves the previous
 * offset in force until the next look. Replace the file atomically (write a
 * temp file, mv it over) to step the clock in one go.
 *
 * Cost: a clock read costs the real (vDSO) read plus one more of
 * CLOCK_MONOTONIC_COARSE; at most every RECHECK_NS a process stat()s the file
 * and re-reads it when its inode, size, mtime or ctime changed (and at least
 * every REREAD_NS in any case, for edits within one mtime tick). So a step
 * reaches every process within a few ms of its next clock read.
 *
 * Safety: PostgreSQL reads the clock in signal handlers (timeout.c's SIGALRM
 * handler calls GetCurrentTimestamp()), so the shim uses only
 * async-signal-safe calls after load (stat, open, read, close), keeps its
 * state in word-sized atomics, and a read that interrupts a refresh in
 * progress simply uses the offset in force. The environment variable and the
 * real functions are looked up once, when the library is loaded. The state
 * survives fork(): a forked backend starts with its parent's offset and
 * looks at the file again within RECHECK_NS.
 *
 * Build: cc -shared -fPIC -O2 -o clockshift.so clockshift.c -ldl
 * (test/clock/step.sh does so into a temp dir; no build output is committed).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define NSEC_PER_SEC 1000000000LL
#define RECHECK_NS (2 * 1000000LL)		/* stat the file at most every 2 ms */
#define REREAD_NS (1000 * 1000000LL)	/* re-read it at least every 1 s */

typedef int (*clock_gettime_fn) (clockid_t, struct timespec *);

static clock_gettime_fn real_clock_gettime;
static char offset_path[PATH_MAX];

/* Shared with signal handlers: each read and written whole, atomically. */
static int64_t offset_ns;				/* the offset in force */
static int64_t next_check_ns = INT64_MIN;	/* monotonic time of the next look */
static int	refreshing;					/* a look at the file is in progress */

/* Owned by whoever holds `refreshing`. */
static struct stat seen;
static int	seen_valid;
static int64_t read_at_ns;

static int
raw_clock_gettime(clockid_t id, struct timespec *ts)
{
	return (int) syscall(SYS_clock_gettime, id, ts);
}

static clock_gettime_fn
real(void)
{
	clock_gettime_fn f = __atomic_load_n(&real_clock_gettime, __ATOMIC_ACQUIRE);

	if (f == NULL)
	{
		/* Called before our constructor ran (another library's constructor). */
		f = (clock_gettime_fn) dlsym(RTLD_NEXT, "clock_gettime");
		if (f == NULL)
			f = raw_clock_gettime;
		__atomic_store_n(&real_clock_gettime, f, __ATOMIC_RELEASE);
	}
	return f;
}

/* "[ws][+-]digits[.digits][ws]" to nanoseconds; 0 on success, -1 if it does not parse. */
static int
parse_offset(const char *s, int64_t *out)
{
	int			neg = 0;
	int			digits = 0;
	int64_t		sec = 0;
	int64_t		frac = 0;
	int64_t		scale = NSEC_PER_SEC;

	while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
		s++;
	if (*s == '+' || *s == '-')
		neg = *s++ == '-';
	for (; *s >= '0' && *s <= '9'; s++, digits++)
	{
		if (sec > 1000000000LL)	/* ~31 years is plenty, and cannot overflow */
			return -1;
		sec = sec * 10 + (*s - '0');
	}
	if (*s == '.')
		for (s++; *s >= '0' && *s <= '9'; s++, digits++)
			if (scale > 1)
			{
				scale /= 10;
				frac += (*s - '0') * scale;
			}
	while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
		s++;
	if (digits == 0 || *s != '\0')
		return -1;
	*out = (sec * NSEC_PER_SEC + frac) * (neg ? -1 : 1);
	return 0;
}

static int
same_file(const struct stat *a, const struct stat *b)
{
	return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
		a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
		a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

/* Look at the file again; the caller holds `refreshing`. */
static void
refresh(int64_t now_ns)
{
	struct stat st;
	char		buf[64];
	ssize_t		n;
	int			fd;
	int64_t		value;

	if (offset_path[0] == '\0' || stat(offset_path, &st) != 0)
	{
		__atomic_store_n(&offset_ns, 0, __ATOMIC_RELAXED);	/* no file: no offset */
		seen_valid = 0;
		return;
	}
	if (seen_valid && same_file(&st, &seen) && now_ns - read_at_ns < REREAD_NS)
		return;
	fd = open(offset_path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n < 0)
		return;
	buf[n] = '\0';
	if (parse_offset(buf, &value) != 0)
	{
		seen_valid = 0;			/* keep the offset in force, look again next time */
		return;
	}
	__atomic_store_n(&offset_ns, value, __ATOMIC_RELAXED);
	seen = st;
	seen_valid = 1;
	read_at_ns = now_ns;
}

static int64_t
current_offset(void)
{
	struct timespec mono;
	int64_t		now_ns;

	if (real() (CLOCK_MONOTONIC_COARSE, &mono) != 0)
		return __atomic_load_n(&offset_ns, __ATOMIC_RELAXED);
	now_ns = mono.tv_sec * NSEC_PER_SEC + mono.tv_nsec;
	if (now_ns >= __atomic_load_n(&next_check_ns, __ATOMIC_RELAXED) &&
		!__atomic_exchange_n(&refreshing, 1, __ATOMIC_ACQUIRE))
	{
		refresh(now_ns);
		__atomic_store_n(&next_check_ns, now_ns + RECHECK_NS, __ATOMIC_RELAXED);
		__atomic_store_n(&refreshing, 0, __ATOMIC_RELEASE);
	}
	return __atomic_load_n(&offset_ns, __ATOMIC_RELAXED);
}

static void
shift(struct timespec *ts, int64_t off)
{
	int64_t		ns = ts->tv_nsec + off % NSEC_PER_SEC;

	ts->tv_sec += off / NSEC_PER_SEC + ns / NSEC_PER_SEC;
	ns %= NSEC_PER_SEC;
	if (ns < 0)
	{
		ns += NSEC_PER_SEC;
		ts->tv_sec--;
	}
	ts->tv_nsec = ns;
}

int
clock_gettime(clockid_t id, struct timespec *ts)
{
	int			rc = real() (id, ts);

	if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE))
		shift(ts, current_offset());
	return rc;
}

int
gettimeofday(struct timeval *restrict tv, void *restrict tz)
{
	struct timespec ts;

	if (tz != NULL)				/* obsolete; glibc reports UTC too */
		memset(tz, 0, sizeof(struct timezone));
	if (real() (CLOCK_REALTIME, &ts) != 0)
		return -1;
	shift(&ts, current_offset());
	tv->tv_sec = ts.tv_sec;
	tv->tv_usec = ts.tv_nsec / 1000;
	return 0;
}

time_t
time(time_t *tloc)
{
	struct timespec ts;

	if (real() (CLOCK_REALTIME, &ts) != 0)
		return (time_t) -1;
	shift(&ts, current_offset());
	if (tloc != NULL)
		*tloc = ts.tv_sec;
	return ts.tv_sec;
}

/* A child forked while another thread refreshed would otherwise never refresh. */
static void
after_fork_child(void)
{
	__atomic_store_n(&refreshing, 0, __ATOMIC_RELEASE);
}

__attribute__((constructor))
static void
clockshift_init(void)
{
	const char *p = getenv("SIMBA_CLOCK_OFFSET_FILE");

	real();
	if (p != NULL && strlen(p) < sizeof(offset_path))
		strcpy(offset_path, p);
	pthread_atfork(NULL, NULL, after_fork_child);
}
