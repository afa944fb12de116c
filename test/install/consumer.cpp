// A C++20 program on the installed libsimba-client (test/install/run.sh):
// built once with `pkg-config --cflags --libs simba-client` and once with
// find_package(simba-client), each time against the files a staging
// `make install` put there. It must build as C++20: neither simba-client.pc
// nor the CMake package may force another standard on it. With
// `--lock NAME` it also holds that mutex on the server in libpq's environment
// and fence-checks it in a transaction: <simba/pg/fence_check.hpp> is
// header-only on libpqxx, which the package's link line must bring.
#include <simba/pg/fence_check.hpp>
#include <simba/simba.hpp>

#include <chrono>
#include <concepts>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>

#if __cplusplus < 202002L
#error "built as C++17 or older: something in the simba-client flags forced the standard"
#endif

// C++20 only: a concept, a requires-expression and std::span.
template <typename T>
concept HasFence = requires(const T& t) {
    { t.fence() } -> std::convertible_to<std::int64_t>;
};

static_assert(HasFence<simba::Locker>);

static std::size_t total_size(std::span<const std::string> parts) {
    std::size_t n = 0;
    for (const auto& p : parts) n += p.size();
    return n;
}

int main(int argc, char** argv) {
    // Calls into the shared library: nothing here needs a server.
    const std::string parts[] = {simba::ContenderId::host(), simba::ContenderId::uuid(),
                                 simba::to_prometheus(simba::Metrics{}, {{"job", "consumer"}})};
    if (parts[1].size() != 32 || total_size(parts) == 0) {
        std::fprintf(stderr, "unexpected contender id %s\n", parts[1].c_str());
        return 1;
    }
    simba::pg::FactoryOptions options;
    options.application_name = "simba-install-consumer";
    std::printf("C++ %ld, contender %s\n", static_cast<long>(__cplusplus), parts[0].c_str());

    if (argc == 3 && std::strcmp(argv[1], "--lock") == 0) {
        simba::pg::ContendServiceFactory factory("", options);
        simba::Locker lock(factory, argv[2]);
        lock.acquire(std::chrono::seconds(10));
        std::printf("held %s, fence %lld\n", lock.mutex().c_str(), static_cast<long long>(lock.fence()));
        pqxx::connection conn;
        pqxx::work tx(conn);
        simba::pg::fence_check(tx, lock.mutex(), lock.contender_id(), lock.fence());
        tx.commit();
        return lock.fence() > 0 ? 0 : 1;
    }
    return 0;
}
