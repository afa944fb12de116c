// simba client: SharedLocker (shared_locker.hpp) on a LockHold whose
// statements are simba_rwlock_acquire and simba_rwlock_release.
#include "simba/shared_locker.hpp"

#include <algorithm>
#include <atomic>

#include "hold_gate.hpp"
#include "lock_hold.hpp"
#include "simba/errors.hpp"
#include "simba/log.hpp"
#include "statements.hpp"

namespace simba {

using std::chrono::microseconds;
using std::chrono::milliseconds;

namespace {

class RwlockStatements final : public pg::detail::HoldStatements {
public:
    RwlockStatements(std::string rwlock, std::string id, const ContendOptions& o)
        : names_{std::move(rwlock)}, id_(std::move(id)), ttl_(o.ttl.count()), transition_(o.transition.count()),
          // A waiting writer's place lapses after ttl + transition without
          // an attempt; a NOTIFY is missed while LISTEN is down.
          poll_(std::min<SteadyClock::duration>(milliseconds(1000), o.ttl / 2)) {}

    std::atomic<bool> write{false};

    pg::detail::HoldProof attempt(pqxx::connection& c, const pg::detail::SessionProof* session) override {
        return ask(c, session ? session->id : std::string(), session ? &session->lease : nullptr);
    }

    pg::detail::HoldProof reask(pqxx::connection& c, const pg::detail::HoldProof& held, bool in_session) override {
        // Asked again: a renewal of its own lease, or under its session a
        // check (the session's keepalives keep it).
        return ask(c, held.session, in_session ? &held.lease : nullptr);
    }

    bool release(pqxx::connection& c) override {
        pqxx::nontransaction tx(c);
        return tx.exec_params1(pg::detail::kRwlockReleaseSql, names_[0], id_)[0].as<bool>();
    }

    const std::vector<std::string>& names() const override { return names_; }
    std::string what() const override { return "read-write lock " + names_[0]; }

private:
    pg::detail::HoldProof ask(pqxx::connection& c, const std::string& session, const MutexOwner* session_lease) {
        const bool w = write.load();
        const auto anchor = SteadyClock::now();
        pqxx::nontransaction tx(c);
        const auto r = tx.exec_params1(pg::detail::kRwlockAcquireSql, names_[0], id_, w ? "write" : "read", ttl_,
                                       transition_, session.empty() ? nullptr : session.c_str());
        pg::detail::HoldProof p;
        p.held = !r[0].is_null() && r[0].as<bool>();
        if (!p.held) {
            p.retry_at = anchor + poll_;
            p.held_by = r[6].is_null() ? "a writer holds or waits for it" : "readers or a writer hold it";
            return p;
        }
        p.fence = r[1].as<std::int64_t>();
        p.acquired_at = microseconds(r[2].as<std::int64_t>());
        p.session = session;
        if (session_lease) {
            p.lease = *session_lease;  // it lives as long as the session its keepalive proved
        } else {
            p.lease.acquired_at = p.acquired_at;
            p.lease.ttl_at = microseconds(r[3].as<std::int64_t>());
            p.lease.transition_at = microseconds(r[4].as<std::int64_t>());
            p.lease.current_at = microseconds(r[5].as<std::int64_t>());
            p.lease.anchor = anchor;
        }
        return p;
    }

    const std::vector<std::string> names_;
    const std::string id_;
    const std::int64_t ttl_;
    const std::int64_t transition_;
    const SteadyClock::duration poll_;
};

ContendOptions validated(ContendOptions o) {
    o.validate();
    return o;
}

}  // namespace

struct SharedLocker::State {
    State(pg::ContendServiceFactory& factory, std::string rwlock, std::string contender_id, const ContendOptions& o)
        : io(pg::detail::io_of(factory)), name(std::move(rwlock)), id(std::move(contender_id)) {
        validate_name(name, "rwlock");
        validate_contender_id(id);
        auto st = std::make_unique<RwlockStatements>(name, id, o);
        statements = st.get();
        hold = std::make_shared<pg::detail::LockHold>(io, std::move(st), o);
        gate = std::make_unique<pg::detail::HoldGate>(
            hold, [st = statements](bool shared) { st->write = !shared; }, "read-write lock " + name);
        io->reserve_ids(pg::detail::Io::Names::rwlock, {name}, id);
    }
    ~State() { io->release_ids(pg::detail::Io::Names::rwlock, {name}, id); }

