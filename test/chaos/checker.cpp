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
//      write loop's is_owner() or an on_acquired) within --bound-ms; the
//      fair lock's mutex and the read-write lock (any hold) too;
//  (6) with --run-mutex (test/ha): `simba run` ran simba_chaos_run_cmd as
//      CMD (its run-*.log): no two CMDs ran at once (the lock file they
//      flock, and their spans on the steady clock), the fences CMDs were
//      given strictly increase, each one is a grant the server has to that
//      contender, and no CMD ran after the server ended its tenure. The
//      mutex's grants join (2) and its CMDs' ticks join (5).
//  (7) read-write lock (rwlock lines; rw_ledger; the holder rows' audit,
//      chaos_audit, in commit order): the server's holder rows never show a
//      write hold beside another hold, and writers' fences strictly increase,
//      none granted twice; every rw_ledger row committed while its writer
//      held the lock in the row's mode with its fence, a write row while
//      nobody else held it, a read row while no writer did, and its fence is
//      the write epoch (the latest writer's fence) at its commit; every hold
//      a worker reported is one the server granted (holder, acquired_at,
//      fence, mode) and was not reported after the server ended it; and on
//      the steady clock, a writer's observed hold never overlaps another
//      hold's.
//  (8) multi-lock (mid/minv/mok lines): at every committed multi-lock write
//      the writer held every member: one row per member, each committed under
//      the member's current tenure (the writer's, with that fence). Its
//      holds, grants and rows also join (1)-(5) for each member.
//  (9) fair lock (fwait/facq lines; the queue's audit): (a) no fair grant
//      while a live queue entry (its lease not over at the grant's decision
//      time) was ahead of the grantee's, in the server's order (enqueued_at,
//      owner_id); (b) a waiter that kept waiting (lock() in progress on the
//      client) from its entry's last renewal until the server dropped the
//      entry as lapsed lost its place only under a fault that can explain
//      it (check9 says which).
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
// control run, fence checks off): 0 only if stale writes WERE found (the
// checker can see them: rows of (3), (7) or (8)), 1 otherwise.
// --report-only: always 0 (prints losses).
// --expect-loss (the asynchronous HA control): 0 only if acknowledged writes
// or grants were lost or a fence was granted to two holders, 1 otherwise.
#include <dirent.h>

#include <pqxx/pqxx>

