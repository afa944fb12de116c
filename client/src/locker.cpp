#include "simba/locker.hpp"

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>
#include <type_traits>

#include "pg_io.hpp"
#include "simba/errors.hpp"
#include "simba/log.hpp"

namespace simba {

namespace {

// The Locker's contender: tells the Locker's state when a tenure ends or
// its renewals fail. Without the Locker's callbacks it has none, so its
// service queues nothing for the handle thread and stop() needs no hand-off.
struct LockerContender final : MutexContender {
    using MutexContender::MutexContender;
    bool has_callbacks() const noexcept override { return callbacks.load(); }
    void on_released(const MutexState& state) override;
    void on_suspended(const Lease& lease) override;
    void on_resumed(const Lease& lease) override;

    std::weak_ptr<Locker::State> locker;
    std::atomic<bool> callbacks{false};
};

ContendOptions single_tenure(ContendOptions options) {
    options.single_tenure = true;  // loss is final (service.hpp)
    return options;
}

void log_release_failure(const std::exception& e) {
    log(LogLevel::error, std::string("Locker release failed: ") + e.what());
}

}  // namespace

// Everything a Locker is, behind a pointer: a Locker moves, and callbacks
// on the handle thread reach this state through weak pointers.
struct Locker::State : std::enable_shared_from_this<State> {
    State(ContendServiceFactory& factory, std::string mutex, std::string id, ContendOptions options, int max_holds)
        : contender(std::make_shared<LockerContender>(std::move(mutex), std::move(id))),
          service(factory.create(contender, single_tenure(options))),
          max_hold_count(max_holds) {}

    bool acquire_until(SteadyClock::time_point deadline, bool bounded);
    bool start(std::uint64_t my_cancels, bool now);
    void started_done();
    void stop_service();
    void stop_hold();
    bool claim(SteadyClock::time_point deadline, bool& reentered);
    void unclaim();
    bool claim_and_acquire(SteadyClock::time_point claim_by, SteadyClock::time_point acquire_by);
    std::optional<Lease> lease_locked() const;
    bool take_lease_locked();
    void tenure_ended(const MutexState& state);
    template <typename Callback, typename... Args>
    void tell(std::int64_t fence, const Callback& which, Args&&... args);
    void count_callbacks();
    void arm_async();
    void async_settled(const std::exception_ptr& error);
    std::string timeout_message(const MutexOwner& seen) const;
    const std::string& mutex() const noexcept { return contender->mutex(); }

    std::shared_ptr<LockerContender> contender;
    std::unique_ptr<MutexContendService> service;
    const int max_hold_count;

