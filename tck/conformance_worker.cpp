// The C++ client's worker for the conformance suite: the line protocol of
// tck/conformance/README.md on stdin/stdout, over one factory (sessions on),
// a simba::Locker per lock name, a simba::SharedLocker per read-write lock,
// a simba::MultiLocker per set of names, a simba::Semaphore's permits and a
// leader service (a simba::MutexContendService) per election.
//
//   simba_tck_conformance_worker --conninfo CONNINFO [--listen-conninfo CONNINFO]
//                                [--ttl-ms N] [--transition-ms N]
#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "simba/simba.hpp"

namespace {

std::mutex g_out;  // replies (main thread) and events (the factory's handle thread)

void say(const std::string& line) {
    std::lock_guard<std::mutex> lock(g_out);
    std::cout << line << '\n' << std::flush;
}

std::string one_line(std::string s) {
    for (auto& c : s)
        if (c == '\n' || c == '\r') c = ' ';
    return s;
}

}  // namespace

int main(int argc, char** argv) {
    std::string conninfo, listen_conninfo;
    long ttl_ms = 2000, transition_ms = 1000;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i], v = argv[i + 1];
        if (k == "--conninfo") conninfo = v;
        else if (k == "--listen-conninfo") listen_conninfo = v;
        else if (k == "--ttl-ms") ttl_ms = std::stol(v);
        else if (k == "--transition-ms") transition_ms = std::stol(v);
        else {
            std::cerr << "conformance worker: unknown argument " << k << '\n';
            return 2;
        }
    }
    simba::pg::FactoryOptions fo;
    fo.reconnect_initial = std::chrono::milliseconds(50);
    fo.reconnect_max = std::chrono::milliseconds(500);
    if (!listen_conninfo.empty()) {  // statements through a transaction pooler, LISTEN direct
        fo.pooled = true;
        fo.listen_conninfo = listen_conninfo;
    }
    simba::pg::ContendServiceFactory factory(conninfo, fo);
    simba::ContendOptions lease;
    lease.ttl = std::chrono::milliseconds(ttl_ms);
    lease.transition = std::chrono::milliseconds(transition_ms);
    std::map<std::string, std::unique_ptr<simba::Locker>> locks;
    // A name's Locker is made by its first lock command, fair or not.
    auto locker = [&](const std::string& name, bool fair = false) -> simba::Locker& {
        auto& l = locks[name];
        if (!l) {
            simba::ContendOptions options = lease;
            options.fair = fair;
            l = std::make_unique<simba::Locker>(factory, name, simba::ContenderId::host(), options);
            simba::Locker* raw = l.get();
            raw->on_lost([name, raw] { say("event lost " + name); });
        }
        return *l;
    };
    // A read-write lock's SharedLocker and the mode held ("read", "write", "").
    std::map<std::string, std::pair<std::unique_ptr<simba::SharedLocker>, std::string>> rwlocks;
    auto shared_locker = [&](const std::string& name) -> auto& {
        auto& l = rwlocks[name];
        if (!l.first) {
            l.first = std::make_unique<simba::SharedLocker>(factory, name, simba::ContenderId::host(), lease);
            l.first->on_lost([name] { say("event lost " + name); });
        }
        return l;
    };
    // A set's MultiLocker, by the comma-separated names it was asked with.
    std::map<std::string, std::unique_ptr<simba::MultiLocker>> multis;
    auto multi_locker = [&](const std::string& names) -> simba::MultiLocker& {
        auto& l = multis[names];
        if (!l) {
            std::vector<std::string> members;
            std::istringstream list(names);
            for (std::string m; std::getline(list, m, ',');) members.push_back(m);
            l = std::make_unique<simba::MultiLocker>(factory, members, simba::ContenderId::host(), lease);
            l->on_lost([names] { say("event lost " + names); });
        }
        return *l;
    };
    simba::Semaphore semaphore(factory);
    std::map<std::string, std::optional<simba::Permit>> permits;  // declared after the semaphore: released first
    // An election's leader service: it campaigns until `resign` stops it, and
    // again after a lost leadership; `resigning` keeps stop()'s on_released
    // from being reported as a loss.
    struct Campaign {
        std::shared_ptr<std::atomic<bool>> resigning = std::make_shared<std::atomic<bool>>(false);
        std::unique_ptr<simba::MutexContendService> service;
        void resign() {
            *resigning = true;
            service->stop();
        }
    };
    std::map<std::string, Campaign> campaigns;
    say("ready c++");

    std::string line;
    while (std::getline(std::cin, line)) {
        std::istringstream in(line);
        std::string cmd, name;
        in >> cmd >> name;
        try {
            if (cmd == "lock") {
                long timeout_ms = 0;
                std::string mode;
                in >> timeout_ms >> mode;
                auto& l = locker(name, mode == "fair");
                if (l.try_lock_for(std::chrono::milliseconds(timeout_ms))) say("ok acquired " + std::to_string(l.fence()));
                else say("ok timeout");
            } else if (cmd == "unlock") {
                locker(name).unlock();
                say("ok released");
            } else if (cmd == "lease") {
                const auto held = locker(name).lease();
                say(held ? "ok held " + std::to_string(held->fence) : "ok none");
            } else if (cmd == "rwlock") {
                std::string mode;
                long timeout_ms = 0;
                in >> mode >> timeout_ms;
                auto& [l, held] = shared_locker(name);
                const auto timeout = std::chrono::milliseconds(timeout_ms);
                if (mode != "read" && mode != "write") {
                    say("err 22023 mode must be read or write");
                } else if (mode == "read" ? l->try_lock_shared_for(timeout) : l->try_lock_for(timeout)) {
                    held = mode;
                    say("ok acquired " + std::to_string(l->fence()));
                } else {
                    say("ok timeout");
                }
            } else if (cmd == "rwunlock") {
                auto& [l, held] = shared_locker(name);
                if (held == "read") l->unlock_shared();
                else if (held == "write") l->unlock();
                held.clear();
                say("ok released");
            } else if (cmd == "multilock") {
                long timeout_ms = 0;
                in >> timeout_ms;
                auto& l = multi_locker(name);
                if (!l.try_lock_for(std::chrono::milliseconds(timeout_ms))) {
                    say("ok timeout");
                } else if (const auto held = l.lease()) {
                    std::string fences;
                    for (const auto& [m, f] : held->fences) fences += (fences.empty() ? "" : ",") + std::to_string(f);
                    say("ok acquired " + fences);
                } else {
                    say("err XX000 the multi-lock was lost as it was taken");
                }
            } else if (cmd == "multiunlock") {
                multi_locker(name).unlock();
                say("ok released");
            } else if (cmd == "permit") {
                int n = 0;
                long timeout_ms = 0;
                in >> n >> timeout_ms;
                try {
                    auto& p = permits[name];
                    p.emplace(semaphore.acquire(name, n, std::chrono::milliseconds(ttl_ms + transition_ms),
                                                std::chrono::milliseconds(timeout_ms)));
                    p->on_lost([name] { say("event lost " + name); });
                    say("ok permit " + std::to_string(p->fence()));
                } catch (const simba::TimeoutError&) {
                    say("ok timeout");
                }
            } else if (cmd == "unpermit") {
                if (auto it = permits.find(name); it != permits.end() && it->second) it->second->release();
                permits.erase(name);
                say("ok released");
            } else if (cmd == "elect") {
                if (auto& c = campaigns[name]; !c.service) {
                    c.service = factory.create(
                        std::make_shared<simba::FunctionContender>(
                            name,
                            [name](const simba::MutexState& s) {
                                say("event leader " + name + " " + std::to_string(s.after.fence));
                            },
                            [name, resigning = c.resigning](const simba::MutexState&) {
                                if (!*resigning) say("event lost " + name);
                            }),
                        lease);
                    c.service->start();
                }
                say("ok campaigning");
            } else if (cmd == "resign") {
                if (auto it = campaigns.find(name); it != campaigns.end()) {
                    it->second.resign();
                    campaigns.erase(it);
                }
                say("ok resigned");
            } else if (cmd == "leader") {
                const auto it = campaigns.find(name);
                const auto held = it != campaigns.end() ? it->second.service->lease() : std::nullopt;
                say(held ? "ok leader " + std::to_string(held->fence) : "ok follower");
            } else if (cmd == "quit") {
                for (auto& [n, c] : campaigns) c.resign();
                campaigns.clear();
                permits.clear();  // each Permit releases itself
                rwlocks.clear();  // each SharedLocker releases what it holds
                multis.clear();  // each MultiLocker releases what it holds
                locks.clear();  // each Locker releases what it holds
                say("ok bye");
                return 0;
            } else {
                say("err 22023 unknown command " + one_line(cmd));
            }
        } catch (const simba::Error& e) {
            say("err " + (e.sqlstate().empty() ? std::string("XX000") : e.sqlstate()) + " " + one_line(e.what()));
        } catch (const std::exception& e) {
            say("err XX000 " + one_line(e.what()));
        }
    }
    return 0;
}
