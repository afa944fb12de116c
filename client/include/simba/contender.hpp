// simba client: the user's side of a contention, MutexContender.
//
// Thread-safety: mutex() and contender_id() never change and may be read
// from any thread. The callbacks run on the factory's handle thread (what
// they may call: service.hpp).
#pragma once

#include <functional>
#include <string>

#include "simba/contender_id.hpp"
#include "simba/lease.hpp"
#include "simba/owner.hpp"

namespace simba {

/// Subclass and override on_acquired / on_released (and, to hear of failing
/// renewals before a loss, on_suspended / on_resumed). All run on the
/// factory's handle thread, one at a time and in order for a service, never
/// on the I/O thread and never after MutexContendService::stop() returned.
/// An exception thrown by a callback is logged and otherwise ignored.
class MutexContender {
public:
    /// Throws InvalidArgumentError (22023) for an empty or too long name/id.
    explicit MutexContender(std::string mutex, std::string contender_id = ContenderId::host());
    virtual ~MutexContender() = default;
    MutexContender(const MutexContender&) = delete;
    MutexContender& operator=(const MutexContender&) = delete;

    [[nodiscard]] const std::string& mutex() const noexcept { return mutex_; }
    [[nodiscard]] const std::string& contender_id() const noexcept { return contender_id_; }

    /// This contender became owner (state.after is the new tenure).
    virtual void on_acquired(const MutexState& state);
    /// This contender stopped being owner: lost, expired, or released by
    /// stop(). state.after names the next owner when the server did (a
    /// forced release, a renewal that found another holder); after stop()
    /// or a tenure that ran out at its deadline it names nobody (empty
    /// owner_id): the client did not ask, and another may hold it already.
    virtual void on_released(const MutexState& state);
    /// The held tenure's renewals are failing (a renewal failed, timed out,
    /// or the connection was lost): it is still owner, until lease.deadline
    /// unless a renewal succeeds first. Once per suspension, not per failed
    /// retry. Either on_resumed or on_released follows, never both.
    virtual void on_suspended(const Lease& lease);
    /// A renewal succeeded after on_suspended: the same tenure (same fence)
    /// goes on, lease.deadline is its new deadline. A tenure that ends while
    /// suspended reports only on_released.
    virtual void on_resumed(const Lease& lease);
    /// False for a contender whose callbacks do nothing and that reads
    /// is_owner() / wait_owner() instead (Locker's): its service then queues
    /// no callbacks, and stop() needs no hand-off to the handle thread.
    [[nodiscard]] virtual bool has_callbacks() const noexcept { return true; }

private:
    std::string mutex_;
    std::string contender_id_;
};

/// A contender built from functions, for when a subclass is overkill.
class FunctionContender : public MutexContender {
public:
    using Callback = std::function<void(const MutexState&)>;
    using LeaseCallback = std::function<void(const Lease&)>;
    FunctionContender(std::string mutex, Callback on_acquired, Callback on_released = {},
                      std::string contender_id = ContenderId::host());
    /// on_suspended / on_resumed (none by default); set them before the
    /// service starts.
    void set_on_suspended(LeaseCallback cb) { suspended_ = std::move(cb); }
    void set_on_resumed(LeaseCallback cb) { resumed_ = std::move(cb); }
    void on_acquired(const MutexState& state) override;
    void on_released(const MutexState& state) override;
    void on_suspended(const Lease& lease) override;
    void on_resumed(const Lease& lease) override;

private:
    Callback acquired_;
    Callback released_;
    LeaseCallback suspended_;
    LeaseCallback resumed_;
};

}  // namespace simba