#include <algorithm>
#include <cinttypes>
#include <climits>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
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
    std::string owner;  // the contender that reported it ("": the worker's service or fair Locker of the mutex)
};
struct Ok {
    int w;
    std::string mutex;
    i64 fence, seq, send, recv, row_id, server_us;
    std::string owner;  // as Inv's
};
struct RwInv {  // a read-write hold a worker reported (rwinv)
    int w;
    std::string rwlock, mode;
    i64 fence, since_us, seq, before, after;
};
struct RwOk {
    int w;
    std::string rwlock, mode;
    i64 fence, seq, send, recv, row_id, server_us;
};
struct RwRow {
    i64 id;
    std::string rwlock, writer, mode;
    i64 fence;
    int worker;
    i64 seq, commit_us;
};
struct Audit {  // a change of a simba_rwlock_holder or simba_mutex_queue row, or a grant of a simba_mutex row
    i64 id;
    std::string tbl, op, name, owner, mode, old_mode;
    i64 fence, since_us, transition_us, renewed_us, old_fence, old_since_us, at_us, commit_us;
    std::string xid;
    i64 origin_us;  // the row's clock_origin
};
struct Wait {  // a fair Locker's lock() call, steady ns
    int w;
    std::string mutex;
    i64 start, end;
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
    std::string xid;  // its transaction (xmin)
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
    /// `kind`: one of an invariant's parts; each gets up to 3 examples.
    void add(const std::string& what, const std::string& kind = "") {
        auto& n = kinds_[kind];
        if (n < (kind.empty() ? 8 : 3)) examples_.push_back(kind.empty() ? what : kind + ": " + what);
        ++n;
        ++count_;
    }
    long count() const { return count_; }
    /// ", by part: kind n, ..." when the violations have parts.
    std::string parts() const {
        std::string out;
        for (auto& [k, n] : kinds_)
            if (!k.empty()) out += (out.empty() ? "; by part: " : ", ") + k + " " + std::to_string(n);
        return out;
    }
    void print_examples() const {
        for (auto& e : examples_) std::cout << "      " << name_ << ": " << e << "\n";
        if (count_ > static_cast<long>(examples_.size()))
            std::cout << "      " << name_ << ": ... " << count_ - static_cast<long>(examples_.size()) << " more\n";
    }

private:
    std::string name_;
    long count_ = 0;
    std::vector<std::string> examples_;
    std::map<std::string, long> kinds_;
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
        check7();
        check8();
        check9();
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
        // Holds reported by a worker's service or fair Locker: its id for the mutex.
        for (auto& s : invs_)
            if (s.owner.empty()) s.owner = ids_[{s.w, s.mutex}];
        for (auto& o : oks_)
            if (o.owner.empty()) o.owner = ids_[{o.w, o.mutex}];
        for (auto& a : acqs_)
            if (a.owner.empty()) a.owner = ids_[{a.w, a.mutex}];
        // A wait still open at the end of a worker's log lasted at least
        // until its last line (killed, or the log ends).
        for (auto& [k, start] : open_waits_) waits_.push_back({k.first, k.second, start, last_seen_[k.first]});
        open_waits_.clear();
    }

    void seen(int w, i64 steady) { last_seen_[w] = std::max(last_seen_[w], steady); }

    /// "m:f,m:f" -> (mutex, fence) pairs.
    static std::vector<std::pair<std::string, i64>> members(const std::string& field) {
        std::vector<std::pair<std::string, i64>> out;
        std::istringstream is(field);
        std::string one;
        while (std::getline(is, one, ',')) {
            auto colon = one.rfind(':');
            if (colon == std::string::npos) throw std::runtime_error("bad member " + one);
            out.push_back({one.substr(0, colon), num(one.substr(colon + 1))});
        }
        return out;
    }

    static std::vector<std::string> list(const std::string& field) {
        std::vector<std::string> out;
        std::istringstream is(field);
        std::string one;
        while (std::getline(is, one, ',')) out.push_back(one);
        return out;
    }

    void end_wait(int w, const std::string& m, i64 t) {
        auto it = open_waits_.find({w, m});
        if (it == open_waits_.end()) return;
        waits_.push_back({w, m, it->second, t});
        open_waits_.erase(it);
    }

    static i64 num(const std::string& s) { return std::stoll(s); }

    void parse(const std::string& line) {
        auto f = chaos::split(line);
        if (f.empty()) return;
        try {
            const std::string& t = f[0];
            if (t == "start" && f.size() >= 4) {
                ++processes_;
                pid_of_worker_[std::stoi(f[1])] = num(f[2]);
                seen(std::stoi(f[1]), num(f[3]));
            } else if (t == "stop" && f.size() >= 3) {
                seen(std::stoi(f[1]), num(f[2]));
            } else if (t == "id" && f.size() >= 4) {
                ids_[{std::stoi(f[1]), f[2]}] = f[3];
                worker_of_[f[3]] = std::stoi(f[1]);
            } else if (t == "acq" && f.size() >= 11) {
                acqs_.push_back({std::stoi(f[1]), f[2], num(f[3]), num(f[4]), num(f[5]), num(f[6]), num(f[7]),
                                 num(f[8]), num(f[9]), f[10]});
            } else if (t == "rel" && f.size() >= 5) {
                ++rels_;
            } else if (t == "inv" && f.size() >= 7) {
                invs_.push_back({std::stoi(f[1]), f[2], num(f[3]), num(f[4]), num(f[5]), num(f[6]), ""});
                ++writes_invoked_;
                seen(std::stoi(f[1]), num(f[6]));
            } else if (t == "ok" && f.size() >= 9) {
                oks_.push_back({std::stoi(f[1]), f[2], num(f[3]), num(f[4]), num(f[5]), num(f[6]), num(f[7]),
                                num(f[8]), ""});
                ++writes_ok_;
            } else if (t == "fail" && f.size() >= 6) {
                fails_.insert({std::stoi(f[1]), num(f[4])});
                ++fail_states_[f[5]];
            } else if (t == "unk" && f.size() >= 5) {
                unks_.insert({std::stoi(f[1]), num(f[4])});
            } else if (t == "lib") {
                ++lib_lines_;
            } else if (t == "rwid" && f.size() >= 4) {
                rw_ids_[{std::stoi(f[1]), f[2]}] = f[3];
                worker_of_[f[3]] = std::stoi(f[1]);
            } else if (t == "rwacq" && f.size() >= 7) {
                ++rw_holds_;
                if (f[3] == "write") ++rw_write_holds_;
            } else if (t == "rwdown" && f.size() >= 6) {
                ++rw_downgrades_;
            } else if (t == "rwinv" && f.size() >= 9) {
                rw_invs_.push_back({std::stoi(f[1]), f[2], f[3], num(f[4]), num(f[5]), num(f[6]), num(f[7]), num(f[8])});
                ++writes_invoked_;
                seen(std::stoi(f[1]), num(f[8]));
            } else if (t == "rwok" && f.size() >= 10) {
                rw_oks_.push_back({std::stoi(f[1]), f[2], f[3], num(f[4]), num(f[5]), num(f[6]), num(f[7]), num(f[8]),
                                   num(f[9])});
                ++writes_ok_;
            } else if (t == "rwfail" && f.size() >= 7) {
                fails_.insert({std::stoi(f[1]), num(f[5])});
                ++fail_states_[f[6]];
            } else if (t == "rwunk" && f.size() >= 6) {
                unks_.insert({std::stoi(f[1]), num(f[5])});
            } else if (t == "mid" && f.size() >= 4) {
                multi_members_[f[2]] = list(f[3]);
                worker_of_[f[2]] = std::stoi(f[1]);
                multi_id_of_[std::stoi(f[1])] = f[2];
            } else if (t == "macq" && f.size() >= 5) {
                const int w = std::stoi(f[1]);
                for (auto& [m, fence] : members(f[4]))
                    acqs_.push_back({w, m, fence, num(f[2]), 0, num(f[3]), 0, 0, num(f[3]), multi_id_of_[w]});
                ++multi_holds_;
                seen(w, num(f[2]));
            } else if (t == "minv" && f.size() >= 6) {
                const int w = std::stoi(f[1]);
                auto ms = members(f[5]);
                for (auto& [m, fence] : ms)
                    invs_.push_back({w, m, fence, num(f[2]), num(f[3]), num(f[4]), multi_id_of_[w]});
                minv_[{w, num(f[2])}] = ms;
                ++writes_invoked_;
                ++multi_invoked_;
                seen(w, num(f[4]));
            } else if (t == "mok" && f.size() >= 7) {
                const int w = std::stoi(f[1]);
                const i64 seq = num(f[2]);
                auto ids = list(f[5]);
                const auto& ms = minv_.at({w, seq});
                if (ids.size() != ms.size()) throw std::runtime_error("mok: rows and members differ");
                for (std::size_t i = 0; i < ids.size(); ++i)
                    oks_.push_back({w, ms[i].first, ms[i].second, seq, num(f[3]), num(f[4]), num(ids[i]), num(f[6]),
                                    multi_id_of_[w]});
                ++writes_ok_;
            } else if (t == "mfail" && f.size() >= 4) {
                fails_.insert({std::stoi(f[1]), num(f[2])});
                ++fail_states_[f[3]];
            } else if (t == "munk" && f.size() >= 3) {
                unks_.insert({std::stoi(f[1]), num(f[2])});
            } else if (t == "fwait" && f.size() >= 4) {
                const int w = std::stoi(f[1]);
                end_wait(w, f[2], num(f[3]));  // (a wait never ends without a line: defensive)
                open_waits_[{w, f[2]}] = num(f[3]);
                fair_mutexes_.insert(f[2]);
                ++fair_waits_;
                seen(w, num(f[3]));
            } else if (t == "facq" && f.size() >= 6) {
                const int w = std::stoi(f[1]);
                end_wait(w, f[2], num(f[5]));
                acqs_.push_back({w, f[2], num(f[3]), num(f[5]), 0, num(f[4]), 0, 0, num(f[4]), ""});
                ++fair_holds_;
                seen(w, num(f[5]));
            } else if (t == "fdone" && f.size() >= 4) {
                end_wait(std::stoi(f[1]), f[2], num(f[3]));
                seen(std::stoi(f[1]), num(f[3]));
            } else if (t == "fault" && f.size() >= 4) {
                std::string detail;
                for (std::size_t i = 4; i < f.size(); ++i) detail += (i > 4 ? " " : "") + f[i];
                faults_.push_back({f[1], num(f[2]), num(f[3]), detail});
            } else if (t == "healthy" && f.size() >= 2) {
                healthy_.push_back(num(f[1]));
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
        // The mutexes judged, and those the lockers' logs name (multi-lock
        // members, fair mutexes): (1)-(4) hold for every one.
        std::set<std::string> names(a_.mutexes.begin(), a_.mutexes.end());
        if (!a_.run_mutex.empty()) names.insert(a_.run_mutex);
        for (auto& [id, ms] : multi_members_) names.insert(ms.begin(), ms.end());
        names.insert(fair_mutexes_.begin(), fair_mutexes_.end());
        std::string list;
        for (auto& m : names) list += (list.empty() ? "" : ",") + tx.quote(m);
        auto h = tx.exec(
            "SELECT id, mutex, event, coalesce(owner_id, ''), fence,"
            " (extract(epoch FROM at) * 1000000)::int8,"
            " (extract(epoch FROM pg_xact_commit_timestamp(xmin)) * 1000000)::int8, xmin::text"
            " FROM simba_mutex_history WHERE mutex IN (" + list + ") ORDER BY id");
        for (const auto& r : h) {
            if (r[6].is_null()) throw std::runtime_error("history row without commit timestamp: track_commit_timestamp must be on");
            hist_.push_back({r[0].as<i64>(), r[1].as<std::string>(), r[2].as<std::string>(), r[3].as<std::string>(),
                             r[4].as<i64>(), r[5].as<i64>(), r[6].as<i64>(), r[7].as<std::string>()});
        }
        // The new primitives' record (test/chaos/setup.sql), where the run made it.
        if (tx.exec1("SELECT to_regclass('rw_ledger') IS NOT NULL")[0].as<bool>()) {
            for (const auto& r : tx.exec(
                     "SELECT id, rwlock, writer, mode, fence, worker, seq,"
                     " (extract(epoch FROM pg_xact_commit_timestamp(xmin)) * 1000000)::int8 FROM rw_ledger ORDER BY id")) {
                if (r[7].is_null()) throw std::runtime_error("rw_ledger row without commit timestamp");
                rw_rows_.push_back({r[0].as<i64>(), r[1].as<std::string>(), r[2].as<std::string>(), r[3].as<std::string>(),
                                    r[4].as<i64>(), r[5].as<int>(), r[6].as<i64>(), r[7].as<i64>()});
            }
        }
        if (tx.exec1("SELECT to_regclass('chaos_audit') IS NOT NULL")[0].as<bool>()) {
            // A row's values: the new row's, a DELETE's the old one's. Times in us, -1 for none.
            auto at = [](const std::string& e) {
                return "coalesce((extract(epoch FROM (" + e + ")::timestamptz) * 1000000)::int8, -1)";
            };
            const std::string row = "coalesce(a.new, a.old)";
            const std::string since = "CASE a.tbl WHEN 'simba_rwlock_holder' THEN 'acquired_at' ELSE 'enqueued_at' END";
            for (const auto& r : tx.exec(
                     "SELECT a.id, a.tbl::text, a.op, " + row +
                     " ->> CASE a.tbl WHEN 'simba_rwlock_holder' THEN 'rwlock' ELSE 'mutex' END, " + row +
                     " ->> 'owner_id', coalesce(" + row + " ->> 'mode', ''), coalesce(a.old ->> 'mode', ''),"
                     " coalesce((" + row + " ->> 'fence')::int8, -1), " + at(row + " ->> " + since) + ", " +
                     at(row + " ->> 'transition_at'") + ", " + at(row + " ->> 'renewed_at'") +
                     ", coalesce((a.old ->> 'fence')::int8, -1), " + at("a.old ->> " + since) + ", " + at("a.at") +
                     ", " + at("pg_xact_commit_timestamp(a.xmin)") + ", a.xmin::text, " + at(row + " ->> 'clock_origin'") +
                     " FROM chaos_audit AS a ORDER BY a.id")) {
                if (r[14].as<i64>() < 0) throw std::runtime_error("chaos_audit row without commit timestamp");
                audit_.push_back({r[0].as<i64>(), r[1].as<std::string>(), r[2].as<std::string>(), r[3].as<std::string>(),
                                  r[4].as<std::string>(), r[5].as<std::string>(), r[6].as<std::string>(), r[7].as<i64>(),
                                  r[8].as<i64>(), r[9].as<i64>(), r[10].as<i64>(), r[11].as<i64>(), r[12].as<i64>(),
                                  r[13].as<i64>(), r[14].as<i64>(), r[15].as<std::string>(), r[16].as<i64>()});
            }
            // Commit order; a transaction's own changes in the order it made them.
            std::stable_sort(audit_.begin(), audit_.end(), [](const Audit& x, const Audit& y) {
                return std::tie(x.commit_us, x.id) < std::tie(y.commit_us, y.id);
            });
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
        auto bracket = [&](i64 server_us, i64 send, i64 recv) {
            i64 s = server_us * 1000;
            off_lo_ = std::max(off_lo_, s - recv);
            off_hi_ = std::min(off_hi_, s - send + 1000);  // +1 us: server time is truncated to us
        };
        for (auto& o : oks_) bracket(o.server_us, o.send, o.recv);
        for (auto& o : rw_oks_) bracket(o.server_us, o.send, o.recv);
        if (oks_.empty() && rw_oks_.empty()) off_lo_ = off_hi_ = 0;
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
            const std::string& me = s.owner;
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
            const std::string& who = s.owner;
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
                                std::to_string(last),
                            "server");
                if (!seen.insert(e.fence).second)
                    v2_.add(m + ": fence " + std::to_string(e.fence) + " granted twice", "server");
                last = std::max(last, e.fence);
            }
        }
        // What the workers were told. A grant is decided after its
        // acquired_at (simba's clock is read before the row lock, so a grant
        // that waited through another's grant and release carries the earlier
        // acquired_at) and before its holder heard of it; fences follow the
        // decisions. So a larger fence heard of before a smaller one's
        // acquired_at means the fences went back.
        std::map<std::pair<std::string, i64>, i64> decided_after;  // (mutex, fence) -> the server's acquired_at
        for (auto& e : hist_)
            if (is_grant(e.event)) decided_after[{e.mutex, e.fence}] = e.at_us;
        std::map<std::string, std::vector<const Acq*>> by_mutex;
        for (auto& a : acqs_) by_mutex[a.mutex].push_back(&a);
        for (auto& [m, v] : by_mutex) {
            std::sort(v.begin(), v.end(), [](const Acq* x, const Acq* y) { return x->fence < y->fence; });
            std::map<i64, std::string> owner_of;
            for (auto* a : v) {
                auto [it, fresh] = owner_of.emplace(a->fence, a->owner);
                if (!fresh && it->second != a->owner) {
                    ++reissued_;
                    v2_.add(m + ": fence " + std::to_string(a->fence) + " was granted to both " + it->second + " and " +
                                a->owner + " (fence reissued)",
                            "reported");
                }
            }
            const Acq* first_heard = nullptr;  // of the larger fences, the one heard of first
            for (auto hi = v.rbegin(); hi != v.rend();) {
                auto lo = hi;  // [hi, lo): the reports of one fence
                while (lo != v.rend() && (*lo)->fence == (*hi)->fence) ++lo;
                const Acq* group_first = nullptr;
                for (auto i = hi; i != lo; ++i) {
                    const Acq& a = **i;
                    auto d = decided_after.find({m, a.fence});
                    const i64 after_us = d != decided_after.end() ? d->second : a.acquired_us;
                    if (first_heard && first_heard->steady_cb + off_hi_ < after_us * 1000)
                        v2_.add(m + ": " + first_heard->owner + " heard of fence " +
                                    std::to_string(first_heard->fence) + " " +
                                    ms(after_us * 1000 - first_heard->steady_cb - off_hi_) + " before " + a.owner +
                                    "'s fence " + std::to_string(a.fence) + " was decided",
                                "reported");
                    if (!group_first || a.steady_cb < group_first->steady_cb) group_first = &a;
                }
                if (!first_heard || group_first->steady_cb < first_heard->steady_cb) first_heard = group_first;
                hi = lo;
            }
        }
    }

    // The tenure of `mutex` current at commit time `commit_us`: the last
    // grant committed strictly before it (nullptr: none), and whether its
    // release committed before it too.
    const Hist* tenure_at(const std::string& mutex, i64 commit_us, bool& released) {
        released = false;
        auto it = timeline_.find(mutex);
        if (it == timeline_.end()) return nullptr;
        const auto& v = it->second;
        const auto& st = state_after(mutex);
        auto pos = std::lower_bound(v.begin(), v.end(), commit_us, [](const Hist& e, i64 t) { return e.commit_us < t; });
        if (pos == v.begin()) return nullptr;
        auto& s = st[static_cast<std::size_t>(pos - v.begin() - 1)];
        released = s.second;
        return s.first >= 0 ? &v[static_cast<std::size_t>(s.first)] : nullptr;
    }

    // Whether `r` committed under its (writer, fence) tenure; else `now`
    // says what the tenure was.
    bool under_tenure(const Row& r, std::string& now) {
        bool released;
        const Hist* cur = tenure_at(r.mutex, r.commit_us, released);
        if (cur && !released && cur->fence == r.fence && cur->owner == r.writer) return true;
        now = !cur ? "no tenure" : released ? "tenure " + std::to_string(cur->fence) + " released"
                                            : "fence " + std::to_string(cur->fence) + " of " + cur->owner;
        return false;
    }

    void check3() {
        std::set<std::pair<int, i64>> unknown_committed;
        for (auto& r : rows_) {
            std::string now;
            if (!under_tenure(r, now)) {
                ++stale_rows_;
                v3_.add("ledger row " + std::to_string(r.id) + " (" + r.mutex + ", writer " + r.writer + ", fence " +
                        std::to_string(r.fence) + ") committed while the current tenure was " + now);
            }
            if (fails_.count({r.worker, r.seq}))
                v3_.add("ledger row " + std::to_string(r.id) + " was written by a write its worker saw fail (worker " +
                        std::to_string(r.worker) + " seq " + std::to_string(r.seq) + ")");
            if (unks_.count({r.worker, r.seq})) unknown_committed.insert({r.worker, r.seq});
        }
        for (auto& r : rw_rows_)
            if (unks_.count({r.worker, r.seq})) unknown_committed.insert({r.worker, r.seq});
        unknown_committed_ = static_cast<long>(unknown_committed.size());
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
            const std::string& me = o.owner;
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
        // The fair lock and the read-write lock too (a multi-lock's members
        // are mutexes above): a waiter stuck for good would show here.
        mutexes.insert(mutexes.end(), fair_mutexes_.begin(), fair_mutexes_.end());
        std::set<std::string> rwlocks;
        for (auto& [k, id] : rw_ids_) rwlocks.insert(k.second);
        mutexes.insert(mutexes.end(), rwlocks.begin(), rwlocks.end());
        for (auto& s : rw_invs_) obs[s.rwlock].push_back({s.before, s.after});
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

    // ------------------------------------------------------ read-write lock
    struct RwRowNow {  // a holder row as it stands
        std::string mode;
        i64 fence, since_us;
    };
    using RwTable = std::map<std::string, RwRowNow>;  // holder -> row
    struct RwHold {                                   // one hold on the server: (rwlock, holder, acquired_at)
        i64 fence = 0;                                // a writer's own, or the epoch a reader reads under
        bool wrote = false;                           // it was a write hold (downgraded since, maybe)
        i64 write_end = LLONG_MAX;                    // server us: no longer a write hold (downgrade, end)
        i64 end = LLONG_MAX;                          // server us: its row deleted, or replaced by another hold
    };

    static bool holds(const std::string& mode) { return mode == "read" || mode == "write"; }

    static void apply(RwTable& t, const Audit& e) {
        if (e.op == "DELETE") t.erase(e.owner);
        else t[e.owner] = {e.mode, e.fence, e.since_us};
    }

    static std::string stamp(i64 us) {  // server time, UTC, for examples
        std::time_t s = static_cast<std::time_t>(us / 1000000);
        std::tm tm{};
        ::gmtime_r(&s, &tm);
        char b[48];
        std::snprintf(b, sizeof b, "%02d:%02d:%02d.%06lld", tm.tm_hour, tm.tm_min, tm.tm_sec,
                      static_cast<long long>(us % 1000000));
        return b;
    }

    void end_hold(const std::string& lock, const std::string& owner, i64 since, i64 at, bool write) {
        auto& h = rw_holds_server_[{lock, owner, since}];
        h.end = std::min(h.end, at);
        if (write) h.write_end = std::min(h.write_end, at);
    }

    void check7() {
        std::map<std::string, std::vector<const Audit*>> by_lock;
        for (auto& e : audit_)
            if (e.tbl == "simba_rwlock_holder") by_lock[e.name].push_back(&e);
        std::map<std::string, std::vector<std::pair<i64, i64>>> epochs;  // lock -> (commit, writer's fence)
        // (a) the server's record alone: replayed in commit order, checked
        // after each commit instant (transactions of one instant together:
        // their order among themselves is unknown).
        for (auto& [lock, ev] : by_lock) {
            RwTable t;
            i64 last = 0;
            std::set<i64> granted;
            for (std::size_t i = 0; i < ev.size(); ++i) {
                const Audit& e = *ev[i];
                if (e.op == "DELETE") {
                    if (holds(e.mode)) end_hold(lock, e.owner, e.since_us, e.at_us, e.mode == "write");
                } else {
                    if (e.op == "UPDATE" && holds(e.old_mode)) {
                        if (!holds(e.mode) || e.old_since_us != e.since_us)
                            end_hold(lock, e.owner, e.old_since_us, e.at_us, e.old_mode == "write");
                        else if (e.old_mode == "write" && e.mode == "read")  // a downgrade: the same hold reads on
                            rw_holds_server_[{lock, e.owner, e.since_us}].write_end = e.at_us;
                    }
                    if (holds(e.mode)) {
                        auto& h = rw_holds_server_[{lock, e.owner, e.since_us}];
                        h.fence = e.fence;
                        if (e.mode == "write") {
                            h.wrote = true;
                            const bool renewal = e.op == "UPDATE" && e.old_mode == "write" && e.old_fence == e.fence &&
                                                 e.old_since_us == e.since_us;
                            if (!renewal) {
                                ++rw_write_grants_;
                                if (e.fence <= last)
                                    v7_.add(lock + ": writer " + e.owner + " granted fence " + std::to_string(e.fence) +
                                                " after fence " + std::to_string(last),
                                            "record");
                                if (!granted.insert(e.fence).second)
                                    v7_.add(lock + ": write fence " + std::to_string(e.fence) + " granted twice",
                                            "record");
                                last = std::max(last, e.fence);
                                epochs[lock].push_back({e.commit_us, e.fence});
                            }
                        }
                    }
                }
                apply(t, e);
                if (i + 1 < ev.size() && ev[i + 1]->commit_us == e.commit_us) continue;
                std::string writer, others;
                int n = 0;
                for (auto& [o, r] : t) {
                    if (r.mode == "write" && writer.empty()) writer = o;
                    else if (holds(r.mode)) others += (n++ ? ", " : "") + o + " (" + r.mode + ")";
                }
                if (!writer.empty() && n > 0)
                    v7_.add(lock + ": at the commit of " + stamp(e.commit_us) + " the server's holder rows show " +
                                writer + " writing beside " + others,
                            "record");
            }
        }
        rw_server_holds_ = static_cast<long>(rw_holds_server_.size());
        auto epoch = [&](const std::string& lock, i64 commit, bool inclusive) -> i64 {
            auto it = epochs.find(lock);
            if (it == epochs.end()) return 0;
            i64 f = 0;
            for (auto& [c, fence] : it->second) {  // fences grow with commit order (checked above)
                if (c > commit || (c == commit && !inclusive)) break;
                f = fence;
            }
            return f;
        };
        // (b) every rw_ledger row, against the holder rows as they stood at
        // its commit. Its fence check held every grant off until it
        // committed, so only a session's close (a delete) can share its
        // instant: a row is stale only if it is in both readings, the
        // changes of that instant before it and after it.
        std::vector<const RwRow*> rows;
        for (auto& r : rw_rows_) rows.push_back(&r);
        std::stable_sort(rows.begin(), rows.end(),
                         [](const RwRow* x, const RwRow* y) { return x->commit_us < y->commit_us; });
        std::map<std::string, std::pair<RwTable, std::size_t>> at;  // lock -> (rows before, next event)
        for (const RwRow* r : rows) {
            auto& [t, next] = at[r->rwlock];
            const auto& ev = by_lock[r->rwlock];
            while (next < ev.size() && ev[next]->commit_us < r->commit_us) apply(t, *ev[next++]);
            RwTable through = t;
            for (std::size_t j = next; j < ev.size() && ev[j]->commit_us == r->commit_us; ++j) apply(through, *ev[j]);
            auto judge = [&](const RwTable& tt, i64 ep, std::string& why) {
                auto add = [&](const std::string& s) { why += (why.empty() ? "" : "; ") + s; };
                auto me = tt.find(r->writer);
                if (me == tt.end() || !holds(me->second.mode)) add("its writer held nothing");
                else if (me->second.mode != r->mode || me->second.fence != r->fence)
                    add("its writer held it for " + me->second.mode + " with fence " + std::to_string(me->second.fence));
                for (auto& [o, x] : tt)
                    if (o != r->writer && (x.mode == "write" || (r->mode == "write" && x.mode == "read")))
                        add(o + " held it for " + x.mode + " (fence " + std::to_string(x.fence) + ")");
                if (r->fence != ep) add("the write epoch was " + std::to_string(ep));
                return why.empty();
            };
            std::string why, why2;
            if (!judge(t, epoch(r->rwlock, r->commit_us, false), why) &&
                !judge(through, epoch(r->rwlock, r->commit_us, true), why2)) {
                ++rw_stale_;
                v7_.add("rw_ledger row " + std::to_string(r->id) + " (" + r->rwlock + ", " + r->mode + ", writer " +
                            r->writer + ", fence " + std::to_string(r->fence) + ") committed while " + why,
                        "rows");
            }
            if (fails_.count({r->worker, r->seq}))
                v7_.add("rw_ledger row " + std::to_string(r->id) + " was written by a write its worker saw fail (worker " +
                            std::to_string(r->worker) + " seq " + std::to_string(r->seq) + ")",
                        "rows");
        }
        // (c) the holds the workers reported: against the server's record,
        // and writers against everyone else on the steady clock alone.
        struct Span {
            i64 first_after = LLONG_MAX, last_before = LLONG_MIN;
        };
        std::map<std::tuple<std::string, std::string, i64, std::string>, Span> spans;  // (lock, holder, since, mode)
        for (auto& s : rw_invs_) {
            const std::string& me = rw_ids_[{s.w, s.rwlock}];
            const std::string who = "worker " + std::to_string(s.w) + " (" + me + ")";
            auto it = rw_holds_server_.find({s.rwlock, me, s.since_us});
            if (it == rw_holds_server_.end()) {
                v7_.add(who + " reported a " + s.mode + " hold of " + s.rwlock + " acquired at " + stamp(s.since_us) +
                            " that the server never granted (seq " + std::to_string(s.seq) + ")",
                        "reports");
                continue;
            }
            const RwHold& h = it->second;
            if (h.fence != s.fence || (s.mode == "write" && !h.wrote))
                v7_.add(who + " reported " + s.rwlock + " held for " + s.mode + " with fence " + std::to_string(s.fence) +
                            ", a hold the server granted " + (h.wrote ? "for writing" : "for reading") + " with fence " +
                            std::to_string(h.fence),
                        "reports");
            const i64 end = s.mode == "write" ? h.write_end : h.end;
            if (end != LLONG_MAX && s.before + off_lo_ >= end * 1000)
                v7_.add(who + " reported " + s.rwlock + " held for " + s.mode + " " +
                            ms(s.before + off_lo_ - end * 1000) + " after the server ended that (seq " +
                            std::to_string(s.seq) + ")",
                        "reports");
            auto& sp = spans[{s.rwlock, me, s.since_us, s.mode}];
            sp.first_after = std::min(sp.first_after, s.after);
            sp.last_before = std::max(sp.last_before, s.before);
            ++rw_claims_checked_;
        }
        std::vector<std::pair<const std::tuple<std::string, std::string, i64, std::string>*, const Span*>> order;
        for (auto& [k, sp] : spans) order.push_back({&k, &sp});
        std::sort(order.begin(), order.end(), [](auto& x, auto& y) { return x.second->first_after < y.second->first_after; });
        for (std::size_t i = 0; i < order.size(); ++i) {
            const auto& [lock, owner, since, mode] = *order[i].first;
            if (mode != "write") continue;
            const Span& w = *order[i].second;
            for (std::size_t j = 0; j < order.size(); ++j) {
                const auto& [k, sp] = order[j];
                if (sp->first_after >= w.last_before) break;  // began after the writer's last observation
                const auto& [lock2, owner2, since2, mode2] = *k;
                if (lock2 != lock || (owner2 == owner && since2 == since)) continue;
                if (mode2 == "write" && j < i) continue;  // that writer's pass found it
                const i64 overlap = std::min(w.last_before, sp->last_before) - std::max(w.first_after, sp->first_after);
                if (overlap > 0)
                    v7_.add(lock + ": " + owner + " was seen writing while " + owner2 + " was seen holding it for " +
                                mode2 + ", for " + ms(overlap),
                            "overlaps");
            }
        }
        rw_spans_ = static_cast<long>(spans.size());
    }

    // ---------------------------------------------------------- multi-lock
    void check8() {
        std::map<std::pair<int, i64>, std::vector<const Row*>> writes;  // (worker, seq) -> its rows
        for (auto& r : rows_)
            if (multi_members_.count(r.writer)) writes[{r.worker, r.seq}].push_back(&r);
        for (auto& [k, rs] : writes) {
            const std::string& writer = rs.front()->writer;
            const auto& want = multi_members_.at(writer);
            std::set<std::string> got;
            std::string missing;
            for (const Row* r : rs) {
                got.insert(r->mutex);
                std::string now;
                if (!under_tenure(*r, now))
                    missing += std::string(missing.empty() ? "" : "; ") + r->mutex + " (fence " + std::to_string(r->fence) +
                               ", current: " + now + ")";
            }
            const std::string what = "multi-lock write of " + writer + " (worker " + std::to_string(k.first) + " seq " +
                                     std::to_string(k.second) + ")";
            if (got != std::set<std::string>(want.begin(), want.end()) || rs.size() != want.size())
                v8_.add(what + " committed " + std::to_string(rs.size()) + " rows, not one per member");
            if (!missing.empty()) {
                ++multi_stale_;
                v8_.add(what + " committed without holding " + missing);
            }
            ++multi_writes_judged_;
            multi_rows_ += static_cast<long>(rs.size());
        }
    }

    // ------------------------------------------------------------ fair lock
    struct Entry {  // a queue entry as it stands
        i64 enqueued_us, renewed_us, transition_us, origin_us;
        // Its lease end on the clock of `origin` (SIMBA_LEASE_END): a row
        // of another clock counts again in full from `origin`.
        i64 end(i64 origin) const {
            return origin_us == origin ? transition_us : origin + (transition_us - renewed_us);
        }
    };

    // (a) At each grant of a fair mutex: the queue as committed before it
    // (a withdrawal committed at the same instant counts as before: it
    // cannot invent a violation), judged at the grant's decision time (its
    // acquired_at, simba's clock read before the call's row lock) on the
    // grant's clock (its row's clock_origin), as the server judges entries:
    // live while that time is before its lease end. An entry counts once
    // it was surely visible to the grant: a commit timestamp is taken
    // before a synchronous standby's acknowledgement, the row becomes
    // visible after it, so an entry's version counts only if a later
    // statement on it (its waiter's next call, or another's delete) began
    // before the decision; else the version before it, if that one is so
    // proven. The grantee's place is its live entry's, or the grant's own
    // time.
    // (b) An entry dropped as lapsed (deleted at or after its
    // transition_at, not in a transaction that granted the mutex to its
    // owner) is judged if its waiter's lock() was in progress from before
    // the entry's last renewal until after the delete: that waiter was alive
    // and asking, unless a fault explains the silence. A fault explains it
    // if it overlaps [last renewal - 1 s, delete] (its end + 3 s: reconnects;
    // its end is its heal, or on an HA cluster when the cluster was next
    // found healthy: over())
    // and is not a kill (a killed process's backends end with it, releasing
    // any lock the others wait on; the waiter's own death ends its wait) or
    // a LISTEN kill (a waiter polls every half ttl without its NOTIFY).
    void check9() {
        for (auto& m : fair_mutexes_) {
            auto tl = timeline_.find(m);
            if (tl == timeline_.end()) continue;
            std::vector<const Audit*> ev;  // the queue's changes
            std::map<i64, i64> origin_of;  // fence -> the grant's clock origin
            for (auto& e : audit_) {
                if (e.name != m) continue;
                if (e.tbl == "simba_mutex_queue") ev.push_back(&e);
                else if (e.tbl == "simba_mutex") origin_of[e.fence] = e.origin_us;
            }
            std::set<std::pair<std::string, std::string>> granted_in;  // (transaction, owner)
            // When the statement of each change began at the latest: a
            // renewal's call time, a delete's trigger time. The next change
            // of the same entry proves the one before it visible from then.
            std::vector<i64> proven_from(ev.size(), LLONG_MAX);
            std::map<std::string, std::size_t> last;
            for (std::size_t i = 0; i < ev.size(); ++i) {
                const Audit& e = *ev[i];
                auto l = last.find(e.owner);
                if (l != last.end()) proven_from[l->second] = e.op == "UPDATE" ? e.renewed_us : e.at_us;
                last[e.owner] = i;
            }
            struct Version {
                Entry entry;
                std::size_t at;                // its change in ev
                std::optional<Entry> before;  // the version it renewed
            };
            std::map<std::string, Version> q;
            std::size_t next = 0;
            for (auto& g : tl->second) {
                if (!is_grant(g.event)) continue;
                granted_in.insert({g.xid, g.owner});
                while (next < ev.size() && ev[next]->commit_us < g.commit_us) {
                    const Audit& e = *ev[next];
                    const Entry entry{e.since_us, e.renewed_us, e.transition_us, e.origin_us};
                    if (e.op == "DELETE") q.erase(e.owner);
                    else if (auto v = q.find(e.owner); v != q.end() && e.op == "UPDATE")
                        v->second = {entry, next, v->second.entry};
                    else q[e.owner] = {entry, next, std::nullopt};
                    ++next;
                }
                auto origin = origin_of.find(g.fence);
                if (origin == origin_of.end()) {  // (never: every grant is audited)
                    ++fair_grants_unjudged_;
                    continue;
                }
                auto s = q;
                for (std::size_t j = next; j < ev.size() && ev[j]->commit_us == g.commit_us; ++j)
                    if (ev[j]->xid != g.xid && ev[j]->op == "DELETE") s.erase(ev[j]->owner);
                i64 place = g.at_us;
                auto me = s.find(g.owner);
                if (me != s.end() && me->second.entry.end(origin->second) > g.at_us) place = me->second.entry.enqueued_us;
                for (auto& [o, v] : s) {
                    if (o == g.owner) continue;
                    const Entry* e = proven_from[v.at] <= g.at_us ? &v.entry
                                     : v.before && ev[v.at]->renewed_us <= g.at_us ? &*v.before
                                                                                  : nullptr;
                    if (!e) {
                        ++fair_entries_unseen_;
                        continue;
                    }
                    const i64 end = e->end(origin->second);
                    if (end <= g.at_us || e->enqueued_us >= place) continue;
                    v9_.add(m + ": fence " + std::to_string(g.fence) + " granted to " + g.owner + " at " + stamp(g.at_us) +
                                " (its place " + stamp(place) + ") while " + o + ", queued since " + stamp(e->enqueued_us) +
                                ", was live until " + stamp(end),
                            "order");
                    ++fair_jumped_;
                }
                ++fair_grants_judged_;
            }
            for (const Audit* e : ev) {
                if (e->op != "DELETE") continue;
                if (e->at_us < e->transition_us) continue;              // deleted live: its turn, or withdrawn
                if (granted_in.count({e->xid, e->owner})) continue;     // dropped as its owner took the mutex
                ++fair_lapses_;
                judge_lapse(m, *e);
            }
        }
    }

    /// When fault f's effects were over: its heal, or on an HA cluster the
    /// first time after it the cluster was found healthy (a failover the
    /// manager began in reaction may come after the heal).
    i64 over(const Fault& f) const {
        auto h = std::lower_bound(healthy_.begin(), healthy_.end(), f.heal);
        return h == healthy_.end() ? f.heal : *h;
    }

    void judge_lapse(const std::string& m, const Audit& e) {
        auto wi = worker_of_.find(e.owner);
        if (wi == worker_of_.end()) return ++fair_lapse_unwaited_, void();
        const int w = wi->second;
        // Steady bounds of the server times (offset in [off_lo_, off_hi_]).
        const i64 renewed = e.renewed_us * 1000 - off_hi_;  // at the latest this early
        const i64 deleted = e.at_us * 1000 - off_lo_;       // at the earliest this late
        bool waiting = false;
        for (auto& wt : waits_)
            if (wt.w == w && wt.mutex == m && wt.start < renewed && wt.end > deleted) waiting = true;
        if (!waiting) return ++fair_lapse_unwaited_, void();
        for (auto& f : faults_) {
            if (f.kind == "kill" || f.kind == "listen") continue;
            if (f.start <= deleted && over(f) + 3000000000LL >= renewed - 1000000000LL)
                return ++fair_lapse_excused_, void();
        }
        ++fair_lapse_judged_;
        v9_.add(m + ": " + e.owner + " (worker " + std::to_string(w) + ") lost its place, queued since " +
                    stamp(e.since_us) + ": no renewal after " + stamp(e.renewed_us) + ", dropped at " + stamp(e.at_us) +
                    ", while its lock() waited and no fault explains it",
                "place");
    }

    int report() {
        std::map<std::string, int> by_kind;
        for (auto& f : faults_) ++by_kind[f.kind];
        std::cout << "\n==== simba " << a_.label << " report ====\n";
        if (run_end_ > run_start_)
            std::cout << "  run:         " << ms(run_end_ - run_start_) << ", " << processes_ << " worker processes, "
                      << a_.mutexes.size() << " mutexes\n";
        std::cout << "  operations:  " << writes_invoked_ << " ledger writes invoked: " << writes_ok_ << " ok, "
                  << fails_.size() << " failed, " << unks_.size() << " unknown (" << unknown_committed_
                  << " of them committed); " << acqs_.size() - re_reported_ << " grants (+" << re_reported_
                  << " re-reported after a deadline release) and " << rels_ << " releases reported to workers\n";
        if (!rw_ids_.empty() || !multi_members_.empty() || !fair_mutexes_.empty())
            std::cout << "  lockers:     read-write " << rw_holds_ << " holds (" << rw_write_holds_ << " writing, "
                      << rw_downgrades_ << " downgraded), " << rw_invs_.size() << " writes; multi-lock "
                      << multi_holds_ << " holds, " << multi_invoked_ << " writes; fair " << fair_holds_
                      << " holds after " << fair_waits_ << " waits\n";
        std::cout << "  failures:   ";
        for (auto& [s, n] : fail_states_) std::cout << " " << s << "=" << n;
        std::cout << (fail_states_.empty() ? " none" : "") << "; client-library warnings/errors logged: " << lib_lines_
                  << "\n";
        std::cout << "  server:      " << server_grants_ << " grants in simba_mutex_history (simba.history="
                  << history_on_ << "), " << rows_.size() << " ledger rows, " << rw_rows_.size() << " rw_ledger rows, "
                  << audit_.size() << " audited changes of holder and queue rows\n";
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
            std::string e = extra;
            if (!v.parts().empty() && !e.empty() && e.back() == ')') e.insert(e.size() - 1, v.parts());
            std::cout << "  " << name << v.count() << " violations" << e << "\n";
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
             " (" + std::to_string(writes_ok_) + " acknowledged writes, " + std::to_string(acqs_.size() - re_reported_) +
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
        if (!rw_ids_.empty())
            line("(7) read-write lock:             ", v7_,
                 " (" + std::to_string(rw_rows_.size()) + " rw_ledger rows, stale: " + std::to_string(rw_stale_) + "; " +
                     std::to_string(rw_write_grants_) + " write grants, " + std::to_string(rw_server_holds_) +
                     " holds on the server; " + std::to_string(rw_claims_checked_) + " observations of " +
                     std::to_string(rw_spans_) + " reported holds)");
        if (!multi_members_.empty())
            line("(8) multi-lock, every member:    ", v8_,
                 " (" + std::to_string(multi_writes_judged_) + " multi-lock writes of " + std::to_string(multi_rows_) +
                     " rows; without every member: " + std::to_string(multi_stale_) + ")");
        if (!fair_mutexes_.empty())
            line("(9) fair, in arrival order:      ", v9_,
                 " (" + std::to_string(fair_grants_judged_) + " grants judged against the live entries ahead, " +
                     std::to_string(fair_jumped_) + " jumped, " + std::to_string(fair_entries_unseen_) +
                     " entries not yet surely visible at a grant" +
                     (fair_grants_unjudged_ ? ", " + std::to_string(fair_grants_unjudged_) + " without a clock" : "") +
                     "; " + std::to_string(fair_lapses_) + " places lapsed: " +
                     std::to_string(fair_lapse_judged_) + " while their waiter waited and no fault explains it, " +
                     std::to_string(fair_lapse_excused_) + " under a fault, " + std::to_string(fair_lapse_unwaited_) +
                     " with no waiter waiting)");
        for (auto& e : nemesis_errors_) std::cout << "  nemesis error: " << e << "\n";
        if (id_order_differs_) std::cout << "  note: history ids and commit order differ on " << id_order_differs_ << " mutexes\n";
        long violations = v1_.count() + v2_.count() + v3_.count() + v4_.count() + v5_.count() + v6_.count() +
                          v7_.count() + v8_.count() + v9_.count();
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
            const long stale = stale_rows_ + rw_stale_;
            bool seen = stale > 0;
            std::cout << "  RESULT: " << (seen ? "PASS" : "FAIL") << " (control run: stale writes "
                      << (seen ? "detected: " + std::to_string(stale) + " (" + std::to_string(stale_rows_) +
                                     " ledger rows, " + std::to_string(multi_stale_) + " multi-lock writes among them; " +
                                     std::to_string(rw_stale_) + " rw_ledger rows)"
                               : "NOT detected")
                      << ")\n";
            rc = seen ? 0 : 1;
        } else {
            // A workload that ran must have given its checks something to judge.
            std::string idle;
            if (!rw_ids_.empty() && (rw_rows_.empty() || rw_write_grants_ == 0)) idle += " read-write";
            if (!multi_members_.empty() && multi_writes_judged_ == 0) idle += " multi-lock";
            if (!fair_mutexes_.empty() && fair_grants_judged_ == 0) idle += " fair";
            if (!idle.empty()) std::cout << "  nothing to judge for:" << idle << "\n";
            bool bad = violations > 0 || !nemesis_errors_.empty() || invs_.empty() || writes_ok_ == 0 ||
                       (!a_.run_mutex.empty() && cmds_judged_ == 0) || !idle.empty();
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
    std::vector<i64> healthy_;  // when an HA cluster was found healthy again, in order
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
    // The new primitives' lockers.
    long writes_invoked_ = 0, writes_ok_ = 0;
    std::map<int, i64> pid_of_worker_, last_seen_;
    std::map<std::pair<int, std::string>, std::string> rw_ids_;
    std::vector<RwInv> rw_invs_;
    std::vector<RwOk> rw_oks_;
    std::vector<RwRow> rw_rows_;
    std::vector<Audit> audit_;
    std::map<std::tuple<std::string, std::string, i64>, RwHold> rw_holds_server_;
    long rw_holds_ = 0, rw_write_holds_ = 0, rw_downgrades_ = 0, rw_write_grants_ = 0, rw_server_holds_ = 0;
    long rw_stale_ = 0, rw_claims_checked_ = 0, rw_spans_ = 0;
    std::map<std::string, std::vector<std::string>> multi_members_;  // multi-lock id -> members
    std::map<int, std::string> multi_id_of_;
    std::map<std::pair<int, i64>, std::vector<std::pair<std::string, i64>>> minv_;  // (worker, seq) -> members
    long multi_holds_ = 0, multi_invoked_ = 0, multi_writes_judged_ = 0, multi_rows_ = 0, multi_stale_ = 0;
    std::set<std::string> fair_mutexes_;
    std::map<std::pair<int, std::string>, i64> open_waits_;
    std::vector<Wait> waits_;
    long fair_waits_ = 0, fair_holds_ = 0, fair_grants_judged_ = 0, fair_jumped_ = 0, fair_lapses_ = 0;
    long fair_lapse_judged_ = 0, fair_lapse_excused_ = 0, fair_lapse_unwaited_ = 0, fair_grants_unjudged_ = 0;
    long fair_entries_unseen_ = 0;
    Violations v7_{"(7)"}, v8_{"(8)"}, v9_{"(9)"};
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
