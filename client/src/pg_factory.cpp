// simba client: the PostgreSQL ContendServiceFactory: the I/O loop that
// wires the parts below, the services' handles, and the factory.
//
// Threads (per factory, whatever the number of services):
//  - the I/O thread owns both connections (connections.*): it sends the
//    services' attempts from a timer queue (service_driver.*, attempt_queue.*),
//    hears NOTIFY simba on the LISTEN connection while it sleeps in poll(),
//    and runs start/stop commands and timed tasks (semaphore refreshes).
//  - the handle thread (executor.*) runs the contenders' callbacks in order
//    per service and fires on_released at a lease deadline by itself
//    (service_events.*), so a statement stuck on the I/O thread can never
//    keep a stale owner alive; it also runs the statement watchdog.
//
// Ownership is decided by one state machine per service (ownership.hpp):
// deadline = boot-clock time the granting request was SENT
//            + (transition_at - current_at) from its reply - margin.
//
// Locking: io_m guards the I/O state (Connections, ServiceDriver and what
// it owns): the I/O thread holds it except while it sleeps in poll(), and a
// thread calling start_and_wait() or stop() takes it to do that service's
// round trip itself. What needs it says REQUIRES(io_state) (io_state.hpp)
// and clang checks it; the other mutexes are annotated in their classes,
// those taken under io_m with ACQUIRED_AFTER(io_state). Not annotated: the
// Executor's mutex (a std::mutex), taken last (after ServiceState::m and
// the StatementWatchdog's), and FactoryMetrics -> ServiceState::m (each
// service's: no expression names it). No thread holds a lock while running
// a callback. docs/design.md, "Client".

#include <poll.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <future>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "attempt_queue.hpp"
#include "command_queue.hpp"
#include "connections.hpp"
#include "conninfo.hpp"
#include "executor.hpp"
#include "factory_io.hpp"
#include "factory_metrics.hpp"
#include "factory_options.hpp"
#include "holder_ids.hpp"
#include "io_state.hpp"
#include "listen_inbox.hpp"
#include "notify_subscribers.hpp"
#include "pg_io.hpp"
#include "service_driver.hpp"
#include "service_events.hpp"
#include "simba/errors.hpp"
#include "simba/factory.hpp"
#include "simba/log.hpp"
#include "statement_watchdog.hpp"
#include "wake_fd.hpp"

namespace simba::pg {

using std::chrono::duration_cast;
using std::chrono::microseconds;
using std::chrono::milliseconds;

using namespace detail;

// ------------------------------------------------------------------ core

struct ContendServiceFactory::Core {
    Core(const std::string& user_conninfo, FactoryOptions o)
        : options(validated(std::move(o))),
          connections(options, build_conninfo(user_conninfo, options), listen_conninfo_for(user_conninfo, options),
                      watchdog),
          driver(options, connections, events, metrics, watchdog) {
        io = std::thread([this] { io_main(); });
    }

    ~Core() { shutdown(); }

    void shutdown() {
        if (!commands.quit()) return;
        if (io.joinable()) io.join();
        executor.shutdown();
    }

    // ------------------------------------------------ thread-safe entry points

    /// Posts the stop of `svcs`; stops posted one after another, with no
    /// other command between them, run as one (one release statement per
    /// kReleaseBatchMax): Lockers destroyed in a row release together.
    bool post_stop(const std::vector<ServicePtr>& svcs) {
        for (auto& svc : svcs) metrics.keep(svc);  // their releases count in their cells
        const bool posted = commands.post_stop(svcs, [this](const std::vector<ServicePtr>& stops) {
            assert_io_held();
            driver.stop(stops);
            for (auto& svc : stops) metrics.let_go(svc);
        });
        if (!posted) {
            for (auto& svc : svcs) metrics.let_go(svc);
            return false;
        }
        return true;
    }

    /// What a caller's round trip calls while it waits for io_m: on the
    /// handle thread (a callback) the queued watchdog check cannot run while
    /// it waits, so it runs here: a frozen statement on the I/O thread
    /// cannot hold the caller.
    std::function<void()> while_waiting_for_io() {
        if (!executor.on_this_thread()) return {};
        return [this] { watchdog.cut_overdue(); };
    }

