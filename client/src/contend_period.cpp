#include "simba/contend_period.hpp"

#include <mutex>

namespace simba {

MutexOwner MutexOwner::none(std::string mutex, SteadyClock::time_point anchor) {
    MutexOwner o;
    o.mutex = std::move(mutex);
    o.anchor = anchor;
    return o;
}

std::uint64_t ContendPeriod::random_seed() {
    static std::mutex m;
    static SplitMix64 seeds((std::uint64_t{std::random_device{}()} << 32) ^ std::random_device{}());
    std::lock_guard<std::mutex> lock(m);
    return seeds();
}

ContendPeriod::ContendPeriod(std::string contender_id, Jitter jitter, std::uint64_t seed)
    : contender_id_(std::move(contender_id)), jitter_(jitter), rng_(seed) {}

SteadyClock::duration ContendPeriod::owner_delay(const MutexOwner& owner, SteadyClock::time_point now) {
    const auto lease = owner.transition_at - owner.acquired_at;
    const auto latest = owner.transition_deadline() - std::chrono::duration_cast<SteadyClock::duration>(lease / 4);
    return std::min(owner.ttl_deadline(), latest) - now;
}

std::chrono::milliseconds ContendPeriod::sample_jitter(const MutexOwner& owner) {
    const JitterRange& r = owner.transition().count() == 0 ? jitter_.zero_transition : jitter_.normal;
    if (r.max <= r.min) return r.min;
    std::uniform_int_distribution<std::int64_t> dist(r.min.count(), r.max.count() - 1);
    std::lock_guard<std::mutex> lock(rng_mutex_);
    return std::chrono::milliseconds(dist(rng_));
}

SteadyClock::duration ContendPeriod::contender_delay(const MutexOwner& owner, SteadyClock::time_point now) {
    return owner.transition_deadline() - now + sample_jitter(owner);
}

SteadyClock::duration ContendPeriod::next_delay(const MutexOwner& owner, SteadyClock::time_point now) {
    if (owner.is_owner(contender_id_)) return owner_delay(owner, now);
    if (!owner.has_owner()) return SteadyClock::duration::zero();
    return contender_delay(owner, now);
}

SteadyClock::duration ContendPeriod::ensure_next_delay(const MutexOwner& owner, SteadyClock::time_point now) {
    auto d = next_delay(owner, now);
    return d < SteadyClock::duration::zero() ? SteadyClock::duration::zero() : d;
}

}  // namespace simba
