#include "io_state.hpp"

#include <cassert>
#include <chrono>
#include <thread>

namespace simba::pg::detail {

IoRole io_state;

namespace {
thread_local int io_locks_held = 0;  // IoLocks of this thread that hold their io_m
}  // namespace

void assert_io_held() { assert(io_locks_held > 0); }

IoLock::IoLock(std::mutex& io_m, const std::function<void()>& between_tries) : lock_(io_m, std::defer_lock) {
    if (!between_tries) {
        lock_.lock();
    } else {
        while (!lock_.try_lock()) {
            between_tries();
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
    }
    ++io_locks_held;
}

IoLock::~IoLock() {
    if (lock_.owns_lock()) --io_locks_held;
}

void IoLock::unlock() {
    lock_.unlock();
    --io_locks_held;
}

void IoLock::lock() {
    lock_.lock();
    ++io_locks_held;
}

}  // namespace simba::pg::detail
