// simba run's watchdog: the process that keeps CMD inside the lease
// (docs/design.md, "simba run").
//
// simba run forks it while still single-threaded; the watchdog forks CMD and
// is a child subreaper, so every process CMD starts stays its descendant,
// daemons included (setsid, double fork). simba run only publishes the lease
// end it can prove into a shared page after each renewal; the watchdog sleeps
// on a CLOCK_BOOTTIME timer and, with no extension, signals every one of those
// processes itself: SIGTERM at end - margin - grace, SIGKILL at end - margin.
// A stopped, killed or wedged simba run therefore cannot keep CMD alive past
// the lease: the watchdog needs nothing from it to act, and a closed pipe
// (simba run died) makes it kill at once. It exits, and simba run may
// release, only when no descendant is left.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "simba/clock.hpp"

namespace simba::cli {

/// Why the watchdog killed CMD's processes.
enum class KillReason : int {
    none = 0,
    deadline = 1,  ///< no renewal reached it before end - margin
    lost = 2,      ///< simba run said the lease is gone (takeover, forced release)
    orphaned = 3,  ///< simba run died
};

/// Shared between simba run and its watchdog (one MAP_SHARED page): lock-free
/// atomics only, so neither side ever waits for the other.
struct WatchdogPage {
    // simba run -> watchdog
    std::atomic<std::int64_t> lease_end_ns{0};  ///< proven lease end, CLOCK_BOOTTIME ns; only grows
    std::atomic<std::int64_t> fence{0};
    std::atomic<int> start{0};                  ///< run CMD now
    std::atomic<int> kill_now{0};               ///< the lease is gone: kill everything
    std::atomic<std::uint64_t> forward{0};      ///< signals to pass on, bit N = signal N
    // watchdog -> simba run
    std::atomic<int> cmd_pid{0};
    std::atomic<int> cmd_exited{0};
    std::atomic<int> cmd_status{0};             ///< CMD's wait status, once cmd_exited
    std::atomic<int> lingering{0};              ///< processes CMD left, seen at the last reap
    std::atomic<std::int64_t> term_sent_ns{0};  ///< when SIGTERM went out (renewals failing), 0: not
    std::atomic<std::int64_t> term_left_ns{0};  ///< ... that long before the lease end then proven
    std::atomic<int> term_pending{0};           ///< that SIGTERM stands: no renewal came after it
    std::atomic<std::int64_t> kill_sent_ns{0};  ///< when the first SIGKILL went out, 0: not
    std::atomic<std::int64_t> kill_left_ns{0};  ///< ... that long before the lease end then proven
    std::atomic<int> kill_reason{0};            ///< KillReason
    std::atomic<int> done{0};                   ///< no process of CMD's is left
};

struct WatchdogConfig {
    std::vector<std::string> argv;  ///< CMD
    std::string mutex, contender;   ///< for SIMBA_MUTEX, SIMBA_CONTENDER
    std::chrono::nanoseconds margin{0};  ///< SIGKILL this long before the lease end
    std::chrono::nanoseconds grace{0};   ///< SIGTERM this long before the SIGKILL
    sigset_t cmd_mask{};                 ///< the signal mask CMD starts with
};

class Watchdog {
public:
    /// Forks the watchdog. Must be called while this process has a single
    /// thread: the child goes on running this program's code (no exec).
    /// `close_in_child`: descriptors the watchdog has no use for.
    explicit Watchdog(WatchdogConfig config, const std::vector<int>& close_in_child);
    ~Watchdog();  ///< closes the pipe: a watchdog with no CMD exits, one with CMD kills it
    Watchdog(const Watchdog&) = delete;
    Watchdog& operator=(const Watchdog&) = delete;

    pid_t pid() const { return pid_; }
    /// Readable when the watchdog has news in the page (drain it with drain()).
    int news_fd() const { return news_r_; }
    void drain();
    const WatchdogPage& page() const { return *page_; }

    /// The lease is proven until `end`; never shortens an earlier proof.
    void extend(SteadyClock::time_point end);
    /// Run CMD (the lease end must have been published first).
    void start(std::int64_t fence);
    /// The lease is gone: kill every process of CMD's now.
    void kill_now();
    /// Pass `sig` on to CMD's processes.
    void forward(int sig);

private:
    void poke();
    pid_t pid_ = -1;
    WatchdogPage* page_ = nullptr;
    int life_w_ = -1;  ///< our end of the pipe the watchdog reads; its EOF = we died
    int news_r_ = -1;
};

/// This process's children (the kernel's children list file is not built
/// everywhere: a /proc scan).
std::vector<pid_t> children_of(pid_t parent);

/// Kills (SIGKILL) every child of this process and, as their children are
/// reparented to it (a subreaper), theirs, until none is left; reaps them.
/// simba run's fallback when its watchdog died.
void kill_all_children();

}  // namespace simba::cli
