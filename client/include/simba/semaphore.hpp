// simba client: Semaphore, a counting semaphore with leased, fenced permits.
//
//   simba::Semaphore workers(factory);                  // holder: ContenderId::host()
//   auto permit = workers.acquire("worker-foo", 20, 30s, 5min);  // at most 20 across the cluster
//   permit.on_lost([] { stop_working(); });
//   do_work(permit.fence());
//   // the destructor releases the permit
//
// A permit is a lease. With FactoryOptions::sessions (the default) it is
// granted under the factory's session of lease length (ttl/3, ttl - ttl/3),
// whose one keepalive every third of the ttl keeps all the factory's permits
// and tenures of that length; the permit ends with the session (an ended
// session, the factory's shutdown). Without sessions the factory's I/O
// thread refreshes each permit every third of its ttl. If keeping it fails
// (the server says it expired, was taken over or its session ended, or the
// connection stays down until the lease ends), lost() turns true and
// on_lost runs on the factory's handle thread, no later than the lease
// deadline (send time of the last successful grant, refresh or keepalive +
// ttl, less SemaphoreOptions' margin). A failed refresh or keepalive first
// calls on_suspended with that deadline; on_resumed follows if one then
// succeeds.
//
// Thread-safety: a Semaphore is copyable and movable (copies share the
// factory) and its members may be called from any threads at once. A
// Permit's members may be called from any threads at once, except that
// moving, assigning or destroying it must not overlap another call on it; a
// moved-from Permit may only be assigned to or destroyed (release() on it
// returns false). on_lost runs on the factory's handle thread, shared with
// every callback of the factory's services: keep it quick. It may call its
// own permit's release() (which does not wait for the callback that calls
// it) and any other Permit or Semaphore member; a blocking acquire() there
// holds up every other callback of the factory until it returns.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "simba/contender_id.hpp"
#include "simba/factory.hpp"

namespace simba {

/// A granted permit. Move-only; releases itself when destroyed.
class Permit {
public:
    Permit(Permit&&) noexcept = default;
    Permit& operator=(Permit&& other) noexcept;
    Permit(const Permit&) = delete;
    Permit& operator=(const Permit&) = delete;
    /// Releases the permit if it is still held (errors are logged).
    ~Permit();

    [[nodiscard]] const std::string& key() const noexcept;
    /// The slot the permit occupies, 0 .. permits-1 (or higher after the limit was lowered).
    [[nodiscard]] int slot() const noexcept;
    /// The random token that proves the permit (simba_semaphore_* functions).
    [[nodiscard]] const std::string& token() const noexcept;
    /// Fencing token: strictly increases across grants of the key.
    [[nodiscard]] std::int64_t fence() const noexcept;

    /// True once the permit is gone: released, expired, taken over, or past
    /// its lease deadline without a successful refresh.
    [[nodiscard]] bool lost() const;
    /// Gives the permit back now (NOTIFY wakes waiters). True if it was still
    /// live on the server; false if it had already been lost. Idempotent.
    /// An on_lost callback that already started is waited for (unless it is
    /// the caller): none runs after release() returned.
    bool release();
    /// Runs `callback` once, on the factory's handle thread, when the permit
    /// is lost other than by release(); at once if it already was. Nothing
    /// after release().
    void on_lost(std::function<void()> callback);
    /// Runs `callback` on the handle thread when a refresh fails (an error,
    /// a timeout, no connection) while the permit is live: it is still
    /// held, until `deadline` unless a refresh succeeds first. Once per
    /// suspension, not per failed retry; at once if the permit is suspended
    /// now. on_resumed or on_lost follows (on_lost alone if it ends while
    /// suspended). Nothing after release().
    void on_suspended(std::function<void(SteadyClock::time_point deadline)> callback);
    /// Runs `callback` on the handle thread when a refresh succeeds after
    /// on_suspended (the permit goes on, with a later deadline). Nothing
    /// after release().
    void on_resumed(std::function<void()> callback);

    struct State;

private:
    friend class Semaphore;
    explicit Permit(std::shared_ptr<State> state) : state_(std::move(state)) {}
    std::shared_ptr<State> state_;
};

struct SemaphoreOptions {
    /// Backstop poll while acquire() waits: NOTIFY wakes it sooner, but is
    /// lost while the LISTEN connection is down.
    std::chrono::milliseconds poll_interval{1000};
    /// How long try_acquire() waits for the factory to (re)connect before it
    /// throws ConnectionError (a new factory connects in the background).
    std::chrono::milliseconds connect_wait{5000};
    /// A permit is given up (lost() turns true) this much before its proven
    /// lease end, as ContendOptions::release_margin and clock_drift_ppm: a
    /// fixed part capped at a tenth of the ttl, plus ppm of the ttl. The
    /// Semaphore constructor throws InvalidArgumentError (22023) for a
    /// negative margin or a ppm outside 0..100000.
    std::chrono::microseconds release_margin = std::chrono::milliseconds(20);
    int clock_drift_ppm = 500;
};

class Semaphore {
public:
    /// Uses `factory`'s two connections and threads; the factory must outlive
    /// the semaphore and its permits. `holder` names this process in
    /// simba_semaphore_status.
    explicit Semaphore(pg::ContendServiceFactory& factory, std::string holder = ContenderId::host(),
                       SemaphoreOptions options = {});

    /// One attempt: a permit if fewer than `permits` of `key` are live, else
    /// nullopt. Throws InvalidArgumentError for bad arguments (before any
    /// round trip), ConnectionError when the factory is not connected within
    /// connect_wait — at once for a setup mistake (no server before the first
    /// connect, wrong database or role: the connect's SQLSTATE and message)
    /// — and the server's errors as simba::Error subclasses (no extension:
    /// ServerError 42883; no grant: PermissionDeniedError 42501).
    [[nodiscard]] std::optional<Permit> try_acquire(const std::string& key, int permits,
                                                    std::chrono::milliseconds ttl,
                                                    const std::string& context = {});
    /// Waits up to `timeout` for a permit: retries when a permit of `key` is
    /// released (NOTIFY) and every poll_interval. Throws TimeoutError when
    /// none was granted in time. A lost or refused connection is retried
    /// until then; every other error of try_acquire(), setup mistakes
    /// included, is thrown at once.
    [[nodiscard]] Permit acquire(const std::string& key, int permits, std::chrono::milliseconds ttl,
                                 std::chrono::milliseconds timeout, const std::string& context = {});

    [[nodiscard]] const std::string& holder() const noexcept { return holder_; }

    /// Largest `permits` argument the server accepts.
    static constexpr int max_permits = 10000;

private:
    std::shared_ptr<pg::detail::Io> io_;
    std::string holder_;
    SemaphoreOptions options_;
};

}  // namespace simba
