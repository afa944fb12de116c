#include "statement_watchdog.hpp"

#include <sys/socket.h>

#include <string>

#include "simba/log.hpp"

namespace simba::pg::detail {

void StatementWatchdog::begin(int fd) {
    std::lock_guard<std::mutex> lock(m_);
    fd_ = fd;
    until_ = SteadyClock::now() + allowance_();
    arm_locked();
}

void StatementWatchdog::end() {
    std::lock_guard<std::mutex> lock(m_);
    fd_ = -1;
}

void StatementWatchdog::arm_locked() {
    if (check_at_ != SteadyClock::time_point{} && check_at_ <= until_) return;
    const auto at = until_;
    if (executor_.post_at(at, [this, at] { check(at); })) check_at_ = at;
}

void StatementWatchdog::check(SteadyClock::time_point at) {
    {
        std::lock_guard<std::mutex> lock(m_);
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
    {
        std::lock_guard<std::mutex> lock(m_);
        if (fd_ < 0 || SteadyClock::now() < until_) return;
        // Shut down, not closed: the fd stays the I/O thread's to close.
        ::shutdown(fd_, SHUT_RDWR);
        fd_ = -1;
    }
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(allowance_()).count();
    log(LogLevel::error, "a statement got no answer within " + std::to_string(ms) +
                             " ms (frozen backend or unreachable server): dropping the connection");
}

}  // namespace simba::pg::detail
