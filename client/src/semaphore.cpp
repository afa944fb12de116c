// simba client: Semaphore and Permit (see semaphore.hpp), a Permit being a
// LockHold (lock_hold.hpp) whose statements are simba_semaphore_acquire,
// simba_semaphore_refresh and simba_semaphore_release: the hold keeps the
// deadline, the lease watchdog, suspension, the callbacks, the refreshes,
// the session and the NOTIFY-driven wait, as it does for the lockers.
//
// A permit of ttl t is a hold of lease length (t/3, t - t/3): under
// FactoryOptions::sessions it joins the factory's session of that length,
// whose keepalive comes a third of the ttl after the last, as a refresh of
// the permit's own would, and which ends t after it; without sessions its
// own lease is proven from the send time of its grant or refresh to t
// later, and renewed a third of the ttl on (ContendPeriod::owner_delay).
// Either way it is given up lease_margin(t) before the proven end.
#include "simba/semaphore.hpp"

#include <algorithm>
#include <atomic>
#include <utility>

#include "lock_hold.hpp"
#include "pg_io.hpp"
#include "simba/errors.hpp"

namespace simba {

using std::chrono::microseconds;
using std::chrono::milliseconds;

namespace {

class SemaphoreStatements final : public pg::detail::HoldStatements {
public:
    SemaphoreStatements(std::string key, std::string holder, int permits, microseconds ttl, std::string context,
                        SteadyClock::duration poll)
        : names_{std::move(key)},
          holder_(std::move(holder)),
          permits_(permits),
          ttl_(ttl),
          context_(std::move(context)),
          poll_(poll) {}

    // The granting attempt's (on the I/O thread, before take() returns;
    // read-only after). The token is what refresh and release go by.
    [[nodiscard]] int slot() const { return slot_.load(); }
    [[nodiscard]] const std::string& token() const { return token_; }
    [[nodiscard]] std::int64_t fence() const { return fence_; }

    pg::detail::HoldProof attempt(pqxx::connection& c, const pg::detail::SessionProof* session) override {
        const auto sent = SteadyClock::now();
        pqxx::nontransaction tx(c);
        auto row = tx.exec_params1(
            "SELECT slot, token::text, fence FROM simba_semaphore_acquire($1, $2, $3,"
            " $4::int8 * interval '1 microsecond', NULLIF($5, ''), $6::uuid)",
            names_[0], holder_, permits_, static_cast<std::int64_t>(ttl_.count()), context_,
            session ? session->id.c_str() : nullptr);
        pg::detail::HoldProof p;
        if (row[1].is_null()) {
            token_.clear();  // a grant before it that came too late was given back
            p.retry_at = sent + poll_;  // the backstop: a NOTIFY is lost while LISTEN is down
            p.held_by = "all " + std::to_string(permits_) + " permits are taken";
            return p;
        }
        token_ = row[1].as<std::string>();
        fence_ = row[2].as<std::int64_t>();
        slot_ = row[0].as<int>();
        p.held = true;
        p.fence = fence_;
        if (session) {
            p.session = session->id;
            p.lease = session->lease;  // it lasts as long as the session its open or last keepalive proved
        } else {
            p.lease = own_lease(sent);
        }
        return p;
    }

    pg::detail::HoldProof reask(pqxx::connection& c, const pg::detail::HoldProof& held, bool in_session) override {
        // A refresh of its own lease; under a session it changes nothing
        // and answers whether the permit is live (its keepalives keep it).
        const auto sent = SteadyClock::now();
        pqxx::nontransaction tx(c);
        pg::detail::HoldProof p = held;
        p.held = tx.exec_params1("SELECT simba_semaphore_refresh($1, $2::uuid, $3::int8 * interval '1 microsecond')",
                                 names_[0], token_, static_cast<std::int64_t>(ttl_.count()))[0]
                     .as<bool>();
        if (p.held && !in_session) p.lease = own_lease(sent);
        return p;
    }

    bool release(pqxx::connection& c) override {
        if (token_.empty()) return false;  // nothing granted, nothing left behind
        pqxx::nontransaction tx(c);
        return tx.exec_params1("SELECT simba_semaphore_release($1, $2::uuid)", names_[0], token_)[0].as<bool>();
    }

    const std::vector<std::string>& names() const override { return names_; }

    std::string what() const override {
        const int slot = slot_.load();
        return slot < 0 ? "permit of key " + names_[0] : "permit " + std::to_string(slot) + " of key " + names_[0];
    }

    // try_acquire throws every error of its one attempt (a lost
    // connection's ConnectionError too); acquire retries a ConnectionError
    // and throws the rest at once.
    bool final_error(const std::exception_ptr& e, bool once) const override {
        if (once) return true;
        try {
            std::rethrow_exception(e);
        } catch (const ConnectionError&) {
            return false;
        } catch (...) {
            return true;
        }
    }

