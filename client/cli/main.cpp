// simba: the command-line tool. `simba --help` lists the commands; each has
// its own --help. Connection: --dsn, else libpq's environment (PGHOST, ...).
#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>

#include <CLI/CLI.hpp>

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
        return R"(usage: simba status [--all] [--pattern GLOB] [--recent DURATION] [--json]
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
        return R"(usage: simba metrics [--listen ADDRESS:PORT] [--dsn DSN]

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
    if (command == "top")
        return R"(usage: simba top [--interval 1s] [--sort mutex|owner|state|left|fence] [--all]
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
    return R"(usage: simba COMMAND [options]

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
}

}  // namespace simba::cli

namespace {

using namespace simba::cli;

const char* const kCommands[] = {"run", "status", "acquire", "release", "owner", "metrics", "top"};

/// The commands and their options, parsed into `a`; the texts --help prints
/// are help_for()'s.
struct Parser {
    CLI::App app{"A distributed mutex / leader election service inside PostgreSQL.", "simba"};
    std::map<std::string, CLI::App*> commands;
    CLI::App* help = nullptr;
    std::string help_topic;
    bool version = false;

    explicit Parser(Args& a) {
        // A repeated option: the last one counts, as in most tools.
        app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
        app.require_subcommand(0, 1);
        // `simba --dsn DSN COMMAND ...` works like `simba COMMAND --dsn DSN ...`.
        app.add_option("-d,--dsn", a.dsn);
        app.add_flag("--version", version);
        help = app.add_subcommand("help");
        help->add_option("COMMAND", help_topic);
        for (const char* name : kCommands) {
            CLI::App* c = app.add_subcommand(name);
            c->add_option("-d,--dsn", a.dsn);
            commands[name] = c;
        }
        auto* run = commands["run"];
        run->add_option("-m,--mutex", a.mutex);
        run->add_option("-c,--contender", a.contender);
        run->add_option("--ttl", a.ttl);
        run->add_option("--transition", a.transition);
        run->add_option("-w,--wait", a.wait);
        run->add_option("--grace", a.grace);
        run->add_option("--metrics-file", a.metrics_file);
        run->add_option("--metrics-interval", a.metrics_interval);
        run->add_flag("-v,--verbose", a.verbose);
        // CMD starts at the first word that is not an option: it and all
        // after it are CMD's (remaining()), even words that look like ours.
        run->prefix_command();
        auto* status = commands["status"];
        status->add_flag("-j,--json", a.json);
        status->add_flag("-W,--watch", a.watch);
        status->add_option("-i,--interval", a.interval);
        status->add_option("-m,--mutex", a.mutex);
        for (const char* name : {"status", "top"}) {
            commands[name]->add_flag("-a,--all", a.all);
            commands[name]->add_option("-p,--pattern", a.pattern);
            commands[name]->add_option("--recent", a.recent);
        }
        auto* acquire = commands["acquire"];
        acquire->add_option("-m,--mutex", a.mutex);
        acquire->add_option("-c,--contender", a.contender);
        acquire->add_option("--ttl", a.ttl);
        acquire->add_option("--transition", a.transition);
        acquire->add_flag("-j,--json", a.json);
        auto* release = commands["release"];
        release->add_option("-m,--mutex", a.mutex);
        release->add_option("-c,--contender", a.contender);
        release->add_flag("-f,--force", a.force);
        auto* owner = commands["owner"];
        owner->add_option("-m,--mutex", a.mutex);
        owner->add_flag("-j,--json", a.json);
        commands["metrics"]->add_option("-l,--listen", a.listen);
        commands["top"]->add_option("-i,--interval", a.interval);
        commands["top"]->add_option("-s,--sort", a.sort);
    }

    /// The command on the command line ("" if none), also after a parse error.
    [[nodiscard]] std::string command() const {
        for (auto& [name, c] : commands)
            if (c->parsed()) return name;
        return {};
    }
};

int usage_error(const std::string& command, const std::string& what) {
    const std::string prefix = command.empty() ? "simba" : "simba " + command;
    std::fprintf(stderr, "%s: %s\nTry '%s --help'.\n", prefix.c_str(), what.c_str(), prefix.c_str());
    return usage;
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> words(argv + 1, argv + argc);
    if (words.empty()) {
        std::fputs(help_for(""), stderr);
        return usage;
    }
    // What follows the first `--` is run's CMD. CLI11 keeps the words from
    // CMD's first one on (prefix_command) but gives a `--` before CMD to the
    // top level, so it is split off here: a `--` after CMD's first word is
    // one of CMD's arguments and goes back in its place.
    std::optional<std::vector<std::string>> after_separator;
    if (auto dd = std::find(words.begin(), words.end(), "--"); dd != words.end()) {
        after_separator.emplace(dd + 1, words.end());
        words.erase(dd, words.end());
    }
    Args a;
    Parser p(a);
    std::string command;
    try {
        std::reverse(words.begin(), words.end());  // CLI11 takes them last first
        p.app.parse(words);
        command = p.command();
        if (command == "run") {
            a.cmd = p.commands["run"]->remaining();
            // prefix_command() passes an unknown option on too: CMD is never one.
            if (!a.cmd.empty() && a.cmd[0].size() > 1 && a.cmd[0][0] == '-')
                return usage_error(command, "unknown option " + a.cmd[0]);
            if (after_separator) {
                if (!a.cmd.empty()) a.cmd.emplace_back("--");
                a.cmd.insert(a.cmd.end(), after_separator->begin(), after_separator->end());
            }
        } else if (after_separator) {
            return usage_error(command, "takes no command after --");
        }
    } catch (const CLI::CallForHelp&) {
        std::fputs(help_for(p.command()), stdout);
        return ok;
    } catch (const CLI::ExtrasError& e) {
        command = p.command();
        const auto extra = p.app.remaining();
        if (command.empty() && !extra.empty() && extra[0].rfind('-', 0) != 0)
            return usage_error("", "unknown command \"" + extra[0] + "\"");
        return usage_error(command, e.what());
    } catch (const CLI::ParseError& e) {
        return usage_error(p.command(), e.what());
    }
    if (p.version) {
        std::puts("simba " SIMBA_VERSION);  // the release (client/CMakeLists.txt)
        return ok;
    }
    if (*p.help) {
        std::fputs(help_for(p.help_topic), stdout);
        return ok;
    }
    if (command.empty()) {
        std::fputs(help_for(""), stderr);
        return usage;
    }
    try {
        if (command == "run") return cmd_run(a);
        if (command == "status") return cmd_status(a);
        if (command == "acquire") return cmd_acquire(a);
        if (command == "release") return cmd_release(a);
        if (command == "owner") return cmd_owner(a);
        if (command == "top") return cmd_top(a);
        return cmd_metrics(a);
    } catch (const UsageError& e) {
        std::string what = e.what();
        // The commands' messages often name the command already.
        const std::string named = "simba " + command + ": ";
        if (what.rfind(named, 0) == 0) what.erase(0, named.size());
        return usage_error(command, what);
    } catch (const Failure& e) {
        std::fprintf(stderr, "simba %s: %s\n", command.c_str(), e.what());
        return e.code;
    } catch (const simba::InvalidArgumentError& e) {
        return usage_error(command, e.what());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "simba %s: %s\n", command.c_str(), e.what());
        return software;
    }
}
