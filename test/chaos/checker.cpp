// simba chaos checker: reads the workers' and the nemesis' event logs and the
// database (simba_mutex_history, ledger, both with commit timestamps) and
// checks docs/design.md, "Safety rules", on what happened:
//
//  (1) one owner at a time: an ownership a worker observed (is_owner() true
//      with fence f at some instant in [before, after], steady clock) never
//      comes after the end of tenure f on the server (the next grant's or the
//      release's server time), and never after another holder's later-fenced
//      ownership was observed;
//  (2) fences strictly increase: per mutex, server grants in commit order,
//      and the grants the workers were told of in server-time order; no fence
//      granted twice;
//  (3) every ledger row committed while its (writer, fence) held the current
//      tenure, judged by commit timestamps (track_commit_timestamp); a row
//      that committed under another tenure is a stale write accepted; no
//      write a worker saw fail is in the ledger;
//  (4) durability: every acknowledged ledger write (COMMIT returned) is in
//      the ledger with its id, fence and writer; every grant a worker was
//      told of (on_acquired) is in the server's history;
//  (5) liveness: after each fault heals, every mutex is observed owned (a
//      write loop's is_owner() or an on_acquired) within --bound-ms;
//  (6) with --run-mutex (test/ha): `simba run` ran simba_chaos_run_cmd as
//      CMD (its run-*.log): no two CMDs ran at once (the lock file they
//      flock, and their spans on the steady clock), the fences CMDs were
//      given strictly increase, each one is a grant the server has to that
//      contender, and no CMD ran after the server ended its tenure. The
//      mutex's grants join (2) and its CMDs' ticks join (5).
//
// Server time vs steady time: both clocks are this machine's, their offset is
// bracketed by every ledger INSERT (clock_timestamp() between the steady send
// and receive times); the tightest bracket over all writes is used, and the
// comparison always takes the side that cannot invent a violation.
//
// Usage: simba_chaos_checker --logdir DIR [--conninfo STR] [--bound-ms 5000]
//        [--mutexes a,b,c] [--run-mutex M] [--expect-stale] [--report-only]
//        [--expect-loss]
// Exit: 0 when every invariant holds; 1 on any violation. --expect-stale (the
// control run, fence check off): 0 only if stale writes WERE found (the
// checker can see them), 1 otherwise. --report-only: always 0 (prints losses).
// --expect-loss (the asynchronous HA control): 0 only if acknowledged writes
// or grants were lost or a fence was granted to two holders, 1 otherwise.
#include <dirent.h>

#include <pqxx/pqxx>

#include <algorithm>
#include <cinttypes>
#include <climits>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "common.hpp"

namespace {

using i64 = std::int64_t;

struct Args {
    std::string logdir;
    std::string conninfo;
    i64 bound_ms = 5000;
    std::vector<std::string> mutexes{"chaos-a", "chaos-b", "chaos-c"};
    std::string run_mutex;  // simba run's mutex, empty when none ran
    bool expect_stale = false;
    bool report_only = false;
    bool expect_loss = false;
    std::string label = "chaos";
};

struct Acq {
    int w;
    std::string mutex;
    i64 fence, steady_cb, anchor, acquired_us, ttl_us, transition_us, current_us;
    std::string owner;
};
struct Inv {
    int w;
    std::string mutex;
    i64 fence, seq, before, after;
};
struct Ok {
    int w;
    std::string mutex;
    i64 fence, seq, send, recv, row_id, server_us;
};
struct Fault {
    std::string kind;
    i64 start, heal;
    std::string detail;
};
struct Cmd {  // one simba run CMD (run_cmd.cpp), by (pid, fence)
    std::string contender;
    i64 first = LLONG_MAX, last = LLONG_MIN;  // ticks, steady
    bool done = false;
};
struct Hist {
    i64 id;
    std::string mutex, event, owner;
    i64 fence, at_us, commit_us;
};
struct Row {
    i64 id;
    std::string mutex, writer;
    i64 fence;
    int worker;
    i64 seq, commit_us;
};

bool is_grant(const std::string& e) { return e == "acquired" || e == "taken_over" || e == "reacquired"; }

class Violations {
public:
    explicit Violations(std::string name) : name_(std::move(name)) {}
    void add(const std::string& what) {
        if (count_ < 8) examples_.push_back(what);
        ++count_;
    }
    long count() const { return count_; }
    void print_examples() const {
        for (auto& e : examples_) std::cout << "      " << name_ << ": " << e << "\n";
        if (count_ > static_cast<long>(examples_.size()))
            std::cout << "      " << name_ << ": ... " << count_ - static_cast<long>(examples_.size()) << " more\n";
    }

private:
    std::string name_;
    long count_ = 0;
    std::vector<std::string> examples_;
};

std::string ms(i64 ns) {
    char b[64];
    std::snprintf(b, sizeof b, "%.3f s", static_cast<double>(ns) / 1e9);
    return b;
}

class Checker {
public:
    explicit Checker(Args a) : a_(std::move(a)) {}

