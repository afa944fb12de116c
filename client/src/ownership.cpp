#include "ownership.hpp"

#include <algorithm>

namespace simba::detail {

Ownership::Ownership(std::string mutex, std::string id, SteadyClock::duration margin, bool single_tenure)
    : mutex_(std::move(mutex)), id_(std::move(id)), margin_(margin), single_tenure_(single_tenure) {
    reported_.before = MutexOwner::none(mutex_, SteadyClock::time_point{});
    reported_.after = reported_.before;
}

void Ownership::start() {
    running_ = true;
    ended_ = false;
}

void Ownership::end_tenure(Change& c, MutexOwner after, SteadyClock::time_point lost_at) {
    MutexState st{tenure_, std::move(after)};
    holding_ = false;
    ended_ = true;
    suspended_ = false;  // a tenure that ends while suspended reports only its end
    reported_ = st;
    c.released = std::move(st);
    c.lost_at = lost_at;
}

Ownership::Change Ownership::expire(SteadyClock::time_point now) {
    Change c;
    if (holding_ && now >= deadline_) end_tenure(c, MutexOwner::none(mutex_, now), deadline_);
    return c;
}

Ownership::Change Ownership::stop(SteadyClock::time_point now) {
    Change c;
    running_ = false;
    if (holding_) end_tenure(c, MutexOwner::none(mutex_, now), std::min(now, deadline_));
    return c;
}

Ownership::Change Ownership::suspend(SteadyClock::time_point now) {
    Change c = expire(now);
    if (holding_ && !suspended_) {
        suspended_ = true;
        c.suspended = lease(now);
    }
    return c;
}

Ownership::Change Ownership::keepalive(const MutexOwner& session, SteadyClock::time_point now) {
    Change c = expire(now);
    if (!running_ || !holding_) return c;
    MutexOwner after = tenure_;  // the tenure, on the session's lease
    after.ttl_at = session.ttl_at;
    after.transition_at = session.transition_at;
    after.current_at = session.current_at;
    after.anchor = session.anchor;
    renew(c, after, now);
    return c;
}

void Ownership::renew(Change& c, const MutexOwner& after, SteadyClock::time_point now) {
    // A renewal never shortens a lease an earlier one proved.
    deadline_ = std::max(deadline_, after.transition_deadline() - margin_);
    tenure_ = after;
    reported_.before = reported_.after;
    reported_.after = after;
    c.renewed = true;
    if (suspended_) {
        suspended_ = false;
        c.resumed = lease(now);
    }
}

Ownership::Change Ownership::reply(const MutexOwner& after, SteadyClock::time_point now) {
    Change c = expire(now);  // never bridge a gap with a late reply
    if (!running_) return c;
    if (!after.is_owner(id_)) {
        if (holding_) {  // the server says our live tenure is gone (forced release)
            end_tenure(c, after, now);
            return c;
        }
        c.busy = after.has_owner();
        reported_.before = reported_.after;
        reported_.after = after;
        return c;
    }
    if (holding_ && tenure_.fence == after.fence) {
        renew(c, after, now);
        return c;
    }
    const auto deadline = after.transition_deadline() - margin_;
    MutexOwner before = reported_.after;
    if (holding_) {  // the server names another fence of ours: the held tenure is over
        before = tenure_;
        end_tenure(c, after, now);
    }
    if (after.fence <= claimed_fence_ || finished()) {
        // A tenure that ended here (at its deadline, by stop()) is over for
        // good, whatever the server still counts: its fence is not claimed
        // again. The caller gives it back and contends for a new one. A
        // single-tenure contender whose tenure ended takes no new one.
        c.disowned = true;
        return c;
    }
    if (deadline <= now) {
        c.too_late = true;
        return c;
    }
    MutexState st{std::move(before), after};
    holding_ = true;
    deadline_ = deadline;
    tenure_ = after;
    acquired_at_ = after.acquired_at;
    claimed_fence_ = after.fence;
    reported_ = st;
    c.acquired = std::move(st);
    return c;
}

}  // namespace simba::detail
