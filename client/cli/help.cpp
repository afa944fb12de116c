// simba CLI: the --help text of each command, and the overview.
#include <utility>

#include "cli.hpp"

namespace simba::cli {

namespace {

const char* const kRunHelp = R"(usage: simba run --mutex NAME [options] [--] CMD [ARGS...]

Runs CMD while this process holds the mutex, cluster-wide: a distributed
flock. Waits to become the leader, runs CMD with SIMBA_MUTEX, SIMBA_CONTENDER
and SIMBA_FENCE in its environment, keeps renewing the lease while CMD runs
and releases the mutex when CMD and every process it started have exited.
CMD and those processes are gone before the lease can pass on, whatever
happens to simba run: a watchdog process sends them SIGTERM --grace before
its SIGKILL, which comes a margin before the lease ends, if renewals keep
failing (at once after a takeover or forced release); simba run exits 76.

options:
  -m, --mutex NAME         the mutex (required)
  -c, --contender ID       contender id (default: {counter}:{pid}@{host})
      --ttl DURATION       lease ttl (default 10s); the owner renews as it ends
      --transition DURATION  grace after ttl in which only the owner may renew (default 6s)
  -w, --wait DURATION      give up waiting after this long and exit 75;
                           0 = try once; default: wait forever
      --grace DURATION     SIGTERM this long before the SIGKILL once renewals fail;
                           must fit in the lease (default: a third of the
                           renewal window, max(transition, (ttl+transition)/4))
      --metrics-file PATH  write this process's client metrics (Prometheus text)
                           to PATH every --metrics-interval and at exit (atomic rename)
      --metrics-interval DURATION  (default 5s)
  -v, --verbose            say what happens (waiting, acquired, fence, lost) on stderr
  -d, --dsn DSN            libpq connection string or URI (default: PGHOST, PGDATABASE, ...)
  -h, --help

CMD runs in its own process group; SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1
and SIGUSR2 sent to simba run are forwarded to that group and to processes
CMD left (so ^C in a terminal reaches simba run, which passes it on). If
simba run itself dies, the watchdog kills CMD and its processes at once.

exit status: CMD's status when it ran to the end (128+N if it died of signal
N); 75 busy (--wait 0, or --wait timed out); 76 lost the lock while CMD ran;
69 could not connect; 77 permission denied; 78 extension missing; 64 usage
error (also a --grace that does not fit); 70 the watchdog was killed; 126/127 CMD not executable / not found; 128+N if simba run got signal
N while waiting (before CMD started).
)";

const char* const kStatusHelp = R"(usage: simba status [--all] [--pattern GLOB] [--recent DURATION] [--json]
                    [--watch [--interval DURATION]] [--mutex NAME]

What is held, waited for or changed lately: mutexes held or in transition,
free ones with fair waiters (WAITING) or released or lapsed within --recent
(owner, state held|transition|free, time left, fence); read-write locks
held or waited for (mode, holders, waiting writers, write fence); live
semaphore permits (key, slot, holder, context, time left, fence, limit);
sessions that have not ended (role, state, time left, what they hold).
A last line counts what was left out. From the simba_*_status views.

options:
  -a, --all                every mutex, read-write lock and session, idle or ended too
  -p, --pattern GLOB       only names matching GLOB (* any run, ? one character);
                           sessions are then left out
      --recent DURATION    how long a free mutex still shows after its release
                           or lease end (default 10m)
  -j, --json               one JSON object: {"mutexes": [...], "rwlocks": [...],
                           "semaphores": [...], "sessions": [...], "not_shown": {...}}
  -W, --watch              redraw every --interval until interrupted, like watch(1)
  -i, --interval DURATION  (default 2s)
  -m, --mutex NAME         only this mutex, whatever its state
  -d, --dsn DSN            libpq connection string or URI
  -h, --help
)";

const char* const kAcquireHelp = R"(usage: simba acquire --mutex NAME [--contender ID] [--ttl 10s] [--transition 6s] [--json]

One attempt to acquire (or renew) the mutex for a script. Exit 0 when this
contender holds it afterwards (prints the fence), 75 when someone else does.
Nothing renews the lease afterwards: call acquire again before ttl ends to
renew, and release when done. Use `simba run` to hold a lock around a command.

The contender id defaults to $SIMBA_CONTENDER, else "sh-{ppid}@{host}": the
same for every simba called from one shell script, so a later
`simba release --mutex NAME` in that script matches.

options:
  -m, --mutex NAME, -c, --contender ID, --ttl DURATION, --transition DURATION,
  -j, --json, -d, --dsn DSN, -h, --help
)";

const char* const kReleaseHelp = R"(usage: simba release --mutex NAME [--contender ID]
       simba release --force --mutex NAME

Releases the mutex held by the contender (default id as for `simba acquire`).
Exit 0 if it was released, 1 if that contender did not hold a live lease
(someone else holds it, it is free, or the lease had already ended).

