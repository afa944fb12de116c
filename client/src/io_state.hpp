// simba client (internal): a factory's I/O state as a capability clang's
// thread-safety analysis checks (thread_annotations.hpp). That state is the
// statement connection and its bookkeeping (Connections), the services'
// driver with its sessions and owed releases (ServiceDriver), and what the
// LISTEN inbox delivers: the I/O thread holds the factory's io_m over it
// except while it sleeps in poll(), and a caller's round trip takes io_m
// to do its own (start_and_wait, stop).
//
// One role, io_state, stands for every factory's io_m: clang names a
// capability by the expression that reaches it, and the parts reach each
// other through references it cannot see are one object. So a REQUIRES
// names the role; IoLock takes the factory's real mutex and the role with
// it. What the analysis cannot see (code posted to the I/O thread, run
// under io_m) says so with assert_io_held().
#pragma once

#include <functional>
#include <mutex>

#include "thread_annotations.hpp"

namespace simba::pg::detail {

class CAPABILITY("role") IoRole {};
/// A name for the analysis only: nothing reads it.
extern IoRole io_state;

/// Code posted to the I/O thread (its commands and timed tasks), and
/// callbacks the I/O state calls, run with io_m held: tells the analysis,
/// and checks it in a build with assertions.
void assert_io_held() ASSERT_CAPABILITY(io_state);

/// A lock on a factory's io_m that holds io_state for the analysis.
class SCOPED_CAPABILITY IoLock {
public:
    /// `between_tries`, if set, is called every 5 ms until io_m is free (the
    /// handle thread runs the statement watchdog while it waits).
    explicit IoLock(std::mutex& io_m, const std::function<void()>& between_tries = {}) ACQUIRE(io_state);
    ~IoLock() RELEASE();
    IoLock(const IoLock&) = delete;
    IoLock& operator=(const IoLock&) = delete;

private:
    friend class IoUnlock;
    void unlock();
    void lock();
    std::unique_lock<std::mutex> lock_;
};

/// The reverse, for a scope that must not hold io_m (a connect, the
/// I/O thread's poll()): unlocks it, and locks it again at the scope's end.
class SCOPED_CAPABILITY IoUnlock {
public:
    explicit IoUnlock(IoLock& lock) RELEASE(io_state) : lock_(lock) { lock_.unlock(); }
    ~IoUnlock() RELEASE() { lock_.lock(); }  // the scope ends: clang spells it so
    IoUnlock(const IoUnlock&) = delete;
    IoUnlock& operator=(const IoUnlock&) = delete;

private:
    IoLock& lock_;
};

}  // namespace simba::pg::detail
