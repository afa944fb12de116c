// simba client (internal): one contend service's state inside a PostgreSQL
// factory, shared by the factory's threads and the service's handle.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "io_state.hpp"
#include "metrics_cell.hpp"
#include "notify_throttle.hpp"
#include "ownership.hpp"
#include "simba/contend_period.hpp"
#include "simba/contender.hpp"
#include "simba/service.hpp"

namespace simba::pg::detail {

struct ServiceState {
    ServiceState(std::shared_ptr<MutexContender> c, ContendOptions o)
        : contender(std::move(c)),
          id(contender->contender_id()),
          mutex(contender->mutex()),
          options(o),
          period(id, o.jitter),
          ownership(mutex, id, simba::detail::lease_margin(duration(), o.release_margin, o.clock_drift_ppm),
                    o.single_tenure) {}

    std::shared_ptr<MutexContender> contender;
    const std::string id;
    const std::string mutex;
    const ContendOptions options;
    ContendPeriod period;

    // One service's ownership state and pending callbacks.
    mutable Mutex m ACQUIRED_AFTER(io_state);
    bool active GUARDED_BY(m) = false;  // callbacks may be emitted
    simba::detail::Ownership ownership GUARDED_BY(m);  // the one place it is decided (ownership.hpp)
    // Callbacks not yet run, oldest first: rarely more than one, and a
    // std::deque would allocate its first 512-byte block for every service.
    std::vector<std::function<void()>> pending GUARDED_BY(m);
    bool in_callback GUARDED_BY(m) = false;  // one of them is running on the handle thread
    // A deadline check is queued for then ({}: none).
    SteadyClock::time_point expiry_at GUARDED_BY(m){};
    CondVar owner_cv;  // a tenure began, it stopped, or an attempt failed for good (wait_owner)
    std::uint64_t stops GUARDED_BY(m) = 0;  // stops so far (end_locally)
    // The last attempt failed and will fail again: wait_owner() throws it.
    std::exception_ptr error GUARDED_BY(m);
    // when_owner()'s callback, until wait_owner() would return.
    std::function<void(std::exception_ptr)> settled GUARDED_BY(m);

    // I/O state (io_state.hpp).
    // The last owner seen from the server.
    MutexOwner last GUARDED_BY(io_state);
    // The current attempt timer (attempt_queue.hpp), and when it is due (max(): none pending).
    std::uint64_t timer_gen GUARDED_BY(io_state) = 0;
    SteadyClock::time_point next_at GUARDED_BY(io_state) = SteadyClock::time_point::max();
    // How soon a NOTIFY may make it attempt (notify_throttle.hpp).
    NotifyThrottle notify GUARDED_BY(io_state);
    bool io_active GUARDED_BY(io_state) = false;
    // Its last attempt failed: kept out of batches until one succeeds.
    bool solo GUARDED_BY(io_state) = false;
    // An attempt's outcome is unknown (its reply was lost): stop() releases.
    bool unknown GUARDED_BY(io_state) = false;
    // The server counts a tenure that ended here: released before the next attempt.
    bool disowned GUARDED_BY(io_state) = false;
    // The session its last attempt was sent under ("": none; sessions.hpp).
    std::string session GUARDED_BY(io_state);
    // A tenure under a session must be checked on the server (a NOTIFY, a revocation).
    bool verify GUARDED_BY(io_state) = false;
    // Fair: its last attempt left it a place in the queue (stop() withdraws it).
    bool queued GUARDED_BY(io_state) = false;
    // Its mutex is registered on the LISTEN connection (it waits).
    bool wait_registered GUARDED_BY(io_state) = false;
    // Fair: the channel it is woken on, listened on while it runs ("": none yet).
    std::string wake_channel GUARDED_BY(io_state);

    // Metrics (simba::Metrics): the cell of (mutex, id), since when it
    // waits, and when a release NOTIFY came while it waited.
    std::shared_ptr<simba::detail::MetricsCell> metrics;
    SteadyClock::time_point wait_since GUARDED_BY(m){};
    SteadyClock::time_point notified_at GUARDED_BY(io_state){};

    bool is_owner_now() const EXCLUDES(m) {
        MutexLock lock(m);
        return ownership.owns(SteadyClock::now());
    }

    /// What the next attempt is: nothing once a single
    /// tenure ended (`finished`), else a renewal by fence (a single
    /// tenure's: `renew_fence` > 0) or simba_acquire.
    struct Next {
        bool finished = false;
        std::int64_t renew_fence = 0;
    };
    Next next() const EXCLUDES(m) {
        MutexLock lock(m);
        if (ownership.finished()) return {true, 0};
        return {false, options.single_tenure && ownership.holding() ? ownership.tenure().fence : 0};
    }

    /// ttl + transition: the lease one grant gives.
    SteadyClock::duration duration() const { return options.ttl + options.transition; }
};

using ServicePtr = std::shared_ptr<ServiceState>;

}  // namespace simba::pg::detail