    /// After I/O work done by a caller's thread: wakes the I/O thread if it
    /// sleeps past something that is now due earlier.
    void wake_if_needed() REQUIRES(io_state) {
        if (poll_until == SteadyClock::time_point{}) return;  // awake: it looks again before sleeping
        if (!connections.up() || driver.next_due() < poll_until || connections.channels_pending() ||
            connections.names_pending(SteadyClock::now()))
            waker.wake();
    }

    void run_commands() REQUIRES(io_state) {
        for (auto& fn : commands.take()) fn();
    }

    /// Stops `svcs` (each STOPPING): their tenures end here, one statement
    /// releases what they hold, and it returns once every callback of
    /// theirs has run. `await_release` false (a destructor's stop): the
    /// I/O thread sends the release, together with the others posted at
    /// the same moment, and this returns without waiting for its reply.
    void stop_services(const std::vector<ServicePtr>& svcs, bool await_release = true) {
        if (executor.on_this_thread() || !await_release) {
            // No I/O here (from inside a callback: none on the handle thread,
            // which runs every service's callbacks and lease deadlines and
            // the statement watchdog). The tenures end here and now (their
            // on_released run before this returns); the I/O thread sends the
            // release to the server.
            for (auto& svc : svcs) events.end_locally(svc);
            post_stop(svcs);
            if (executor.on_this_thread()) {
                for (auto& svc : svcs) ServiceEvents::drain_all(*svc);
                return;
            }
        } else {
            // The release round trip on this thread (the I/O thread sleeps or
            // finishes its batch first).
            IoLock lock(io_m, while_waiting_for_io());
            if (!io_done) {
                run_commands();  // what was posted before (the start() this stops) goes first
                driver.stop(svcs);
                wake_if_needed();  // e.g. the connection was lost
            } else {
                for (auto& svc : svcs) events.end_locally(svc);  // no callbacks: the handle thread is gone
            }
        }
        const bool pending = std::any_of(svcs.begin(), svcs.end(), [](const ServicePtr& svc) {
            MutexLock lock(svc->m);
            return !svc->pending.empty() || svc->in_callback;
        });
        if (!pending) return;  // nothing can run after we return
        auto barrier = std::make_shared<std::promise<void>>();
        auto bfut = barrier->get_future();
        if (executor.post([barrier] { barrier->set_value(); })) bfut.wait();
        for (auto& svc : svcs) ServiceEvents::drain_all(*svc);  // only non-empty if the executor has shut down
    }

    // ------------------------------------------------------------ I/O thread

    void io_main() {
        IoLock lock(io_m);
        connections.set_io_thread(std::this_thread::get_id());
        bool listen_broke = false;
        bool was_up = false;
        for (;;) {
            auto now = SteadyClock::now();
            if (connections.after_wake(listen_broke, now)) driver.attempt_all(now, true);  // missed NOTIFYs
            // Lapses no longer announced: waiters that only had a backstop poll attempt now.
            if (connections.take_unannounced() && connections.up()) driver.attempt_all(now, true);
            listen_broke = false;
            connections.probe();  // an idle statement connection the server closed goes now (notice_loss)
            inbox.deliver();
            run_commands();
            if (commands.quitting()) break;
            tasks.run_due();
            notice_loss(was_up);
            now = SteadyClock::now();
            if (connections.connect_due(now)) {
                if (connections.connect(lock)) {
                    log(LogLevel::info, "connected (" + std::to_string(driver.running()) + " services)");
                    driver.attempt_all(SteadyClock::now());  // resume
                } else if (auto e = connections.setup_error()) {
                    driver.setup_failed(e);
                }
                continue;
            }
            driver.run_due(now);  // one batch, then commands and notifications again
            notice_loss(was_up);
            now = SteadyClock::now();
            auto until = std::min({now + std::chrono::seconds(1), tasks.next_due(), connections.next_wake()});
            if (connections.up()) until = std::min(until, driver.next_due());
            sleep(lock, now, until, listen_broke);
        }
        // Shutdown: close the sessions (one statement each releases what is
        // held under it), stop services still running, then close.
        commands.close();
        run_commands();
        deliver_before_exit(lock);
        driver.sessions().close_sessions();
        driver.stop({driver.registry().all().begin(), driver.registry().all().end()});
        connections.drop();
        io_done = true;
    }

