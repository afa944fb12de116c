// simba CLI: shared pieces of the commands (options, durations, exit codes,
// connecting, reporting server errors).
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <pqxx/pqxx>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace simba::cli {

/// simba_acquire's owner_id as the CLI compares it with its own id ($2): a
/// tenure belongs to an id and the role that took it, so another role
/// holding our id reads as "role:id" and never as ours.
#define SIMBA_CLI_OWNER_ID \
    "CASE WHEN owner_role <> current_user AND owner_id = $2 THEN owner_role || ':' || owner_id ELSE owner_id END"

/// Exit codes (cli/README.md, "Exit codes"). sysexits.h values where one fits.
enum Exit : int {
    ok = 0,
    not_held = 1,         ///< owner: the mutex is free; release: the caller did not hold it
    usage = 64,           ///< EX_USAGE: bad command line
    unavailable = 69,     ///< EX_UNAVAILABLE: could not connect to the server
    software = 70,        ///< EX_SOFTWARE: unexpected server or internal error
    busy = 75,            ///< EX_TEMPFAIL: the mutex is held (--wait 0, or the wait timed out)
    lost_lock = 76,       ///< the lease was lost while CMD ran; CMD was terminated
    no_permission = 77,   ///< EX_NOPERM: the role lacks a privilege (42501)
    config = 78,          ///< EX_CONFIG: extension missing or too old in that database
    cannot_execute = 126, ///< CMD found but not executable
    not_found = 127,      ///< CMD not found
};

/// A usage error: printed with a pointer to --help, exit 64.
struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};
/// Any error with its exit code, already worded for the user.
struct Failure : std::runtime_error {
    Failure(int code, const std::string& what) : std::runtime_error(what), code(code) {}
    int code;
};

/// A command's options as parsed (main.cpp declares them with CLI11): an
/// option not given is nullopt / false, so each command applies its defaults
/// and tells "not given" from "given empty".
struct Args {
    std::string dsn;  ///< --dsn; empty = libpq's environment
    std::optional<std::string> mutex, contender, ttl, transition, wait, grace, interval, metrics_file,
        metrics_interval, listen, sort;
    std::optional<std::string> pattern, recent;  ///< status and top: --pattern GLOB, --recent DURATION
    bool json = false, watch = false, force = false, verbose = false, all = false;
    std::vector<std::string> cmd;  ///< run: CMD [ARGS...]
};

/// "10s", "500ms", "1.5s", "2m", "1h", "250us", a bare number = seconds.
/// Throws UsageError naming `what`.
std::chrono::microseconds parse_duration(const std::string& text, const std::string& what);
std::string format_duration(std::chrono::microseconds d);
/// A PostgreSQL interval literal for `d` ("1500000 microseconds").
std::string to_interval(std::chrono::microseconds d);

/// Opens a connection (`dsn`, else libpq's environment). Throws Failure(69)
/// with libpq's reason and what to do.
std::unique_ptr<pqxx::connection> connect(const std::string& dsn, const std::string& application_name);

/// How long a command waits for the server's answers. libpq has no deadline
/// of its own, and statement_timeout cannot help when the server, a pooler
/// or the network in between stops answering (docs/design.md, rule 3).
constexpr std::chrono::seconds answer_deadline{10};

/// While it lives, bounds the wait for `c`'s answers to answer_deadline,
/// counted from its construction: past it, it says so on stderr and shuts
/// the socket down, so the blocked call fails as a lost connection (69).
/// Scope it around a command's statements.
class AnswerDeadline {
public:
    explicit AnswerDeadline(pqxx::connection& c);
    ~AnswerDeadline();
    AnswerDeadline(const AnswerDeadline&) = delete;
    AnswerDeadline& operator=(const AnswerDeadline&) = delete;

private:
    std::mutex m_;
    std::condition_variable cv_;
    bool done_ = false;
    std::thread t_;
};

/// A field as text ("" for NULL) and as a number (0 for NULL).
inline std::string str(const pqxx::field& f) { return f.is_null() ? std::string() : f.c_str(); }
inline double num(const pqxx::field& f) { return f.is_null() ? 0.0 : f.as<double>(); }

/// `s` padded with spaces to `w` characters, for columns.
inline std::string pad(std::string s, std::size_t w) {
    if (s.size() < w) s.append(w - s.size(), ' ');
    return s;
}

/// What `simba status` and `simba top` show (cli/README.md, "simba status"): by
/// default what is held, waited for or changed within `recent`; `all`:
/// every row; `pattern`: names matching a glob (* and ?); `exact`: one
/// mutex (--mutex), shown whatever its state.
struct ViewFilter {
    bool all = false;
    std::optional<std::string> pattern;  ///< as a LIKE pattern
    std::optional<std::string> exact;
    std::chrono::microseconds recent{std::chrono::minutes(10)};
};
/// From --all, --pattern, --recent and --mutex; throws UsageError.
ViewFilter view_filter(const Args& a);
/// A glob (* any run, ? one character) as a LIKE pattern, other characters literal.
std::string glob_to_like(const std::string& glob);

/// One read of everything the views show, filtered (commands.cpp).
struct StatusSnapshot {
    pqxx::result mutexes, rwlocks, semaphores, sessions;
    long long hidden_mutexes = 0, hidden_rwlocks = 0, hidden_sessions = 0;
};
/// Reads it in one nontransaction; throws pqxx errors.
StatusSnapshot read_snapshot(pqxx::connection& c, const ViewFilter& f);
/// The lines that say what the filter left out ("" when nothing).
std::string hidden_note(const StatusSnapshot& s);

/// Maps a server error to a Failure with an exit code and a hint.
[[noreturn]] void fail_sql(const std::exception& e, const std::string& doing);

int cmd_run(const Args& args);
int cmd_status(const Args& args);
int cmd_acquire(const Args& args);
int cmd_release(const Args& args);
int cmd_owner(const Args& args);
int cmd_metrics(const Args& args);
int cmd_top(const Args& args);

}  // namespace simba::cli

namespace simba::cli {
/// The --help text of a command ("" = the overview).
const char* help_for(const std::string& command);
}  // namespace simba::cli