    int main() {
        load_logs();
        load_db();
        compute_offset();
        check1b();
        check1();
        check2();
        check3();
        check4();
        check5();
        check6();
        return report();
    }

private:
    // ------------------------------------------------------------ loading
    void load_logs() {
        DIR* d = ::opendir(a_.logdir.c_str());
        if (!d) throw std::runtime_error("cannot open " + a_.logdir);
        std::vector<std::string> files;
        while (auto* e = ::readdir(d)) {
            std::string n = e->d_name;
            bool log = n.size() > 4 && n.substr(n.size() - 4) == ".log";
            if ((log && (n.rfind("worker-", 0) == 0 || n.rfind("run-", 0) == 0)) || n == "nemesis.log")
                files.push_back(n);
        }
        ::closedir(d);
        std::sort(files.begin(), files.end());
        for (auto& n : files) {
            std::ifstream in(a_.logdir + "/" + n);
            std::string line;
            while (std::getline(in, line)) parse(line);
        }
    }

    static i64 num(const std::string& s) { return std::stoll(s); }

    void parse(const std::string& line) {
        auto f = chaos::split(line);
        if (f.empty()) return;
        try {
            const std::string& t = f[0];
            if (t == "start" && f.size() >= 4) {
                ++processes_;
            } else if (t == "id" && f.size() >= 4) {
                ids_[{std::stoi(f[1]), f[2]}] = f[3];
                worker_of_[f[3]] = std::stoi(f[1]);
            } else if (t == "acq" && f.size() >= 11) {
                acqs_.push_back({std::stoi(f[1]), f[2], num(f[3]), num(f[4]), num(f[5]), num(f[6]), num(f[7]),
                                 num(f[8]), num(f[9]), f[10]});
            } else if (t == "rel" && f.size() >= 5) {
                ++rels_;
            } else if (t == "inv" && f.size() >= 7) {
                invs_.push_back({std::stoi(f[1]), f[2], num(f[3]), num(f[4]), num(f[5]), num(f[6])});
            } else if (t == "ok" && f.size() >= 9) {
                oks_.push_back({std::stoi(f[1]), f[2], num(f[3]), num(f[4]), num(f[5]), num(f[6]), num(f[7]),
                                num(f[8])});
            } else if (t == "fail" && f.size() >= 6) {
                fails_.insert({std::stoi(f[1]), num(f[4])});
                ++fail_states_[f[5]];
            } else if (t == "unk" && f.size() >= 5) {
                unks_.insert({std::stoi(f[1]), num(f[4])});
            } else if (t == "lib") {
                ++lib_lines_;
            } else if (t == "fault" && f.size() >= 4) {
                std::string detail;
                for (std::size_t i = 4; i < f.size(); ++i) detail += (i > 4 ? " " : "") + f[i];
                faults_.push_back({f[1], num(f[2]), num(f[3]), detail});
            } else if (t == "skipped" && f.size() >= 2) {
                ++skipped_[f[1]];
            } else if (t == "run" && f.size() >= 3) {
                run_start_ = num(f[1]);
                run_end_ = num(f[2]);
            } else if (t == "cmd" && f.size() >= 5) {
                cmds_[{num(f[1]), num(f[2])}].contender = f[3];
            } else if (t == "tick" && f.size() >= 4) {
                auto& c = cmds_[{num(f[1]), num(f[2])}];
                c.first = std::min(c.first, num(f[3]));
                c.last = std::max(c.last, num(f[3]));
                ticks_.push_back(num(f[3]));
            } else if (t == "overlap" && f.size() >= 4) {
                v6_.add("CMD " + f[1] + " (fence " + f[2] + ") started while another CMD held the lock file");
            } else if (t == "done" && f.size() >= 4) {
                cmds_[{num(f[1]), num(f[2])}].done = true;
            } else if (t == "error") {
                nemesis_errors_.push_back(line);
            }
        } catch (const std::exception&) {
            ++malformed_;  // a line cut by SIGKILL
        }
    }