    /// Owners hear of a lost connection (lost by a renewal, a caller's
    /// round trip, the watchdog) before the loop reconnects or waits.
    void notice_loss(bool& was_up) REQUIRES(io_state) {
        if (was_up && !connections.up()) driver.connection_lost();
        was_up = connections.up();
    }

    /// Shutdown's bounded effort (FactoryOptions::shutdown_timeout): the
    /// releases a lost connection left owed and the sessions' closes go out
    /// over one reconnect if need be, rather than lapse with their leases
    /// (a process that exits right after unlock() hands the lock over now).
    /// The statements after such a reconnect are cut at that limit too
    /// (statement_allowance()); on a connection that stayed up they have
    /// their usual deadlines.
    void deliver_before_exit(IoLock& lock) REQUIRES(io_state) {
        if (!driver.unfinished()) return;
        connections.probe();
        if (!connections.up() && options.shutdown_timeout.count() > 0) {
            shutdown_by.store(SteadyClock::now() + options.shutdown_timeout);
            log(LogLevel::info, "shutting down with releases or sessions to send: reconnecting once");
            connections.connect_for_shutdown(lock);
        }
        driver.pay_owed_at_exit();
    }

    /// How long a statement sent now may take (the watchdog's allowance):
    /// statement_timeout and a half, cut to what is left of the shutdown's
    /// limit after shutdown's reconnect.
    SteadyClock::duration statement_allowance() const {
        auto d = connections.statement_deadline();
        const auto by = shutdown_by.load();
        if (by != SteadyClock::time_point{})
            d = std::min(d, std::max<SteadyClock::duration>(by - SteadyClock::now(), milliseconds(50)));
        return d;
    }

    /// Sleeps in poll() without io_m (callers may do their round trips
    /// meanwhile) until `until`, a waker.wake(), or a NOTIFY for a mutex of ours;
    /// NOTIFYs for other mutexes (our own releases among them) and LISTEN's
    /// own exchanges are handled without waking the loop.
    void sleep(IoLock& lock, SteadyClock::time_point now, SteadyClock::time_point until, bool& listen_broke)
        REQUIRES(io_state) {
        auto wait = duration_cast<milliseconds>(until - now);
        if (until > now && wait.count() == 0) wait = milliseconds(1);
        poll_until = now + wait;
        // The idle statement connection too: if the server closes it, the
        // loop probes it at once (a caller's round trip meanwhile only
        // wakes the loop once, after it: io_m).
        const int stmt_fd = connections.stmt_sock();
        {
            IoUnlock unlocked(lock);
            poll_until_woken(until, stmt_fd, listen_broke);
        }
        poll_until = {};
    }

    /// sleep()'s poll() loop, without io_m: the statement connection's socket
    /// (`stmt_fd`) is only watched, LISTEN is stepped as it stirs.
    void poll_until_woken(SteadyClock::time_point until, int stmt_fd, bool& listen_broke) EXCLUDES(io_state) {
        for (;;) {
            const bool was_ready = connections.listen_ready_now();
            until = std::min(until, connections.next_wake());
            auto left = duration_cast<milliseconds>(until - SteadyClock::now() + microseconds(999));
            // A negative fd is left out by poll().
            pollfd fds[3] = {{waker.fd(), POLLIN, 0},
                             {connections.listen_sock(), connections.listen_events(), 0},
                             {stmt_fd, POLLIN, 0}};
            const int rc = ::poll(fds, 3, static_cast<int>(std::clamp<std::int64_t>(left.count(), 0, 60000)));
            bool woken_up = rc <= 0;  // the timeout (or EINTR): look again
            if (rc > 0 && (fds[0].revents & POLLIN)) {
                waker.drain();
                woken_up = true;
            }
            if (rc > 0 && fds[2].revents != 0) woken_up = true;
            listen_broke = !inbox.read(fds[1].fd >= 0 ? fds[1].revents : 0);
            if (woken_up || listen_broke || inbox.pending() || connections.listen_ready_now() != was_ready)
                break;
        }
    }

