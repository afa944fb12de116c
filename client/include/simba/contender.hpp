// simba client: the user's side of a contention, MutexContender.
//
// Thread-safety: mutex() and contender_id() never change and may be read
// from any thread. The callbacks run on the factory's handle thread (what
// they may call: service.hpp).
#pragma once

#include <functional>
#include <string>

#include "simba/contender_id.hpp"
#include "simba/owner.hpp"

namespace simba {

/// Subclass and override on_acquired / on_released. Both run on the factory's
/// handle thread, one at a time and in order for a service, never on the I/O
/// thread and never after MutexContendService::stop() returned. An exception
/// thrown by a callback is logged and otherwise ignored.
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
    /// This contender stopped being owner: lost, expired, or released by stop().
    virtual void on_released(const MutexState& state);
    /// False for a contender whose callbacks do nothing and that reads
    /// is_owner() / wait_owner() instead (Locker's): its service then queues
    /// no callbacks, and stop() needs no hand-off to the handle thread.
    [[nodiscard]] virtual bool has_callbacks() const noexcept { return true; }

private:
    std::string mutex_;
    std::string contender_id_;
};

/// A contender built from two functions, for when a subclass is overkill.
class FunctionContender : public MutexContender {
public:
    using Callback = std::function<void(const MutexState&)>;
    FunctionContender(std::string mutex, Callback on_acquired, Callback on_released = {},
                      std::string contender_id = ContenderId::host());
    void on_acquired(const MutexState& state) override;
    void on_released(const MutexState& state) override;

private:
    Callback acquired_;
    Callback released_;
};

}  // namespace simba
