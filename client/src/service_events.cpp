#include "service_events.hpp"

#include "simba/log.hpp"

namespace simba::pg::detail {

using simba::detail::MetricsCell;
using std::chrono::duration_cast;
using std::chrono::microseconds;

/// Queues a callback of `svc` (caller holds svc->m).
void ServiceEvents::emit(const ServicePtr& svc, std::function<void()> cb) {
    if (!svc->active || !svc->contender->has_callbacks()) return;
    svc->pending.push_back(std::move(cb));
    std::weak_ptr<ServiceState> weak = svc;
    executor_.post([weak] {
        if (auto s = weak.lock()) drain_one(*s);
    });
}

void ServiceEvents::settle(ServiceState& s, std::exception_ptr error) {
    if (!s.settled) return;
    executor_.post([done = std::move(s.settled), error] { done(error); });
    s.settled = nullptr;
}

void ServiceEvents::drain_one(ServiceState& s) {
    std::function<void()> cb;
    {
        std::lock_guard<std::mutex> lock(s.m);
        if (s.pending.empty()) return;
        cb = std::move(s.pending.front());
        s.pending.erase(s.pending.begin());
        s.in_callback = true;
    }
    try {
        cb();
    } catch (const std::exception& e) {
        log(LogLevel::error, "callback of contender " + s.id + " on mutex " + s.mutex + " threw: " + e.what());
    } catch (...) {
        log(LogLevel::error, "callback of contender " + s.id + " on mutex " + s.mutex + " threw");
    }
    std::lock_guard<std::mutex> lock(s.m);
    s.in_callback = false;
}

void ServiceEvents::drain_all(ServiceState& s) {
    for (;;) {
        {
            std::lock_guard<std::mutex> lock(s.m);
            if (s.pending.empty()) return;
        }
        drain_one(s);
    }
}

/// Lease deadline check, on the handle thread (caller holds svc->m). One
/// check per service is queued at a time: a renewal moves the deadline
/// and the queued check, finding it moved, waits again for the new one.
void ServiceEvents::schedule_expiry(const ServicePtr& svc, SteadyClock::time_point at) {
    if (svc->expiry_at != SteadyClock::time_point{} && svc->expiry_at <= at) return;
    std::weak_ptr<ServiceState> weak = svc;
    if (executor_.post_at(at, [this, weak, at] { check_expiry(weak, at); })) svc->expiry_at = at;
}

void ServiceEvents::check_expiry(const std::weak_ptr<ServiceState>& weak, SteadyClock::time_point at) {
    auto s = weak.lock();
    if (!s) return;
    {
        std::lock_guard<std::mutex> lock(s->m);
        if (s->expiry_at == at) s->expiry_at = {};  // else a check for an earlier deadline is queued too
        if (!s->ownership.holding()) return;
        auto change = s->ownership.expire(SteadyClock::now());
        if (!change.released) {  // renewed meanwhile
            schedule_expiry(s, s->ownership.deadline());
            return;
        }
        report(s, change);
    }
    // Run it now, not behind callbacks queued meanwhile (we are on the
    // handle thread; the queued drain then finds nothing).
    drain_all(*s);
    // Logged outside the lock: the log handler is user code.
    log(LogLevel::warning,
        "lease of " + s->id + " on mutex " + s->mutex + " reached its deadline without a renewal: released");
}

simba::detail::Ownership::Change ServiceEvents::apply(const ServicePtr& svc, const MutexOwner& prev,
                                                      const MutexOwner& after) {
    simba::detail::Ownership::Change change;
    {
        std::lock_guard<std::mutex> lock(svc->m);
        change = svc->ownership.reply(after, SteadyClock::now());
        report(svc, change, true, &prev);
    }
    // Logged outside the lock: the log handler is user code.
    if (change.too_late)
        log(LogLevel::warning, "acquire reply for " + svc->id + " on mutex " + svc->mutex +
                                   " arrived after its lease deadline; not reporting ownership");
    if (change.disowned)
        log(LogLevel::warning, "the server still counts fence " + std::to_string(after.fence) + " of " + svc->id +
                                   " on mutex " + svc->mutex +
                                   ", a tenure that already ended here: giving it back (a new tenure gets a new fence)");
    return change;
}

void ServiceEvents::suspend(const ServicePtr& svc) {
    std::lock_guard<std::mutex> lock(svc->m);
    report(svc, svc->ownership.suspend(SteadyClock::now()));
}

bool ServiceEvents::keepalive(const ServicePtr& svc, const MutexOwner& session) {
    std::lock_guard<std::mutex> lock(svc->m);
    report(svc, svc->ownership.keepalive(session, SteadyClock::now()));
    return svc->ownership.holding();
}

void ServiceEvents::report(const ServicePtr& svc, const simba::detail::Ownership::Change& change, bool lost,
                           const MutexOwner* prev) {
    auto c = svc->contender;
    auto& mc = *svc->metrics;
    const auto now = SteadyClock::now();
    if (change.renewed) MetricsCell::inc(mc.renewals);
    if (change.busy) {
        MetricsCell::inc(mc.busy);
        svc->notified_at = {};  // that release went to someone else: no handoff of ours
    }
    if (change.released) {
        if (lost) MetricsCell::inc(mc.lost);
        svc->wait_since = change.lost_at;
        emit(svc, [c, st = *change.released] { c->on_released(st); });
        if (svc->ownership.finished()) {  // a single tenure ended: wait_owner() returns
            settle(*svc, nullptr);
            svc->owner_cv.notify_all();
        }
    }
    if (change.suspended) {
        MetricsCell::inc(mc.suspensions);
        emit(svc, [c, l = *change.suspended] { c->on_suspended(l); });
    }
    if (change.resumed) emit(svc, [c, l = *change.resumed] { c->on_resumed(l); });
    if (change.acquired) {
        // Acquire latency from the start of waiting; handoff from the
        // release NOTIFY we acted on, else from the previous holder's lease
        // end (server clock).
        const auto& after = change.acquired->after;
        MetricsCell::inc(mc.acquired);
        mc.acquire_latency.observe(duration_cast<microseconds>(now - svc->wait_since));
        if (svc->notified_at != SteadyClock::time_point{})
            mc.handoff_latency.observe(duration_cast<microseconds>(now - svc->notified_at));
        else if (prev && prev->has_owner() && prev->owner_id != svc->id && after.acquired_at >= prev->transition_at)
            mc.handoff_latency.observe(after.acquired_at - prev->transition_at);
        svc->notified_at = {};
        emit(svc, [c, st = *change.acquired] { c->on_acquired(st); });
        schedule_expiry(svc, svc->ownership.deadline());
        settle(*svc, nullptr);
        svc->owner_cv.notify_all();
    }
}

void ServiceEvents::end_locally(const ServicePtr& svc) {
    std::lock_guard<std::mutex> lock(svc->m);
    if (!svc->active) return;
    report(svc, svc->ownership.stop(SteadyClock::now()), false);
    settle(*svc, nullptr);
    svc->active = false;
    ++svc->stops;
    svc->owner_cv.notify_all();  // wait_owner() returns: stopped
}

}  // namespace simba::pg::detail
