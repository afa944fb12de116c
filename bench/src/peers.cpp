// Benchmark 10's driver for simba and Redis (bench/peers.sh runs it beside
// etcd's and Curator's drivers, which speak the same command line; the
// protocol is in bench/README.md, "10. Against the peers"):
//
//   bench_peers MODE --store simba|redis --endpoint E [--lease-s 5] [options]
//   MODE: cycles --clients N --locks L --seconds S [--warmup-s 1]
//         handoff --handoffs K
//         leader --name NAME            (simba only: Redis has no leader recipe)
//         hold --locks L
//
// simba: a factory per client (its own connections and session), a Locker
// per mutex (--fair: in arrival order, as etcd's and Curator's mutexes
// are), a MutexContendService as the leader; the lease is ttl + transition
// = 3/5 + 2/5 of --lease-s. Redis: SET key id NX PX lease, a Lua
// compare-and-delete to release, a waiter retrying after 1-2 ms (the
// distlock article's random retry), and a watchdog per client renewing what
// it holds every lease/3 with a Lua compare-and-pexpire (Redisson's).
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "common.hpp"
#include "redis_conn.hpp"
#include "simba/simba.hpp"

namespace {

using bench::Clock;

struct Args {
    std::string mode, store, endpoint, name = "bench";
    int lease_s = 5, clients = 1, locks = 1, handoffs = 200;
    bool fair = false;
    double seconds = 5, warmup_s = 1;
};

// --------------------------------------------------------------- the stores

class Mutex {
public:
    virtual ~Mutex() = default;
    virtual void lock() = 0;
    virtual void unlock() = 0;
};

/// One client: its own connections and session.
class Session {
public:
    virtual ~Session() = default;
    virtual std::unique_ptr<Mutex> mutex(const std::string& name) = 0;
};

simba::ContendOptions simba_options(const Args& a) {
    simba::ContendOptions o;
    o.ttl = std::chrono::milliseconds(a.lease_s * 600);
    o.transition = std::chrono::milliseconds(a.lease_s * 400);
    o.fair = a.fair;
    return o;
}

class SimbaSession : public Session {
public:
    explicit SimbaSession(const Args& a) : factory_(a.endpoint), options_(simba_options(a)) {}
    std::unique_ptr<Mutex> mutex(const std::string& name) override {
        struct M : Mutex {
            simba::Locker locker;
            M(simba::ContendServiceFactory& f, const std::string& n, simba::ContendOptions o)
                : locker(f, n, simba::ContenderId::uuid(), o) {}
            void lock() override { locker.lock(); }
            void unlock() override { locker.unlock(); }
        };
        return std::make_unique<M>(factory_, name, options_);
    }
    simba::pg::ContendServiceFactory& factory() { return factory_; }

private:
    simba::pg::ContendServiceFactory factory_;
    simba::ContendOptions options_;
};

class RedisSession : public Session {
public:
    explicit RedisSession(const Args& a)
        : redis_(a.endpoint), id_(simba::ContenderId::uuid()), px_(std::to_string(a.lease_s * 1000)),
          renew_every_(std::chrono::milliseconds(a.lease_s * 1000 / 3)), rng_(std::random_device{}()) {
        del_sha_ = script("if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) "
                          "else return 0 end");
        renew_sha_ = script("if redis.call('get', KEYS[1]) == ARGV[1] then "
                            "return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end");
        watchdog_ = std::thread([this] { watch(); });
    }
    ~RedisSession() override {
        {
            std::lock_guard<std::mutex> l(m_);
            stop_ = true;
        }
        cv_.notify_all();
        watchdog_.join();
    }
    std::unique_ptr<Mutex> mutex(const std::string& name) override {
        struct M : Mutex {
            RedisSession& s;
            std::string key;
            M(RedisSession& session, std::string k) : s(session), key(std::move(k)) {}
            void lock() override { s.lock(key); }
            void unlock() override { s.unlock(key); }
        };
        return std::make_unique<M>(*this, "bench:" + name);
    }

private:
    std::string script(const std::string& lua) { return redis_.cmd({"SCRIPT", "LOAD", lua}).substr(1); }