--force clears the owner whatever its lease (simba_force_release): the next
holder gets the next fence, so a fenced write of the old holder is refused.
It needs a privilege an application role lacks: a superuser, or a role the
DBA granted it explicitly:
    GRANT EXECUTE ON FUNCTION simba_force_release(text) TO ops_admin;
Exit 0 if an owner was cleared, 1 if the mutex was free, 77 without the
privilege.

options:
  -m, --mutex NAME, -c, --contender ID, -f, --force, -d, --dsn DSN, -h, --help
)";

const char* const kOwnerHelp = R"(usage: simba owner --mutex NAME [--json]

Prints the owner id of the mutex (nothing when free) and exits 0 when it is
held, 1 when it is free. --json adds the fence, state and time left.

options:
  -m, --mutex NAME, -j, --json, -d, --dsn DSN, -h, --help
)";

const char* const kMetricsHelp = R"(usage: simba metrics [--listen ADDRESS:PORT] [--dsn DSN]

Prints the server-side numbers in the Prometheus text format, for a
node-exporter textfile (simba metrics > dir/simba.prom.tmp && mv ...), or
with --listen serves them to Prometheus on http://ADDRESS:PORT/metrics
(and /healthz) until SIGTERM or ^C, one query per scrape; while the database
cannot be reached it answers simba_up 0 and connects again at the next scrape:
  simba_mutex_held, simba_mutex_time_left_seconds, simba_mutex_fence,
  simba_mutex_version, simba_mutex_owner_info          (simba_mutex_status)
  simba_semaphore_permits_held, simba_semaphore_permits_limit,
  simba_semaphore_fence                                (simba_semaphore_status)
  simba_mutex_acquisitions_total, simba_mutex_releases_total,
  simba_mutex_late_releases_total, simba_mutex_expired_total,
  simba_mutex_forced_releases_total,
  simba_mutex_last_event_timestamp_seconds  per mutex and holder (simba_mutex_stats;
                                            needs simba.history = on)
  simba_session_count, simba_session_mutexes, simba_session_permits  per state
                                                       (simba_session_status)
  simba_history_enabled, simba_up (--listen)
Client-side numbers (attempts, busy, renewals, latencies) live in each
process: `simba run --metrics-file`, or factory.metrics() in C++.

options:
  -l, --listen ADDRESS:PORT  serve /metrics there: 127.0.0.1:9808, [::1]:9808,
                             :9808 (every IPv4 address); port 0 picks a free one
                             (the address is printed on stderr)
  -d, --dsn DSN, -h, --help
)";

const char* const kTopHelp = R"(usage: simba top [--interval 1s] [--sort mutex|owner|state|left|fence] [--all]
                 [--pattern GLOB] [--recent DURATION] [--dsn DSN]

A live view, redrawn every --interval: the mutexes held, waited for (fair
waiters) or changed within --recent, with owner, state (held, transition,
free), time left, fence and waiters; read-write locks held or waited for;
each semaphore key's permits; live sessions; and the latest changes of
hands (from simba_mutex_history when simba.history is on, else as this
view sees fences change). The header counts what is left out. Keys: s sorts by the next
column, r reverses, q quits (so do ^C and SIGTERM). When stdout or stdin is
not a terminal it prints the view once and exits. If the database stops
answering, the last state stays on the screen with the reason, and each
refresh tries again.

options:
  -i, --interval DURATION  (default 1s)
  -s, --sort COLUMN        mutex (default), owner, state, left or fence
  -a, --all                every mutex, read-write lock and session, idle or ended too
  -p, --pattern GLOB       only names matching GLOB (* any run, ? one character)
      --recent DURATION    how long a free mutex still shows after it was freed (default 10m)
  -d, --dsn DSN, -h, --help
)";

const char* const kOverviewHelp = R"(usage: simba COMMAND [options]

A distributed mutex / leader election service inside PostgreSQL.

commands:
  run       run a command while holding a mutex (a cluster-wide flock)
  status    what is held, waited for or changed lately (--all, --pattern, --json, --watch)
  acquire   one attempt to acquire or renew a mutex, for scripts
  release   release a mutex (--force: admin)
  owner     print a mutex's owner
  metrics   server-side metrics in the Prometheus text format (--listen: serve them)
  top       a live view of held locks, waiters, sessions and changes of hands

`simba COMMAND --help` describes each. The server is reached through --dsn or
libpq's environment (PGHOST, PGPORT, PGDATABASE, PGUSER, PGPASSWORD, ...).
Exit status: 0 ok, 1 not held / not released, 64 usage, 69 could not connect,
70 unexpected error, 75 busy, 76 lost the lock (run), 77 permission denied,
78 extension missing.
)";

}  // namespace

const char* help_for(const std::string& command) {
    static const std::pair<const char*, const char*> texts[] = {
        {"run", kRunHelp},
        {"status", kStatusHelp},
        {"acquire", kAcquireHelp},
        {"release", kReleaseHelp},
        {"owner", kOwnerHelp},
        {"metrics", kMetricsHelp},
        {"top", kTopHelp},
    };
    for (const auto& [name, text] : texts)
        if (command == name) return text;
    return kOverviewHelp;
}

}  // namespace simba::cli
