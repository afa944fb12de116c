// pg.Ownership: issue 23's scenario, judged exactly. Four factories in one
// process contend for one mutex (lease 300 ms + 150 ms) while, every
// 150-500 ms, a random service is stopped and restarted, a factory's
// backends are terminated, or the current owner is stopped and restarted; a
// sampler reads every service's ownership every 200 us: lease(), the
// snapshot, and every fourth sweep the report's fence(), is_owner(), fence().
//
// The judgment is about real safety, from the client's own claims and the
// server's own record:
//  - every tenure a service claims (a fence it reports as owner) is one the
//    server granted to that service (simba_mutex_history, simba.history on);
//  - no claim is made after the server's end of that tenure: its release, or
//    the transition_at of its last renewal, or of its session's last
//    keepalive (every committed version of the mutex and session rows is
//    logged by triggers of the test's own); server times are carried
//    onto the client's boot clock exactly (simba's clock counts the same
//    CLOCK_BOOTTIME) up to a measured calibration error, which is always
//    given to the client;
//  - no deadline lease() showed lies past the server's end of a tenure that
//    lapsed, and lease() never returns a tenure past its deadline;
//  - no two services claim at overlapping times;
//  - the callbacks alternate per service, every on_acquired reports a fence
//    granted to it, and no fence twice (each tenure its own).
//
// On the 1.4 client before issue 23's fix every run failed: stop() sent the
// release before it ended the tenure, and the stopping service still
// claimed its fence for up to 4 ms after the release, while the next holder
// was granted the mutex and claimed it too.
//
// SIMBA_OWNERSHIP_RUNS (default 4) and SIMBA_OWNERSHIP_SECONDS (default 10)
// set how many runs and how long each lasts: CI runs the default (about
// 45 s); a soak sets e.g. SIMBA_OWNERSHIP_RUNS=100. SIMBA_OWNERSHIP_SEED
// repeats a run's choice of faults.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "pg_support.hpp"

using namespace simba_test;
using simba::MutexContendService;
using std::chrono::duration_cast;
using std::chrono::microseconds;
using std::chrono::milliseconds;

namespace {

/// One read of a service's ownership: what it claimed at some instant in
/// [t0, t1] (boot clock, microseconds).
struct Sample {
    std::int64_t t0 = 0, t1 = 0;
    bool claim = false;         ///< it reported itself owner
    std::int64_t fence = 0;     ///< of the claimed tenure
    std::int64_t deadline = 0;  ///< the claimed lease's local deadline (lease() reads only)
    bool torn = false;          ///< is_owner() and fence() read apart disagreed
};

/// The snapshot: lease(), one read of fence, grant and deadline together.
Sample sample_lease(const MutexContendService& s) {
    Sample x;
    x.t0 = us(SteadyClock::now());
    const auto l = s.lease();
    x.t1 = us(SteadyClock::now());
    x.claim = l.has_value();
    if (l) {
        x.fence = l->fence;
        x.deadline = us(l->deadline);
    }
    return x;
}

/// The report's way: fence(), is_owner(), fence(). Apart, they can see a
/// tenure begin or end between two calls; counted (torn), not judged.
Sample sample_calls(const MutexContendService& s) {
    Sample x;
    x.t0 = us(SteadyClock::now());
    const auto f1 = s.fence();
    const bool owner = s.is_owner();
    const auto f2 = s.fence();
    x.t1 = us(SteadyClock::now());
    x.claim = owner;
    x.fence = f1 == f2 ? f1 : (f2 != 0 ? f2 : f1);
    x.torn = owner ? (f1 != f2 || f1 == 0) : (f1 != 0 || f2 != 0);
    return x;
}

/// Consecutive claiming samples of one tenure by one service.
struct Segment {
    std::int64_t fence = 0;
    std::int64_t first_t0 = 0, first_t1 = 0, last_t0 = 0, last_t1 = 0;
    long samples = 0;
    long torn = 0;
    std::int64_t deadline = 0;  // the latest deadline lease() showed
    bool past_deadline = false;  // lease() returned a lease whose deadline had passed before the call
};

struct Watched {
    std::vector<Segment> segments;
    long samples = 0;
    long torn = 0;
    bool open = false;  // the last sample claimed (segments.back() goes on)

