// simba: the command-line tool. `simba --help` lists the commands; each has
// its own --help. Connection: --dsn, else libpq's environment (PGHOST, ...).
#include <cstdio>
#include <cstring>
#include <iostream>

#include "cli.hpp"
#include "simba/errors.hpp"

namespace simba::cli {

const char* help_for(const std::string& command) {
    if (command == "run")
        return R"(usage: simba run --mutex NAME [options] [--] CMD [ARGS...]

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
    if (command == "status")
        return R"(usage: simba status [--json] [--watch [--interval DURATION]] [--mutex NAME]

Every mutex (owner, state held|transition|free, time left, fence, version)
and every live semaphore permit (key, slot, holder, context, time left,
fence, limit), from simba_mutex_status and simba_semaphore_status.

options:
  -j, --json               one JSON object: {"mutexes": [...], "semaphores": [...]}
  -W, --watch              redraw every --interval until interrupted, like watch(1)
  -i, --interval DURATION  (default 2s)
  -m, --mutex NAME         only this mutex (and no semaphores)
  -d, --dsn DSN            libpq connection string or URI
  -h, --help
)";
    if (command == "acquire")
        return R"(usage: simba acquire --mutex NAME [--contender ID] [--ttl 10s] [--transition 6s] [--json]

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
    if (command == "release")
        return R"(usage: simba release --mutex NAME [--contender ID]
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
    if (command == "owner")
        return R"(usage: simba owner --mutex NAME [--json]

Prints the owner id of the mutex (nothing when free) and exits 0 when it is
held, 1 when it is free. --json adds the fence, state and time left.

options:
  -m, --mutex NAME, -j, --json, -d, --dsn DSN, -h, --help
)";
    if (command == "metrics")
        return R"(usage: simba metrics [--dsn DSN]

Prints the server-side numbers in the Prometheus text format, for a
node-exporter textfile (simba metrics > dir/simba.prom.tmp && mv ...) or a
scrape wrapper:
  simba_mutex_held, simba_mutex_time_left_seconds, simba_mutex_fence,
  simba_mutex_version, simba_mutex_owner_info          (simba_mutex_status)
  simba_semaphore_permits_held, simba_semaphore_permits_limit,
  simba_semaphore_fence                                (simba_semaphore_status)
  simba_mutex_acquisitions_total, simba_mutex_releases_total,
  simba_mutex_late_releases_total, simba_mutex_expired_total,
  simba_mutex_forced_releases_total,
  simba_mutex_last_event_timestamp_seconds  per mutex and holder (simba_mutex_stats;
                                            needs simba.history = on)
  simba_history_enabled
Client-side numbers (attempts, busy, renewals, latencies) live in each
process: `simba run --metrics-file`, or factory.metrics() in C++.

options:
  -d, --dsn DSN, -h, --help
)";
    return R"(usage: simba COMMAND [options]

A distributed mutex / leader election service inside PostgreSQL.

commands:
  run       run a command while holding a mutex (a cluster-wide flock)
  status    show every mutex and semaphore (--json, --watch)
  acquire   one attempt to acquire or renew a mutex, for scripts
  release   release a mutex (--force: admin)
  owner     print a mutex's owner
  metrics   server-side metrics in the Prometheus text format

`simba COMMAND --help` describes each. The server is reached through --dsn or
libpq's environment (PGHOST, PGPORT, PGDATABASE, PGUSER, PGPASSWORD, ...).
Exit status: 0 ok, 1 not held / not released, 64 usage, 69 could not connect,
70 unexpected error, 75 busy, 76 lost the lock (run), 77 permission denied,
78 extension missing.
)";
}

}  // namespace simba::cli

int main(int argc, char** argv) {
    using namespace simba::cli;
    std::vector<std::string> args(argv + 1, argv + argc);
    if (args.empty()) {
        std::fputs(help_for(""), stderr);
        return usage;
    }
    // `simba --dsn DSN COMMAND ...` works like `simba COMMAND --dsn DSN ...`.
    std::vector<std::string> global;
    while (args.size() >= 2 && (args[0] == "--dsn" || args[0] == "-d")) {
        global = {"--dsn", args[1]};
        args.erase(args.begin(), args.begin() + 2);
    }
    if (args.size() >= 1 && args[0].rfind("--dsn=", 0) == 0) {
        global = {args[0]};
        args.erase(args.begin());
    }
    if (args.empty()) {
        std::fputs(help_for(""), stderr);
        return usage;
    }
    const std::string command = args[0];
    args.erase(args.begin());
    args.insert(args.begin(), global.begin(), global.end());
    if (command == "--help" || command == "-h" || command == "help") {
        std::fputs(help_for(args.empty() ? "" : args[0].c_str()), stdout);
        return ok;
    }
    if (command == "--version") {
        std::puts("simba 1.2");
        return ok;
    }
    try {
        if (command == "run") return cmd_run(args);
        if (command == "status") return cmd_status(args);
        if (command == "acquire") return cmd_acquire(args);
        if (command == "release") return cmd_release(args);
        if (command == "owner") return cmd_owner(args);
        if (command == "metrics") return cmd_metrics(args);
        throw UsageError("unknown command \"" + command + "\"");
    } catch (const UsageError& e) {
        std::string what = e.what();
        if (what.rfind("simba", 0) != 0) what = "simba: " + what;
        std::fprintf(stderr, "%s\nTry 'simba %s--help'.\n", what.c_str(),
                     (command == "run" || command == "status" || command == "acquire" || command == "release" ||
                      command == "owner" || command == "metrics")
                         ? (command + " ").c_str()
                         : "");
        return usage;
    } catch (const Failure& e) {
        std::fprintf(stderr, "simba %s: %s\n", command.c_str(), e.what());
        return e.code;
    } catch (const simba::InvalidArgumentError& e) {
        std::fprintf(stderr, "simba %s: %s\nTry 'simba %s --help'.\n", command.c_str(), e.what(), command.c_str());
        return usage;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "simba %s: %s\n", command.c_str(), e.what());
        return software;
    }
}
