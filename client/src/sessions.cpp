#include "sessions.hpp"

#include "simba/contend_period.hpp"

namespace simba::pg::detail {

SessionLease& Sessions::of(std::chrono::microseconds ttl, std::chrono::microseconds transition) {
    return leases_.try_emplace({ttl.count(), transition.count()}, ttl, transition).first->second;
}

SessionLease* Sessions::due(SteadyClock::time_point now) {
    for (auto& [key, l] : leases_)
        if (l.next_at <= now) return &l;
    return nullptr;
}

SteadyClock::time_point Sessions::next_due() const {
    auto at = SteadyClock::time_point::max();
    for (const auto& [key, l] : leases_) at = std::min(at, l.next_at);
    return at;
}

void Sessions::all_due(SteadyClock::time_point now) {
    for (auto& [key, l] : leases_)
        if (l.is_open()) l.next_at = now;
}

/// The keepalive comes when a tenure's renewal would (ContendPeriod's
/// owner rule: at ttl_at, with a quarter of the lease left for retries).
void Sessions::proven(SessionLease& l, const pqxx::row& row, SteadyClock::time_point anchor) {
    l.proof = parse_session(row, anchor);
    const auto now = SteadyClock::now();
    l.next_at = now + std::max(SteadyClock::duration::zero(), ContendPeriod::owner_delay(l.proof.lease, now));
}

void Sessions::open(pqxx::connection& c, SessionLease& l) {
    const auto anchor = SteadyClock::now();
    pqxx::nontransaction tx(c);
    proven(l, tx.exec_params1(kSessionOpenSql, l.ttl.count(), l.transition.count()), anchor);
}

bool Sessions::keepalive(pqxx::connection& c, SessionLease& l) {
    const auto anchor = SteadyClock::now();
    const auto revoked = l.proof.revoked;
    pqxx::nontransaction tx(c);
    proven(l, tx.exec_params1(kSessionKeepaliveSql, l.proof.id), anchor);
    return l.proof.revoked > revoked;
}

void Sessions::close(pqxx::connection& c, SessionLease& l) {
    const auto id = forget(l);
    pqxx::nontransaction tx(c);
    tx.exec_params1(kSessionCloseSql, id);
}

std::string Sessions::forget(SessionLease& l) {
    auto id = std::move(l.proof.id);
    l.proof = {};
    l.next_at = SteadyClock::time_point::max();
    return id;
}

}  // namespace simba::pg::detail
