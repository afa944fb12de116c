#include "run_plan.hpp"

#include <sys/wait.h>

#include <algorithm>

#include "ownership.hpp"  // client/src: lease_margin, inline
#include "simba/contender_id.hpp"
#include "simba/errors.hpp"

namespace simba::cli {

using std::chrono::duration_cast;
using std::chrono::microseconds;
using std::chrono::milliseconds;

microseconds kill_margin(microseconds lease, int clock_drift_ppm) {
    return duration_cast<microseconds>(detail::lease_margin(lease, milliseconds(500), clock_drift_ppm));
}

microseconds renewal_window(const ContendOptions& lease) {
    return std::max<microseconds>(lease.transition, (lease.ttl + lease.transition) / 4);
}

namespace {

// SIGTERM goes out `grace` before the SIGKILL; it must come after the first
// renewal attempt, leaving a tenth of the renewal window for one to land.
void check_grace(const RunOptions& o, microseconds window) {
    const auto max_grace = window - o.margin - window / 10;
    if (o.grace > max_grace)
        throw UsageError("--grace " + format_duration(o.grace) + " does not fit in the lease: CMD gets SIGTERM --grace " +
                         "before the watchdog's SIGKILL, which comes " + format_duration(o.margin) +
                         " before the lease ends, and renewals start " + format_duration(window) +
                         " before it (--transition, or a quarter of ttl + transition if more); with a tenth of that "
                         "left for renewing, --grace can be at most " + format_duration(max_grace) +
                         ": lower --grace or raise --transition");
}

}  // namespace

RunOptions parse_run_options(const Args& a) {
    if (!a.mutex) throw UsageError("simba run: --mutex NAME is required");
    if (a.cmd.empty()) throw UsageError("simba run: no command given: simba run --mutex NAME -- CMD [ARGS...]");
    RunOptions o;
    o.mutex = *a.mutex;
    o.contender = a.contender ? *a.contender : ContenderId::host();
    o.cmd = a.cmd;
    o.verbose = a.verbose;
    o.lease.ttl = parse_duration(a.ttl.value_or("10s"), "--ttl");
    o.lease.transition = parse_duration(a.transition.value_or("6s"), "--transition");
    if (a.wait && *a.wait != "forever") o.wait = parse_duration(*a.wait, "--wait");
    o.metrics_interval = parse_duration(a.metrics_interval.value_or("5s"), "--metrics-interval");
    if (o.metrics_interval.count() <= 0) throw UsageError("--metrics-interval must be greater than 0");
    o.metrics_file = a.metrics_file.value_or("");
    validate_mutex(o.mutex);
    validate_contender_id(o.contender);
    o.lease.validate();
    o.margin = kill_margin(o.lease.ttl + o.lease.transition, o.lease.clock_drift_ppm);
    const auto window = renewal_window(o.lease);
    o.grace = a.grace ? parse_duration(*a.grace, "--grace") : window / 3;
    check_grace(o, window);
    o.check_every = std::clamp<SteadyClock::duration>(window / 20, milliseconds(5), milliseconds(100));
    return o;
}

int exit_code_of(int wait_status) {
    if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
    return WIFSIGNALED(wait_status) ? 128 + WTERMSIG(wait_status) : software;
}

std::string WatchdogNews::read(const WatchdogPage& page) {
    if (page.cmd_pid.load() < 0) return "";
    auto before_end = [](const std::atomic<std::int64_t>& left_ns) {
        return format_duration(duration_cast<microseconds>(std::chrono::nanoseconds(left_ns.load())));
    };
    const std::string& cmd = o_.cmd[0];
    std::string out;
    const auto term = page.term_sent_ns.load(), kill = page.kill_sent_ns.load();
    if (term != 0 && term != said_term_) {
        said_term_ = term;
        out += "simba run: renewals of " + o_.mutex + " are failing: sent SIGTERM to " + cmd + "'s processes " +
               before_end(page.term_left_ns) + " before the lease ends (--grace " + format_duration(o_.grace) +
               " before the SIGKILL)\n";
    }
    if (kill != 0 && kill != said_kill_) {
        said_kill_ = kill;
        const auto why = static_cast<KillReason>(page.kill_reason.load());
        if (why == KillReason::deadline)
            out += "simba run: no renewal of " + o_.mutex + " (fence " + std::to_string(fence_) +
                   ") came in time: killed (SIGKILL) " + cmd + "'s processes " + before_end(page.kill_left_ns) +
                   " before the lease ends\n";
        else if (why == KillReason::lost)
            out += "simba run: killed (SIGKILL) " + cmd + "'s processes\n";
    }
    // CMD's own exit is worth a line only while the lease is held for what it left.
    if (page.cmd_exited.load() && !said_exit_ && page.lingering.load() > 0 && page.kill_sent_ns.load() == 0) {
        said_exit_ = true;
        out += "simba run: " + cmd + " exited (status " + std::to_string(exit_code_of(page.cmd_status.load())) +
               ") and left " + std::to_string(page.lingering.load()) + " process(es) running: holding " + o_.mutex +
               " until they exit\n";
    }
    return out;
}

KeeperStep keeper_step(const KeeperView& v, std::chrono::nanoseconds margin, std::chrono::nanoseconds grace) {
    const std::int64_t kill_at = v.lease_end - margin.count(), term_at = kill_at - grace.count();
    KeeperStep s;
    if (!v.killing)
        s.begins = v.orphaned ? KillReason::orphaned
                   : v.lease_gone ? KillReason::lost
                   : v.now >= kill_at ? KillReason::deadline
                                      : KillReason::none;
    if (v.killing || s.begins != KillReason::none) {
        s.action = KeeperStep::kill;
        s.wake = v.now + 5000000;  // the killed ones' children are reparented to the watchdog: again
    } else if (v.now >= term_at) {
        s.action = KeeperStep::term;
        s.wake = kill_at;
    } else {
        s.wake = term_at;
    }
    return s;
}

}  // namespace simba::cli
