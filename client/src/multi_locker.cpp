// simba client: MultiLocker (multi_locker.hpp) on a LockHold whose
// statements are simba_acquire_all, simba_renew of each member by its fence,
// and simba_release_all.
#include "simba/multi_locker.hpp"

#include <algorithm>
#include <set>

#include "hold_gate.hpp"
#include "lock_hold.hpp"
#include "simba/errors.hpp"
#include "simba/log.hpp"
#include "statements.hpp"

namespace simba {

using std::chrono::microseconds;

namespace {

/// The members in byte order (std::string compares bytes as unsigned
/// char, as the server orders them), each once and valid.
std::vector<std::string> members(std::vector<std::string> names) {
    if (names.empty()) throw InvalidArgumentError("mutexes must not be empty", "22023");
    if (names.size() > MultiLocker::max_mutexes)
        throw InvalidArgumentError("mutexes must have at most " + std::to_string(MultiLocker::max_mutexes) + " names",
                                   "22023");
    for (const auto& n : names) validate_mutex(n);
    std::sort(names.begin(), names.end());
    if (auto dup = std::adjacent_find(names.begin(), names.end()); dup != names.end())
        throw InvalidArgumentError("mutexes must not repeat a name: \"" + *dup + "\"", "22023");
    return names;
}

class MultiStatements final : public pg::detail::HoldStatements {
public:
    MultiStatements(std::vector<std::string> names, std::string id, const ContendOptions& o)
        : names_(std::move(names)),
          id_(std::move(id)),
          array_(pg::detail::array_literal(names_, [](const std::string& n) -> const std::string& { return n; })),
          ttl_(o.ttl.count()),
          transition_(o.transition.count()) {}

    pg::detail::HoldProof attempt(pqxx::connection& c, const pg::detail::SessionProof* session) override {
        const auto anchor = SteadyClock::now();
        pqxx::nontransaction tx(c);
        const auto rows = tx.exec_params(pg::detail::kAcquireAllSql, array_, id_, ttl_, transition_,
                                         session ? session->id.c_str() : nullptr);
        auto p = proof(rows, anchor);
        if (!p.held) return p;
        p.acquired_at = p.lease.current_at;  // the hold's grant: its members' renewals move theirs
        if (session) {
            p.session = session->id;
            p.lease = session->lease;  // they live as long as the session its keepalive proved
        }
        return p;
    }

    pg::detail::HoldProof reask(pqxx::connection& c, const pg::detail::HoldProof& held, bool in_session) override {
        // Each member by its fence: simba_renew renews a tenure of its own
        // lease, and only reads one under a session (its keepalives keep it).
        const auto anchor = SteadyClock::now();
        const auto fence_array = pg::detail::array_literal(held.fences, [](std::int64_t f) { return std::to_string(f); });
        pqxx::nontransaction tx(c);
        auto p = proof(tx.exec_params(pg::detail::kRenewAllSql, array_, id_, fence_array, ttl_, transition_), anchor);
        if (p.fences != held.fences) p.held = false;
        p.acquired_at = held.acquired_at;
        p.session = held.session;
        if (in_session) p.lease = held.lease;
        return p;
    }

    bool release(pqxx::connection& c) override {
        pqxx::nontransaction tx(c);
        return tx.exec_params1(pg::detail::kReleaseAllSql, array_, id_)[0].as<int>() > 0;
    }

    const std::vector<std::string>& names() const override { return names_; }
    bool check_on_notify() const override { return true; }
    std::string what() const override {
        return "multi-lock of " + std::to_string(names_.size()) + " mutexes (" + names_.front() +
               (names_.size() > 1 ? ", ...)" : ")");
    }

private:
    /// Owner rows in the order of names_: held if every one is ours. The
    /// lease ends with the member whose lease ends first. Refused: try again
    /// when the last of the others' leases ends (a NOTIFY comes sooner).
    pg::detail::HoldProof proof(const pqxx::result& rows, SteadyClock::time_point anchor) const {
        pg::detail::HoldProof p;
        p.held = rows.size() == names_.size();
        auto free_at = anchor + std::chrono::milliseconds(10);
        for (const auto& r : rows) {
            const auto o = pg::detail::parse_owner(r, std::string(), anchor);
            if (o.is_owner(id_)) {
                if (p.fences.empty() || o.transition_at < p.lease.transition_at) p.lease = o;
                p.fences.push_back(o.fence);
                continue;
            }
            p.held = false;
            if (!o.has_owner()) continue;
            if (p.held_by.empty()) p.held_by = "mutex " + o.mutex + " is held by \"" + o.owner_id + "\"";
            free_at = std::max(free_at, o.transition_deadline());
        }
        if (!p.held) {
            p.fences.clear();
            p.retry_at = free_at;
        }
        return p;
    }