    void add(const Sample& x) {
        ++samples;
        torn += x.torn;
        if (!x.claim) {
            open = false;
            return;
        }
        if (!open || segments.back().fence != x.fence) {
            segments.push_back(Segment{x.fence, x.t0, x.t1, x.t0, x.t1, 0, 0, 0, false});
            open = true;
        }
        auto& s = segments.back();
        s.last_t0 = x.t0;
        s.last_t1 = x.t1;
        ++s.samples;
        s.torn += x.torn;
        if (x.deadline != 0) {
            s.deadline = std::max(s.deadline, x.deadline);
            s.past_deadline = s.past_deadline || x.deadline <= x.t0;
        }
    }
};

/// A tenure as the server recorded it, in server microseconds.
struct Tenure {
    std::string owner;
    std::int64_t start = 0;   // acquired_at of its grant
    std::int64_t end = 0;     // release, or transition_at of its last renewal (or keepalive)
    bool released = false;
    int versions = 0;
};

/// The test's own record of every committed version of the mutex rows and
/// of every release, with simba's clock at the release; and of every
/// version of the session rows (a keepalive renews the tenures under it).
void install_tenure_log(pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    tx.exec0("CREATE TABLE regress_tenure_log (id bigserial PRIMARY KEY, mutex text, fence int8, owner_id text,"
             " acquired_us int8, transition_us int8, released_us int8, session_id uuid)");
    tx.exec0("CREATE TABLE regress_session_log (session_id uuid, transition_us int8)");
    tx.exec0(
        "CREATE FUNCTION public.regress_session_log() RETURNS trigger LANGUAGE plpgsql"
        " SET search_path = pg_catalog AS $$ BEGIN"
        "  INSERT INTO public.regress_session_log VALUES"
        "    (NEW.session_id, (extract(epoch FROM NEW.transition_at) * 1000000)::int8);"
        "  RETURN NULL; END $$");
    tx.exec0("CREATE TRIGGER regress_session_log AFTER INSERT OR UPDATE ON simba_session_lease FOR EACH ROW"
             " EXECUTE FUNCTION public.regress_session_log()");
    // Fired by simba's functions under their own search path (pg_catalog first):
    // every name qualified.
    tx.exec0(
        "CREATE FUNCTION public.regress_tenure_log() RETURNS trigger LANGUAGE plpgsql"
        " SET search_path = pg_catalog AS $$ BEGIN"
        "  IF NEW.owner_id IS NOT NULL THEN"
        "    INSERT INTO public.regress_tenure_log (mutex, fence, owner_id, acquired_us, transition_us, session_id)"
        "    VALUES (NEW.mutex, NEW.fence, NEW.owner_id, (extract(epoch FROM NEW.acquired_at) * 1000000)::int8,"
        "            (extract(epoch FROM NEW.transition_at) * 1000000)::int8, NEW.session_id);"
        "  ELSIF TG_OP = 'UPDATE' AND OLD.owner_id IS NOT NULL THEN"
        "    INSERT INTO public.regress_tenure_log (mutex, fence, owner_id, released_us)"
        "    SELECT OLD.mutex, OLD.fence, OLD.owner_id, (extract(epoch FROM c.now) * 1000000)::int8"
        "      FROM public.simba_clock() c;"
        "  END IF;"
        "  RETURN NULL; END $$");
    tx.exec0("CREATE TRIGGER regress_tenure_log AFTER INSERT OR UPDATE ON simba_mutex FOR EACH ROW"
             " EXECUTE FUNCTION public.regress_tenure_log()");
}

std::map<std::int64_t, Tenure> server_tenures(pqxx::connection& c, const std::string& mutex) {
    std::map<std::int64_t, Tenure> out;
    pqxx::nontransaction tx(c);
    auto rows = tx.exec_params(
        "SELECT l.fence, l.owner_id, l.acquired_us,"
        " greatest(l.transition_us, (SELECT max(s.transition_us) FROM regress_session_log s"
        "                             WHERE s.session_id = l.session_id)),"
        " l.released_us FROM regress_tenure_log l WHERE l.mutex = $1 ORDER BY l.id",
        mutex);
    for (const auto& r : rows) {
        auto& t = out[r[0].as<std::int64_t>()];
        if (t.versions == 0 && !r[2].is_null()) {
            t.owner = r[1].as<std::string>();
            t.start = r[2].as<std::int64_t>();
        }
        if (!r[4].is_null()) {
            t.released = true;
            t.end = r[4].as<std::int64_t>();
        } else if (!t.released) {
            t.end = std::max(t.end, r[3].as<std::int64_t>());
            ++t.versions;
        }
    }
    return out;
}

/// fence -> holder of every grant simba_mutex_history logged, in order.
std::vector<std::pair<std::int64_t, std::string>> history_grants(pqxx::connection& c, const std::string& mutex) {
    std::vector<std::pair<std::int64_t, std::string>> out;
    pqxx::nontransaction tx(c);
    auto rows = tx.exec_params("SELECT fence, owner_id FROM simba_mutex_history WHERE mutex = $1"
                               " AND event IN ('acquired', 'taken_over', 'reacquired') ORDER BY id",
                               mutex);
    for (const auto& r : rows) out.emplace_back(r[0].as<std::int64_t>(), r[1].as<std::string>());
    return out;
}

struct RunResult {
    int faults[3] = {0, 0, 0};
    int grants = 0;
    int moves = 0;
    long samples = 0;
    long torn = 0;
    int same_fence_again = 0;  // on_acquired twice with one fence in one service
    struct OwnerHit {
        std::int64_t fence;  // the holder's tenure when the fault hit it
        int kind;
        std::size_t fault;   // index in fault_at
    };
    std::vector<OwnerHit> owner_hits;
    int ended_by[3] = {0, 0, 0};     // of those, tenures that ended before the next fault
    int moved_after[3] = {0, 0, 0};  // ... and whose next grant went to another service
    // Each stop of the holder (restarts, owner restarts): how long until the
    // next tenure was granted (boot clock, microseconds; -1: none before the
    // next fault), and how long until that next fault.
    std::vector<std::pair<std::int64_t, std::int64_t>> handovers;
    std::int64_t min_slack_us = std::numeric_limits<std::int64_t>::max();  // claim end to server end
    double coverage = 0;  // share of the faults' span with a tenure live on the server
    std::vector<std::string> violations;
};

std::string fmt_ms(std::int64_t micros) {
    char b[32];
    std::snprintf(b, sizeof b, "%.3f ms", static_cast<double>(micros) / 1000.0);
    return b;
}

RunResult one_run(pqxx::connection& db, const std::string& conninfo, int run, std::uint64_t seed,
                  milliseconds length) {
    RunResult res;
    const auto m = unique_name("owners");
    constexpr int n = 4;
    std::vector<std::unique_ptr<simba::pg::ContendServiceFactory>> factories;
    std::vector<std::string> apps;
    std::vector<std::shared_ptr<Recorder>> recorders;
    std::vector<std::unique_ptr<MutexContendService>> services;
    for (int i = 0; i < n; ++i) {
        auto o = test_options("owners");
        apps.push_back(o.application_name);
        factories.push_back(std::make_unique<simba::pg::ContendServiceFactory>(conninfo, o));
        recorders.push_back(std::make_shared<Recorder>(m, "s" + std::to_string(run) + "-" + std::to_string(i)));
        services.push_back(factories.back()->create(recorders.back(), lease(300ms, 150ms)));
    }
    for (auto& f : factories)
        if (!f->wait_connected(10s)) ADD_FAILURE() << "a factory did not connect within 10 s";

    std::vector<Watched> watched(n);
    std::atomic<bool> sampling{true};
    std::thread sampler([&] {
        auto next = SteadyClock::now();
        for (long sweep = 0; sampling.load(); ++sweep) {
            // Mostly the snapshot; every fourth sweep the report's three calls.
            for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i)
                watched[i].add(sweep % 4 == 3 ? sample_calls(*services[i]) : sample_lease(*services[i]));
            next += microseconds(200);
            std::this_thread::sleep_until(next);
        }
    });

