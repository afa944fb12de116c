// simba TCK worker: one service of the backend under test in its own
// process, so the TCK can SIGKILL, SIGSTOP and cut off an owner.
//
//   worker --mutex M --id ID --tag TAG --ttl-ms N --transition-ms N
//
// stdout, one event per line, flushed at once; times are steady-clock
// nanoseconds (CLOCK_MONOTONIC: system-wide on Linux, so comparable with the
// test process), server times are microseconds since the Unix epoch:
//   ready id=ID t=NS
//   acquired fence=F version=V acquired_at=US transition_at=US current_at=US anchor=NS t=NS
//   released fence=F transition_at=US current_at=US anchor=NS t=NS   (the tenure that ended)
//   acting fence=F t=NS anchor=NS current_at=US
//                           every ~10 ms while is_owner(); t is taken BEFORE
//                           is_owner() was asked, so ownership held at t;
//                           anchor/current_at: the lease's grant or renewal
//   idle t=NS               the first is_owner() == false after acting
//   stopped t=NS            after SIGTERM: service stopped, exiting 0
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#include "simba/simba.hpp"
#include "simba/tck/backend.hpp"

namespace simba::tck {
namespace {

volatile std::sig_atomic_t g_stop = 0;
void on_term(int) { g_stop = 1; }

std::mutex g_out;

long long ns(SteadyClock::time_point t) {
    return static_cast<long long>(std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
}
long long us(ServerTime t) { return static_cast<long long>(t.count()); }

void emit(const std::string& line) {
    std::lock_guard<std::mutex> lock(g_out);
    std::fputs(line.c_str(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
}

std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* f, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, f);
    std::vsnprintf(buf, sizeof buf, f, ap);
    va_end(ap);
    return buf;
}

}  // namespace

int worker_main(int argc, char** argv, const Backend& backend) {
    std::string mutex, id, tag;
    long ttl_ms = 1000, transition_ms = 1000;
    for (int i = 1; i + 1 < argc; i += 2) {
        std::string k = argv[i], v = argv[i + 1];
        if (k == "--mutex") mutex = v;
        else if (k == "--id") id = v;
        else if (k == "--tag") tag = v;
        else if (k == "--ttl-ms") ttl_ms = std::atol(v.c_str());
        else if (k == "--transition-ms") transition_ms = std::atol(v.c_str());
        else {
            std::fprintf(stderr, "tck worker: unknown argument %s\n", k.c_str());
            return 2;
        }
    }
    if (mutex.empty() || id.empty() || tag.empty()) {
        std::fprintf(stderr, "usage: %s --mutex M --id ID --tag TAG [--ttl-ms N] [--transition-ms N]\n", argv[0]);
        return 2;
    }
    struct sigaction sa {};
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, nullptr);

    auto factory = backend.make_factory(tag);
    auto contender = std::make_shared<FunctionContender>(
        mutex,
        [](const MutexState& s) {
            const auto& a = s.after;
            emit(fmt("acquired fence=%lld version=%lld acquired_at=%lld transition_at=%lld current_at=%lld "
                     "anchor=%lld t=%lld",
                     static_cast<long long>(a.fence), static_cast<long long>(a.version), us(a.acquired_at),
                     us(a.transition_at), us(a.current_at), ns(a.anchor), ns(SteadyClock::now())));
        },
        [](const MutexState& s) {
            const auto& b = s.before;
            emit(fmt("released fence=%lld transition_at=%lld current_at=%lld anchor=%lld t=%lld",
                     static_cast<long long>(b.fence), us(b.transition_at), us(b.current_at), ns(b.anchor),
                     ns(SteadyClock::now())));
        },
        id);
    ContendOptions opts;
    opts.ttl = std::chrono::milliseconds(ttl_ms);
    opts.transition = std::chrono::milliseconds(transition_ms);
    auto service = factory->create(contender, opts);
    emit(fmt("ready id=%s t=%lld", id.c_str(), ns(SteadyClock::now())));
    service->start();
    bool was_acting = false;
    while (!g_stop) {
        const auto t = SteadyClock::now();  // before the question: ownership held at t
        const auto fence = service->fence();
        const bool owner = fence > 0 && service->is_owner();
        if (owner) {
            const auto lease = service->state().after;  // the grant or renewal in force
            emit(fmt("acting fence=%lld t=%lld anchor=%lld current_at=%lld", static_cast<long long>(fence), ns(t),
                     ns(lease.anchor), us(lease.current_at)));
            was_acting = true;
        } else if (was_acting) {
            emit(fmt("idle t=%lld", ns(SteadyClock::now())));
            was_acting = false;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    service->stop();
    emit(fmt("stopped t=%lld", ns(SteadyClock::now())));
    service.reset();
    factory.reset();
    return 0;
}

}  // namespace simba::tck
