// simba client: ContendPeriod, when to attempt next.
//
// owner:     delay = min(ttl_at, transition_at - lease/4) - now
//            (renew as the ttl ends, but with a quarter of the lease
//            ttl + transition still left to do it in: with a short or zero
//            transition, ttl_at is the lease's end and too late to renew)
// contender: delay = transition_at - now + jitter     (jitter uniform in
//            [jitter.min, jitter.max), default [-200 ms, 1000 ms); when the
//            mutex has no transition window, [zero_transition.min, .max),
//            default [0, 1000 ms))
// free:      delay = 0
// Negative delays clamp to 0. "now" is the client's steady clock and server
// times are carried onto it through MutexOwner::to_steady: no wall clock.
// A ContendPeriod may be used from several threads at once (its generator
// is locked); a SplitMix64 by one thread at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <random>
#include <string>

#include "simba/owner.hpp"

namespace simba {

/// splitmix64 (Steele, Lea, Flood 2014): a 64-bit generator with 8 bytes of
/// state, ample for jitter; a service's mt19937_64 would hold 2.5 KB, half
/// of what a service costs at 10,000 per process.
class SplitMix64 {
public:
    using result_type = std::uint64_t;
    explicit SplitMix64(std::uint64_t seed) noexcept : state_(seed) {}
    static constexpr result_type min() noexcept { return 0; }
    static constexpr result_type max() noexcept { return ~result_type{0}; }
    result_type operator()() noexcept {
        std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }

private:
    std::uint64_t state_;
};

/// A half-open range [min, max) of jitter. min == max means no jitter.
struct JitterRange {
    std::chrono::milliseconds min{-200};
    std::chrono::milliseconds max{1000};
};

struct Jitter {
    JitterRange normal{std::chrono::milliseconds(-200), std::chrono::milliseconds(1000)};
    JitterRange zero_transition{std::chrono::milliseconds(0), std::chrono::milliseconds(1000)};
};

class ContendPeriod {
public:
    explicit ContendPeriod(std::string contender_id, Jitter jitter = {}, std::uint64_t seed = random_seed());

    /// A different seed per call: one random_device read per process, then
    /// splitmix64 (a random_device per service costs more than a lock round
    /// trip).
    static std::uint64_t random_seed();

    const std::string& contender_id() const noexcept { return contender_id_; }
    const Jitter& jitter() const noexcept { return jitter_; }

    /// Raw delay (may be negative).
    [[nodiscard]] SteadyClock::duration next_delay(const MutexOwner& owner,
                                                   SteadyClock::time_point now = SteadyClock::now());
    /// next_delay clamped to >= 0.
    [[nodiscard]] SteadyClock::duration ensure_next_delay(const MutexOwner& owner,
                                                          SteadyClock::time_point now = SteadyClock::now());

    /// Owner case only: min(ttl deadline, transition deadline - lease/4) - now.
    [[nodiscard]] static SteadyClock::duration owner_delay(const MutexOwner& owner,
                                                           SteadyClock::time_point now);
    /// Contender case only: transition deadline - now + jitter.
    [[nodiscard]] SteadyClock::duration contender_delay(const MutexOwner& owner,
                                                        SteadyClock::time_point now);
    /// One jitter sample for this owner (normal or zero_transition range).
    [[nodiscard]] std::chrono::milliseconds sample_jitter(const MutexOwner& owner);

private:
    std::string contender_id_;
    Jitter jitter_;
    std::mutex rng_mutex_;
    SplitMix64 rng_;
};

}  // namespace simba