    for (auto& s : services) s->start();
    std::mt19937_64 rng(seed);
    auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    // The server's tenure when a fault hit its holder: (fence, kind).
    auto server_owner = [&]() -> std::pair<std::int64_t, std::string> {
        pqxx::nontransaction tx(db);
        auto r = tx.exec_params1("SELECT fence, owner_id FROM simba_owner($1)", m);
        if (r[1].is_null()) return {0, {}};
        return {r[0].as<std::int64_t>(), r[1].as<std::string>()};
    };
    std::vector<std::int64_t> fault_at;  // boot clock, microseconds
    auto hit = [&](std::size_t i, int kind) {
        auto [fence, owner] = server_owner();
        fault_at.push_back(us(SteadyClock::now()));
        if (!owner.empty() && owner == recorders[i]->contender_id())
            res.owner_hits.push_back(RunResult::OwnerHit{fence, kind, fault_at.size() - 1});
    };
    auto restart = [&](std::size_t i, int kind) {
        hit(i, kind);
        if (services[i]->running()) services[i]->stop();
        services[i]->start();
    };
    const auto end = SteadyClock::now() + length;
    const auto faults_from = us(SteadyClock::now());
    while (SteadyClock::now() < end) {
        std::this_thread::sleep_for(milliseconds(uniform(150, 500)));
        const int kind = uniform(0, 2);
        ++res.faults[kind];
        if (kind == 0) {
            restart(static_cast<std::size_t>(uniform(0, n - 1)), kind);
        } else if (kind == 1) {
            const auto i = static_cast<std::size_t>(uniform(0, n - 1));
            hit(i, kind);
            pqxx::nontransaction tx(db);
            tx.exec_params("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
                           apps[i]);
        } else {
            // The current owner by its own claim, else by the server's.
            int owner = -1;
            for (int i = 0; i < n && owner < 0; ++i)
                if (services[static_cast<std::size_t>(i)]->is_owner()) owner = i;
            if (owner < 0) {
                pqxx::nontransaction tx(db);
                auto r = tx.exec_params1("SELECT owner_id FROM simba_owner($1)", m);
                for (int i = 0; i < n && !r[0].is_null(); ++i)
                    if (recorders[static_cast<std::size_t>(i)]->contender_id() == r[0].as<std::string>()) owner = i;
            }
            restart(static_cast<std::size_t>(owner >= 0 ? owner : uniform(0, n - 1)), kind);
        }
    }
    const auto faults_until = us(SteadyClock::now());
    for (auto& s : services)
        if (s->running()) s->stop();
    sampling = false;
    sampler.join();

