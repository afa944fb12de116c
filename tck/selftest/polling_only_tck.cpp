// TCK self-test: a deliberately naive backend that only polls (no LISTEN,
// no push on release) must FAIL the Handoff case. ctest registers it as
// tck.selftest.PollingOnlyFailsHandoff, which passes only if the Handoff
// latency assertion is what fired. It shows that the TCK's timing bounds
// discriminate, and that a backend other than simba::pg plugs in with one
// line.
//
// The backend: one thread and one connection per service, simba_acquire on
// the ContendPeriod schedule (owner at ttl_at, contender at transition_at +
// jitter), callbacks on the polling thread, release on stop.
#include <condition_variable>
#include <mutex>
#include <pqxx/pqxx>
#include <thread>

#include "simba/simba.hpp"
#include "simba/tck/postgres.hpp"

namespace {

using namespace simba;
using std::chrono::microseconds;

const char* const kAcquire =
    "SELECT o.owner_id, (extract(epoch FROM o.acquired_at) * 1000000)::int8,"
    " (extract(epoch FROM o.ttl_at) * 1000000)::int8, (extract(epoch FROM o.transition_at) * 1000000)::int8,"
    " o.version, o.fence, (extract(epoch FROM o.current_at) * 1000000)::int8"
    " FROM simba_acquire($1, $2, $3::int8 * interval '1 microsecond', $4::int8 * interval '1 microsecond') o";

std::int64_t i64(const pqxx::field& f) { return f.is_null() ? 0 : f.as<std::int64_t>(); }

class PollingService final : public MutexContendService {
public:
    PollingService(std::string conninfo, std::shared_ptr<MutexContender> c, ContendOptions o)
        : MutexContendService(c), conninfo_(std::move(conninfo)), opts_(o), period_(c->contender_id(), o.jitter) {
        state_.before = state_.after = MutexOwner::none(c->mutex());
    }
    ~PollingService() override {
        if (status() == Status::RUNNING) stop();
    }
    std::optional<Lease> lease() const override {
        std::lock_guard<std::mutex> lock(m_);
        if (!owned_ || SteadyClock::now() >= deadline_) return std::nullopt;
        return Lease{state_.after.fence, state_.after.acquired_at, deadline_};
    }
    MutexState state() const override {
        std::lock_guard<std::mutex> lock(m_);
        return state_;
    }
    bool wait_owner(SteadyClock::time_point until) const override {
        std::unique_lock<std::mutex> lock(m_);
        return simba::wait_until(cv_, lock, until, [&] { return owned_ && SteadyClock::now() < deadline_; });
    }

protected:
    void start_contend() override {
        quit_ = false;
        thread_ = std::thread([this] { loop(); });
    }
    void stop_contend() override {
        {
            std::lock_guard<std::mutex> lock(m_);
            quit_ = true;
        }
        cv_.notify_all();
        thread_.join();
    }

private:
    void loop() {
        std::unique_ptr<pqxx::connection> c;
        std::unique_lock<std::mutex> lock(m_);
        while (!quit_) {
            lock.unlock();
            SteadyClock::duration delay = std::chrono::milliseconds(100);
            try {
                if (!c) c = std::make_unique<pqxx::connection>(conninfo_);
                const auto anchor = SteadyClock::now();
                pqxx::nontransaction tx(*c);
                auto r = tx.exec_params1(kAcquire, mutex(), contender_id(),
                                         static_cast<std::int64_t>(opts_.ttl.count()),
                                         static_cast<std::int64_t>(opts_.transition.count()));
                MutexOwner o;
                o.mutex = mutex();
                o.owner_id = r[0].is_null() ? "" : r[0].as<std::string>();
                o.acquired_at = microseconds(i64(r[1]));
                o.ttl_at = microseconds(i64(r[2]));
                o.transition_at = microseconds(i64(r[3]));
                o.version = i64(r[4]);
                o.fence = i64(r[5]);
                o.current_at = microseconds(i64(r[6]));
                o.anchor = anchor;
                observe(o);
                delay = period_.ensure_next_delay(o);
            } catch (const std::exception& e) {
                log(LogLevel::error, std::string("polling backend: ") + e.what());
                c.reset();
            }
            lock.lock();
            cv_.wait_for(lock, delay, [&] { return quit_; });
        }
        const bool owned = owned_;
        lock.unlock();
        if (owned && c) {
            try {
                pqxx::nontransaction tx(*c);
                tx.exec_params("SELECT simba_release($1, $2)", mutex(), contender_id());
            } catch (const std::exception& e) {
                log(LogLevel::error, std::string("polling backend release: ") + e.what());
            }
        }
        if (owned) {
            MutexState st;
            {
                std::lock_guard<std::mutex> l(m_);
                owned_ = false;
                st = MutexState{state_.after, MutexOwner::none(mutex())};
                state_ = st;
            }
            contender()->on_released(st);
        }
    }

    void observe(const MutexOwner& o) {
        MutexState st;
        bool acquired = false, released = false;
        {
            std::lock_guard<std::mutex> lock(m_);
            st = MutexState{state_.after, o};
            state_ = st;
            const bool mine = o.is_owner(contender_id());
            acquired = mine && !owned_;
            released = !mine && owned_;
            owned_ = mine;
            if (mine) deadline_ = o.transition_deadline() - std::chrono::milliseconds(20);
        }
        if (acquired) cv_.notify_all();
        if (acquired) contender()->on_acquired(st);
        if (released) contender()->on_released(st);
    }

    const std::string conninfo_;
    const ContendOptions opts_;
    ContendPeriod period_;
    mutable std::mutex m_;
    mutable std::condition_variable cv_;
    bool quit_ = false;
    bool owned_ = false;
    SteadyClock::time_point deadline_{};
    MutexState state_;
    std::thread thread_;
};

class PollingFactory final : public ContendServiceFactory {
public:
    std::unique_ptr<MutexContendService> create(std::shared_ptr<MutexContender> c, ContendOptions o) override {
        o.validate();
        return std::make_unique<PollingService>("application_name=simba-tck-polling", std::move(c), o);
    }
};

simba::tck::Backend polling_only_backend() {
    auto b = simba::tck::postgres_backend();  // the server-side hooks are PostgreSQL's
    b.name = "PollingOnly";
    b.make_factory = [](const std::string&) { return std::make_unique<PollingFactory>(); };
    return b;
}

}  // namespace

SIMBA_TCK_INSTANTIATE(PollingOnly, polling_only_backend());
