// `simba metrics`' exposition of the server-side numbers, from rows already
// read (metrics.cpp reads them): no connection here, so the unit tests
// (test/cli_unit_test.cpp) check the text from rows they make up.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace simba::cli {

/// What server_metrics reads, one struct per view; numbers as doubles (0
/// for NULL), as the exposition writes them.
struct ServerRows {
    struct Mutex {  ///< simba_mutex_status
        std::string mutex;
        std::optional<std::string> owner;
        std::string state;  ///< free, held, transition
        double time_left = 0, fence = 0, version = 0;
    };
    struct Semaphore {  ///< simba_semaphore_status, by key
        std::string key;
        double permits_held = 0, permits_limit = 0, fence = 0;
    };
    struct Session {  ///< simba_session_status, by state
        std::string state;
        double count = 0, mutexes = 0, permits = 0, rwlocks = 0;
    };
    struct Rwlock {  ///< simba_rwlock_status
        std::string rwlock;
        double readers = 0, write_held = 0, waiting_writers = 0, write_fence = 0;
    };
    struct Stats {  ///< simba_mutex_stats, by mutex and holder
        std::string mutex, holder;
        double acquisitions = 0, releases = 0, late_releases = 0, expired = 0, forced_releases = 0, last_event = 0;
    };
    std::vector<Mutex> mutexes;
    std::vector<Semaphore> semaphores;
    std::vector<Session> sessions;
    std::vector<Rwlock> rwlocks;
    std::vector<Stats> stats;
    bool history = false;  ///< simba.history is on
    /// Why an optional view could not be read ("" when it was): said in a
    /// comment while the rest is still written.
    std::string sessions_error, rwlocks_error, stats_error;
};

/// The Prometheus text of those rows (cli/README.md, "simba metrics").
std::string server_metrics_text(const ServerRows& rows);

}  // namespace simba::cli
