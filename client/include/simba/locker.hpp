// simba client: Locker, an RAII distributed lock.
//
//   simba::Locker lock(factory, "orders");
//   lock.acquire();                         // blocks until owner
//   write_with_fence(lock.fence());
//   // destructor releases
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>

#include "simba/contender_id.hpp"
#include "simba/factory.hpp"

namespace simba {

class Locker {
public:
    Locker(ContendServiceFactory& factory, std::string mutex,
           std::string contender_id = ContenderId::host(), ContendOptions options = {});
    /// Releases the lock (stop()) if acquired or acquiring.
    ~Locker();
    Locker(const Locker&) = delete;
    Locker& operator=(const Locker&) = delete;

    /// Blocks until this locker owns the mutex. Throws IllegalStateError if
    /// this locker already acquired (or is acquiring): one locker, one hold.
    void acquire();
    /// Like acquire(), but throws TimeoutError if not owner within `timeout`
    /// (measured on the steady clock from the call; spurious wake-ups do not
    /// shorten it). After a timeout the locker is idle and may acquire again.
    void acquire(std::chrono::milliseconds timeout);
    /// Releases now (idempotent); the destructor calls it. Called from
    /// another thread while acquire() is starting its service, it waits for
    /// that start (one round trip, bounded by the statement deadline), so
    /// the lock is never taken after release() returned; that acquire() then
    /// throws IllegalStateError.
    void release();

    /// Still owner (false once the lease was lost or released).
    [[nodiscard]] bool is_owner() const;
    /// The fence of the hold; 0 before acquire() returned.
    [[nodiscard]] std::int64_t fence() const;
    [[nodiscard]] const std::string& mutex() const noexcept;
    [[nodiscard]] const std::string& contender_id() const noexcept;

private:
    struct Contender;
    bool acquire_until(SteadyClock::time_point deadline, bool bounded);
    static void log_release_failure(const std::exception& e);

    std::shared_ptr<Contender> contender_;
    std::unique_ptr<MutexContendService> service_;
    mutable std::mutex call_mutex_;
    std::condition_variable started_;  // starting_ went false
    bool in_use_ = false;
    bool starting_ = false;  // acquire() is starting the service (Status::STARTING)
    std::int64_t fence_ = 0;
};

}  // namespace simba