    const std::vector<std::string> names_;
    const std::string id_;
    const std::string array_;
    const std::int64_t ttl_;
    const std::int64_t transition_;
};

ContendOptions validated(ContendOptions o) {
    o.validate();
    return o;
}

}  // namespace

struct MultiLocker::State {
    State(pg::ContendServiceFactory& factory, std::vector<std::string> mutexes, std::string contender_id,
          const ContendOptions& o)
        : io(pg::detail::io_of(factory)), names(members(std::move(mutexes))), id(std::move(contender_id)) {
        validate_contender_id(id);
        hold = std::make_shared<pg::detail::LockHold>(io, std::make_unique<MultiStatements>(names, id, o), o);
        gate = std::make_unique<pg::detail::HoldGate>(hold, [](bool) {}, "multi-lock");
        io->reserve_ids(pg::detail::Io::Names::mutex, names, id);
    }
    ~State() { io->release_ids(pg::detail::Io::Names::mutex, names, id); }

    std::shared_ptr<pg::detail::Io> io;
    const std::vector<std::string> names;
    const std::string id;
    std::shared_ptr<pg::detail::LockHold> hold;
    std::unique_ptr<pg::detail::HoldGate> gate;
};

MultiLocker::MultiLocker(pg::ContendServiceFactory& factory, std::vector<std::string> mutexes,
                         std::string contender_id, ContendOptions options)
    : s_(std::make_shared<State>(factory, std::move(mutexes), std::move(contender_id), validated(options))) {}

MultiLocker::~MultiLocker() {
    if (!s_) return;
    try {
        s_->gate->cancel();
    } catch (const std::exception& e) {
        log(LogLevel::error, std::string("MultiLocker release failed: ") + e.what());
    }
}

MultiLocker::MultiLocker(MultiLocker&& other) noexcept = default;

MultiLocker& MultiLocker::operator=(MultiLocker&& other) noexcept {
    if (this == &other) return *this;
    MultiLocker gone(std::move(*this));  // released as it goes
    s_ = std::move(other.s_);
    return *this;
}

MultiLocker::State& MultiLocker::state() const {
    if (!s_) throw IllegalStateError("this MultiLocker was moved from");
    return *s_;
}

bool MultiLocker::lock_until(SteadyClock::time_point deadline) { return state().gate->lock(deadline, false, false); }
void MultiLocker::lock() { (void)lock_until(SteadyClock::time_point::max()); }
bool MultiLocker::try_lock() { return state().gate->lock(SteadyClock::now(), false, true); }
void MultiLocker::unlock() { state().gate->unlock(false); }
std::future<void> MultiLocker::lock_async() { return state().gate->lock_async(false); }
void MultiLocker::cancel() { state().gate->cancel(); }

std::optional<MultiLease> MultiLocker::lease() const {
    const auto v = state().gate->view();
    if (!v || v->proof.fences.size() != s_->names.size()) return std::nullopt;
    MultiLease out;
    for (std::size_t i = 0; i < s_->names.size(); ++i) out.fences.emplace_back(s_->names[i], v->proof.fences[i]);
    out.acquired_at = v->proof.acquired_at;
    out.deadline = v->deadline;
    return out;
}

bool MultiLocker::is_owner() const { return s_ && lease().has_value(); }

void MultiLocker::on_lost(std::function<void()> callback) { state().hold->set_on_lost(std::move(callback)); }

void MultiLocker::on_suspended(std::function<void(SteadyClock::time_point)> callback) {
    state().hold->set_on_suspended(std::move(callback));
}

void MultiLocker::on_resumed(std::function<void()> callback) { state().hold->set_on_resumed(std::move(callback)); }

const std::vector<std::string>& MultiLocker::mutexes() const noexcept {
    static const std::vector<std::string> none;
    return s_ ? s_->names : none;
}

const std::string& MultiLocker::contender_id() const noexcept {
    static const std::string none;
    return s_ ? s_->id : none;
}

}  // namespace simba