    void lock(const std::string& key) {
        std::uniform_int_distribution<int> retry_us(1000, 2000);
        for (;;) {
            {
                std::lock_guard<std::mutex> l(m_);
                if (redis_.cmd({"SET", key, id_, "NX", "PX", px_}) == "+OK") {
                    held_.insert(key);
                    return;
                }
            }
            std::this_thread::sleep_for(std::chrono::microseconds(retry_us(rng_)));
        }
    }
    void unlock(const std::string& key) {
        std::lock_guard<std::mutex> l(m_);
        held_.erase(key);
        redis_.cmd({"EVALSHA", del_sha_, "1", key, id_});
    }
    void watch() {
        std::unique_lock<std::mutex> l(m_);
        while (!cv_.wait_for(l, renew_every_, [this] { return stop_; }))
            for (const auto& key : held_) redis_.cmd({"EVALSHA", renew_sha_, "1", key, id_, px_});
    }

    bench::Redis redis_;
    const std::string id_, px_;
    const std::chrono::milliseconds renew_every_;
    std::string del_sha_, renew_sha_;
    std::mt19937 rng_;
    std::mutex m_;  // the connection, held_ and stop_
    std::condition_variable cv_;
    std::set<std::string> held_;
    bool stop_ = false;
    std::thread watchdog_;
};

std::unique_ptr<Session> open_session(const Args& a) {
    if (a.store == "simba") return std::make_unique<SimbaSession>(a);
    return std::make_unique<RedisSession>(a);
}

// -------------------------------------------------------------- the modes

double nearest_rank(std::vector<double>& v, double p) {
    if (v.empty()) return NAN;
    std::sort(v.begin(), v.end());
    const auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * v.size()));
    return v[std::max<std::size_t>(rank, 1) - 1];
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void print(const bench::Json& j) {
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
}

void cycles(const Args& a) {
    std::vector<std::unique_ptr<Session>> sessions;
    std::vector<std::unique_ptr<Mutex>> mutexes;
    for (int i = 0; i < a.clients; ++i) {
        sessions.push_back(open_session(a));
        mutexes.push_back(sessions.back()->mutex("lock-" + std::to_string(i % a.locks)));
    }
    const auto start = Clock::now() + std::chrono::milliseconds(100);
    const auto counted = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(a.warmup_s));
    const auto end = counted + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(a.seconds));
    std::vector<std::vector<double>> samples(a.clients);
    std::vector<std::thread> threads;
    for (int i = 0; i < a.clients; ++i)
        threads.emplace_back([&, i] {
            std::this_thread::sleep_until(start);
            for (auto t0 = Clock::now(); t0 < end; t0 = Clock::now()) {
                mutexes[i]->lock();
                mutexes[i]->unlock();
                if (t0 >= counted) samples[i].push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
            }
        });
    for (auto& t : threads) t.join();
    std::vector<double> all;
    for (auto& s : samples) all.insert(all.end(), s.begin(), s.end());
    const double measured = std::chrono::duration<double>(end - counted).count();
    print({{"mode", "cycles"}, {"clients", a.clients}, {"locks", a.locks}, {"seconds", measured},
           {"cycles", all.size()}, {"cycles_per_s", all.size() / measured}, {"p50_us", nearest_rank(all, 50)},
           {"p99_us", nearest_rank(all, 99)}});
}

// Two clients pass one lock back and forth, each on a thread of its own (a
// Locker is unlocked by the thread that locked it): the holder waits 20 ms
// (the other is parked in lock()), stamps t0 and unlocks; the other stamps
// t1 as its lock() returns. The holder asks again only after that.
void handoff(const Args& a) {
    auto sa = open_session(a), sb = open_session(a);
    std::unique_ptr<Mutex> m[2] = {sa->mutex("handoff"), sb->mutex("handoff")};
    std::mutex mu;
    std::condition_variable cv;
    int took = -1;  // handoffs done; -1 until the first holder has the lock
    Clock::time_point t0;
    std::vector<double> samples;
    auto run = [&](int me) {
        std::unique_lock<std::mutex> l(mu);
        cv.wait(l, [&] { return me == 0 || took >= 0; });
        for (;;) {
            l.unlock();
            m[me]->lock();
            const auto t1 = Clock::now();
            l.lock();
            if (took >= 0) samples.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
            const int mine = ++took;
            cv.notify_all();
            if (mine >= a.handoffs) {  // the last one: done
                l.unlock();
                m[me]->unlock();
                return;
            }
            l.unlock();
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
            l.lock();
            t0 = Clock::now();
            l.unlock();
            m[me]->unlock();
            l.lock();
            cv.wait(l, [&] { return took > mine; });
            if (took >= a.handoffs) return;
        }
    };
    std::thread first(run, 0), second(run, 1);
    first.join();
    second.join();
    print({{"mode", "handoff"}, {"handoffs", samples.size()}, {"p50_us", nearest_rank(samples, 50)},
           {"p99_us", nearest_rank(samples, 99)}, {"max_us", nearest_rank(samples, 100)}});
}

