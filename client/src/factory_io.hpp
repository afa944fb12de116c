// simba client (internal): FactoryIo, a PostgreSQL factory's detail::Io
// (pg_io.hpp): what its threads and connections offer the semaphore's
// permits and the lockers' holds, made of the factory's parts. Statements
// and timers go to the I/O thread through the command queue; callbacks to
// the handle thread. Holds no state of its own.
#pragma once

#include "attempt_queue.hpp"
#include "command_queue.hpp"
#include "connections.hpp"
#include "executor.hpp"
#include "holder_ids.hpp"
#include "notify_subscribers.hpp"
#include "pg_io.hpp"
#include "service_driver.hpp"
#include "simba/factory.hpp"
#include "statement_watchdog.hpp"
#include "wake_fd.hpp"

namespace simba::pg::detail {

/// The factory's parts a hold reaches (each outlives this).
struct FactoryParts {
    const FactoryOptions& options;
    Executor& executor;
    StatementWatchdog& watchdog;
    Connections& connections;  // mostly I/O state (io_state.hpp)
    ServiceDriver& driver;     // I/O state
    TaskQueue& tasks;          // I/O state
    NotifySubscribers& subscribers;
    HolderIds& ids;
    CommandQueue& commands;
    WakeFd& waker;
};

class FactoryIo final : public Io {
public:
    explicit FactoryIo(FactoryParts parts) : p_(parts) {}

    bool run(std::function<void(pqxx::connection&)> fn, std::function<void(std::exception_ptr)> failed) override;
    bool grant_in_session(const std::shared_ptr<SessionHolder>& holder,
                          const std::function<bool(const SessionProof*)>& grant) override {
        assert_io_held();  // inside run()'s fn
        return p_.driver.sessions().grant_in_session(holder, grant);
    }
    void leave_session(std::shared_ptr<SessionHolder> holder) override;
    bool wait_connected(SteadyClock::time_point until) override { return p_.connections.wait_connected(until, true); }
    std::exception_ptr setup_error() const override { return p_.connections.setup_error(); }
    void while_waiting() override {
        if (p_.executor.on_this_thread()) p_.watchdog.cut_overdue();
    }
    bool run_at(SteadyClock::time_point at, std::function<void()> fn) override;
    bool handle(std::function<void()> fn) override { return p_.executor.post(std::move(fn)); }
    bool handle_at(SteadyClock::time_point at, std::function<void()> fn) override {
        return p_.executor.post_at(at, std::move(fn));
    }
    SteadyClock::duration notify_min_interval() const override { return p_.options.notify_min_interval; }
    SteadyClock::duration retry_delay() const override { return p_.options.retry_delay; }
    std::uint64_t subscribe(std::vector<std::string> names, std::function<void(bool)> fn) override {
        return p_.subscribers.subscribe(std::move(names), std::move(fn));
    }
    void unsubscribe(std::uint64_t id) override { p_.subscribers.unsubscribe(id); }
    void register_wait(const std::vector<std::string>& names, bool on) override;
    void owe(std::function<void(pqxx::connection&)> pay, std::string what) override;
    void reserve_ids(Names kind, const std::vector<std::string>& names, const std::string& id) override {
        p_.ids.reserve(kind, names, id);
    }
    void release_ids(Names kind, const std::vector<std::string>& names, const std::string& id) override {
        p_.ids.release(kind, names, id);
    }

private:
    FactoryParts p_;
};

}  // namespace simba::pg::detail
