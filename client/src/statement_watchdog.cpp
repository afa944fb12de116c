#include "statement_watchdog.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <string>

#include "simba/log.hpp"

namespace simba::pg::detail {

void StatementWatchdog::begin(int fd, SteadyClock::time_point serves_until) {
    MutexLock lock(m_);
    fd_ = fd;
    sent_ = SteadyClock::now();
    // A renewal sent with almost no lease left still gets 100 ms: cutting
    // sooner would only trade one late reply for a reconnect.
    until_ = std::min(sent_ + allowance_(), std::max(serves_until, sent_ + std::chrono::milliseconds(100)));
    arm_locked();
}

void StatementWatchdog::end() {
    MutexLock lock(m_);
    fd_ = -1;
}

void StatementWatchdog::arm_locked() {
    if (check_at_ != SteadyClock::time_point{} && check_at_ <= until_) return;
    const auto at = until_;
    if (executor_.post_at(at, [this, at] { check(at); })) check_at_ = at;
}

void StatementWatchdog::check(SteadyClock::time_point at) {
    {
        MutexLock lock(m_);
        if (check_at_ == at) check_at_ = {};
        if (fd_ < 0) return;
        if (SteadyClock::now() < until_) {
            arm_locked();
            return;
        }
    }
    cut_overdue();
}

void StatementWatchdog::cut_overdue() {
    SteadyClock::duration allowed;
    {
        MutexLock lock(m_);
        if (fd_ < 0 || SteadyClock::now() < until_) return;
        // Shut down, not closed: the fd stays the I/O thread's to close.
        ::shutdown(fd_, SHUT_RDWR);
        fd_ = -1;
        allowed = until_ - sent_;
    }
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(allowed).count();
    log(LogLevel::error, "a statement got no answer within " + std::to_string(ms) +
                             " ms (frozen backend or unreachable server): dropping the connection");
}

}  // namespace simba::pg::detail
