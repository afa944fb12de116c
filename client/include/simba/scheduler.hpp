// simba client: Scheduler, leader-gated periodic work.
//
// Contends for a mutex; while (and only while) it is the leader, runs `work`
// on its own worker thread on a fixed-rate or fixed-delay schedule. Losing
// leadership cancels the next runs (a run in progress finishes). An exception
// thrown by work is logged and the schedule continues.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

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

    /// Starts contending (status machine as MutexContendService::start).
    /// start() and stop() are safe to call from any threads at once.
    void start();
    /// Cancels further runs, waits for a running work item to finish, then
    /// stops contending: leadership is released only after that item, so the
    /// next leader's work never overlaps it. Must not be called from inside
    /// `work`.
    void stop();
    /// Leader right now (the service's own lease check).
    [[nodiscard]] bool is_leader() const;
    [[nodiscard]] Status status() const noexcept;
    [[nodiscard]] const MutexContendService& service() const noexcept { return *service_; }

    struct State;

private:
    std::shared_ptr<State> state_;
    std::unique_ptr<MutexContendService> service_;
    std::mutex call_m_;  // start() and stop() one at a time: the worker is theirs
    std::thread worker_;
};

}  // namespace simba
