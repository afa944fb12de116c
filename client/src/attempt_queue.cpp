#include "attempt_queue.hpp"

#include <algorithm>

namespace simba::pg::detail {

void AttemptQueue::schedule(const ServicePtr& svc, SteadyClock::time_point at, std::size_t live_services) {
    timers_.push(Timer{at, seq_++, svc, ++svc->timer_gen});
    svc->next_at = at;
    // Each service has one current timer; the rest are cancelled ones
    // waiting to come due. Past twice the live count, drop them all.
    if (timers_.size() > 2 * live_services + 1024) {
        std::vector<Timer> live;
        live.reserve(live_services);
        while (!timers_.empty()) {
            if (timers_.top().live()) live.push_back(timers_.top());
            timers_.pop();
        }
        for (auto& t : live) timers_.push(std::move(t));
    }
}

std::vector<ServicePtr> AttemptQueue::due_batch(SteadyClock::time_point now, SteadyClock::duration window,
                                                std::size_t max) {
    std::vector<ServicePtr> out;
    std::vector<Timer> later;  // inside the batch window but not inside their own (short ttl)
    const auto horizon = now + window;
    // `later` counts toward `max` too: else every call would pop and push
    // back every short-ttl timer inside the window, however many. Those due
    // now come first in the heap, so none is left behind by this.
    while (!timers_.empty() && out.size() + later.size() < max && timers_.top().at <= horizon) {
        Timer t = timers_.top();
        timers_.pop();
        ServicePtr svc = t.live();
        if (!svc) continue;
        auto own = std::min<SteadyClock::duration>(window, svc->options.ttl / 10);
        if (t.at <= now + own) {
            svc->next_at = SteadyClock::time_point::max();  // taken: the caller attempts now
            out.push_back(std::move(svc));
        } else {
            later.push_back(std::move(t));
        }
    }
    for (auto& t : later) timers_.push(std::move(t));
    return out;
}

SteadyClock::time_point AttemptQueue::next_due() {
    // Cancelled timers at the top must not shorten the I/O thread's sleep.
    while (!timers_.empty() && !timers_.top().live()) timers_.pop();
    return timers_.empty() ? SteadyClock::time_point::max() : timers_.top().at;
}

void TaskQueue::run_due() {
    while (!tasks_.empty() && tasks_.top().at <= SteadyClock::now()) {
        auto fn = std::move(const_cast<Task&>(tasks_.top()).fn);
        tasks_.pop();
        fn();
    }
}

}  // namespace simba::pg::detail
