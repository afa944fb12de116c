// Helpers for the tests that run against a real PostgreSQL (test/pg-run.sh).
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <pqxx/pqxx>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "simba/simba.hpp"

namespace simba_test {

using namespace std::chrono_literals;
using simba::SteadyClock;

/// Whether the tests run against the portable edition (SIMBA_TEST_EDITION=portable,
/// test/pg-run.sh), not the C extension.
bool portable_edition();
/// The role without superuser that owns the portable edition's databases and
/// installs it (SIMBA_PORTABLE_OWNER, pg-run.sh's default simba_portable_owner).
std::string portable_owner();

/// A superuser connection from libpq's environment, with the extension
/// created (the portable edition: its script, SIMBA_PORTABLE_SCRIPT, run
/// there by portable_owner(), unless it is there already).
std::unique_ptr<pqxx::connection> admin(const std::string& conninfo = {});

class ScratchDatabase;
/// simba's setting `name` (history, notify, ...) for every connection of
/// the scratch database: the extension's `ALTER DATABASE ... SET simba.name`,
/// or the portable edition's row in simba_settings.
void set_database_setting(pqxx::connection& root, const ScratchDatabase& db, const std::string& name,
                          const std::string& value);

/// A database of the test's own, for outages (ALLOW_CONNECTIONS false):
/// created with the extension (unless `with_extension` is false), dropped
/// (WITH FORCE) at the end of the scope.
class ScratchDatabase {
public:
    ScratchDatabase(pqxx::connection& root, const std::string& prefix, bool with_extension = true);
    ~ScratchDatabase();
    ScratchDatabase(const ScratchDatabase&) = delete;
    ScratchDatabase& operator=(const ScratchDatabase&) = delete;
    /// libpq connection string naming it ("dbname=...").
    [[nodiscard]] std::string conninfo() const { return "dbname=" + name_; }
    /// New connections refused (refuse = true) or allowed again; existing
    /// ones are not touched.
    void refuse_connections(bool refuse = true);
    /// An outage of one client: new connections refused (as above) and the
    /// backends of `application_name` terminated; how many there were.
    int cut_off(const std::string& application_name);

private:
    pqxx::connection& root_;
    std::string name_;
    std::string quoted_;
};

/// The mutex's owner id on the server now ("" when free).
std::string owner_of(pqxx::connection& c, const std::string& mutex);
/// How many acquire attempts `id`'s service of `mutex` made (the factory's
/// metrics; failed ones included), 0 if it has none.
std::uint64_t attempts_of(simba::pg::ContendServiceFactory& f, const std::string& mutex, const std::string& id);
/// Whether the server shows `id` holding `mutex` with another fence than
/// `fence`: a tenure after the one that had it. (The tenure of `fence`
/// itself may still be live there a moment after its holder gave up.)
bool holds_later_tenure(pqxx::connection& c, const std::string& mutex, const std::string& id, std::int64_t fence);

/// Waits until the server has renewed `mutex`'s lease `n` times: the end
/// simba_mutex_status shows for it (its own lease's, or its session's) moved
/// on n times. False if that took longer than `timeout`.
bool renewed_on_server(pqxx::connection& c, const std::string& mutex, int n, std::chrono::milliseconds timeout);

/// A boot-clock time in microseconds (since the clock's epoch).
std::int64_t us(SteadyClock::time_point t);

/// Server time (simba's clock) minus the client's boot clock, both in
/// microseconds: simba's clock counts CLOCK_BOOTTIME from one origin, so on
/// the test's own machine the difference is constant; measured within
/// [lo, hi]. A client instant t was certainly before server time S if
/// us(t) + hi < S, certainly after it if us(t) + lo > S.
struct Offset {
    std::int64_t lo = 0, hi = 0;
};
/// The offset from the quickest of 50 round trips on `c`.
Offset calibrate(pqxx::connection& c);

/// A name unique to this process and call: prefix-<pid>-<n>.
std::string unique_name(const std::string& prefix);

/// Polls `pred` every 2 ms until it holds or `timeout` passes; returns pred().
bool eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout);

