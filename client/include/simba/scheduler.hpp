// simba client: Scheduler, leader-gated periodic work.
//
// Contends for a mutex; while (and only while) it is the leader, runs `work`
// on its own worker thread on a fixed-rate or fixed-delay schedule. Losing
// leadership cancels the next runs (a run in progress finishes). An exception
// thrown by work is logged and the schedule continues; a setup mistake
// (no extension, no grant, wrong database) is only logged too, unless the
// caller asks wait_leader(), which throws it.
//
// Thread-safety: start() and stop() may be called from any threads at once
// (one wins each transition, the others get IllegalStateError);
// wait_leader(), is_leader(), status() and service() from any thread, at
// any time. Moving, assigning or destroying a Scheduler must not overlap
// another call on it. A moved-from Scheduler is empty: status() INITIAL,
// is_leader() false, start(), stop() and wait_leader() throw
// IllegalStateError; it may be assigned to or destroyed.
// `work` runs on the scheduler's own thread, one run at a time. It may call
// is_leader(), status() and service(), but not stop() or the destructor
// (they wait for the run in progress: a deadlock).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "simba/contender_id.hpp"
#include "simba/factory.hpp"

namespace simba {

struct ScheduleConfig {
    enum class Strategy { FIXED_RATE, FIXED_DELAY };
    Strategy strategy = Strategy::FIXED_RATE;
    /// Delay from becoming leader to the first run.
    std::chrono::milliseconds initial_delay{0};
    /// FIXED_RATE: start-to-start; FIXED_DELAY: end-to-start.
    std::chrono::milliseconds period{1000};

    static ScheduleConfig fixed_rate(std::chrono::milliseconds initial_delay,
                                     std::chrono::milliseconds period);
    static ScheduleConfig fixed_delay(std::chrono::milliseconds initial_delay,
                                      std::chrono::milliseconds delay);
};

class Scheduler {
public:
    using Work = std::function<void()>;
    /// Throws InvalidArgumentError if period <= 0 or initial_delay < 0.
    Scheduler(ContendServiceFactory& factory, std::string mutex, ScheduleConfig config, Work work,
              std::string contender_id = ContenderId::host(), ContendOptions options = {});
    /// Calls stop() if running.
    ~Scheduler();
    Scheduler(const Scheduler&) = delete;
    Scheduler& operator=(const Scheduler&) = delete;
    /// Moves take the service, its schedule and a running worker along:
    /// the new object stops them. Assigning to a scheduler destroys what it
    /// had first (stopping it if running). Neither may run concurrently
    /// with another call on either object.
    Scheduler(Scheduler&& other) noexcept;
    Scheduler& operator=(Scheduler&& other) noexcept;

    /// Starts contending (status machine as MutexContendService::start).
    /// start() and stop() are safe to call from any threads at once.
    void start();
    /// Cancels further runs, waits for a running work item to finish, then
    /// stops contending: leadership is released only after that item, so the
    /// next leader's work never overlaps it. Must not be called from inside
    /// `work`.
    void stop();
    /// Blocks until this scheduler leads, `until` passes or it stops;
    /// returns is_leader(). Throws a setup mistake at once, as
    /// MutexContendService::wait_owner (no extension: ServerError 42883; no
    /// grant: PermissionDeniedError; no server, wrong database or role:
    /// ConnectionError), which would otherwise only be logged while the
    /// scheduler keeps retrying. Call it after start().
    [[nodiscard]] bool wait_leader(SteadyClock::time_point until) const;
    template <typename Clock, typename Duration>
    [[nodiscard]] bool wait_leader(const std::chrono::time_point<Clock, Duration>& until) const {
        return wait_leader(steady_deadline(until));
    }
    /// Leader right now (the service's own lease check).
    [[nodiscard]] bool is_leader() const;
    [[nodiscard]] Status status() const noexcept;
    /// The contend service. Not on a moved-from scheduler.
    [[nodiscard]] const MutexContendService& service() const noexcept;

    struct State;

private:
    struct Impl;
    Impl& impl() const;
    std::unique_ptr<Impl> impl_;
};

}  // namespace simba
