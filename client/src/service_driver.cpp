#include "service_driver.hpp"

#include <algorithm>
#include <cctype>
#include <tuple>

#include "simba/log.hpp"
#include "statements.hpp"

namespace simba::pg::detail {

using simba::detail::MetricsCell;
using std::chrono::duration_cast;
using std::chrono::milliseconds;

void ServiceDriver::start(const ServicePtr& svc, bool here) {
    {
        MutexLock lock(svc->m);
        svc->active = true;
        svc->ownership.start();
        svc->wait_since = SteadyClock::now();
    }
    svc->notified_at = {};
    svc->notify = {};
    svc->unknown = false;
    // `disowned` stays if stop()'s release failed: its first attempt gives
    // that tenure back first.
    svc->session.clear();
    svc->verify = false;
    svc->queued = false;
    if (!svc->wake_channel.empty()) listen_for(svc);
    svc->io_active = true;
    svc->last = MutexOwner::none(svc->mutex);
    registry_.add(svc);
    sessions_.join(svc);
    update_statement_timeout();
    if (here && conn_.up())
        attempt(svc);
    else
        schedule(svc, SteadyClock::now());
}

void ServiceDriver::stop(const std::vector<ServicePtr>& svcs) {
    std::vector<ServicePtr> owners;  // released by id whenever they may hold the lease
    for (auto& svc : svcs) {
        svc->io_active = false;
        ++svc->timer_gen;  // cancels pending attempts
        svc->next_at = SteadyClock::time_point::max();
        registry_.remove(svc);
        register_wait(svc, false);
        sessions_.leave(svc);
        // Including when a grant's reply was lost: contenders then need not
        // wait a lease out.
        // A fair waiter's place in the queue is withdrawn the same way.
        if (svc->last.is_owner(svc->id) || svc->unknown || svc->is_owner_now() || svc->queued) owners.push_back(svc);
        if (!svc->wake_channel.empty()) {
            channels_.erase(svc->wake_channel);
            conn_.want_channel(svc->wake_channel, false);
        }
        // The tenure ends here first: once the release commits, a waiter can
        // be granted the mutex (the NOTIFY wakes it in about a millisecond)
        // while this thread has yet to read the release's reply; a claim
        // that lasted until then would overlap the next holder's.
        events_.end_locally(svc);
    }
    bool released_all = false;
    if (!owners.empty() && conn_.up()) {
        try {
            // false: the lease had ended (expired or taken over) before this release.
            const auto released = release(owners);
            for (std::size_t i = 0; i < owners.size(); ++i)
                MetricsCell::inc(released[i] ? owners[i]->metrics->released : owners[i]->metrics->late_releases);
            released_all = true;
        } catch (const std::exception& e) {
            conn_.statement_failed(e, owners.size() == 1 ? "release of mutex " + owners[0]->mutex
                                                         : "release of " + std::to_string(owners.size()) + " mutexes");
        }
    }
    // What was not released lapses on the server by itself, unless a session
    // holds it: the session's keepalives would keep it for good.
    std::vector<ServicePtr> owing;
    if (!released_all)
        for (auto& svc : owners) {
            if (svc->session.empty())
                log(LogLevel::warning, "stop of " + svc->id + " on mutex " + svc->mutex +
                                           " without its release: the lease will lapse on the server");
            else
                owing.push_back(svc);
        }
    for (auto& svc : svcs) {
        svc->last = MutexOwner::none(svc->mutex);
        svc->unknown = false;
        svc->disowned = false;
        svc->queued = false;
        svc->session.clear();
    }
    for (auto& svc : owing) {
        svc->disowned = true;  // a restart gives it back first
        owe([this, svc](pqxx::connection&) {
            assert_io_held();  // OwedReleases pays with it
            if (svc->disowned) release(svc, "owed release");
            svc->disowned = false;
        }, "release of mutex " + svc->mutex + " by " + svc->id + " (held under a session)");
    }
    update_statement_timeout();
}

void ServiceDriver::owe(std::function<void(pqxx::connection&)> pay, std::string what) {
    owed_.owe(std::move(pay), std::move(what));
}

bool ServiceDriver::unfinished() {
    if (!owed_.empty() || !registry_.all().empty()) return true;
    return sessions_.any_open();
}

void ServiceDriver::pay_owed_at_exit() { owed_.pay_all_at_exit(conn_); }

/// Releases `owners` by id, one statement per kReleaseBatchMax of them, in
/// mutex order (as batched acquires lock rows: two processes' statements
/// never deadlock); whether each had a live tenure. Throws what a
/// statement throws (the rest are not sent: their leases lapse).
std::vector<bool> ServiceDriver::release(std::vector<ServicePtr>& owners) {
    if (owners.size() == 1) return {release(owners[0], "release")};
    std::sort(owners.begin(), owners.end(), [](const ServicePtr& a, const ServicePtr& b) {
        return std::tie(a->mutex, a->id) < std::tie(b->mutex, b->id);
    });
    std::vector<bool> released;
    released.reserve(owners.size());
    for (auto from = owners.begin(); from != owners.end();) {
        const auto to = from + std::min<std::ptrdiff_t>(kReleaseBatchMax, owners.end() - from);
        const std::vector<ServicePtr> chunk(from, to);
        const auto names = array_literal(chunk, [](const ServicePtr& s) -> const std::string& { return s->mutex; });
        const auto ids = array_literal(chunk, [](const ServicePtr& s) -> const std::string& { return s->id; });
        const auto fair =
            array_literal(chunk, [](const ServicePtr& s) { return std::string(s->options.fair ? "t" : "f"); });
        metrics_.count_release_statement(chunk.size());
        auto watch = watchdog_.watch(conn_.stmt().sock());
        pqxx::nontransaction tx(conn_.stmt());
        for (const auto& r : tx.exec_params(kReleaseBatchSql, names, ids, fair)) released.push_back(r[0].as<bool>());
        from = to;
    }
    log(LogLevel::debug, "released " + std::to_string(owners.size()) + " mutexes in one stop");
    return released;
}

/// simba_release by the service's id (a fair one's simba_fair_release,
/// which also withdraws its place and wakes the next in the queue; throws
/// what the statement throws): whether a live tenure of that id was released.
bool ServiceDriver::release(const ServicePtr& svc, const char* what) {
    metrics_.count_release_statement(1);
    auto watch = watchdog_.watch(conn_.stmt().sock());
    pqxx::nontransaction tx(conn_.stmt());
    const bool fair = svc->options.fair;
    const bool released =
        (options_.pooled ? tx.exec_params1(fair ? kFairReleaseSql : kReleaseSql, svc->mutex, svc->id)
                         : tx.exec_prepared1(fair ? "simba_fair_release" : "simba_release", svc->mutex, svc->id))[0]
            .as<bool>();
    svc->queued = false;
    log(LogLevel::debug, std::string(what) + " of " + svc->mutex + " by " + svc->id + ": " +
                             (released ? "released" : "was not owner"));
    return released;
}

/// Gives back a tenure the server still counts but that ended here (loss is
/// final: ownership.hpp), so that the next attempt contends for a new one.
/// Releasing by id is exact: this service's attempts run one at a time on
/// this thread, so the only live tenure its id can have is that one. False
/// if the release failed (the attempt waits).
bool ServiceDriver::give_back(const ServicePtr& svc) {
    try {
        release(svc, "give-back");
        conn_.statement_ok();
        svc->disowned = false;
        return true;
    } catch (const std::exception& e) {
        // Lost connection: everything attempts again on reconnect, and
        // `disowned` stays until a release succeeds.
        if (!conn_.statement_failed(e, "release of a tenure of " + svc->id + " on mutex " + svc->mutex +
                                           " that ended here"))
            retry_later(svc, false);
        return false;
    }
}

void ServiceDriver::run_due(SteadyClock::time_point now) {
    if (!owed_.empty()) owed_.pay_due(conn_, now);
    sessions_.keep_due(now);
    if (!conn_.up() || queue_.next_due() > now) return;
    auto batch = queue_.due_batch(now, options_.batch_window, static_cast<std::size_t>(options_.batch_max));
    // remove_if by hand: the analysis does not see io_state in a lambda.
    std::size_t kept = 0;
    for (auto& svc : batch)
        if (!rearm(svc)) batch[kept++].swap(svc);
    batch.resize(kept);
    if (!batch.empty()) attempt_batch(batch);
}

void ServiceDriver::attempt_all(SteadyClock::time_point now, bool waiters_only) {
    if (!waiters_only) sessions_.all_due(now);  // reconnected: the sessions' keepalives go first
    for (auto& s : registry_.all())
        if (!waiters_only || !s->last.is_owner(s->id)) schedule(s, now);
}

// ---------------------------------------------------------------- sessions

/// A tenure under a session lives by the session's keepalives, not by
/// attempts of its own: its timer only moves on to the tenure's deadline.
/// It attempts when asked to check (a NOTIFY, a revocation) or once that
/// deadline has passed (its session's keepalives failed: it contends again).
bool ServiceDriver::rearm(const ServicePtr& svc) {
    if (svc->session.empty() || svc->verify) return false;
    SteadyClock::time_point deadline;
    {
        MutexLock lock(svc->m);
        if (!svc->ownership.holding()) return false;
        deadline = svc->ownership.deadline();
    }
    if (deadline <= SteadyClock::now()) return false;
    schedule(svc, deadline);
    return true;
}

void ServiceDriver::setup_failed(const std::exception_ptr& error) {
    for (auto& s : registry_.all()) {
        MutexLock lock(s->m);
        events_.settle(*s, error);
    }
}

void ServiceDriver::connection_lost() {
    for (auto& s : registry_.all()) events_.suspend(s);
    sessions_.connection_lost();
}

void ServiceDriver::notified(const std::vector<std::string>& names, bool waiters_only) {
    auto now = SteadyClock::now();
    for (auto& name : names) {
        auto* services = registry_.of(name);
        if (!services) continue;
        for (auto& s : *services) {
            if (waiters_only) {
                // Its registration took effect, which no stranger can cause:
                // one attempt now for a waiter, spending nothing of the
                // NOTIFY limit (a real release right after is heard at once).
                if (!s->last.is_owner(s->id) && now < s->next_at) schedule(s, now);
                continue;
            }
            // Waiters attempt at once. The owner re-checks too: the NOTIFY
            // may be an admin's simba_force_release of its tenure. But anyone
            // may NOTIFY, as often as they like: at most one such attempt
            // per notify_min_interval (notify_throttle.hpp).
            if (!s->last.is_owner(s->id))
                s->notified_at = now;
            else
                s->verify = true;  // under a session its timer would not attempt
            if (auto at = s->notify.admit(now, s->next_at, options_.notify_min_interval)) schedule(s, *at);
        }
    }
}

// ------------------------------------------------------------- fair waiters

/// LISTEN on `svc`'s wake channel while it runs: only that waiter hears the
/// release that makes it the next.
void ServiceDriver::listen_for(const ServicePtr& svc) {
    channels_[svc->wake_channel] = svc;
    conn_.want_channel(svc->wake_channel, true);
}

/// A fair attempt's place and channel (columns 8 and 9 of its row).
void ServiceDriver::fair_reply(const ServicePtr& svc, const pqxx::row& row) {
    svc->queued = !row[9].is_null();
    const auto channel = row[10].is_null() ? std::string() : row[10].as<std::string>();
    if (channel == svc->wake_channel) return;
    // An identifier the server made ("simba_fair_" and hex digits): LISTEN quotes it as it is.
    const bool plain = !channel.empty() && channel.size() < 64 &&
                       std::all_of(channel.begin(), channel.end(),
                                   [](unsigned char c) { return std::isalnum(c) || c == '_'; });
    if (!plain) return log(LogLevel::warning, "ignoring the fair lock's wake channel \"" + channel + "\"");
    if (!svc->wake_channel.empty()) {
        channels_.erase(svc->wake_channel);
        conn_.want_channel(svc->wake_channel, false);
    }
    svc->wake_channel = channel;
    listen_for(svc);
}

void ServiceDriver::woken(const std::vector<std::string>& channels) {
    const auto now = SteadyClock::now();
    for (const auto& c : channels) {
        auto it = channels_.find(c);
        if (it == channels_.end()) continue;
        auto& s = it->second;
        // Its turn came, or its LISTEN just took effect (a release before
        // it was not heard): it asks now, NOTIFY's rate limit applies. (Anyone
        // may NOTIFY: a holder only checks its tenure.)
        if (!s->last.is_owner(s->id))
            s->notified_at = now;
        else
            s->verify = true;
        if (auto at = s->notify.admit(now, s->next_at, options_.notify_min_interval)) schedule(s, *at);
    }
}

/// A service registers its mutex on the LISTEN connection while its last
/// attempt saw another owner, so that a release under simba.notify =
/// registered wakes it; an owner does not, so that its own release, with
/// nobody else waiting, can skip the NOTIFY (an operator's forced release
/// notifies always).
void ServiceDriver::register_wait(const ServicePtr& svc, bool on) {
    if (svc->wait_registered == on) return;
    svc->wait_registered = on;
    conn_.want_name(svc->mutex, on);
}

/// One attempt of `svc`: renewal if it holds the lease, else a try.
/// Returns whether it renews (counted as an attempt otherwise).
bool ServiceDriver::begin_attempt(const ServicePtr& svc) {
    const bool renewing = svc->last.is_owner(svc->id) && svc->is_owner_now();
    if (!renewing && !svc->next().finished) MetricsCell::inc(svc->metrics->attempts);
    return renewing;
}

/// The server's answer to an attempt sent at `anchor`.
void ServiceDriver::finish_attempt(const ServicePtr& svc, const pqxx::row& row, SteadyClock::time_point anchor) {
    conn_.statement_ok();
    svc->solo = false;
    {
        MutexLock lock(svc->m);
        svc->error = nullptr;
    }
    MutexOwner o = parse_owner(row, svc->mutex, anchor);
    const MutexOwner prev = std::move(svc->last);
    if (!prev.same_tenure(o))  // a NOTIFY now is likely a real release too
        svc->notify.news(o.is_owner(svc->id) ? SteadyClock::time_point{}
                                             : SteadyClock::now() + options_.notify_min_interval);
    svc->last = o;
    svc->unknown = false;
    register_wait(svc, !o.is_owner(svc->id));
    const auto change = events_.apply(svc, prev, o);
    auto now = SteadyClock::now();
    if (change.disowned) {
        svc->disowned = true;  // given back at the next attempt, right away
        schedule(svc, now);
        return;
    }
    auto delay = svc->period.ensure_next_delay(o, now);
    // The server announces the end of the holder's session (its lapse
    // waker, our name registered): the poll is only a backstop.
    if (!o.is_owner(svc->id) && o.under_session && conn_.lapses_announced(svc->mutex))
        delay = std::max(delay, std::chrono::duration_cast<SteadyClock::duration>(options_.announced_lapse_poll));
    if (svc->queued) {
        // A fair waiter keeps its place by asking within its entry's lease;
        // with someone ahead, a free mutex is theirs (it is woken after).
        const auto keep = std::chrono::duration_cast<SteadyClock::duration>(svc->options.ttl / 2);
        delay = o.has_owner() ? std::min(delay, keep) : keep;
    }
    schedule(svc, now + delay);
}

/// A failed attempt on a connection that is still up: retry soon. A failed
/// renewal suspends the tenure until one succeeds.
void ServiceDriver::retry_later(const ServicePtr& svc, bool renewing) {
    if (renewing) {
        MetricsCell::inc(svc->metrics->renewal_failures);
        events_.suspend(svc);
    }
    svc->solo = true;
    schedule(svc, SteadyClock::now() + retry_delay(svc));
}

milliseconds ServiceDriver::retry_delay(const ServicePtr& svc) const {
    auto quarter = duration_cast<milliseconds>(svc->options.ttl / 4);
    return std::max(milliseconds(10), std::min(options_.retry_delay, quarter));
}

/// The lease deadline a renewal serves: past it, its reply proves nothing.
SteadyClock::time_point ServiceDriver::serves_until(const ServicePtr& svc, bool renewing) {
    if (!renewing) return SteadyClock::time_point::max();
    MutexLock lock(svc->m);
    return svc->ownership.deadline();
}

void ServiceDriver::attempt(const ServicePtr& svc, bool renewing) {
    if (svc->disowned && !give_back(svc)) return;
    const auto next = svc->next();
    if (next.finished) return;  // a single tenure ended: nothing until restarted
    svc->verify = false;
    try {
        const char* session = next.renew_fence ? nullptr : sessions_.session_for(svc);
        auto anchor = SteadyClock::now();
        metrics_.count_statement(1);
        auto watch = watchdog_.watch(conn_.stmt().sock(), serves_until(svc, renewing));
        pqxx::nontransaction tx(conn_.stmt());
        const auto ttl = static_cast<std::int64_t>(svc->options.ttl.count());
        const auto transition = static_cast<std::int64_t>(svc->options.transition.count());
        // Behind a transaction pooler a prepared statement may be on another server connection.
        const bool fair = svc->options.fair && !next.renew_fence;
        const char* sql = next.renew_fence ? kRenewSql : fair ? kFairAcquireSql : kAcquireSql;
        const char* prepared = next.renew_fence ? "simba_renew" : fair ? "simba_fair_acquire" : "simba_acquire";
        const auto row =
            next.renew_fence
                ? (options_.pooled ? tx.exec_params1(sql, svc->mutex, svc->id, next.renew_fence, ttl, transition)
                                   : tx.exec_prepared1(prepared, svc->mutex, svc->id, next.renew_fence, ttl, transition))
                : (options_.pooled ? tx.exec_params1(sql, svc->mutex, svc->id, ttl, transition, session)
                                   : tx.exec_prepared1(prepared, svc->mutex, svc->id, ttl, transition, session));
        if (fair) fair_reply(svc, row);
        finish_attempt(svc, row, anchor);
    } catch (const std::exception& e) {
        if (conn_.statement_failed(e, "acquire of mutex " + svc->mutex + " by " + svc->id)) {
            svc->unknown = true;  // it may have committed
            return;               // all services attempt again on reconnect
        }
        if (sqlstate_of(e) == "SB004") {  // its session ended before the attempt
            sessions_.ended_under(svc);
            schedule(svc, SteadyClock::now());
            return;
        }
        if (permanent_sqlstate(sqlstate_of(e))) {
            // A setup mistake: tell whoever waits for this service now
            // (it still retries: a grant may come later).
            {
                MutexLock lock(svc->m);
                svc->error = typed_error(e);
                events_.settle(*svc, svc->error);
            }
            svc->owner_cv.notify_all();
        }
        retry_later(svc, renewing);
    }
}

/// Several attempts in one statement. If it fails on a live connection (one
/// attempt's error aborts them all), each is sent on its own, so only the
/// faulty one fails.
void ServiceDriver::attempt_batch(std::vector<ServicePtr>& batch) {
    // A service whose last attempt failed goes alone: a persistent error (a
    // trigger, a grant) must not fail every batch it would join.
    // So does one with a tenure to give back first, a single tenure's
    // renewal (simba_renew: the batch statement only acquires) and a fair
    // contender (simba_fair_acquire).
    auto solo = std::stable_partition(batch.begin(), batch.end(), [](const ServicePtr& s) {
        assert_io_held();
        const auto next = s->next();
        return !s->solo && !s->disowned && !next.finished && next.renew_fence == 0 && !s->options.fair;
    });
    for (auto it = solo; it != batch.end() && conn_.up(); ++it) attempt(*it);
    batch.erase(solo, batch.end());
    if (batch.empty() || !conn_.up()) return;
    if (batch.size() == 1) return attempt(batch.front());
    std::sort(batch.begin(), batch.end(), [](const ServicePtr& a, const ServicePtr& b) { return a->mutex < b->mutex; });
    std::vector<char> renewing(batch.size());
    std::vector<char> done(batch.size(), 0);
    auto until = SteadyClock::time_point::max();
    for (std::size_t i = 0; i < batch.size(); ++i) {
        renewing[i] = begin_attempt(batch[i]);
        until = std::min(until, serves_until(batch[i], renewing[i]));
    }
    SteadyClock::time_point anchor;
    try {
        // Session ids (a uuid needs no quotes), NULL without sessions.
        std::string sessions = "{";
        for (auto& s : batch) {
            s->verify = false;
            const char* id = sessions_.session_for(s);
            if (sessions.size() > 1) sessions += ',';
            sessions += id ? id : "NULL";
        }
        sessions += '}';
        const auto names = array_literal(batch, [](const ServicePtr& s) -> const std::string& { return s->mutex; });
        const auto ids = array_literal(batch, [](const ServicePtr& s) -> const std::string& { return s->id; });
        const auto ttls = array_literal(batch, [](const ServicePtr& s) { return std::to_string(s->options.ttl.count()); });
        const auto trs =
            array_literal(batch, [](const ServicePtr& s) { return std::to_string(s->options.transition.count()); });
        anchor = SteadyClock::now();
        metrics_.count_statement(batch.size());
        auto watch = watchdog_.watch(conn_.stmt().sock(), until);
        pqxx::nontransaction tx(conn_.stmt());
        auto rows = options_.pooled ? tx.exec_params(kAcquireBatchSql, names, ids, ttls, trs, sessions)
                                    : tx.exec_prepared("simba_acquire_batch", names, ids, ttls, trs, sessions);
        for (const auto& row : rows) {
            auto i = row[9].as<std::size_t>() - 1;
            if (i >= batch.size() || done[i]) continue;
            done[i] = 1;
            finish_attempt(batch[i], row, anchor);
        }
    } catch (const std::exception& e) {
        if (conn_.statement_failed(e, "batch of " + std::to_string(batch.size()) + " acquires")) {
            for (std::size_t i = 0; i < batch.size(); ++i)
                if (!done[i]) batch[i]->unknown = true;  // they may have committed
            return;
        }
        log(LogLevel::warning, "sending the batch's attempts one at a time");
    }
    // Renewals first: a row another transaction holds locked (it failed the
    // batch with 55P03) then delays no owner by more than one lock_timeout.
    for (const bool renewals : {true, false})
        for (std::size_t i = 0; i < batch.size(); ++i) {
            if (done[i] || static_cast<bool>(renewing[i]) != renewals) continue;
            attempt(batch[i], renewing[i]);
            if (!conn_.up()) return;  // the rest attempt again on reconnect
        }
}

/// statement_timeout: the configured one, at most half the shortest lease
/// in use, so one hung statement never outlives a lease. O(1): the registry
/// keeps the lease durations counted (a scan of every service here made
/// starting N services O(N²)).
void ServiceDriver::update_statement_timeout() {
    auto t = options_.statement_timeout;
    if (auto shortest = registry_.shortest_lease())
        t = std::min(t, std::max(milliseconds(10), duration_cast<milliseconds>(*shortest / 2)));
    conn_.set_statement_timeout(t);
}

}  // namespace simba::pg::detail
