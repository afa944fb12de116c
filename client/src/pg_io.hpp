// simba client (internal): what a PostgreSQL factory's threads offer to the
// other users of its two connections besides the contend services: the
// Semaphore, and the SharedLocker and MultiLocker (lock_hold.hpp); the
// factory's FactoryIo (factory_io.hpp) implements it. Not
// installed: pqxx types stay out of the public headers.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <pqxx/pqxx>
#include <string>
#include <vector>

#include "simba/owner.hpp"
#include "simba/service.hpp"

namespace simba::pg {
class ContendServiceFactory;
}

namespace simba::pg::detail {

class SessionHolder;
struct SessionProof;

class Io {
public:
    virtual ~Io() = default;

    /// Runs `fn` with the statement connection on the I/O thread. If the
    /// factory is disconnected, or `fn` throws, `failed` gets the error (a
    /// simba::Error; a lost connection is also handled: logged, reconnect).
    /// Returns false, running nothing, once the factory is shutting down.
    virtual bool run(std::function<void(pqxx::connection&)> fn,
                     std::function<void(std::exception_ptr)> failed) = 0;
    /// Inside run()'s fn: runs `grant` with the session of `holder`'s lease
    /// length (its open or last keepalive), opened first if none is, or
    /// with nullptr without FactoryOptions::sessions. If `grant` returns
    /// true, `holder` is kept by that session from then on. A session that
    /// ended on the server (SB004) is replaced once. Throws what the open
    /// or `grant` throws.
    virtual bool grant_in_session(const std::shared_ptr<SessionHolder>& holder,
                                  const std::function<bool(const SessionProof*)>& grant) = 0;
    /// From any thread: `holder` holds nothing any more; its session no
    /// longer keeps it.
    virtual void leave_session(std::shared_ptr<SessionHolder> holder) = 0;
    /// Waits until both connections are up, or `until`, or setup_error()
    /// is set; returns whether they are up.
    virtual bool wait_connected(SteadyClock::time_point until) = 0;
    /// A connect failure that is a setup mistake (Connections::setup_error):
    /// wrong database or role, no server before the first connect. Null
    /// otherwise.
    [[nodiscard]] virtual std::exception_ptr setup_error() const = 0;
    /// Called in a loop while a caller waits for the I/O thread. On the
    /// handle thread (a callback) it runs the statement watchdog, which
    /// cannot run there while that thread waits: a hung statement is still
    /// cut at its deadline.
    virtual void while_waiting() = 0;
    /// Runs `fn` on the I/O thread at `at` (not before).
    virtual bool run_at(SteadyClock::time_point at, std::function<void()> fn) = 0;
    /// Runs `fn` on the handle thread, where callbacks run: now, or at `at`.
    virtual bool handle(std::function<void()> fn) = 0;
    virtual bool handle_at(SteadyClock::time_point at, std::function<void()> fn) = 0;

    /// Anyone may NOTIFY: no retry for one sooner than this after the last
    /// try (FactoryOptions::notify_min_interval).
    [[nodiscard]] virtual SteadyClock::duration notify_min_interval() const = 0;
    /// FactoryOptions::retry_delay: how soon a statement that failed on a
    /// live connection is tried again.
    [[nodiscard]] virtual SteadyClock::duration retry_delay() const = 0;

    /// Calls `fn` on the I/O thread (quick: no statements, it may post)
    /// whenever `NOTIFY simba` names one of `names`, until unsubscribe(id).
    /// Returns that id.
    /// fn(true): only a registration of ours took effect (register_wait).
    virtual std::uint64_t subscribe(std::vector<std::string> names, std::function<void(bool)> fn) = 0;
    /// From any thread; the callback may be running on the I/O thread.
    virtual void unsubscribe(std::uint64_t id) = 0;
    /// From any thread: a holder waits (on) on `names`, or no longer: they
    /// are registered with simba_wait on the LISTEN connection meanwhile, so
    /// that a release under simba.notify = registered still notifies.
    virtual void register_wait(const std::vector<std::string>& names, bool on) = 0;

    /// From any thread: a release that failed for something a session may
    /// hold (its keepalives would keep it for good). `pay` sends it again on
    /// the I/O thread (throwing what its statement throws) until it succeeds;
    /// a holder that takes the lock again must pay its own debt first.
    virtual void owe(std::function<void(pqxx::connection&)> pay, std::string what) = 0;

    /// One holder per (name, contender id) in a factory: two would be one
    /// holder to the server, sharing a lease and a fence that each believes
    /// its own. Reserves every name of `names` for `id` (mutexes, shared
    /// with the services and Lockers, or read-write locks), or none:
    /// IllegalStateError naming the first taken. release_ids() undoes it.
    enum class Names { mutex, rwlock };
    virtual void reserve_ids(Names kind, const std::vector<std::string>& names, const std::string& id) = 0;
    virtual void release_ids(Names kind, const std::vector<std::string>& names, const std::string& id) = 0;
};

/// IllegalStateError: "the factory of this <what> has shut down".
[[noreturn]] void throw_shut_down(const char* what);

/// Runs `fn` on `io`'s I/O thread and waits for it; rethrows its error.
/// IllegalStateError once the factory has shut down.
template <typename T>
T call(Io& io, std::function<T(pqxx::connection&)> fn, const char* what) {
    auto done = std::make_shared<std::promise<T>>();
    auto result = done->get_future();
    bool queued = io.run([done, fn](pqxx::connection& c) { done->set_value(fn(c)); },
                         [done](std::exception_ptr e) { done->set_exception(e); });
    if (!queued) throw_shut_down(what);
    while (result.wait_for(std::chrono::milliseconds(5)) != std::future_status::ready) io.while_waiting();
    return result.get();
}

/// The I/O channel of a PostgreSQL factory (shared: outlives the factory's
/// handle on it for as long as a user keeps it).
std::shared_ptr<Io> io_of(ContendServiceFactory& factory);

/// Stops a RUNNING service without waiting for its release's reply (a
/// destructor's stop): a PostgreSQL factory's I/O thread sends it, in one
/// statement with the others stopped at the same moment. Other backends: stop().
void stop_detached(MutexContendService& service);

}  // namespace simba::pg::detail