/// A connection as a role with no simba grant at all (created if need be):
/// what anyone who may connect to the database can do. conninfo names
/// another database (ScratchDatabase::conninfo()).
std::unique_ptr<pqxx::connection> ungranted(pqxx::connection& root, const std::string& conninfo = "");

/// What a call threw (a runtime_error "no error" if nothing) and how long it took.
using Outcome = std::pair<std::exception_ptr, SteadyClock::duration>;
Outcome error_of(const std::function<void()>& call);

/// `got` is an E with this SQLSTATE and these words in its message, thrown
/// in under 1 s.
template <typename E>
void expect_error(const Outcome& got, const std::string& sqlstate, const std::string& words) {
    try {
        std::rethrow_exception(got.first);
    } catch (const E& e) {
        EXPECT_EQ(e.sqlstate(), sqlstate) << e.what();
        EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    } catch (const std::exception& e) {
        ADD_FAILURE() << "wrong exception: " << e.what();
    }
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(got.second);
    EXPECT_LT(ms, 1000ms) << ms.count() << " ms";
}

/// The setup mistakes a caller must hear of at once (issue 23): a database
/// without the extension, a role without a grant, a database that does not
/// exist, a port nothing listens on. Runs `attempt` with a connection
/// string for each and expects its typed error (expect_error).
void expect_setup_mistakes_thrown(pqxx::connection& root,
                                  const std::function<Outcome(const std::string& conninfo)>& attempt);

/// `n` times NOTIFY simba, '<name>' on `c`, one transaction each (within
/// one transaction identical NOTIFYs are delivered once); counts them in
/// `sent` if given.
void notify_storm(pqxx::connection& c, const std::string& name, int n, std::atomic<int>* sent = nullptr);

/// Backends of the server whose application_name is `app`.
int backends_with_app(pqxx::connection& c, const std::string& app);

/// The integer in environment variable `name`, or `fallback` when unset or empty.
int env_int(const char* name, int fallback);

/// Threads of this process (/proc/self/task).
int thread_count();

/// Factory options for tests: a unique application_name, fast reconnects
/// (and FactoryOptions::sessions as given).
simba::pg::FactoryOptions test_options(const std::string& app_prefix);
simba::pg::FactoryOptions test_options(const std::string& app_prefix, bool sessions);

/// A suite run once with sessions and once with a lease per lock
/// (INSTANTIATE_TEST_SUITE_P(..., ::testing::Bool(), session_mode_name)).
class SessionModes : public ::testing::TestWithParam<bool> {};
std::string session_mode_name(const ::testing::TestParamInfo<bool>& p);

/// Service options with this ttl and transition, the rest default.
simba::ContendOptions lease(std::chrono::milliseconds ttl, std::chrono::milliseconds transition);

/// A contender recording its callbacks.
class Recorder : public simba::MutexContender {
public:
    using MutexContender::MutexContender;
    struct Event {
        bool acquired;
        simba::MutexState state;
        SteadyClock::time_point at;
        std::thread::id thread;
    };
    void on_acquired(const simba::MutexState& s) override;
    void on_released(const simba::MutexState& s) override;

    std::vector<Event> events() const;
    int acquired_count() const;
    int released_count() const;
    /// Waits until `pred(events)` holds.
    bool wait(const std::function<bool(const std::vector<Event>&)>& pred, std::chrono::milliseconds timeout);

    /// Optional hook run inside the callback, after recording.
    std::function<void(bool acquired, const simba::MutexState&)> hook;

private:
    void record(bool acquired, const simba::MutexState& s);
    mutable std::mutex m_;
    std::condition_variable cv_;
    std::vector<Event> events_;
};

/// Collects log messages for the duration of a test.
class LogCapture {
public:
    LogCapture();
    ~LogCapture();
    std::vector<std::string> messages(simba::LogLevel min = simba::LogLevel::warning) const;
    int count_containing(const std::string& needle) const;

private:
    mutable std::mutex m_;
    std::vector<std::pair<simba::LogLevel, std::string>> msgs_;
    simba::LogHandler previous_;
};

}  // namespace simba_test
