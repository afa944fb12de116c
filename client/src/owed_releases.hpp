// simba client (internal): OwedReleases, the ledger of releases that failed
// for something a session may hold. A session's keepalives would keep such
// a hold for good, so each is sent again, on the I/O thread, until it
// succeeds or the factory shuts down (then it lapses with its session).
// I/O state (io_state.hpp).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "connections.hpp"
#include "io_state.hpp"

namespace simba::pg::detail {

class OwedReleases {
public:
    explicit OwedReleases(SteadyClock::duration retry_delay) : retry_delay_(retry_delay) {}

    /// `pay` sends the release (throwing what its statement throws); due now.
    void owe(std::function<void(pqxx::connection&)> pay, std::string what) REQUIRES(io_state);
    /// Sends those due at `now` while `conn` is up; one that fails is due
    /// again a retry delay later (all of them stay if the connection was lost).
    void pay_due(Connections& conn, SteadyClock::time_point now) REQUIRES(io_state);
    /// Shutdown: sends every one now, whatever its time; what cannot be
    /// sent is logged and forgotten.
    void pay_all_at_exit(Connections& conn) REQUIRES(io_state);

    [[nodiscard]] bool empty() const REQUIRES(io_state) { return owed_.empty(); }
    /// When the next is due (time_point::max(): none).
    [[nodiscard]] SteadyClock::time_point next_due() const REQUIRES(io_state);

private:
    struct Owed {
        std::function<void(pqxx::connection&)> pay;
        std::string what;
        SteadyClock::time_point at;  // not before
    };
    const SteadyClock::duration retry_delay_;
    std::vector<Owed> owed_ GUARDED_BY(io_state);
};

}  // namespace simba::pg::detail
