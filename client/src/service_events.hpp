// simba client (internal): what the contenders hear. Turns the steps of a
// service's Ownership (ownership.hpp) into its callbacks, in order, on the handle
// thread (executor.hpp), and into its metrics; fires on_released at a lease
// deadline by itself, so a statement stuck on the I/O thread cannot keep a
// stale owner alive (docs/design.md, "Safety rules", rule 3).
#pragma once

#include <functional>
#include <memory>

#include "executor.hpp"
#include "service_state.hpp"

namespace simba::pg::detail {

class ServiceEvents {
public:
    explicit ServiceEvents(Executor& executor) : executor_(executor) {}

    /// A reply from the server for `svc` (I/O thread): the step it was. A
    /// grant that came too late to be proven and a tenure disowned (see
    /// ownership.hpp) are logged; the caller acts on the latter.
    simba::detail::Ownership::Change apply(const ServicePtr& svc, const MutexOwner& prev, const MutexOwner& after)
        REQUIRES(io_state) EXCLUDES(svc->m);
    /// Turns an Ownership step into callbacks and metrics. `lost`: a
    /// release the contender did not ask for.
    void report(const ServicePtr& svc, const simba::detail::Ownership::Change& change, bool lost = true)
        REQUIRES(svc->m);
    /// A renewal of `svc` failed or its connection was lost (I/O thread): a
    /// held tenure is suspended, on_suspended queued once per suspension.
    void suspend(const ServicePtr& svc) REQUIRES(io_state) EXCLUDES(svc->m);
    /// A keepalive renewed `svc`'s session onto `session`'s lease (I/O
    /// thread): so is its held tenure. Whether it still holds one.
    bool keepalive(const ServicePtr& svc, const MutexOwner& session) REQUIRES(io_state) EXCLUDES(svc->m);
    /// Ends `svc`'s contention on this side: its tenure (on_released is
    /// queued), its callbacks, wait_owner(). Idempotent.
    void end_locally(const ServicePtr& svc) EXCLUDES(svc->m);

    /// Hands `s`'s when_owner() callback, if any, `error` (nullptr: owner,
    /// stopped or finished) on the handle thread.
    void settle(ServiceState& s, std::exception_ptr error) REQUIRES(s.m);

    /// Runs `s`'s pending callbacks on this thread, now.
    static void drain_all(ServiceState& s) EXCLUDES(s.m);

private:
    void note_handoff(const ServicePtr& svc, const simba::detail::Ownership::Change& change, const MutexOwner& prev)
        REQUIRES(io_state);
    void emit(const ServicePtr& svc, std::function<void()> cb) REQUIRES(svc->m);
    static void drain_one(ServiceState& s) EXCLUDES(s.m);
    void schedule_expiry(const ServicePtr& svc, SteadyClock::time_point at) REQUIRES(svc->m);
    void check_expiry(const std::weak_ptr<ServiceState>& weak, SteadyClock::time_point at);

    Executor& executor_;
};

}  // namespace simba::pg::detail