    void load_db() {
        pqxx::connection c(a_.conninfo);
        pqxx::nontransaction tx(c);
        std::string list;
        for (auto& m : a_.mutexes) list += (list.empty() ? "" : ",") + tx.quote(m);
        if (!a_.run_mutex.empty()) list += "," + tx.quote(a_.run_mutex);
        auto h = tx.exec(
            "SELECT id, mutex, event, coalesce(owner_id, ''), fence,"
            " (extract(epoch FROM at) * 1000000)::int8,"
            " (extract(epoch FROM pg_xact_commit_timestamp(xmin)) * 1000000)::int8"
            " FROM simba_mutex_history WHERE mutex IN (" + list + ") ORDER BY id");
        for (const auto& r : h) {
            if (r[6].is_null()) throw std::runtime_error("history row without commit timestamp: track_commit_timestamp must be on");
            hist_.push_back({r[0].as<i64>(), r[1].as<std::string>(), r[2].as<std::string>(), r[3].as<std::string>(),
                             r[4].as<i64>(), r[5].as<i64>(), r[6].as<i64>()});
        }
        auto l = tx.exec(
            "SELECT id, mutex, writer, fence, worker, seq,"
            " (extract(epoch FROM pg_xact_commit_timestamp(xmin)) * 1000000)::int8 FROM ledger ORDER BY id");
        for (const auto& r : l) {
            if (r[6].is_null()) throw std::runtime_error("ledger row without commit timestamp: track_commit_timestamp must be on");
            rows_.push_back({r[0].as<i64>(), r[1].as<std::string>(), r[2].as<std::string>(), r[3].as<i64>(),
                             r[4].as<int>(), r[5].as<i64>(), r[6].as<i64>()});
        }
        history_on_ = tx.exec1("SELECT current_setting('simba.history')")[0].as<std::string>();
        // Per mutex, the state-changing events in commit order.
        for (auto& e : hist_) timeline_[e.mutex].push_back(e);
        for (auto& [m, v] : timeline_) {
            if (!std::is_sorted(v.begin(), v.end(), [](const Hist& x, const Hist& y) { return x.commit_us < y.commit_us; }))
                ++id_order_differs_;
            std::stable_sort(v.begin(), v.end(), [](const Hist& x, const Hist& y) { return x.commit_us < y.commit_us; });
        }
    }

    void compute_offset() {
        // offset = server_ns - steady_ns, with server in [send, recv] + offset.
        off_lo_ = LLONG_MIN;
        off_hi_ = LLONG_MAX;
        for (auto& o : oks_) {
            i64 s = o.server_us * 1000;
            off_lo_ = std::max(off_lo_, s - o.recv);
            off_hi_ = std::min(off_hi_, s - o.send + 1000);  // +1 us: server time is truncated to us
        }
        if (oks_.empty()) off_lo_ = off_hi_ = 0;
    }

    // Index of the grant of (mutex, fence) in the mutex's timeline, or -1.
    long grant_index(const std::string& mutex, i64 fence) const {
        auto it = timeline_.find(mutex);
        if (it == timeline_.end()) return -1;
        for (std::size_t i = 0; i < it->second.size(); ++i)
            if (is_grant(it->second[i].event) && it->second[i].fence == fence) return static_cast<long>(i);
        return -1;
    }

    // Server time (us) the tenure at index i ended: the next grant, or the
    // release of this fence; LLONG_MAX if it had not ended.
    i64 tenure_end_us(const std::string& mutex, long i) const {
        const auto& v = timeline_.at(mutex);
        for (std::size_t j = static_cast<std::size_t>(i) + 1; j < v.size(); ++j) {
            if (is_grant(v[j].event)) return v[j].at_us;
            if ((v[j].event == "released" || v[j].event == "forced_release") && v[j].fence == v[i].fence)
                return v[j].at_us;
        }
        return LLONG_MAX;
    }

    // -------------------------------------------------------------- checks
    void check1() {
        // (a) against the server's history
        std::map<std::pair<std::string, i64>, std::pair<long, i64>> cache;  // (mutex, fence) -> (index, end)
        for (auto& s : invs_) {
            auto key = std::make_pair(s.mutex, s.fence);
            auto it = cache.find(key);
            if (it == cache.end()) {
                long gi = grant_index(s.mutex, s.fence);
                i64 end = gi < 0 ? LLONG_MAX : tenure_end_us(s.mutex, gi);
                it = cache.emplace(key, std::make_pair(gi, end)).first;
            }
            if (it->second.first < 0) {
                ++samples_unmatched_;
                continue;
            }
            const Hist& g = timeline_.at(s.mutex)[static_cast<std::size_t>(it->second.first)];
            const std::string& me = ids_[{s.w, s.mutex}];
            if (g.owner != me)
                v1_.add("worker " + std::to_string(s.w) + " (" + me + ") reported owning " + s.mutex + " with fence " +
                        std::to_string(s.fence) + ", which the server granted to " + g.owner);
            i64 end = it->second.second;
            if (end != LLONG_MAX && s.before + off_lo_ >= end * 1000)
                v1_.add("worker " + std::to_string(s.w) + " reported owning " + s.mutex + " fence " +
                        std::to_string(s.fence) + " " + ms(s.before + off_lo_ - end * 1000) +
                        " after the server ended that tenure (seq " + std::to_string(s.seq) + ")");
            ++samples_checked_;
        }
    }

