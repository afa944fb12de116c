#include "service_events.hpp"

#include "simba/log.hpp"

namespace simba::pg::detail {

using simba::detail::MetricsCell;
using std::chrono::duration_cast;
using std::chrono::microseconds;

/// Queues a callback of `svc`.
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
        MutexLock lock(s.m);
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
    MutexLock lock(s.m);
    s.in_callback = false;
}

void ServiceEvents::drain_all(ServiceState& s) {
    for (;;) {
        {
            MutexLock lock(s.m);
            if (s.pending.empty()) return;
        }
        drain_one(s);
    }
}

/// Lease deadline check, on the handle thread. One
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
        MutexLock lock(s->m);
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
        MutexLock lock(svc->m);
        change = svc->ownership.reply(after, SteadyClock::now());
        note_handoff(svc, change, prev);  // counted before on_acquired can run
        report(svc, change);
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
    MutexLock lock(svc->m);
    report(svc, svc->ownership.suspend(SteadyClock::now()));
}

bool ServiceEvents::keepalive(const ServicePtr& svc, const MutexOwner& session) {
    MutexLock lock(svc->m);
    report(svc, svc->ownership.keepalive(session, SteadyClock::now()));
    return svc->ownership.holding();
}

/// A grant's handoff latency: from the release NOTIFY it acted on, else
/// from the previous holder's lease end (server clock). After a busy reply
/// that NOTIFY's release went to someone else: no handoff of ours.
void ServiceEvents::note_handoff(const ServicePtr& svc, const simba::detail::Ownership::Change& change,
                                 const MutexOwner& prev) {
    if (change.acquired) {
        const auto& after = change.acquired->after;
        auto& latency = svc->metrics->handoff_latency;
        if (svc->notified_at != SteadyClock::time_point{})
            latency.observe(duration_cast<microseconds>(SteadyClock::now() - svc->notified_at));
        else if (prev.has_owner() && prev.owner_id != svc->id && after.acquired_at >= prev.transition_at)
            latency.observe(after.acquired_at - prev.transition_at);
    }
    if (change.acquired || change.busy) svc->notified_at = {};
}

void ServiceEvents::report(const ServicePtr& svc, const simba::detail::Ownership::Change& change, bool lost) {
    auto c = svc->contender;
    auto& mc = *svc->metrics;
    const auto now = SteadyClock::now();
    if (change.renewed) MetricsCell::inc(mc.renewals);
    if (change.busy) MetricsCell::inc(mc.busy);
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
        MetricsCell::inc(mc.acquired);
        mc.acquire_latency.observe(duration_cast<microseconds>(now - svc->wait_since));  // from the start of waiting
        emit(svc, [c, st = *change.acquired] { c->on_acquired(st); });
        schedule_expiry(svc, svc->ownership.deadline());
        settle(*svc, nullptr);
        svc->owner_cv.notify_all();
    }
}

void ServiceEvents::end_locally(const ServicePtr& svc) {
    MutexLock lock(svc->m);
    if (!svc->active) return;
    report(svc, svc->ownership.stop(SteadyClock::now()), false);
    settle(*svc, nullptr);
    svc->active = false;
    ++svc->stops;
    svc->owner_cv.notify_all();  // wait_owner() returns: stopped
}

}  // namespace simba::pg::detail