    // ---- the judgment
    const auto offset = calibrate(db);
    auto latest_end = [&](std::int64_t server) { return server - offset.lo; };
    const auto tenures = server_tenures(db, m);
    const auto grants = history_grants(db, m);
    std::map<std::int64_t, std::string> granted;
    std::string prev;
    for (auto& [fence, owner] : grants) {
        granted[fence] = owner;
        ++res.grants;
        if (!prev.empty() && owner != prev) ++res.moves;
        prev = owner;
    }
    const auto stopped_at = us(SteadyClock::now());
    {
        // Tenures in fence order start one after another on the server.
        std::int64_t covered = 0, from = faults_from;
        for (const auto& [fence, t] : tenures) {
            const auto a = std::max(from, latest_end(t.start)), b = std::min(faults_until, latest_end(t.end));
            if (b > a) covered += b - a, from = b;
        }
        const auto span = std::max<std::int64_t>(1, faults_until - faults_from);
        res.coverage = static_cast<double>(covered) / static_cast<double>(span);
    }
    for (const auto& h : res.owner_hits) {
        auto holder = granted.find(h.fence);
        auto t = tenures.find(h.fence);
        const auto until = h.fault + 1 < fault_at.size() ? fault_at[h.fault + 1] : stopped_at;
        if (h.kind != 1 && holder != granted.end()) {
            // A stop released it: the next tenure starts (on the server)
            // before the next fault, whoever it goes to.
            auto next = tenures.upper_bound(h.fence);
            const auto start = next == tenures.end() ? until : latest_end(next->second.start);
            res.handovers.emplace_back(start < until ? std::max<std::int64_t>(0, start - fault_at[h.fault]) : -1,
                                       until - fault_at[h.fault]);
        }
        if (holder == granted.end() || t == tenures.end() || latest_end(t->second.end) >= until) continue;
        ++res.ended_by[h.kind];
        auto next = granted.upper_bound(h.fence);
        if (next != granted.end() && next->second != holder->second) ++res.moved_after[h.kind];
    }
    // Server time carried onto the boot clock: the latest and the earliest
    // it may be (the calibration error goes to the client).
    auto latest = [&](std::int64_t server) { return server - offset.lo; };
    auto earliest = [&](std::int64_t server) { return server - offset.hi; };
    struct Claim {
        int service;
        Segment seg;
    };
    std::vector<Claim> claims;
    for (int i = 0; i < n; ++i) {
        const auto& w = watched[static_cast<std::size_t>(i)];
        const auto& id = recorders[static_cast<std::size_t>(i)]->contender_id();
        res.samples += w.samples;
        res.torn += w.torn;
        for (const auto& seg : w.segments) {
            claims.push_back(Claim{i, seg});
            std::ostringstream where;
            where << "service " << i << " (" << id << ") claimed fence " << seg.fence << " in " << seg.samples
                  << " samples";
            auto g = granted.find(seg.fence);
            if (g == granted.end() || g->second != id) {
                res.violations.push_back(where.str() + ": the server never granted that fence to it" +
                                         (g == granted.end() ? std::string() : " (it went to " + g->second + ")"));
                continue;
            }
            auto t = tenures.find(seg.fence);
            if (t == tenures.end()) {
                res.violations.push_back(where.str() + ": no version of that tenure in the row's log");
                continue;
            }
            if (seg.first_t1 < earliest(t->second.start))
                res.violations.push_back(where.str() + " " + fmt_ms(earliest(t->second.start) - seg.first_t1) +
                                         " before the server granted it");
            if (seg.past_deadline) res.violations.push_back(where.str() + ": lease() returned it past its deadline");
            if (!t->second.released && seg.deadline > latest(t->second.end))
                res.violations.push_back(where.str() + ": lease() showed a deadline " +
                                         fmt_ms(seg.deadline - latest(t->second.end)) +
                                         " past the server's end of the tenure (its lease lapsed)");
            const auto slack = latest(t->second.end) - seg.last_t0;
            res.min_slack_us = std::min(res.min_slack_us, slack);
            if (slack < 0)
                res.violations.push_back(where.str() + " until " + fmt_ms(-slack) + " after the server's end of it (" +
                                         (t->second.released ? "released" : "lease lapsed") + ")");
        }
    }
    for (std::size_t a = 0; a < claims.size(); ++a)
        for (std::size_t b = a + 1; b < claims.size(); ++b) {
            const auto& x = claims[a];
            const auto& y = claims[b];
            if (x.service == y.service) continue;
            const auto from = std::max(x.seg.first_t1, y.seg.first_t1);
            const auto to = std::min(x.seg.last_t0, y.seg.last_t0);
            if (from < to) {
                std::ostringstream o;
                o << "two owners: service " << x.service << " (fence " << x.seg.fence << ") and service " << y.service
                  << " (fence " << y.seg.fence << ") both claimed for " << fmt_ms(to - from);
                res.violations.push_back(o.str());
            }
        }
    for (int i = 0; i < n; ++i) {
        const auto& id = recorders[static_cast<std::size_t>(i)]->contender_id();
        bool expect_acquired = true;
        std::set<std::int64_t> fences;
        for (const auto& e : recorders[static_cast<std::size_t>(i)]->events()) {
            if (e.acquired != expect_acquired) {
                res.violations.push_back("service " + std::to_string(i) + ": callbacks do not alternate");
                break;
            }
            expect_acquired = !expect_acquired;
            if (!e.acquired) continue;
            const auto f = e.state.after.fence;
            auto g = granted.find(f);
            if (g == granted.end() || g->second != id)
                res.violations.push_back("service " + std::to_string(i) + ": on_acquired with fence " +
                                         std::to_string(f) + ", not granted to it");
            if (!fences.insert(f).second) {
                ++res.same_fence_again;
                res.violations.push_back("service " + std::to_string(i) + ": fence " + std::to_string(f) +
                                         " reported by two on_acquired (each tenure has its own fence)");
            }
        }
        if (!expect_acquired) res.violations.push_back("service " + std::to_string(i) + ": on_released missing after stop");
    }
    if (!res.violations.empty()) {
        // The trace: every claim and every server tenure, on the boot clock
        // relative to the first grant.
        const std::int64_t zero = tenures.empty() ? 0 : latest(tenures.begin()->second.start);
        std::fprintf(stderr, "run %d: server tenures (fence owner start..end, ms, boot clock):\n", run);
        for (auto& [f, t] : tenures)
            std::fprintf(stderr, "  %" PRId64 " %s %.3f..%.3f%s\n", f, t.owner.c_str(),
                         static_cast<double>(latest(t.start) - zero) / 1000.0,
                         static_cast<double>(latest(t.end) - zero) / 1000.0, t.released ? " released" : "");
        std::fprintf(stderr, "run %d: claims (service fence first..last sample, ms):\n", run);
        std::sort(claims.begin(), claims.end(),
                  [](const Claim& a, const Claim& b) { return a.seg.first_t0 < b.seg.first_t0; });
        for (auto& c : claims)
            std::fprintf(stderr, "  s%d %" PRId64 " %.3f..%.3f (%ld samples%s)\n", c.service, c.seg.fence,
                         static_cast<double>(c.seg.first_t0 - zero) / 1000.0,
                         static_cast<double>(c.seg.last_t1 - zero) / 1000.0, c.seg.samples,
                         c.seg.torn ? ", torn" : "");
    }
    return res;
}

}  // namespace