    void check1b() {
        // (b) between workers, on the steady clock alone. Per mutex and
        // (fence, holder), the span [first after, last before] of its
        // observations: a holder with a smaller fence is never seen owning
        // after a larger fence's holder was seen owning, and two holders of
        // the same fence (a fence issued twice) never own at the same time.
        struct Span {
            i64 first_after, last_before;
        };
        std::map<std::string, std::map<i64, std::map<std::string, Span>>> span;  // mutex -> fence -> holder
        for (auto& s : invs_) {
            auto& sp = span[s.mutex][s.fence];
            const std::string& who = ids_[{s.w, s.mutex}];
            auto it = sp.find(who);
            if (it == sp.end()) sp[who] = {s.after, s.before};
            else {
                it->second.first_after = std::min(it->second.first_after, s.after);
                it->second.last_before = std::max(it->second.last_before, s.before);
            }
        }
        for (auto& [m, fences] : span) {
            i64 latest_before = LLONG_MIN, latest_fence = 0;
            for (auto& [f, holders] : fences) {  // ascending fence
                for (auto a = holders.begin(); a != holders.end(); ++a) {
                    if (latest_before != LLONG_MIN && latest_before > a->second.first_after)
                        v1_.add(m + ": holder of fence " + std::to_string(latest_fence) + " still owned " +
                                ms(latest_before - a->second.first_after) + " after the holder of fence " +
                                std::to_string(f) + " was seen owning");
                    for (auto b = std::next(a); b != holders.end(); ++b) {
                        i64 overlap = std::min(a->second.last_before, b->second.last_before) -
                                      std::max(a->second.first_after, b->second.first_after);
                        if (overlap > 0) {
                            ++simultaneous_;
                            v1_.add(m + ": " + a->first + " and " + b->first + " both owned fence " +
                                    std::to_string(f) + " at the same time, for " + ms(overlap));
                        }
                    }
                }
                for (auto& [who, sp] : holders) {
                    if (sp.last_before > latest_before) {
                        latest_before = sp.last_before;
                        latest_fence = f;
                    }
                }
            }
        }
    }

    void check2() {
        for (auto& [m, v] : timeline_) {
            i64 last = 0;
            std::set<i64> seen;
            for (auto& e : v) {
                if (!is_grant(e.event)) continue;
                ++server_grants_;
                if (e.fence <= last)
                    v2_.add(m + ": server granted fence " + std::to_string(e.fence) + " to " + e.owner + " after fence " +
                            std::to_string(last));
                if (!seen.insert(e.fence).second) v2_.add(m + ": fence " + std::to_string(e.fence) + " granted twice");
                last = std::max(last, e.fence);
            }
        }
        // What the workers were told, in server time order.
        std::map<std::string, std::vector<const Acq*>> by_mutex;
        for (auto& a : acqs_) by_mutex[a.mutex].push_back(&a);
        for (auto& [m, v] : by_mutex) {
            std::sort(v.begin(), v.end(), [](const Acq* x, const Acq* y) {
                return std::tie(x->acquired_us, x->fence) < std::tie(y->acquired_us, y->fence);
            });
            std::map<i64, std::string> owner_of;
            for (std::size_t i = 0; i < v.size(); ++i) {
                auto [it, fresh] = owner_of.emplace(v[i]->fence, v[i]->owner);
                if (!fresh && it->second != v[i]->owner) ++reissued_;
                if (!fresh && it->second != v[i]->owner)
                    v2_.add(m + ": fence " + std::to_string(v[i]->fence) + " was granted to both " + it->second +
                            " and " + v[i]->owner + " (fence reissued)");
                if (i > 0 && v[i]->fence <= v[i - 1]->fence && v[i]->owner != v[i - 1]->owner)
                    v2_.add(m + ": " + v[i]->owner + " was granted fence " + std::to_string(v[i]->fence) +
                            " after " + v[i - 1]->owner + " had fence " + std::to_string(v[i - 1]->fence));
            }
        }
    }

