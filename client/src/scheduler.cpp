#include "simba/scheduler.hpp"

#include <thread>

#include "simba/errors.hpp"
#include "simba/log.hpp"
#include "thread_annotations.hpp"

namespace simba {

ScheduleConfig ScheduleConfig::fixed_rate(std::chrono::milliseconds initial_delay, std::chrono::milliseconds period) {
    return ScheduleConfig{Strategy::FIXED_RATE, initial_delay, period};
}

ScheduleConfig ScheduleConfig::fixed_delay(std::chrono::milliseconds initial_delay, std::chrono::milliseconds delay) {
    return ScheduleConfig{Strategy::FIXED_DELAY, initial_delay, delay};
}

struct Scheduler::State {
    ScheduleConfig config;
    Work work;
    detail::Mutex m;
    detail::CondVar cv;
    bool leader GUARDED_BY(m) = false;
    std::uint64_t term GUARDED_BY(m) = 0;  // +1 on every leadership change
    bool quit GUARDED_BY(m) = false;
    const MutexContendService* service = nullptr;  // set before the worker starts

    void run_worker() EXCLUDES(m);
    /// The leadership of `my_term` is over (or the scheduler stops).
    bool cancelled(std::uint64_t my_term) const REQUIRES(m) { return quit || !leader || term != my_term; }
};

namespace {

class WorkContender final : public MutexContender {
public:
    WorkContender(std::string mutex, std::string id, std::shared_ptr<Scheduler::State> state)
        : MutexContender(std::move(mutex), std::move(id)), state_(std::move(state)) {}
    void on_acquired(const MutexState&) override { set(true); }
    void on_released(const MutexState&) override { set(false); }

private:
    void set(bool leader);
    std::shared_ptr<Scheduler::State> state_;
};

}  // namespace

void WorkContender::set(bool leader) {
    detail::MutexLock lock(state_->m);
    state_->leader = leader;
    ++state_->term;
    state_->cv.notify_all();
}

void Scheduler::State::run_worker() {
    detail::UniqueLock lock(m);
    while (!quit) {
        if (!leader) {
            while (!quit && !leader) cv.wait(lock);
            continue;
        }
        const std::uint64_t my_term = term;
        auto next = SteadyClock::now() + config.initial_delay;
        while (!cancelled(my_term)) {
            // Until the next run, unless the leadership ends first.
            while (!cancelled(my_term) && SteadyClock::now() < next) cv.wait_until(lock, next);
            if (cancelled(my_term)) break;  // lost leadership: next runs cancelled
            if (service && !service->is_owner()) {
                // The lease deadline passed; on_released is on its way.
                next += config.period;
                continue;
            }
            lock.unlock();
            try {
                work();
            } catch (const std::exception& e) {
                log(LogLevel::error, std::string("scheduled work threw: ") + e.what());
            } catch (...) {
                log(LogLevel::error, "scheduled work threw a non-std exception");
            }
            lock.lock();
            auto now = SteadyClock::now();
            if (config.strategy == ScheduleConfig::Strategy::FIXED_RATE) {
                next += config.period;
                while (next < now) next += config.period;  // skip missed runs, no burst
            } else {
                next = now + config.period;
            }
        }
    }
}

/// What a Scheduler owns, behind a pointer so that a running one can move.
struct Scheduler::Impl {
    std::shared_ptr<State> state = std::make_shared<State>();
    std::unique_ptr<MutexContendService> service;
    detail::Mutex call_m;  // start() and stop() one at a time: the worker is theirs
    std::thread worker GUARDED_BY(call_m);

    ~Impl() {
        try {
            if (service->status() == Status::RUNNING) stop();
        } catch (const std::exception& e) {
            log(LogLevel::error, std::string("Scheduler stop in destructor failed: ") + e.what());
        }
        if (worker.joinable()) worker.join();
    }

    void start() EXCLUDES(call_m) {
        detail::MutexLock call(call_m);
        if (worker.joinable()) throw IllegalStateError("Scheduler already started");
        {
            detail::MutexLock lock(state->m);
            state->quit = false;
        }
        service->start();
        auto st = state;
        worker = std::thread([st] { st->run_worker(); });
    }

    void stop() EXCLUDES(call_m) {
        detail::MutexLock call(call_m);
        std::thread running;
        {
            detail::MutexLock lock(state->m);
            if (service->status() != Status::RUNNING)
                throw IllegalStateError(std::string("stop() needs status RUNNING, not ") +
                                        to_string(service->status()));
            if (state->quit) throw IllegalStateError("Scheduler is already stopping");
            state->quit = true;  // no further runs
            state->cv.notify_all();
            running = std::move(worker);
        }
        // A running work item finishes while we still hold the lock; only then
        // is it released, so the next leader's work never overlaps ours.
        if (running.joinable()) running.join();
        service->stop();
    }
};

Scheduler::Scheduler(ContendServiceFactory& factory, std::string mutex, ScheduleConfig config, Work work,
                     std::string contender_id, ContendOptions options) {
    if (config.period.count() <= 0) throw InvalidArgumentError("period must be positive", "22023");
    if (config.initial_delay.count() < 0) throw InvalidArgumentError("initial_delay must not be negative", "22023");
    if (!work) throw InvalidArgumentError("work must not be null", "22004");
    auto impl = std::make_unique<Impl>();
    auto& state = *impl->state;
    state.config = config;
    state.work = std::move(work);
    impl->service = factory.create(
        std::make_shared<WorkContender>(std::move(mutex), std::move(contender_id), impl->state), options);
    state.service = impl->service.get();
    impl_ = std::move(impl);
}

Scheduler::~Scheduler() = default;
Scheduler::Scheduler(Scheduler&& other) noexcept = default;
Scheduler& Scheduler::operator=(Scheduler&& other) noexcept = default;

Scheduler::Impl& Scheduler::impl() const {
    if (!impl_) throw IllegalStateError("this Scheduler was moved from");
    return *impl_;
}

void Scheduler::start() { impl().start(); }

void Scheduler::stop() { impl().stop(); }

bool Scheduler::wait_leader(SteadyClock::time_point until) const { return impl().service->wait_owner(until); }

bool Scheduler::is_leader() const { return impl_ && impl_->service->is_owner(); }

Status Scheduler::status() const noexcept { return impl_ ? impl_->service->status() : Status::INITIAL; }

const MutexContendService& Scheduler::service() const noexcept { return *impl_->service; }

}  // namespace simba
