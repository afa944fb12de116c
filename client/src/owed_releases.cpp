#include "owed_releases.hpp"

#include <algorithm>

#include "simba/log.hpp"

namespace simba::pg::detail {

void OwedReleases::owe(std::function<void(pqxx::connection&)> pay, std::string what) {
    log(LogLevel::warning, what + " failed: sent again once it can be");
    owed_.push_back({std::move(pay), std::move(what), SteadyClock::time_point{}});
}

void OwedReleases::pay_due(Connections& conn, SteadyClock::time_point now) {
    for (auto it = owed_.begin(); it != owed_.end() && conn.up();) {
        if (it->at > now) {
            ++it;
            continue;
        }
        try {
            it->pay(conn.stmt());  // under the statement watchdog, as every statement
            conn.statement_ok();
            log(LogLevel::info, it->what + ": sent");
            it = owed_.erase(it);
        } catch (const std::exception& e) {
            if (conn.statement_failed(e, it->what)) return;
            it->at = now + retry_delay_;
            ++it;
        }
    }
}

void OwedReleases::pay_all_at_exit(Connections& conn) {
    for (auto& o : owed_) o.at = {};
    pay_due(conn, SteadyClock::now());
    for (auto& o : owed_)
        log(LogLevel::error, o.what + ": not sent before the factory shut down (" +
                                 (conn.up() ? "it failed; its session's close releases it)"
                                            : "no connection; it lapses with its session on the server)"));
    owed_.clear();
}

SteadyClock::time_point OwedReleases::next_due() const {
    auto at = SteadyClock::time_point::max();
    for (const auto& o : owed_) at = std::min(at, o.at);
    return at;
}

}  // namespace simba::pg::detail
