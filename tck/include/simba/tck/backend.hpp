// simba TCK: what a backend hands the technology compatibility kit.
//
// The TCK (tck/src/tck_suite.cpp) is written once against the abstract
// simba::ContendServiceFactory. A backend proves itself by describing itself
// in a Backend value and instantiating the suite in one line:
//
//   SIMBA_TCK_INSTANTIATE(Postgres, simba::tck::postgres_backend());
//
// and by building a worker executable whose main is one line too:
//
//   int main(int argc, char** argv) { return simba::tck::worker_main(argc, argv, my_backend()); }
//
// Every hook may be called from several threads at once.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "simba/factory.hpp"
#include "simba/owner.hpp"

namespace simba::tck {

/// A mutex's row as the server stores it, read without changing anything.
/// Times are server times (microseconds since the Unix epoch, the server's
/// clock). owner_id is the stored owner even when its lease has ended (the
/// history of the lock is what the TCK judges); empty after a release.
struct ServerRow {
    bool exists = false;
    std::string owner_id;
    std::int64_t fence = 0;
    std::int64_t version = 0;
    ServerTime acquired_at{0};
    ServerTime ttl_at{0};
    ServerTime transition_at{0};
    ServerTime current_at{0};  ///< server time of this read
};

struct Backend {
    /// Used in test names: letters, digits and '_' only.
    std::string name;

    /// A fresh factory. `client_tag` (letters, digits, '_'; unique per call)
    /// names this client on the server so that server_connections,
    /// cut_off_client and restore_client can find it. Called in the test
    /// process and in worker processes.
    std::function<std::unique_ptr<ContendServiceFactory>(const std::string& client_tag)> make_factory;

    /// The worker executable (argv prefix): a program whose main calls
    /// worker_main(argc, argv, <this backend>). The TCK appends its arguments.
    std::vector<std::string> worker_command;

    /// Server connections one factory holds, whatever the number of services.
    int fixed_connections = 0;
    /// Server connections open right now for `client_tag`.
    std::function<int(const std::string& client_tag)> server_connections;

    /// Terminates the client's server connections and refuses new ones
    /// until restore_client: its renewals fail from now on.
    std::function<void(const std::string& client_tag)> cut_off_client;
    std::function<void(const std::string& client_tag)> restore_client;

    /// The mutex's stored row (see ServerRow).
    std::function<ServerRow(const std::string& mutex)> read_row;

    /// Runs the backend's transactional fence check as the client
    /// `client_tag` would (for PostgreSQL simba_fence_check(mutex,
    /// contender_id, fence) in a transaction of that client's role: a lease
    /// belongs to the id and the role that took it).
    /// Returns "" if it passed, else the error (SQLSTATE and message).
    std::function<std::string(const std::string& client_tag, const std::string& mutex,
                              const std::string& contender_id, std::int64_t fence)>
        fence_check;

    /// Optional: called once after the suite with the prefix of every
    /// client_tag the test process used (drop roles, users, ...).
    std::function<void(const std::string& client_tag_prefix)> cleanup;
};

inline void PrintTo(const Backend& b, std::ostream* os) { *os << b.name; }

/// The worker process's main (see worker.cpp for its stdout protocol).
int worker_main(int argc, char** argv, const Backend& backend);

/// The value-parameterized suite; instantiate it with SIMBA_TCK_INSTANTIATE.
class Suite : public ::testing::TestWithParam<Backend> {
protected:
    void SetUp() override;
    void TearDown() override;
    /// A client_tag unique to this test (prefix() + a counter).
    std::string new_tag();
    /// A mutex name unique to this test run.
    std::string new_mutex(const std::string& what);
    const std::string& prefix() const { return prefix_; }

private:
    std::string prefix_;
    int counter_ = 0;
};

}  // namespace simba::tck

/// The suite's gtest name (test names read NAME/SimbaTck.Case/NAME).
using SimbaTck = simba::tck::Suite;

/// Instantiates the whole TCK for one backend, in one line.
#define SIMBA_TCK_INSTANTIATE(NAME, BACKEND)                                               \
    INSTANTIATE_TEST_SUITE_P(NAME, SimbaTck, ::testing::Values(BACKEND),                   \
                             [](const ::testing::TestParamInfo<::simba::tck::Backend>& i) { \
                                 return i.param.name;                                      \
                             })
