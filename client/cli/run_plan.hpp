// simba run's pure parts (run.cpp and watchdog.cpp have the processes,
// signals and the service): its options checked into RunOptions, the margins
// the watchdog keeps, what to report from the watchdog's page, and the
// watchdog's decision at each look at the lease. No I/O here, so the unit
// tests (test/cli_unit_test.cpp) reach all of it without a server.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cli.hpp"
#include "simba/clock.hpp"
#include "simba/service.hpp"
#include "watchdog.hpp"

namespace simba::cli {

/// How long before the proven lease end the watchdog SIGKILLs CMD
/// (docs/design.md, "simba run"): the library's lease margin
/// (src/ownership.hpp, lease_margin: min(fixed, lease / 10) +
/// clock_drift_ppm of the lease) with a fixed part of 500 ms, time to wake
/// and kill, where the library's own is release_margin.
std::chrono::microseconds kill_margin(std::chrono::microseconds lease, int clock_drift_ppm);

/// How long before the lease end the library first tries to renew:
/// max(transition, lease / 4) (contend_period.hpp, the owner's delay).
std::chrono::microseconds renewal_window(const ContendOptions& lease);

/// simba run's command line, defaults applied and checked.
struct RunOptions {
    std::string mutex, contender;
    ContendOptions lease;                           ///< --ttl, --transition
    std::optional<std::chrono::microseconds> wait;  ///< nullopt: forever
    std::chrono::microseconds metrics_interval{};
    std::string metrics_file;                       ///< "": none
    bool verbose = false;
    std::vector<std::string> cmd;
    std::chrono::microseconds margin{};  ///< kill_margin of the lease
    std::chrono::microseconds grace{};   ///< SIGTERM this long before the SIGKILL
    /// How often the lease end the library proves is passed to the watchdog.
    SteadyClock::duration check_every{};
};

/// Throws UsageError (a missing or bad option, a --grace that does not fit
/// the lease) or the library's InvalidArgumentError (mutex, contender id,
/// ttl), in the order the options are checked.
RunOptions parse_run_options(const Args& a);

/// The exit code of a wait status: its exit status, 128 + a killing
/// signal, else `software`.
int exit_code_of(int wait_status);

/// What the watchdog did, worded once each for stderr: it acts first and
/// simba run reports after, from the page.
class WatchdogNews {
public:
    WatchdogNews(const RunOptions& o, std::int64_t fence) : o_(o), fence_(fence) {}
    /// The lines not said yet ("" when none).
    std::string read(const WatchdogPage& page);

private:
    const RunOptions& o_;
    std::int64_t fence_;
    std::int64_t said_term_ = 0, said_kill_ = 0;
    bool said_exit_ = false;
};

/// What the watchdog sees at one look at the lease (CLOCK_BOOTTIME ns).
struct KeeperView {
    std::int64_t now = 0;
    std::int64_t lease_end = 0;  ///< the latest end simba run proved
    bool killing = false;        ///< a kill began at an earlier look: it never stops
    bool orphaned = false;       ///< simba run died (its pipe closed)
    bool lease_gone = false;     ///< simba run said the lease is gone (kill_now)
};

/// What the watchdog does at that look: SIGKILL at lease end - margin (or
/// at once when orphaned or the lease is gone), SIGTERM from `grace` before
/// that, else wait.
struct KeeperStep {
    enum Action { wait, term, kill } action = wait;
    KillReason begins = KillReason::none;  ///< why, when a kill begins at this look
    std::int64_t wake = 0;                 ///< when to look again
};
KeeperStep keeper_step(const KeeperView& v, std::chrono::nanoseconds margin, std::chrono::nanoseconds grace);

}  // namespace simba::cli