    FactoryOptions options;
    Executor executor;
    // Set once the factory is being destroyed: its statements' limit.
    std::atomic<SteadyClock::time_point> shutdown_by{SteadyClock::time_point{}};
    StatementWatchdog watchdog{executor, [this] { return statement_allowance(); }};
    Connections connections;
    ServiceEvents events{executor};
    FactoryMetrics metrics;
    ServiceDriver driver;
    TaskQueue tasks GUARDED_BY(io_state);
    NotifySubscribers subscribers;  // the holds' NOTIFY callbacks
    ListenInbox inbox{connections, driver, subscribers};  // I/O thread

    HolderIds ids;                   // (name, contender id) pairs alive
    WakeFd waker;                    // wakes the I/O thread's poll()
    CommandQueue commands{waker};    // from other threads
    // What the holds reach (io_of): made of the parts above.
    FactoryIo hold_io{{options, executor, watchdog, connections, driver, tasks, subscribers, ids, commands, waker}};

    // Held as io_state (IoLock). A caller's thread takes it to start or stop
    // a service itself: a round trip without two thread hand-offs.
    std::mutex io_m;
    SteadyClock::time_point poll_until GUARDED_BY(io_state){};  // when the sleeping I/O thread wakes; {} while awake
    bool io_done GUARDED_BY(io_state) = false;  // the I/O thread has exited

    std::thread io;  // last: starts after the members above exist
};

// --------------------------------------------------------------- service

namespace {

class PgService final : public MutexContendService {
public:
    using Core = ContendServiceFactory::Core;

    PgService(std::shared_ptr<Core> core, std::shared_ptr<MutexContender> contender, ContendOptions options)
        : MutexContendService(contender), core_(std::move(core)),
          // Not make_shared: the timers and deadline checks of a stopped
          // service hold weak_ptrs until they come due, and must not pin
          // the whole ServiceState meanwhile.
          svc_(new ServiceState(std::move(contender), options)) {
        core_->ids.reserve(Io::Names::mutex, {svc_->mutex}, svc_->id);
        core_->metrics.track(svc_);
    }

    ~PgService() override {
        if (status() == Status::RUNNING) {
            try {
                stop_detached();
            } catch (const std::exception& e) {
                log(LogLevel::error, std::string("stop in destructor failed: ") + e.what());
            }
        }
        core_->metrics.untrack(svc_);
        core_->ids.release(Io::Names::mutex, {svc_->mutex}, svc_->id);
    }

    std::optional<Lease> lease() const override {
        MutexLock lock(svc_->m);
        return svc_->ownership.lease(SteadyClock::now());
    }

    MutexState state() const override {
        MutexLock lock(svc_->m);
        return svc_->ownership.reported();
    }

protected:
    void start_contend() override {
        auto core = core_;
        auto svc = svc_;
        if (!core_->commands.post([core, svc] {
                assert_io_held();
                core->driver.start(svc, false);
            }))
            throw IllegalStateError("the factory of this service has shut down");
    }

    void start_contend_now() override {
        IoLock io(core_->io_m, core_->while_waiting_for_io());
        if (core_->io_done) throw IllegalStateError("the factory of this service has shut down");
        core_->run_commands();  // what was posted before (an earlier start()) goes first
        core_->driver.start(svc_, true);
        core_->wake_if_needed();
    }

    bool wait_owner(SteadyClock::time_point until) const override {
        UniqueLock lock(svc_->m);
        // Status read under m: stop() leaves RUNNING before it counts itself
        // under m, so a stop cannot slip between this check and the wait.
        const auto st = status();
        if (st == Status::INITIAL || st == Status::STOPPING) return svc_->ownership.owns(SteadyClock::now());
        const auto stops = svc_->stops;
        // A setup mistake (the attempt's or the connection's) is thrown at
        // once; the connection's is looked at every 50 ms.
        for (;;) {
            const auto now = SteadyClock::now();
            if (svc_->stops != stops || svc_->ownership.owns(now) || svc_->ownership.finished()) break;
            if (svc_->error) std::rethrow_exception(svc_->error);
            if (auto e = core_->connections.setup_error()) std::rethrow_exception(e);
            if (now >= until) break;
            svc_->owner_cv.wait_until(lock, std::min(until, now + std::chrono::milliseconds(50)));
        }
        return svc_->ownership.owns(SteadyClock::now());
    }