TEST(Ownership, FourFactoriesUnderFaultsNeverTwoOwners) {
    const int runs = std::max(1, env_int("SIMBA_OWNERSHIP_RUNS", 4));
    const milliseconds length(std::max(1, env_int("SIMBA_OWNERSHIP_SECONDS", 10)) * 1000);
    const auto base_seed = static_cast<std::uint64_t>(env_int("SIMBA_OWNERSHIP_SEED", static_cast<int>(::getpid())));
    auto root = admin();
    ScratchDatabase scratch(*root, "owners");
    set_database_setting(*root, scratch, "history", "on");
    auto db = admin(scratch.conninfo());
    install_tenure_log(*db);
    int failed = 0, moves = 0, faults = 0;
    for (int run = 0; run < runs; ++run) {
        const auto seed = base_seed + static_cast<std::uint64_t>(run);
        auto r = one_run(*db, scratch.conninfo(), run, seed, length);
        const int f = r.faults[0] + r.faults[1] + r.faults[2];
        faults += f;
        moves += r.moves;
        int hits[3] = {0, 0, 0};
        for (auto& h : r.owner_hits) ++hits[h.kind];
        std::printf("run %d (seed %" PRIu64 "): %d faults (%d restarts, %d kills, %d owner restarts), %d grants, "
                    "%d moves; faults that hit the holder / ended its tenure / moved it: restarts %d/%d/%d, kills "
                    "%d/%d/%d, owner restarts %d/%d/%d; %ld samples, %ld torn, %d same-fence re-acquisitions, "
                    "closest claim %s before the server's end, %zu violations\n",
                    run, seed, f, r.faults[0], r.faults[1], r.faults[2], r.grants, r.moves, hits[0], r.ended_by[0],
                    r.moved_after[0], hits[1], r.ended_by[1], r.moved_after[1], hits[2], r.ended_by[2],
                    r.moved_after[2], r.samples, r.torn, r.same_fence_again, fmt_ms(r.min_slack_us).c_str(),
                    r.violations.size());
        // Ownership keeps moving: every stop of the holder released it, so a
        // new tenure begins within a lease (ttl + transition), unless the
        // next fault came first (issue 39: a release owed on a dead
        // statement connection waited for its next keepalive).
        std::int64_t worst = 0;
        int handed = 0;
        for (auto [delay, gap] : r.handovers) {
            handed += delay >= 0;
            worst = std::max(worst, delay < 0 ? gap : delay);
            if (delay > 450000 || (delay < 0 && gap > 450000))
                r.violations.push_back("a stop of the holder was followed by no new tenure for " +
                                       fmt_ms(delay < 0 ? gap : delay) + " (lease 300 ms + 150 ms)");
        }
        std::printf("run %d: %zu stops of the holder, %d handed over before the next fault, slowest %s; an owner "
                    "on the server %.1f %% of the time\n",
                    run, r.handovers.size(), handed, fmt_ms(worst).c_str(), 100 * r.coverage);
        std::fflush(stdout);
        for (std::size_t i = 0; i < r.violations.size() && i < 20; ++i)
            ADD_FAILURE() << "run " << run << " (seed " << seed << "): " << r.violations[i];
        failed += !r.violations.empty();
    }
    std::printf("%d of %d runs with violations; %d ownership moves over %d faults\n", failed, runs, moves, faults);
}