    void check3() {
        for (auto& r : rows_) {
            auto it = timeline_.find(r.mutex);
            const Hist* cur = nullptr;  // the tenure current at the row's commit
            bool released = false;
            if (it != timeline_.end()) {
                const auto& v = it->second;
                const auto& st = state_after(r.mutex);
                // events committed strictly before the row
                auto pos = std::lower_bound(v.begin(), v.end(), r.commit_us,
                                            [](const Hist& e, i64 t) { return e.commit_us < t; });
                if (pos != v.begin()) {
                    auto& s = st[static_cast<std::size_t>(pos - v.begin() - 1)];
                    if (s.first >= 0) cur = &v[static_cast<std::size_t>(s.first)];
                    released = s.second;
                }
            }
            bool ok = cur && !released && cur->fence == r.fence && cur->owner == r.writer;
            if (!ok) {
                ++stale_rows_;
                std::string now = !cur ? "no tenure" : released ? "tenure " + std::to_string(cur->fence) + " released"
                                                                : "fence " + std::to_string(cur->fence) + " of " + cur->owner;
                v3_.add("ledger row " + std::to_string(r.id) + " (" + r.mutex + ", writer " + r.writer + ", fence " +
                        std::to_string(r.fence) + ") committed while the current tenure was " + now);
            }
            if (fails_.count({r.worker, r.seq}))
                v3_.add("ledger row " + std::to_string(r.id) + " was written by a write its worker saw fail (worker " +
                        std::to_string(r.worker) + " seq " + std::to_string(r.seq) + ")");
            if (unks_.count({r.worker, r.seq})) ++unknown_committed_;
        }
    }

    // Per mutex, after each timeline event: (index of the current grant or -1, released).
    const std::vector<std::pair<long, bool>>& state_after(const std::string& mutex) {
        auto it = states_.find(mutex);
        if (it != states_.end()) return it->second;
        std::vector<std::pair<long, bool>> st;
        long cur = -1;
        bool released = false;
        const auto& v = timeline_.at(mutex);
        for (std::size_t i = 0; i < v.size(); ++i) {
            if (is_grant(v[i].event)) {
                cur = static_cast<long>(i);
                released = false;
            } else if ((v[i].event == "released" || v[i].event == "forced_release") && cur >= 0 &&
                       v[i].fence == v[static_cast<std::size_t>(cur)].fence) {
                released = true;
            }
            st.push_back({cur, released});
        }
        return states_[mutex] = std::move(st);
    }

    void check4() {
        std::map<i64, const Row*> by_id;
        for (auto& r : rows_) by_id[r.id] = &r;
        for (auto& o : oks_) {
            auto it = by_id.find(o.row_id);
            const std::string& me = ids_[{o.w, o.mutex}];
            if (it == by_id.end()) {
                v4_.add("acknowledged ledger write lost: row " + std::to_string(o.row_id) + " (worker " +
                        std::to_string(o.w) + " seq " + std::to_string(o.seq) + ", " + o.mutex + " fence " +
                        std::to_string(o.fence) + ")");
                ++lost_writes_;
            } else if (it->second->fence != o.fence || it->second->writer != me || it->second->seq != o.seq) {
                v4_.add("acknowledged ledger write lost: row " + std::to_string(o.row_id) + " (worker " +
                        std::to_string(o.w) + " seq " + std::to_string(o.seq) + ", " + o.mutex + " fence " +
                        std::to_string(o.fence) + ") now holds another write (worker " +
                        std::to_string(it->second->worker) + " seq " + std::to_string(it->second->seq) +
                        "): the id was issued again");
                ++lost_writes_;
            }
        }
        std::set<std::tuple<std::string, i64, std::string>> grants;
        for (auto& e : hist_)
            if (is_grant(e.event)) grants.insert({e.mutex, e.fence, e.owner});
        std::set<std::tuple<std::string, i64, std::string>> reported;
        for (auto& a : acqs_) {
            if (!reported.insert({a.mutex, a.fence, a.owner}).second) {
                ++re_reported_;  // the same tenure reported again (after an on_released at the deadline)
                continue;
            }
            if (!grants.count({a.mutex, a.fence, a.owner})) {
                v4_.add("acknowledged grant lost: " + a.mutex + " fence " + std::to_string(a.fence) + " to " + a.owner);
                ++lost_grants_;
            }
        }
    }

