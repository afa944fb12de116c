#include "simba/contender_id.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <random>

namespace simba {

std::string ContenderId::host() {
    static std::atomic<unsigned long long> counter{0};
    char host[256] = {0};
    if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') std::snprintf(host, sizeof host, "localhost");
    return std::to_string(counter.fetch_add(1)) + ":" + std::to_string(::getpid()) + "@" + host;
}

std::string ContenderId::uuid() {
    static std::mutex m;
    static std::mt19937_64 rng{[] {
        std::random_device rd;
        std::seed_seq seq{rd(), rd(), rd(), rd(), rd(), rd(), rd(), rd()};
        return std::mt19937_64(seq);
    }()};
    unsigned long long a, b;
    {
        std::lock_guard<std::mutex> lock(m);
        a = rng();
        b = rng();
    }
    char buf[33];
    std::snprintf(buf, sizeof buf, "%016llx%016llx", a, b);
    return std::string(buf, 32);
}

}  // namespace simba