    mutable std::mutex m;
    std::condition_variable started;  // starting went false
    bool in_use = false;     // acquired or being acquired
    bool starting = false;   // the service is being started: a release waits for it
    bool unlocking = false;  // a release is stopping the service: no loss to report
    bool destroying = false; // the Locker's destructor: its release is sent without waiting for the reply
    std::uint64_t cancels = 0;  // release()/cancel() calls: a lock in progress is cancelled
    std::int64_t hold_fence = 0;  // the hold's tenure (0: none)
    mutable bool lost = false;    // that tenure ended: loss is final for the hold
    bool lost_told = false;       // on_lost ran for it
    std::function<void()> on_lost;
    std::function<void(SteadyClock::time_point)> on_suspended;
    std::function<void()> on_resumed;
    // The in-process mutex: the thread that holds or takes the lock (none
    // for a lock_async() hold), and its holds.
    std::condition_variable claim_cv;  // claimed went false
    bool claimed = false;
    std::thread::id claimant;
    int holds = 0;
    std::shared_ptr<std::promise<void>> async;  // lock_async() waiting
};

void LockerContender::on_released(const MutexState& state) {
    if (auto s = locker.lock()) s->tenure_ended(state);
}

void LockerContender::on_suspended(const Lease& lease) {
    if (auto s = locker.lock()) s->tell(lease.fence, &Locker::State::on_suspended, lease.deadline);
}

void LockerContender::on_resumed(const Lease& lease) {
    if (auto s = locker.lock()) s->tell(lease.fence, &Locker::State::on_resumed);
}

/// On the handle thread: runs one of the hold's callbacks for the tenure
/// with `fence`, unless it is not the hold's (any more) or being released.
template <typename Callback, typename... Args>
void Locker::State::tell(std::int64_t fence, const Callback& which, Args&&... args) {
    std::remove_reference_t<decltype(this->*which)> callback;
    {
        std::lock_guard<std::mutex> lock(m);
        if (unlocking || lost || fence != hold_fence) return;
        callback = this->*which;
    }
    if (callback) callback(std::forward<Args>(args)...);
}

/// The contender has callbacks while the Locker has any (caller holds m).
void Locker::State::count_callbacks() {
    contender->callbacks.store(on_lost || on_suspended || on_resumed);
}

/// On the handle thread: a tenure ended. A loss of the hold (not the
/// release that unlock() sends) is final and told once.
void Locker::State::tenure_ended(const MutexState& state) {
    std::function<void()> callback;
    {
        std::lock_guard<std::mutex> lock(m);
        if (unlocking || hold_fence == 0 || state.before.fence != hold_fence || lost_told) return;
        lost = true;
        lost_told = true;
        callback = on_lost;
    }
    if (callback) callback();
}

/// The hold's tenure as the service proves it now (caller holds m): a
/// tenure with another fence, or none, is the hold lost for good.
std::optional<Lease> Locker::State::lease_locked() const {
    if (hold_fence == 0 || lost) return std::nullopt;
    auto l = service->lease();
    if (!l || l->fence != hold_fence) {
        lost = true;
        return std::nullopt;
    }
    return l;
}

/// The service owns: that tenure becomes the hold (caller holds m, so a
/// loss right after is told through tenure_ended). False if it already ended.
bool Locker::State::take_lease_locked() {
    const auto l = service->lease();
    if (!l) return false;
    hold_fence = l->fence;
    lost = false;
    lost_told = false;
    return true;
}

/// "timed out acquiring mutex m: held by "B" for another 2.4 s", as the CLI says it.
std::string Locker::State::timeout_message(const MutexOwner& seen) const {
    std::string msg = "timed out acquiring mutex " + mutex();
    if (!seen.has_owner()) return msg + ": it was free at the last attempt";
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(seen.transition_at - seen.current_at);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.1f", static_cast<double>(left.count()) / 1000.0);
    return msg + ": held by \"" + seen.owner_id + "\" for another " + buf + " s at the last attempt";
}

void Locker::State::started_done() {
    std::lock_guard<std::mutex> lock(m);
    starting = false;
    started.notify_all();
}

/// (Re)starts contending unless cancelled since `my_cancels`: `now`, the
/// first attempt on this thread; else from the I/O thread. A single tenure
/// that ended before it became the hold is stopped first (outside
/// `starting`: that stop may wait for the handle thread, where an on_lost
/// callback may be releasing).
bool Locker::State::start(std::uint64_t my_cancels, bool now) {
    stop_service();
    {
        std::lock_guard<std::mutex> lock(m);
        if (cancels != my_cancels) return false;
        starting = true;
    }
    try {
        if (now)
            (void)service->start_and_wait(SteadyClock::time_point{});  // one round trip, no waiting
        else
            service->start();
    } catch (...) {
        started_done();
        throw;
    }
    started_done();
    return true;
}

bool Locker::State::acquire_until(SteadyClock::time_point deadline, bool bounded) {
    std::uint64_t my_cancels;
    {
        std::lock_guard<std::mutex> lock(m);
        if (in_use) throw IllegalStateError("Locker for mutex " + mutex() + " already acquired: release it first");
        in_use = true;
        my_cancels = cancels;
    }
    auto cancelled = [&] {
        std::lock_guard<std::mutex> lock(m);
        return cancels != my_cancels;
    };
    const auto until = bounded ? deadline : SteadyClock::time_point::max();
    bool held = false;
    try {
        for (bool go = start(my_cancels, true); go; go = start(my_cancels, true)) {
            (void)service->wait_owner(until);
            std::lock_guard<std::mutex> lock(m);
            if ((held = take_lease_locked())) break;
            // Not owner: timed out, cancelled, or the tenure ended before it
            // became the hold (contend for a new one within the deadline).
            if (SteadyClock::now() >= until || cancels != my_cancels) break;
        }
    } catch (...) {
        // A setup mistake (no extension, no grant, no server): stop contending.
        try {
            stop_hold();
        } catch (const std::exception& e) {
            log_release_failure(e);
        }
        throw;
    }
    // cancel() or release() from another thread stopped the service: the
    // lock is not taken (and, stopped, not taken after they returned).
    if (cancelled()) {
        stop_hold();
        throw CancelledError("lock of mutex " + mutex() + " was cancelled");
    }
    if (!held) {
        const auto seen = service->state().after;
        stop_hold();
        if (!bounded) throw IllegalStateError("Locker for mutex " + mutex() + " was released while acquiring");
        throw TimeoutError(timeout_message(seen));
    }
    return true;
}

/// Stops the service if it runs; a release or restart that stopped it
/// meanwhile (stop() lost the race) is no error.
void Locker::State::stop_service() {
    if (service->status() != Status::RUNNING) return;
    bool detached;
    {
        std::lock_guard<std::mutex> lock(m);
        detached = destroying;
    }
    try {
        if (detached)
            pg::detail::stop_detached(*service);
        else
            service->stop();
    } catch (const IllegalStateError&) {
        if (service->status() == Status::RUNNING) throw;
    }
}

void Locker::State::stop_hold() {
    {
        // A start in progress (STARTING) cannot be stopped: wait for it, so
        // its lock is released below instead of taken after we return.
        std::unique_lock<std::mutex> lock(m);
        started.wait(lock, [this] { return !starting; });
        unlocking = true;
    }
    auto done = [this] {
        std::lock_guard<std::mutex> lock(m);
        unlocking = false;
        in_use = false;
        hold_fence = 0;
    };
    try {
        stop_service();
    } catch (...) {
        done();
        throw;
    }
    done();
}

bool Locker::State::claim(SteadyClock::time_point deadline, bool& reentered) {
    std::unique_lock<std::mutex> lock(m);
    const auto me = std::this_thread::get_id();
    reentered = claimed && claimant == me;
    if (reentered) {
        if (holds == 0) throw IllegalStateError("Locker for mutex " + mutex() + " is being taken by this thread");
        if (!lease_locked())
            throw IllegalStateError("Locker for mutex " + mutex() + " lost its lock: unlock() it before locking again");
        if (holds >= max_hold_count)
            throw IllegalStateError("Locker for mutex " + mutex() + " already held " + std::to_string(holds) +
                                    " times by this thread (max_hold_count " + std::to_string(max_hold_count) + ")");
        ++holds;
        return true;
    }
    if (!wait_until(claim_cv, lock, deadline, [this] { return !claimed; })) return false;
    claimed = true;
    claimant = me;
    return true;
}

void Locker::State::unclaim() {
    std::lock_guard<std::mutex> lock(m);
    claimed = false;
    claimant = std::thread::id();
    holds = 0;
    claim_cv.notify_all();
}

bool Locker::State::claim_and_acquire(SteadyClock::time_point claim_by, SteadyClock::time_point acquire_by) {
    bool reentered = false;
    if (!claim(claim_by, reentered)) return false;
    if (reentered) return true;
    bool ok = false;
    try {
        const bool bounded = acquire_by != SteadyClock::time_point::max();
        ok = acquire_until(acquire_by, bounded);
    } catch (const TimeoutError&) {
        ok = false;
    } catch (...) {
        unclaim();
        throw;
    }
    if (!ok) {
        unclaim();
        return false;
    }
    std::lock_guard<std::mutex> lock(m);
    holds = 1;
    return true;
}

// ------------------------------------------------------------ lock_async

void Locker::State::arm_async() {
    std::weak_ptr<State> weak = shared_from_this();
    try {
        service->when_owner([weak](std::exception_ptr error) {
            if (auto s = weak.lock()) s->async_settled(error);
        });
    } catch (const IllegalStateError&) {
        // Stopped meanwhile: only a cancel stops it, and that completes the future.
        std::lock_guard<std::mutex> lock(m);
        if (async) throw;
    }
}

/// On the handle thread: the service owns, failed for good, stopped, or
/// its tenure ended before it became the hold (then contend again).
void Locker::State::async_settled(const std::exception_ptr& error) {
    std::shared_ptr<std::promise<void>> done;
    std::uint64_t my_cancels;
    {
        std::lock_guard<std::mutex> lock(m);
        if (!async) return;  // cancelled: cancel() completed the future
        my_cancels = cancels;
        if (error || take_lease_locked()) {
            done = std::move(async);
            holds = error ? 0 : 1;
        }
    }
    if (done && !error) return done->set_value();
    if (done) {
        try {
            stop_hold();
        } catch (const std::exception& e) {
            log_release_failure(e);
        }
        unclaim();
        return done->set_exception(error);
    }
    if (service->status() != Status::RUNNING) return;  // a cancel is completing the future
    try {
        if (start(my_cancels, false)) arm_async();
    } catch (...) {
        {
            std::lock_guard<std::mutex> lock(m);
            done = std::move(async);
        }
        if (!done) return;
        unclaim();
        done->set_exception(std::current_exception());
    }
}

// ----------------------------------------------------------------- Locker

Locker::Locker(ContendServiceFactory& factory, std::string mutex, std::string contender_id, ContendOptions options,
               int max_hold_count) {
    if (max_hold_count < 1) throw InvalidArgumentError("max_hold_count must be at least 1", "22023");
    s_ = std::make_shared<State>(factory, std::move(mutex), std::move(contender_id), options, max_hold_count);
    s_->contender->locker = s_;
}

Locker::~Locker() {
    if (!s_) return;
    {
        // Lockers destroyed one after another release in one statement.
        std::lock_guard<std::mutex> lock(s_->m);
        s_->destroying = true;
    }
    try {
        release();
    } catch (const std::exception& e) {
        log_release_failure(e);
    }
}

Locker::Locker(Locker&& other) noexcept = default;

Locker& Locker::operator=(Locker&& other) noexcept {
    if (this == &other) return *this;
    if (s_) {
        try {
            release();
        } catch (const std::exception& e) {
            log_release_failure(e);
        }
    }
    s_ = std::move(other.s_);
    return *this;
}

Locker::State& Locker::state() const {
    if (!s_) throw IllegalStateError("this Locker was moved from");
    return *s_;
}

void Locker::acquire() { state().acquire_until(SteadyClock::time_point::max(), false); }

void Locker::acquire(std::chrono::milliseconds timeout) { state().acquire_until(SteadyClock::now() + timeout, true); }

void Locker::release() { cancel(); }

void Locker::cancel() {
    auto& s = state();
    std::shared_ptr<std::promise<void>> waiting;
    bool async_hold;
    {
        std::lock_guard<std::mutex> lock(s.m);
        ++s.cancels;
        waiting = std::move(s.async);
        async_hold = s.claimed && s.claimant == std::thread::id();
    }
    s.stop_hold();
    if (async_hold) s.unclaim();  // no thread holds it to unlock() it
    if (waiting) waiting->set_exception(std::make_exception_ptr(CancelledError("lock of mutex " + s.mutex() + " was cancelled")));
}

bool Locker::lock_until(SteadyClock::time_point deadline) { return state().claim_and_acquire(deadline, deadline); }

void Locker::lock() { lock_until(SteadyClock::time_point::max()); }

bool Locker::try_lock() {
    auto& s = state();
    {
        // As std::recursive_mutex: past the hold limit (or on a lost hold), false rather than an error.
        std::lock_guard<std::mutex> lock(s.m);
        if (s.claimed && s.claimant == std::this_thread::get_id() &&
            (s.holds >= s.max_hold_count || !s.lease_locked()))
            return false;
    }
    // No waiting for another thread; one round trip (the first attempt runs on this thread).
    return s.claim_and_acquire(SteadyClock::now(), SteadyClock::time_point{});
}

void Locker::unlock() {
    auto& s = state();
    {
        std::lock_guard<std::mutex> lock(s.m);
        // A lock_async() hold belongs to no thread: any thread unlocks it.
        const bool mine = s.claimed && !s.async &&
                          (s.claimant == std::this_thread::get_id() || s.claimant == std::thread::id());
        if (!mine || s.holds == 0)
            throw IllegalStateError("Locker for mutex " + s.mutex() + " is not held by this thread");
        if (--s.holds > 0) return;
    }
    s.stop_hold();
    s.unclaim();
}

std::future<void> Locker::lock_async() {
    auto& s = state();
    auto promise = std::make_shared<std::promise<void>>();
    auto future = promise->get_future();
    std::uint64_t my_cancels;
    {
        std::lock_guard<std::mutex> lock(s.m);
        if (s.claimed || s.in_use)
            throw IllegalStateError("Locker for mutex " + s.mutex() + " is held or being taken: lock_async() needs it idle");
        s.claimed = true;
        s.claimant = std::thread::id();
        s.in_use = true;
        s.async = promise;
        my_cancels = s.cancels;
    }
    try {
        if (s.start(my_cancels, false)) s.arm_async();
    } catch (...) {
        {
            std::lock_guard<std::mutex> lock(s.m);
            s.async = nullptr;
            s.in_use = false;
        }
        s.unclaim();
        throw;
    }
    return future;
}

int Locker::hold_count() const {
    auto& s = state();
    std::lock_guard<std::mutex> lock(s.m);
    return s.holds;
}

std::optional<Lease> Locker::lease() const {
    auto& s = state();
    std::lock_guard<std::mutex> lock(s.m);
    return s.lease_locked();
}

bool Locker::is_owner() const { return s_ && lease().has_value(); }

std::int64_t Locker::fence() const {
    if (!s_) return 0;
    const auto l = lease();
    return l ? l->fence : 0;
}

void Locker::on_lost(std::function<void()> callback) {
    auto& s = state();
    std::lock_guard<std::mutex> lock(s.m);
    s.on_lost = std::move(callback);
    s.count_callbacks();
}

void Locker::on_suspended(std::function<void(SteadyClock::time_point)> callback) {
    auto& s = state();
    std::lock_guard<std::mutex> lock(s.m);
    s.on_suspended = std::move(callback);
    s.count_callbacks();
}

void Locker::on_resumed(std::function<void()> callback) {
    auto& s = state();
    std::lock_guard<std::mutex> lock(s.m);
    s.on_resumed = std::move(callback);
    s.count_callbacks();
}

const std::string& Locker::mutex() const noexcept {
    static const std::string none;
    return s_ ? s_->mutex() : none;
}

const std::string& Locker::contender_id() const noexcept {
    static const std::string none;
    return s_ ? s_->contender->contender_id() : none;
}

}  // namespace simba
