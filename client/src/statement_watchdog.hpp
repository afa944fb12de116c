// simba client (internal): no network wait without a deadline. A statement
// that has not answered `allowance` after it was sent (a frozen backend, a
// stuck pooler, a blackholed server: TCP accepts the bytes and nothing
// answers, so the server's own statement_timeout cannot fire), or that is
// still waiting at the earliest lease deadline it serves (a renewal that
// late proves nothing), has its socket
// shut down from the handle thread. The blocked libpq call then returns, the
// connection counts as lost and the I/O thread reconnects (libpq tries the
// next host of a multi-host string). One check is queued at a time and
// re-armed, like the lease checks.
#pragma once

#include <functional>

#include "executor.hpp"
#include "io_state.hpp"
#include "thread_annotations.hpp"

namespace simba::pg::detail {

class StatementWatchdog {
public:
    /// Checks run on `executor`; `allowance()` is how long a statement sent
    /// now may take.
    StatementWatchdog(Executor& executor, std::function<SteadyClock::duration()> allowance)
        : executor_(executor), allowance_(std::move(allowance)) {}

    /// Watches the statement about to be sent on socket `fd` for as long as
    /// it lives; its deadline is min(now + allowance, `serves_until`).
    class Watch {
    public:
        Watch(StatementWatchdog& w, int fd, SteadyClock::time_point serves_until) : w_(w) {
            w_.begin(fd, serves_until);
        }
        ~Watch() { w_.end(); }
        Watch(const Watch&) = delete;
        Watch& operator=(const Watch&) = delete;

    private:
        StatementWatchdog& w_;
    };
    [[nodiscard]] Watch watch(int fd, SteadyClock::time_point serves_until = SteadyClock::time_point::max()) {
        return Watch(*this, fd, serves_until);
    }

    /// Shuts down the socket of the statement in flight if it is past its
    /// deadline (for a thread that waits on the I/O thread where the queued
    /// check cannot run: the handle thread itself).
    void cut_overdue() EXCLUDES(m_);

private:
    void begin(int fd, SteadyClock::time_point serves_until) EXCLUDES(m_);
    void end() EXCLUDES(m_);
    void arm_locked() REQUIRES(m_);
    void check(SteadyClock::time_point at) EXCLUDES(m_);

    Executor& executor_;
    std::function<SteadyClock::duration()> allowance_;
    Mutex m_ ACQUIRED_AFTER(io_state);  // and before the Executor's own (arm_locked posts under it)
    int fd_ GUARDED_BY(m_) = -1;                       // socket of the statement in flight; -1: none
    SteadyClock::time_point sent_ GUARDED_BY(m_) = {};    // when it was sent
    SteadyClock::time_point until_ GUARDED_BY(m_) = {};   // its deadline
    SteadyClock::time_point check_at_ GUARDED_BY(m_) = {};  // a check is queued for then ({}: none)
};

}  // namespace simba::pg::detail