    void when_owner(std::function<void(std::exception_ptr)> done) override {
        MutexLock lock(svc_->m);
        if (status() != Status::RUNNING) throw IllegalStateError("when_owner() needs status RUNNING");
        svc_->settled = std::move(done);
        // Settled already: the callback goes to the handle thread now.
        auto error = svc_->error ? svc_->error : core_->connections.setup_error();
        if (error || svc_->ownership.owns(SteadyClock::now()) || svc_->ownership.finished())
            core_->events.settle(*svc_, error);
    }

    void stop_contend() override { core_->stop_services({svc_}); }

public:
    /// stop(), but the release goes out from the I/O thread without this
    /// thread waiting for its reply (Core::stop_services).
    void stop_detached() {
        enter_stopping();
        struct Leave {
            PgService* p;
            ~Leave() { p->leave_stopping(); }
        } leave{this};
        core_->stop_services({svc_}, false);
    }

    /// ContendServiceFactory::stop: checks every service first (this
    /// factory's, once each, RUNNING), then stops them together.
    static void stop_all(const std::shared_ptr<Core>& core, const std::vector<MutexContendService*>& services) {
        std::vector<PgService*> pg;
        std::vector<ServicePtr> svcs;
        std::set<const ServiceState*> seen;
        for (auto* s : services) {
            auto* p = dynamic_cast<PgService*>(s);
            if (!p || p->core_ != core)
                throw InvalidArgumentError("stop(): every service must come from this factory", "22023");
            if (!seen.insert(p->svc_.get()).second)
                throw InvalidArgumentError("stop(): service for mutex " + p->svc_->mutex + " listed twice", "22023");
            pg.push_back(p);
            svcs.push_back(p->svc_);
        }
        std::size_t entered = 0;
        try {
            for (; entered < pg.size(); ++entered) pg[entered]->enter_stopping();
        } catch (...) {
            for (std::size_t i = 0; i < entered; ++i) pg[i]->resume_running();  // none stopped
            throw;
        }
        struct Leave {  // also when stopping throws, as stop() does
            std::vector<PgService*>& pg;
            ~Leave() {
                for (auto* p : pg) p->leave_stopping();
            }
        } leave{pg};
        core->stop_services(svcs);
    }

private:
    std::shared_ptr<Core> core_;
    std::shared_ptr<ServiceState> svc_;
};

}  // namespace

// --------------------------------------------------------------- factory

ContendServiceFactory::ContendServiceFactory(std::string conninfo, FactoryOptions options)
    : core_(std::make_shared<Core>(std::move(conninfo), std::move(options))) {}

ContendServiceFactory::~ContendServiceFactory() { core_->shutdown(); }

std::unique_ptr<MutexContendService> ContendServiceFactory::create(std::shared_ptr<MutexContender> contender,
                                                                   ContendOptions options) {
    if (!contender) throw InvalidArgumentError("contender must not be null", "22004");
    options.validate();
    return std::make_unique<PgService>(core_, std::move(contender), options);
}

void ContendServiceFactory::stop(const std::vector<MutexContendService*>& services) {
    PgService::stop_all(core_, services);
}

// Shares the core's ownership: a hold keeps the factory's threads alive.
std::shared_ptr<detail::Io> detail::io_of(ContendServiceFactory& factory) {
    return {factory.core_, &factory.core_->hold_io};
}

void detail::stop_detached(MutexContendService& service) {
    if (auto* pg = dynamic_cast<PgService*>(&service)) return pg->stop_detached();
    service.stop();
}

void detail::throw_shut_down(const char* what) {
    throw IllegalStateError(std::string("the factory of this ") + what + " has shut down");
}

int ContendServiceFactory::connection_count() const { return core_->connections.open_count(); }

bool ContendServiceFactory::connected() const {
    return core_->connections.connected();
}

bool ContendServiceFactory::wait_connected(std::chrono::milliseconds timeout) const {
    return core_->connections.wait_connected(SteadyClock::now() + timeout);
}

std::uint64_t ContendServiceFactory::connects() const { return core_->connections.connects(); }

Metrics ContendServiceFactory::metrics() const { return core_->metrics.snapshot(); }

const std::string& ContendServiceFactory::application_name() const { return core_->options.application_name; }

std::chrono::milliseconds ContendServiceFactory::statement_timeout() const {
    return core_->connections.statement_timeout();
}

}  // namespace simba::pg