// The defect the scenario found, on its own: stop() must end the tenure
// before it sends the release. A trigger holds the release inside the
// server for 500 ms (the row still names the holder): the stopping service
// must already say it is not owner, and its on_released must already have
// been queued. Before the fix is_owner() stayed true until the release's
// reply came back, after the row was free for the next holder.
TEST(Ownership, StopEndsTheTenureBeforeItsReleaseReachesTheServer) {
    auto root = admin();
    ScratchDatabase scratch(*root, "stop-order");
    auto db = admin(scratch.conninfo());
    const auto m = unique_name("stop-order");
    {
        pqxx::nontransaction tx(*db);
        tx.exec0("CREATE FUNCTION public.regress_slow_release() RETURNS trigger LANGUAGE plpgsql"
                 " SET search_path = pg_catalog AS $$ BEGIN"
                 "  IF NEW.mutex = " + tx.quote(m) + " AND NEW.owner_id IS NULL AND OLD.owner_id IS NOT NULL THEN"
                 "    PERFORM pg_sleep(0.5);"
                 "  END IF; RETURN NEW; END $$");
        tx.exec0("CREATE TRIGGER regress_slow_release BEFORE UPDATE ON simba_mutex FOR EACH ROW"
                 " EXECUTE FUNCTION public.regress_slow_release()");
    }
    auto opts = test_options("stop-order");
    simba::pg::ContendServiceFactory factory(scratch.conninfo(), opts);
    auto rec = std::make_shared<Recorder>(m, "holder");
    auto s = factory.create(rec, lease(5000ms, 2000ms));
    s->start();
    ASSERT_TRUE(rec->wait([](auto& ev) { return ev.size() == 1; }, 10s));
    ASSERT_TRUE(s->is_owner());
    std::thread stopper([&] { s->stop(); });
    // The release is in the server, held by the trigger: the row still names us.
    const bool in_release = eventually(
        [&] {
            pqxx::nontransaction tx(*db);
            return tx.exec_params1("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1"
                                   " AND wait_event = 'PgSleep'",
                                   opts.application_name)[0]
                       .as<int>() == 1;
        },
        5000ms);
    bool owner_during_release = true, server_still_ours = false;
    if (in_release) {
        owner_during_release = s->is_owner() || s->lease().has_value();
        pqxx::nontransaction tx(*db);
        auto r = tx.exec_params1("SELECT owner_id FROM simba_owner($1)", m);
        server_still_ours = !r[0].is_null() && r[0].as<std::string>() == "holder";
    }
    stopper.join();
    ASSERT_TRUE(in_release) << "the release never reached the trigger";
    EXPECT_TRUE(server_still_ours) << "the release committed before the check: the test proves nothing";
    EXPECT_FALSE(owner_during_release) << "the stopping service still claimed a tenure its release was ending";
    EXPECT_EQ(rec->released_count(), 1);
    EXPECT_FALSE(s->is_owner());
}
