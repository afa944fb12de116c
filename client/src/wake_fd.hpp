// simba client (internal): WakeFd, the eventfd another thread writes to
// wake the I/O thread from its poll().
#pragma once

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>

#include "simba/errors.hpp"

namespace simba::pg::detail {

class WakeFd {
public:
    WakeFd() : fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
        if (fd_ < 0) throw Error("eventfd failed");
    }
    ~WakeFd() { ::close(fd_); }
    WakeFd(const WakeFd&) = delete;
    WakeFd& operator=(const WakeFd&) = delete;

    /// From any thread: the next (or current) poll() on fd() returns.
    void wake() {
        std::uint64_t one = 1;
        [[maybe_unused]] auto n = ::write(fd_, &one, sizeof one);
    }
    /// After poll() saw fd() readable: the wake-ups so far are spent.
    void drain() {
        std::uint64_t v;
        [[maybe_unused]] auto r = ::read(fd_, &v, sizeof v);
    }
    [[nodiscard]] int fd() const { return fd_; }

private:
    const int fd_;
};

}  // namespace simba::pg::detail