    void check5() {
        // Ownership observations per mutex, by steady time.
        std::map<std::string, std::vector<std::pair<i64, i64>>> obs;  // mutex -> (before, after)
        for (auto& s : invs_) obs[s.mutex].push_back({s.before, s.after});
        // on_acquired is an ownership report too (the client fires it only
        // for a reply that arrived before the lease deadline): it counts
        // when the worker's write loop is blocked on another mutex's write.
        for (auto& a : acqs_) obs[a.mutex].push_back({a.steady_cb, a.steady_cb});
        std::vector<std::string> mutexes = a_.mutexes;
        if (!a_.run_mutex.empty()) {
            mutexes.push_back(a_.run_mutex);
            for (i64 t : ticks_) obs[a_.run_mutex].push_back({t, t});
        }
        for (auto& [m, v] : obs) std::sort(v.begin(), v.end());
        std::vector<Fault> sorted = faults_;
        std::sort(sorted.begin(), sorted.end(), [](const Fault& x, const Fault& y) { return x.heal < y.heal; });
        for (std::size_t i = 0; i < sorted.size(); ++i) {
            const auto& f = sorted[i];
            i64 horizon = i + 1 < sorted.size() ? sorted[i + 1].start : run_end_;
            for (auto& m : mutexes) {
                auto& v = obs[m];
                auto it = std::lower_bound(v.begin(), v.end(), std::make_pair(f.heal, static_cast<i64>(LLONG_MIN)));
                i64 delay = (it == v.end() || it->first > horizon) ? -1 : it->second - f.heal;
                if (delay < 0 && horizon - f.heal < a_.bound_ms * 1000000) {
                    ++unjudged_;  // the next fault (or the end) came before the bound: nothing to judge
                    continue;
                }
                if (delay < 0) {
                    v5_.add("no owner of " + m + " after " + f.kind + " (" + f.detail + ") healed, within " +
                            ms(horizon - f.heal));
                    continue;
                }
                auto& worst = worst_[f.kind];
                worst = std::max(worst, delay);
                // From the fault's start: the outage it caused, at most (owners
                // may have lasted into the fault).
                auto& from_start = worst_from_start_[f.kind];
                from_start = std::max(from_start, f.heal - f.start + delay);
                worst_all_ = std::max(worst_all_, delay);
                if (m == a_.run_mutex) run_worst_ = std::max(run_worst_, delay);
                if (delay > a_.bound_ms * 1000000)
                    v5_.add("owner of " + m + " only " + ms(delay) + " after " + f.kind + " (" + f.detail + ") healed");
            }
        }
    }

    void check6() {
        if (a_.run_mutex.empty()) return;
        const std::string& m = a_.run_mutex;
        std::vector<std::pair<std::pair<i64, i64>, const Cmd*>> order;  // (pid, fence), by first tick
        for (auto& [k, c] : cmds_)
            if (c.first != LLONG_MAX) order.push_back({k, &c});
        std::sort(order.begin(), order.end(), [](auto& x, auto& y) { return x.second->first < y.second->first; });
        auto name = [](const std::pair<i64, i64>& k) {
            return "CMD " + std::to_string(k.first) + " (fence " + std::to_string(k.second) + ")";
        };
        i64 latest = LLONG_MIN, last_fence = 0;
        std::pair<i64, i64> latest_key{};
        for (auto& [k, c] : order) {
            if (latest > c->first)
                v6_.add(name(k) + " ran " + ms(latest - c->first) + " before " + name(latest_key) + " last ran");
            if (k.second <= last_fence)
                v6_.add(name(k) + " ran after a CMD with fence " + std::to_string(last_fence));
            last_fence = std::max(last_fence, k.second);
            if (c->last > latest) {
                latest = c->last;
                latest_key = k;
            }
            long gi = grant_index(m, k.second);
            if (gi < 0) {
                v6_.add(name(k) + " ran on a grant the server does not have: acknowledged grant lost");
                ++lost_grants_;
                continue;
            }
            const Hist& g = timeline_.at(m)[static_cast<std::size_t>(gi)];
            if (g.owner != c->contender)
                v6_.add(name(k) + " of " + c->contender + " ran with a fence the server granted to " + g.owner);
            i64 end = tenure_end_us(m, gi);
            if (end != LLONG_MAX && c->last + off_lo_ >= end * 1000)
                v6_.add(name(k) + " ran " + ms(c->last + off_lo_ - end * 1000) + " after the server ended its tenure");
            ++cmds_judged_;
            if (c->done) ++cmds_done_;
        }
    }

