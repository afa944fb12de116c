// Benchmark 6: the memory of a long-lived process. One factory runs
// --cycles Locker acquire/release cycles on one mutex, each Locker with a
// fresh default id (a Locker per job, as a worker pool does), and every
// --permit-every cycles a Semaphore acquire()/release() on a fresh key.
// Prints RSS and the number of Prometheus series at ten checkpoints, each
// against the first one (taken after a warm-up tenth of the run, the
// baseline of this same run). Exits 1 if RSS grew by more than
// --max-growth-mb or the series count grew at all.
#include <simba/simba.hpp>

#include "common.hpp"

namespace {

double rss_mb() {
    long pages = 0, resident = 0;
    if (FILE* f = std::fopen("/proc/self/statm", "r")) {
        if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
        std::fclose(f);
    }
    return static_cast<double>(resident) * static_cast<double>(::sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

std::size_t series(const simba::Metrics& m) {
    const auto text = simba::to_prometheus(m);
    std::size_t n = 0;
    for (std::size_t at = 0; (at = text.find('\n', at)) != std::string::npos; ++at)
        n += at + 1 < text.size() && text[at + 1] != '#';
    return n;
}

}  // namespace

int main(int argc, char** argv) {
    long cycles = 1000000, permit_every = 100;
    double max_growth_mb = 5;
    std::string json;
    bench::Options cli("benchmark 6: memory of a long-lived process, Locker cycles with fresh ids");
    cli.add_option("--cycles", cycles, "Locker acquire + release cycles")->check(CLI::PositiveNumber);
    cli.add_option("--permit-every", permit_every, "a semaphore permit every N cycles")->check(CLI::PositiveNumber);
    cli.add_option("--max-growth-mb", max_growth_mb, "fail if RSS grows more than this over the run's baseline");
    cli.add_option("--json", json, "write the results here");
    CLI11_PARSE(cli, argc, argv);

    simba::pg::ContendServiceFactory factory;
    simba::Semaphore semaphore(factory, "bench-memory");
    if (!factory.wait_connected(std::chrono::seconds(10))) {
        std::fprintf(stderr, "bench_memory: not connected\n");
        return 2;
    }
    const std::string mutex = "bench-memory-" + std::to_string(::getpid());
    std::printf("benchmark 6: memory, %ld Locker cycles (fresh id each), a permit on a fresh key every %ld\n", cycles,
                permit_every);
    std::printf("%12s %12s %10s %12s %8s %12s\n", "cycles", "cycles/s", "RSS MB", "RSS vs base", "series", "vs base");
    const long step = std::max(1L, cycles / 10);
    double base_rss = 0, last_rss = 0;
    std::size_t base_series = 0, last_series = 0;
    auto t0 = bench::Clock::now();
    for (long i = 1; i <= cycles; ++i) {
        {
            simba::Locker lock(factory, mutex);
            lock.acquire(std::chrono::seconds(10));
        }
        if (permit_every > 0 && i % permit_every == 0) {
            auto permit = semaphore.acquire(mutex + "-" + std::to_string(i), 1, std::chrono::seconds(10),
                                            std::chrono::seconds(10));
            permit.release();
        }
        if (i % step != 0) continue;
        const auto t1 = bench::Clock::now();
        const double rate = static_cast<double>(step) / std::chrono::duration<double>(t1 - t0).count();
        t0 = t1;
        last_rss = rss_mb();
        last_series = series(factory.metrics());
        if (i == step) base_rss = last_rss, base_series = last_series;
        std::printf("%12ld %12s %10s %12s %8zu %12s\n", i, bench::fmt(rate, 0).c_str(), bench::fmt(last_rss, 1).c_str(),
                    bench::fmt(last_rss / base_rss, 3).c_str(), last_series,
                    bench::fmt(static_cast<double>(last_series) / static_cast<double>(base_series), 3).c_str());
        std::fflush(stdout);
    }
    const double growth = last_rss - base_rss;
    const bool ok = growth <= max_growth_mb && last_series <= base_series;
    std::printf("RSS %s MB -> %s MB (%+.1f MB, limit %s MB); series %zu -> %zu: %s\n", bench::fmt(base_rss, 1).c_str(),
                bench::fmt(last_rss, 1).c_str(), growth, bench::fmt(max_growth_mb, 0).c_str(), base_series, last_series,
                ok ? "bounded" : "GROWING");
    bench::write_file(json, bench::Json{{"cycles", cycles}, {"base_rss_mb", base_rss}, {"final_rss_mb", last_rss},
                                        {"growth_mb", growth}, {"base_series", base_series},
                                        {"final_series", last_series}});
    return ok ? 0 : 1;
}
