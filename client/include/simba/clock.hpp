// simba client: the clock every lease deadline is measured on.
//
// CLOCK_BOOTTIME, not std::chrono::steady_clock (CLOCK_MONOTONIC): both are
// immune to wall-clock steps, but only CLOCK_BOOTTIME keeps counting while
// the machine is suspended. A client whose laptop or VM slept through its
// lease must find the deadline passed when it wakes, not still ahead
// (docs/design.md, "Client", clocks).
// Everything here is stateless: call it from any thread.
#pragma once

#include <time.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <type_traits>

namespace simba {

struct BootClock {
    using duration = std::chrono::nanoseconds;
    using rep = duration::rep;
    using period = duration::period;
    using time_point = std::chrono::time_point<BootClock>;
    static constexpr bool is_steady = true;

    static time_point now() noexcept {
        timespec ts{};
        ::clock_gettime(CLOCK_BOOTTIME, &ts);
        return time_point(std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec));
    }
};

/// The client's clock (named for what callers rely on: it never goes back).
using SteadyClock = BootClock;

/// A deadline of any clock (system_clock, std::chrono::steady_clock, ...) on
/// SteadyClock, as std::condition_variable::wait_until takes any clock's:
/// the time left on its own clock, from now on ours, rounded up (never
/// early); a deadline too far to represent is time_point::max().
template <typename Clock, typename Duration>
SteadyClock::time_point steady_deadline(const std::chrono::time_point<Clock, Duration>& deadline) {
    using std::chrono::ceil;
    if constexpr (std::is_same_v<Clock, SteadyClock>) {
        return std::chrono::time_point_cast<SteadyClock::duration>(deadline);
    } else {
        const auto now = Clock::now();
        const auto steady_now = SteadyClock::now();
        if (deadline <= now) return steady_now;
        const auto left = deadline - now;
        const auto room = std::chrono::duration_cast<std::chrono::duration<double>>(SteadyClock::time_point::max() - steady_now);
        if (std::chrono::duration<double>(left) >= room) return SteadyClock::time_point::max();
        return steady_now + ceil<SteadyClock::duration>(left);
    }
}

/// cv.wait_until(lock, until, pred) for a SteadyClock deadline. The standard
/// library maps another clock's deadline onto its own by adding (until - now),
/// which overflows for time_point::max() (an unbounded wait) and then spins:
/// wait in bounded slices instead. Returns pred().
template <typename Lock, typename Pred>
bool wait_until(std::condition_variable& cv, Lock& lock, SteadyClock::time_point until, Pred pred) {
    while (!pred()) {
        const auto now = SteadyClock::now();
        if (now >= until) return pred();
        cv.wait_for(lock, std::min<SteadyClock::duration>(until - now, std::chrono::hours(1)));
    }
    return true;
}

}  // namespace simba
