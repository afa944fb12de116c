// simba client (internal, not installed): clang's thread-safety analysis
// (-Wthread-safety; cmake -DSIMBA_THREAD_SAFETY=ON, test/thread-safety/run.sh).
// The lock rules of a class as attributes the compiler checks: a member
// GUARDED_BY(m_) read or written without m_ held, or a REQUIRES(m_) helper
// called without it, is an error in that build. Empty for other compilers.
//
// std::mutex carries no attributes in libstdc++, so the classes below wrap
// it: Mutex, MutexLock (lock_guard), MutexUnlock, UniqueLock (unique_lock, relockable) and
// CondVar (a std::condition_variable over UniqueLock). Same behaviour as the
// standard types; only the analysis sees a difference.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "simba/clock.hpp"

#if defined(__clang__)
#define SIMBA_TSA(x) __attribute__((x))
#else
#define SIMBA_TSA(x)
#endif

#define CAPABILITY(x) SIMBA_TSA(capability(x))
#define SCOPED_CAPABILITY SIMBA_TSA(scoped_lockable)
#define GUARDED_BY(x) SIMBA_TSA(guarded_by(x))
#define PT_GUARDED_BY(x) SIMBA_TSA(pt_guarded_by(x))
#define ACQUIRED_BEFORE(...) SIMBA_TSA(acquired_before(__VA_ARGS__))
#define ACQUIRED_AFTER(...) SIMBA_TSA(acquired_after(__VA_ARGS__))
#define REQUIRES(...) SIMBA_TSA(requires_capability(__VA_ARGS__))
#define EXCLUDES(...) SIMBA_TSA(locks_excluded(__VA_ARGS__))
#define ACQUIRE(...) SIMBA_TSA(acquire_capability(__VA_ARGS__))
#define RELEASE(...) SIMBA_TSA(release_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) SIMBA_TSA(try_acquire_capability(__VA_ARGS__))
#define ASSERT_CAPABILITY(x) SIMBA_TSA(assert_capability(x))
#define RETURN_CAPABILITY(x) SIMBA_TSA(lock_returned(x))
#define NO_THREAD_SAFETY_ANALYSIS SIMBA_TSA(no_thread_safety_analysis)

namespace simba::detail {

class CondVar;
class UniqueLock;

/// A std::mutex the analysis knows.
class CAPABILITY("mutex") Mutex {
public:
    Mutex() = default;
    Mutex(const Mutex&) = delete;
    Mutex& operator=(const Mutex&) = delete;

    void lock() ACQUIRE() { m_.lock(); }
    void unlock() RELEASE() { m_.unlock(); }
    bool try_lock() TRY_ACQUIRE(true) { return m_.try_lock(); }

private:
    friend class UniqueLock;
    std::mutex m_;
};

/// std::lock_guard<std::mutex>.
class SCOPED_CAPABILITY MutexLock {
public:
    explicit MutexLock(Mutex& m) ACQUIRE(m) : m_(m) { m_.lock(); }
    ~MutexLock() RELEASE() { m_.unlock(); }
    MutexLock(const MutexLock&) = delete;
    MutexLock& operator=(const MutexLock&) = delete;

private:
    Mutex& m_;
};

/// The reverse: unlocks a held mutex for its scope, locks it again at the
/// end (also when an exception leaves it), for a helper that REQUIRES the
/// mutex and calls out without it.
class SCOPED_CAPABILITY MutexUnlock {
public:
    explicit MutexUnlock(Mutex& m) RELEASE(m) : m_(m) { m_.unlock(); }
    ~MutexUnlock() RELEASE() { m_.lock(); }  // the scope ends: clang spells it so
    MutexUnlock(const MutexUnlock&) = delete;
    MutexUnlock& operator=(const MutexUnlock&) = delete;

private:
    Mutex& m_;
};

/// std::unique_lock<std::mutex>, locked from construction: unlock() and
/// lock() again in between (as around a call that must not hold it), and
/// CondVar's waits.
class SCOPED_CAPABILITY UniqueLock {
public:
    explicit UniqueLock(Mutex& m) ACQUIRE(m) : lock_(m.m_) {}
    ~UniqueLock() RELEASE() {}
    UniqueLock(const UniqueLock&) = delete;
    UniqueLock& operator=(const UniqueLock&) = delete;

    void lock() ACQUIRE() { lock_.lock(); }
    void unlock() RELEASE() { lock_.unlock(); }

private:
    friend class CondVar;
    std::unique_lock<std::mutex> lock_;
};

/// std::condition_variable over a UniqueLock. The waits take no predicate:
/// a predicate lambda reads guarded members in a body the analysis checks
/// on its own, without the lock; callers loop instead.
class CondVar {
public:
    void notify_one() noexcept { cv_.notify_one(); }
    void notify_all() noexcept { cv_.notify_all(); }
    void wait(UniqueLock& lock) { cv_.wait(lock.lock_); }
    /// One wait, until `until` at the latest (SteadyClock, in slices of an
    /// hour at most, as simba::wait_until: time_point::max() is fine);
    /// false once `until` has passed. May wake early: the caller loops.
    bool wait_until(UniqueLock& lock, SteadyClock::time_point until) {
        const auto now = SteadyClock::now();
        if (now >= until) return false;
        cv_.wait_for(lock.lock_, std::min<SteadyClock::duration>(until - now, std::chrono::hours(1)));
        return SteadyClock::now() < until;
    }

private:
    std::condition_variable cv_;
};

}  // namespace simba::detail

namespace simba::pg::detail {
using simba::detail::CondVar;
using simba::detail::Mutex;
using simba::detail::MutexLock;
using simba::detail::MutexUnlock;
using simba::detail::UniqueLock;
}  // namespace simba::pg::detail