    int report() {
        std::map<std::string, int> by_kind;
        for (auto& f : faults_) ++by_kind[f.kind];
        long ok = static_cast<long>(oks_.size());
        std::cout << "\n==== simba " << a_.label << " report ====\n";
        if (run_end_ > run_start_)
            std::cout << "  run:         " << ms(run_end_ - run_start_) << ", " << processes_ << " worker processes, "
                      << a_.mutexes.size() << " mutexes\n";
        std::cout << "  operations:  " << invs_.size() << " ledger writes invoked: " << ok << " ok, " << fails_.size()
                  << " failed, " << unks_.size() << " unknown (" << unknown_committed_ << " of them committed); "
                  << acqs_.size() - re_reported_ << " grants (+" << re_reported_
                  << " re-reported after a deadline release) and " << rels_ << " releases reported to workers\n";
        std::cout << "  failures:   ";
        for (auto& [s, n] : fail_states_) std::cout << " " << s << "=" << n;
        std::cout << (fail_states_.empty() ? " none" : "") << "; client-library warnings/errors logged: " << lib_lines_
                  << "\n";
        std::cout << "  server:      " << server_grants_ << " grants in simba_mutex_history (simba.history="
                  << history_on_ << "), " << rows_.size() << " ledger rows\n";
        std::cout << "  faults:     ";
        int total = 0;
        for (auto& [k, n] : by_kind) {
            std::cout << " " << k << "=" << n;
            total += n;
        }
        std::cout << " (total " << total << ")";
        for (auto& [k, n] : skipped_) std::cout << ", " << k << " skipped " << n;
        std::cout << "\n";
        std::cout << "  clock:       server - steady offset known within " << (off_hi_ - off_lo_) / 1000 << " us"
                  << (off_lo_ > off_hi_ ? "  (INCONSISTENT: the wall clock stepped)" : "") << "\n";
        auto line = [](const char* name, const Violations& v, const std::string& extra) {
            std::cout << "  " << name << v.count() << " violations" << extra << "\n";
            v.print_examples();
        };
        line("(1) one owner at a time:         ", v1_,
             " (" + std::to_string(samples_checked_) + " ownership observations checked against the history" +
                 (samples_unmatched_ ? ", " + std::to_string(samples_unmatched_) + " without a server grant" : "") + ")");
        line("(2) fences strictly increase:    ", v2_, " (" + std::to_string(server_grants_) + " server grants, " +
                                                           std::to_string(acqs_.size() - re_reported_) + " reported grants)");
        line("(3) writes under current fence:  ", v3_,
             " (" + std::to_string(rows_.size()) + " rows; stale writes accepted: " + std::to_string(stale_rows_) + ")");
        line("(4) acknowledged = durable:      ", v4_,
             " (" + std::to_string(ok) + " acknowledged writes, " + std::to_string(acqs_.size() - re_reported_) +
                 " acknowledged grants; lost: " + std::to_string(lost_writes_) + " writes, " +
                 std::to_string(lost_grants_) + " grants)");
        std::string worst = " (bound " + ms(a_.bound_ms * 1000000) + "; worst time to an owner after a fault healed: " +
                            ms(worst_all_);
        for (auto& [k, w] : worst_) worst += ", " + k + " " + ms(w);
        if (unjudged_) worst += ", " + std::to_string(unjudged_) + " recoveries cut short by the next fault or the end";
        worst += "; from the fault's start:";
        for (auto& [k, w] : worst_from_start_) worst += std::string(k == worst_from_start_.begin()->first ? " " : ", ") + k + " " + ms(w);
        worst += ")";
        line("(5) liveness:                    ", v5_, worst);
        if (!a_.run_mutex.empty())
            line("(6) simba run, one CMD at a time: ", v6_,
                 " (" + std::to_string(cmds_judged_) + " CMDs on " + a_.run_mutex + ", " + std::to_string(cmds_done_) +
                     " ran to their end, the others were killed or stopped; " + std::to_string(ticks_.size()) +
                     " ticks; worst time to a running CMD after a fault healed: " + ms(run_worst_) + ")");
        for (auto& e : nemesis_errors_) std::cout << "  nemesis error: " << e << "\n";
        if (id_order_differs_) std::cout << "  note: history ids and commit order differ on " << id_order_differs_ << " mutexes\n";
        long violations = v1_.count() + v2_.count() + v3_.count() + v4_.count() + v5_.count() + v6_.count();
        int rc;
        if (a_.report_only || a_.expect_loss) {
            std::cout << "  LOST in this run: " << lost_writes_ << " acknowledged ledger writes, " << lost_grants_
                      << " acknowledged grants; " << reissued_ << " fences granted to two holders (" << simultaneous_
                      << " times both owned it at once); " << v1_.count()
                      << " ownership observations under a tenure the surviving server does not have\n";
            if (a_.expect_loss) {
                bool seen = lost_writes_ + lost_grants_ + reissued_ > 0;
                std::cout << "  RESULT: " << (seen ? "PASS" : "FAIL") << " (control run: losses "
                          << (seen ? "detected" : "NOT detected") << ", " << violations << " violations)\n";
                rc = seen ? 0 : 1;
            } else {
                std::cout << "  RESULT: REPORT (" << violations << " violations, not a failure in this variant)\n";
                rc = 0;
            }
        } else if (a_.expect_stale) {
            bool seen = stale_rows_ > 0;
            std::cout << "  RESULT: " << (seen ? "PASS" : "FAIL") << " (control run: stale writes "
                      << (seen ? "detected: " + std::to_string(stale_rows_) : "NOT detected") << ")\n";
            rc = seen ? 0 : 1;
        } else {
            bool bad = violations > 0 || !nemesis_errors_.empty() || invs_.empty() || ok == 0 ||
                       (!a_.run_mutex.empty() && cmds_judged_ == 0);
            std::cout << "  RESULT: " << (bad ? "FAIL" : "PASS") << " (" << violations << " violations)\n";
            rc = bad ? 1 : 0;
        }
        std::cout.flush();
        return rc;
    }