    // A failed refresh (or attempt) is sent again after ttl/6, at most
    // 500 ms (docs/client-protocol.md), whatever the factory's retry_delay.
    SteadyClock::duration retry_delay(SteadyClock::duration) const override {
        return std::min<SteadyClock::duration>(ttl_ / 6, milliseconds(500));
    }

private:
    /// The lease a grant or refresh sent at `sent` proves on its own: the
    /// server's expiry is its clock at the grant + ttl, read after we sent
    /// the request, so sent + ttl never outlives the permit. As a lease of
    /// (ttl/3, ttl - ttl/3) from `sent`: transition_deadline() is sent +
    /// ttl, and owner_delay renews it at its ttl_deadline(), sent + ttl/3.
    [[nodiscard]] MutexOwner own_lease(SteadyClock::time_point sent) const {
        MutexOwner l;
        l.anchor = sent;
        l.acquired_at = l.current_at = ServerTime{0};
        l.ttl_at = ttl_ / 3;
        l.transition_at = ttl_;
        return l;
    }

    const std::vector<std::string> names_;
    const std::string holder_;
    const int permits_;
    const microseconds ttl_;
    const std::string context_;
    const SteadyClock::duration poll_;
    std::atomic<int> slot_{-1};  // -1 until granted; read by what() on any thread
    std::string token_;
    std::int64_t fence_ = 0;
};

void validate_acquire(const std::string& key, const std::string& holder, int permits, milliseconds ttl,
                      const std::string& context) {
    validate_name(key, "key");
    validate_name(holder, "holder");
    if (permits < 1 || permits > Semaphore::max_permits)
        throw InvalidArgumentError("permits must be between 1 and " + std::to_string(Semaphore::max_permits),
                                   "22023");
    validate_ttl(ttl);
    if (utf8_length(context) > max_context_length)
        throw InvalidArgumentError("context must be at most " + std::to_string(max_context_length) + " characters",
                                   "22023");
}

}  // namespace

struct Permit::State {
    State(const std::shared_ptr<pg::detail::Io>& io, const std::string& key, const std::string& holder, int permits,
          microseconds ttl, const std::string& context, const SemaphoreOptions& options)
        : key(key) {
        auto st = std::make_unique<SemaphoreStatements>(key, holder, permits, ttl, context, options.poll_interval);
        statements = st.get();
        ContendOptions lease;  // the lease length (ttl/3, ttl - ttl/3) and the margin of ttl
        lease.ttl = ttl / 3;
        lease.transition = ttl - ttl / 3;
        lease.release_margin = options.release_margin;
        lease.clock_drift_ppm = options.clock_drift_ppm;
        hold = std::make_shared<pg::detail::LockHold>(io, std::move(st), lease);
    }

    const std::string key;
    const SemaphoreStatements* statements;  // owned by hold
    std::shared_ptr<pg::detail::LockHold> hold;
};

Permit& Permit::operator=(Permit&& other) noexcept {
    if (this != &other) {
        release();
        state_ = std::move(other.state_);
    }
    return *this;
}

Permit::~Permit() { release(); }

const std::string& Permit::key() const noexcept { return state_->key; }
int Permit::slot() const noexcept { return state_->statements->slot(); }
const std::string& Permit::token() const noexcept { return state_->statements->token(); }
std::int64_t Permit::fence() const noexcept { return state_->statements->fence(); }

bool Permit::lost() const { return !state_->hold->view(); }

bool Permit::release() {
    if (!state_) return false;  // moved from
    // A live permit's release is waited for, and says whether the server
    // still counted it. A lost one's goes without waiting (the server may
    // count it still: a deadline passed while the connection was down) and
    // the answer is false.
    const bool live = state_->hold->view().has_value();
    return state_->hold->end(live) && live;
}

void Permit::on_lost(std::function<void()> callback) { state_->hold->set_on_lost(std::move(callback), true); }

void Permit::on_suspended(std::function<void(SteadyClock::time_point deadline)> callback) {
    state_->hold->set_on_suspended(std::move(callback), true);
}

void Permit::on_resumed(std::function<void()> callback) { state_->hold->set_on_resumed(std::move(callback)); }

Semaphore::Semaphore(pg::ContendServiceFactory& factory, std::string holder, SemaphoreOptions options)
    : io_(pg::detail::io_of(factory)), holder_(std::move(holder)), options_(options) {
    validate_name(holder_, "holder");
    validate_margin(options_.release_margin, options_.clock_drift_ppm);
}

std::optional<Permit> Semaphore::try_acquire(const std::string& key, int permits, milliseconds ttl,
                                             const std::string& context) {
    validate_acquire(key, holder_, permits, ttl, context);
    // The attempt says if it is not connected; a setup mistake is thrown at once.
    if (!io_->wait_connected(SteadyClock::now() + options_.connect_wait))
        if (auto e = io_->setup_error()) std::rethrow_exception(e);
    auto st = std::make_shared<Permit::State>(io_, key, holder_, permits, ttl, context, options_);
    if (!st->hold->take(SteadyClock::now(), true)) return std::nullopt;
    return Permit(std::move(st));
}

Permit Semaphore::acquire(const std::string& key, int permits, milliseconds ttl, milliseconds timeout,
                          const std::string& context) {
    validate_acquire(key, holder_, permits, ttl, context);
    const auto deadline = SteadyClock::now() + timeout;
    auto st = std::make_shared<Permit::State>(io_, key, holder_, permits, ttl, context, options_);
    // Woken by the key's NOTIFY (registered as a waiter after a refused
    // attempt: docs/reference.md, "Wake-ups") and every poll_interval.
    if (!st->hold->take(deadline, false, true))
        throw TimeoutError("no permit of key " + key + " within " + std::to_string(timeout.count()) + " ms");
    return Permit(std::move(st));
}

}  // namespace simba