    std::shared_ptr<pg::detail::Io> io;
    const std::string name;
    const std::string id;
    RwlockStatements* statements;  // owned by hold
    std::shared_ptr<pg::detail::LockHold> hold;
    std::unique_ptr<pg::detail::HoldGate> gate;
};

SharedLocker::SharedLocker(pg::ContendServiceFactory& factory, std::string rwlock, std::string contender_id,
                           ContendOptions options)
    : s_(std::make_shared<State>(factory, std::move(rwlock), std::move(contender_id), validated(options))) {}

SharedLocker::~SharedLocker() {
    if (!s_) return;
    try {
        s_->gate->cancel();
    } catch (const std::exception& e) {
        log(LogLevel::error, std::string("SharedLocker release failed: ") + e.what());
    }
}

SharedLocker::SharedLocker(SharedLocker&& other) noexcept = default;

SharedLocker& SharedLocker::operator=(SharedLocker&& other) noexcept {
    if (this == &other) return *this;
    SharedLocker gone(std::move(*this));  // released as it goes
    s_ = std::move(other.s_);
    return *this;
}

SharedLocker::State& SharedLocker::state() const {
    if (!s_) throw IllegalStateError("this SharedLocker was moved from");
    return *s_;
}

bool SharedLocker::lock_until(SteadyClock::time_point deadline, bool shared) {
    return state().gate->lock(deadline, shared, false);
}

void SharedLocker::lock() { (void)lock_until(SteadyClock::time_point::max(), false); }
bool SharedLocker::try_lock() { return state().gate->lock(SteadyClock::now(), false, true); }
void SharedLocker::unlock() { state().gate->unlock(false); }
void SharedLocker::lock_shared() { (void)lock_until(SteadyClock::time_point::max(), true); }
bool SharedLocker::try_lock_shared() { return state().gate->lock(SteadyClock::now(), true, true); }
void SharedLocker::unlock_shared() { state().gate->unlock(true); }
bool SharedLocker::downgrade() { return state().gate->downgrade(); }
std::future<void> SharedLocker::lock_async() { return state().gate->lock_async(false); }
std::future<void> SharedLocker::lock_shared_async() { return state().gate->lock_async(true); }
void SharedLocker::cancel() { state().gate->cancel(); }

std::optional<SharedLease> SharedLocker::lease() const {
    bool exclusive = false;
    const auto v = state().gate->view(&exclusive);
    if (!v) return std::nullopt;
    SharedLease out;
    out.fence = v->proof.fence;
    out.acquired_at = v->proof.acquired_at;
    out.deadline = v->deadline;
    out.exclusive = exclusive;
    return out;
}

bool SharedLocker::is_owner() const { return s_ && lease().has_value(); }

std::int64_t SharedLocker::fence() const {
    if (!s_) return 0;
    const auto l = lease();
    return l ? l->fence : 0;
}

void SharedLocker::on_lost(std::function<void()> callback) { state().hold->set_on_lost(std::move(callback)); }

void SharedLocker::on_suspended(std::function<void(SteadyClock::time_point)> callback) {
    state().hold->set_on_suspended(std::move(callback));
}

void SharedLocker::on_resumed(std::function<void()> callback) { state().hold->set_on_resumed(std::move(callback)); }

const std::string& SharedLocker::rwlock() const noexcept {
    static const std::string none;
    return s_ ? s_->name : none;
}

const std::string& SharedLocker::contender_id() const noexcept {
    static const std::string none;
    return s_ ? s_->id : none;
}

}  // namespace simba