    Args a_;
    std::map<std::pair<int, std::string>, std::string> ids_;
    std::map<std::string, int> worker_of_;
    std::vector<Acq> acqs_;
    std::vector<Inv> invs_;
    std::vector<Ok> oks_;
    std::set<std::pair<int, i64>> fails_, unks_;
    std::map<std::string, long> fail_states_;
    std::vector<Fault> faults_;
    std::map<std::string, int> skipped_;
    std::vector<std::string> nemesis_errors_;
    std::map<std::pair<i64, i64>, Cmd> cmds_;
    std::vector<i64> ticks_;
    long cmds_judged_ = 0, cmds_done_ = 0;
    i64 run_worst_ = 0;
    std::vector<Hist> hist_;
    std::vector<Row> rows_;
    std::map<std::string, std::vector<Hist>> timeline_;
    std::map<std::string, std::vector<std::pair<long, bool>>> states_;
    std::string history_on_;
    long processes_ = 0, rels_ = 0, lib_lines_ = 0, malformed_ = 0, id_order_differs_ = 0;
    i64 run_start_ = 0, run_end_ = 0, off_lo_ = 0, off_hi_ = 0;
    long samples_checked_ = 0, samples_unmatched_ = 0, server_grants_ = 0, stale_rows_ = 0, unknown_committed_ = 0;
    long lost_writes_ = 0, lost_grants_ = 0, re_reported_ = 0, reissued_ = 0, simultaneous_ = 0, unjudged_ = 0;
    std::map<std::string, i64> worst_, worst_from_start_;
    i64 worst_all_ = 0;
    Violations v1_{"(1)"}, v2_{"(2)"}, v3_{"(3)"}, v4_{"(4)"}, v5_{"(5)"}, v6_{"(6)"};
};

}  // namespace

int main(int argc, char** argv) {
    Args a;
    chaos::Options cli("simba chaos checker: judges a run's logs and the server's history (checker.cpp)");
    cli.add_option("--logdir", a.logdir, "directory of the event logs")->required();
    cli.add_option("--conninfo", a.conninfo, "libpq connection string");
    cli.add_option("--bound-ms", a.bound_ms, "liveness bound: an owner again within this after a fault healed");
    cli.add_option("--mutexes", a.mutexes, "mutexes (comma-separated)")->delimiter(',');
    cli.add_option("--run-mutex", a.run_mutex, "the mutex simba run held around simba_chaos_run_cmd (run-*.log)");
    cli.add_flag("--expect-stale", a.expect_stale, "pass only if stale writes were accepted (the control run)");
    cli.add_flag("--report-only", a.report_only, "print the report, pass whatever it says");
    cli.add_flag("--expect-loss", a.expect_loss,
                 "pass only if acknowledged writes or grants were lost (the asynchronous control)");
    cli.add_option("--label", a.label, "the report's title");
    CLI11_PARSE(cli, argc, argv);
    try {
        Checker c(a);
        return c.main();
    } catch (const std::exception& e) {
        std::cerr << "simba_chaos_checker: " << e.what() << std::endl;
        return 2;
    }
}
