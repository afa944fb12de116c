#include "connections.hpp"

#include <poll.h>

#include <algorithm>

#include "conninfo.hpp"
#include "simba/contend_period.hpp"
#include "simba/errors.hpp"
#include "simba/log.hpp"
#include "statements.hpp"

namespace simba::pg::detail {

using std::chrono::milliseconds;

namespace {
constexpr std::chrono::minutes kSetupMistakeLogInterval{1};
}  // namespace

Connections::Connections(const FactoryOptions& options, std::string conninfo, std::string listen_info,
                         StatementWatchdog& watchdog)
    : options_(options),
      conninfo_(std::move(conninfo)),
      listen_info_(std::move(listen_info)),
      watchdog_(watchdog),
      backoff_(options.reconnect_initial),
      jitter_rng_(static_cast<std::uint_fast32_t>(ContendPeriod::random_seed())),
      stmt_timeout_ms_(options.statement_timeout.count()),
      listen_backoff_(options.reconnect_initial) {}

bool Connections::connect(IoLock& io_lock) { return connect_to(io_lock, conninfo_, true); }

bool Connections::connect_for_shutdown(IoLock& io_lock) {
    const auto limit = std::chrono::ceil<std::chrono::seconds>(options_.shutdown_timeout);
    return connect_to(io_lock, with_connect_timeout(shutdown_info_.empty() ? conninfo_ : shutdown_info_, limit), false);
}

bool Connections::connect_to(IoLock& io_lock, const std::string& conninfo, bool listen) {
    std::unique_ptr<pqxx::connection> fresh;
    std::string failure;
    try {
        IoUnlock unlocked(io_lock);
        fresh = std::make_unique<pqxx::connection>(conninfo);
    } catch (const std::exception& e) {
        failure = e.what();
    }
    try {
        if (!fresh) throw std::runtime_error(failure);
        stmt_ = std::move(fresh);
        notices_ = std::make_unique<ServerNotices>(*stmt_);
        // Shutdown reconnects to the host reached last, not down the list.
        shutdown_info_ = pin_host(conninfo_, stmt_->hostname(), stmt_->port());
        open_.store(1);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
        stmt_->inhibit_reactivation(true);  // a silent reconnect would lose our session settings
#pragma GCC diagnostic pop
        if (!options_.pooled) {  // a pooler shares the session: no settings, no prepared statements
            applied_timeout_ms_ = -1;
            apply_statement_timeout();
            stmt_->prepare("simba_acquire", kAcquireSql);
            stmt_->prepare("simba_renew", kRenewSql);
            stmt_->prepare("simba_release", kReleaseSql);
            stmt_->prepare("simba_acquire_batch", kAcquireBatchSql);
            stmt_->prepare("simba_fair_acquire", kFairAcquireSql);
            stmt_->prepare("simba_fair_release", kFairReleaseSql);
        }
        connects_.fetch_add(1);
        {
            std::lock_guard<std::mutex> lock(state_m_);
            connect_error_ = nullptr;
        }
        set_up(true);
        listen_backoff_ = options_.reconnect_initial;
        if (listen) open_listen();
        return true;
    } catch (const std::exception& e) {
        drop();
        const auto msg = trimmed_message(e.what());
        const auto state = connect_sqlstate(e);
        const bool permanent = permanent_sqlstate(state);
        {
            std::lock_guard<std::mutex> lock(state_m_);
            connect_error_ = std::make_exception_ptr(ConnectionError(msg, state));
            connect_error_permanent_ = permanent;
        }
        state_cv_.notify_all();
        if (!listen) {  // shutdown's one try
            log(LogLevel::error, "connect at shutdown failed: " + msg);
            return false;
        }
        const auto wait = next_backoff();
        // A service started before its database says so once, not at every retry.
        const bool waiting = options_.wait_for_server && connects_.load() == 0 && !permanent;
        const auto retry = "; retrying in " + std::to_string(wait.count()) + " ms";
        if (waiting && !said_waiting_)
            log(LogLevel::warning, "waiting for the server (FactoryOptions::wait_for_server): " + msg + retry);
        else
            log(waiting ? LogLevel::debug : LogLevel::error, "connect failed: " + msg + retry);
        said_waiting_ = said_waiting_ || waiting;
        return false;
    }
}

bool Connections::statement_failed(const std::exception& e, const std::string& what) {
    const std::string state = sqlstate_of(e);
    bool lost = dynamic_cast<const pqxx::broken_connection*>(&e) != nullptr || state.rfind("08", 0) == 0 ||
                state.rfind("57P", 0) == 0 || !stmt_ || !stmt_->is_open();
    std::string msg = what + " failed";
    if (!state.empty()) msg += " (SQLSTATE " + state + ")";
    if (!lost && permanent_sqlstate(state)) {
        // A setup mistake: the server's first line with simba's hint, not
        // the statement it quotes, and not at every retry.
        std::string why = with_setup_hint(state, trimmed_message(e.what()));
        why = why.substr(0, why.find('\n'));
        const auto now = SteadyClock::now();
        if (why == setup_mistake_ && now < setup_mistake_logged_ + kSetupMistakeLogInterval) return false;
        const bool again = why == setup_mistake_;
        setup_mistake_ = why;
        setup_mistake_logged_ = now;
        log(LogLevel::error, msg + ": " + why + (again ? " (still; said once a minute)" : ""));
        return false;
    }
    log(LogLevel::error, msg + ": " + trimmed_message(e.what()));
    if (lost) this->lost();
    return lost;
}

bool ServerNotices::operator()(const char msg[]) noexcept {
    try {
        said = trimmed_message(msg);
        log(LogLevel::debug, "server: " + said);
    } catch (...) {  // out of memory: the notice is lost, nothing else
    }
    return false;
}

bool Connections::probe() {
    if (!up_ || !stmt_) return up_;
    std::string why = "end of stream";
    try {
        // A goodbye (FATAL 57P01) is read first, the end of the stream next.
        for (int reads = 0; reads < 3 && stmt_->is_open(); ++reads) {
            pollfd p{stmt_->sock(), POLLIN, 0};
            if (::poll(&p, 1, 0) <= 0 || !(p.revents & (POLLIN | POLLHUP | POLLERR))) return true;
            stmt_->get_notifs();  // reads what came; throws once the connection is gone
        }
        if (stmt_->is_open()) return true;  // something keeps talking: looked at again next time
    } catch (const std::exception& e) {
        why = trimmed_message(e.what());
    }
    // Routine (idle_session_timeout, a pooler's idle limit, a restart): no
    // statement failed, and both connections are back within the backoff.
    // A failed reconnect is what an operator needs to hear of.
    if (notices_ && notices_->said.rfind("FATAL", 0) == 0) why = notices_->said;
    log(LogLevel::info, "the server closed the idle statement connection (" + why + ")");
    lost(LogLevel::info);
    return false;
}

void Connections::lost(LogLevel level) {
    drop();
    const auto wait = next_backoff();
    log(level, "connection to the server lost; reconnecting in " + std::to_string(wait.count()) + " ms");
}

/// Schedules the next connect after a jittered backoff (half to all of it,
/// so a fleet that lost its server does not return in step) and doubles the
/// backoff; returns the wait.
milliseconds Connections::next_backoff() {
    const auto half = backoff_ / 2;
    const auto wait = half + milliseconds(static_cast<std::int64_t>(jitter_rng_() % (half.count() + 1)));
    next_connect_ = SteadyClock::now() + wait;
    backoff_ = std::min(backoff_ * 2, options_.reconnect_max);
    return wait;
}

void Connections::set_statement_timeout(milliseconds t) {
    stmt_timeout_ms_.store(t.count());
    if (!up_ || options_.pooled) return;
    try {
        apply_statement_timeout();
    } catch (const std::exception& e) {
        statement_failed(e, "SET statement_timeout");
    }
}

void Connections::apply_statement_timeout() {
    auto ms = stmt_timeout_ms_.load();
    if (ms == applied_timeout_ms_) return;
    const auto lock_ms = std::min<std::int64_t>(options_.lock_timeout.count(), ms);
    auto watch = watchdog_.watch(stmt_->sock());
    pqxx::nontransaction tx(*stmt_);
    tx.exec0("SET statement_timeout = " + std::to_string(ms) + "; SET lock_timeout = " + std::to_string(lock_ms));
    applied_timeout_ms_ = ms;
}

SteadyClock::duration Connections::statement_deadline() const {
    const milliseconds t(stmt_timeout_ms_.load());
    return t + std::max(milliseconds(100), t / 2);
}

/// Both go: the LISTEN connection must follow the statement one to
/// whichever server it reaches next (a failover).
void Connections::drop() {
    if (std::this_thread::get_id() == io_id_)
        close_listen();
    else
        listen_stale_ = true;  // the I/O thread may be reading it: it drops it itself
    notices_.reset();
    stmt_.reset();
    open_.store(0);
    set_up(false);
}

/// up_: the statement connection; connected() also needs LISTEN in place.
void Connections::set_up(bool v) {
    up_ = v;
    {
        std::lock_guard<std::mutex> lock(state_m_);
        up_flag_ = v && (listen_info_.empty() || listen_ready_);
    }
    state_cv_.notify_all();
}

std::exception_ptr Connections::setup_error() const {
    std::lock_guard<std::mutex> lock(state_m_);
    return setup_error_locked();
}

std::exception_ptr Connections::setup_error_locked() const {
    return connect_error_permanent_ || (connects_.load() == 0 && !options_.wait_for_server) ? connect_error_ : nullptr;
}

bool Connections::connected() const {
    std::lock_guard<std::mutex> lock(state_m_);
    return up_flag_;
}

bool Connections::wait_connected(SteadyClock::time_point until, bool or_setup_error) const {
    std::unique_lock<std::mutex> lock(state_m_);
    simba::wait_until(state_cv_, lock, until, [&] { return up_flag_ || (or_setup_error && setup_error_locked()); });
    return up_flag_;
}

// ------------------------------------------------------------------ LISTEN

/// With the same connection string as statements, LISTEN goes to the server
/// the statement connection reached, host and port pinned: a multi-host
/// string must not leave it on an old primary, and libpq's async connect
/// does not move past a host that hangs.
void Connections::open_listen() {
    if (listen_info_.empty() || !up_) return;
    std::string info = listen_info_;
    if (options_.listen_conninfo.empty()) info = pin_host(info, stmt_->hostname(), stmt_->port());
    const auto deadline = connect_timeout(options_) * host_count(info);
    if (!listen_.open(info, SteadyClock::now(), deadline)) listen_failed();
    open_.store(1 + listen_.is_open());
}

void Connections::close_listen() {
    listen_.close();
    listen_ready_ = false;
    listen_stale_ = false;
}

/// LISTEN failed or missed a deadline: the statement connection carries
/// on; LISTEN is retried after a backoff.
void Connections::listen_failed() {
    log(LogLevel::error, "LISTEN connection failed: " + listen_.error() + "; reconnecting it in " +
                             std::to_string(listen_backoff_.count()) + " ms (waiters poll meanwhile)");
    close_listen();
    set_up(up_);
    listen_retry_at_ = SteadyClock::now() + listen_backoff_;
    listen_backoff_ = std::min(listen_backoff_ * 2, options_.reconnect_max);
    open_.store(up_ ? 1 : 0);
}

bool Connections::after_wake(bool broke, SteadyClock::time_point now) {
    if (listen_stale_) {  // a caller's thread lost the connections
        close_listen();
    } else if (broke && listen_.lost() && up_) {
        // The server ended the LISTEN connection: it ended the statement
        // connection too (a pooler or server restart, a failover,
        // pg_terminate_backend), which would only be found dead at its next
        // statement. Both go, and both reconnect (client/README.md, "Failures").
        // Routine, as in probe(): the reason is what the server said, if anything.
        const auto& why = listen_.said().rfind("FATAL", 0) == 0 ? listen_.said() : listen_.error();
        log(LogLevel::info, "the server closed the LISTEN connection (" + why + "); dropping the statement connection too");
        lost(LogLevel::info);
    } else if (broke) {
        listen_failed();
    } else if (!listen_ready_ && listen_.ready()) {
        listen_ready_ = true;
        listen_backoff_ = options_.reconnect_initial;
        set_up(up_);
        return true;
    }
    if (up_ && !listen_info_.empty() && !listen_.is_open() && now >= listen_retry_at_) open_listen();
    return false;
}

bool Connections::step_listen(short revents, ListenConnection::Heard& heard) {
    return listen_.step(SteadyClock::now(), revents, statement_deadline(), options_.listen_ping_interval, heard);
}

SteadyClock::time_point Connections::next_wake() const {
    auto t = listen_.next_step(options_.listen_ping_interval);
    if (!up_) t = std::min(t, next_connect_.load());
    if (up_ && !listen_info_.empty() && !listen_.is_open()) t = std::min(t, listen_retry_at_);
    return t;
}

}  // namespace simba::pg::detail