// SIGTERM or stdin's end: written to a pipe, so one poll() waits for both.
int g_stop_pipe[2];

void wait_for_stop() {
    std::signal(SIGTERM, [](int) { (void)!write(g_stop_pipe[1], "x", 1); });
    pollfd fds[2] = {{STDIN_FILENO, POLLIN, 0}, {g_stop_pipe[0], POLLIN, 0}};
    char buf[256];
    for (;;) {
        if (poll(fds, 2, -1) < 0) continue;
        if (fds[1].revents) return;
        if (fds[0].revents && read(STDIN_FILENO, buf, sizeof buf) <= 0) return;
    }
}

void leader(const Args& a) {
    SimbaSession s(a);
    auto service = s.factory().create(
        std::make_shared<simba::FunctionContender>(
            a.name, [](const simba::MutexState&) { std::printf("elected\n"), std::fflush(stdout); }, nullptr,
            simba::ContenderId::uuid()),
        simba_options(a));
    service->start();
    std::printf("ready\n"), std::fflush(stdout);
    wait_for_stop();
    service->stop();
}

void hold(const Args& a) {
    auto s = open_session(a);
    std::vector<std::unique_ptr<Mutex>> held;
    auto t0 = Clock::now();
    for (int i = 0; i < a.locks; ++i) {
        held.push_back(s->mutex("hold-" + std::to_string(i)));
        held.back()->lock();
    }
    print({{"mode", "hold"}, {"locks", a.locks}, {"take_s", seconds_since(t0)}});
    wait_for_stop();
    t0 = Clock::now();
    for (auto& m : held) m->unlock();
    print({{"mode", "released"}, {"locks", a.locks}, {"release_s", seconds_since(t0)}});
}

}  // namespace

int main(int argc, char** argv) {
    Args a;
    bench::Options cli("Benchmark 10's driver for simba and Redis (bench/README.md)");
    cli.add_option("mode", a.mode, "cycles, handoff, leader or hold")
        ->required()
        ->check(CLI::IsMember({"cycles", "handoff", "leader", "hold"}));
    cli.add_option("--store", a.store, "simba or redis")->required()->check(CLI::IsMember({"simba", "redis"}));
    cli.add_option("--endpoint", a.endpoint, "simba: a connection string; redis: its unix socket")->required();
    cli.add_option("--lease-s", a.lease_s, "lease, seconds")->check(CLI::Range(1, 3600));
    cli.add_option("--clients", a.clients, "cycles: clients")->check(CLI::Range(1, 1000));
    cli.add_option("--locks", a.locks, "cycles: locks shared out; hold: locks held")->check(CLI::Range(1, 10000000));
    cli.add_option("--seconds", a.seconds, "cycles: seconds counted");
    cli.add_option("--warmup-s", a.warmup_s, "cycles: seconds before counting");
    cli.add_option("--handoffs", a.handoffs, "handoff: samples")->check(CLI::Range(1, 1000000));
    cli.add_option("--name", a.name, "leader: the election");
    cli.add_flag("--fair", a.fair, "simba: fair locks (waiters granted in arrival order, woken one at a time)");
    try {
        cli.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return cli.exit(e) == 0 ? 0 : 2;
    }
    if (pipe(g_stop_pipe) != 0) return 1;
    try {
        if (a.mode == "cycles") cycles(a);
        else if (a.mode == "handoff") handoff(a);
        else if (a.mode == "hold") hold(a);
        else if (a.store == "simba") leader(a);
        else {
            std::fprintf(stderr, "bench_peers: the Redis recipe has no leader election\n");
            return 2;
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_peers: %s\n", e.what());
        return 1;
    }
    return 0;
}
