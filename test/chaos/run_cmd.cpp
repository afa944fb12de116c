// simba chaos: the CMD `simba run` runs in the HA suite (test/ha/run.sh), so
// the checker can judge simba run's promise that CMD never runs while
// another holder's CMD does.
//
//   simba run --mutex M -- simba_chaos_run_cmd --log FILE --lock FILE
//
// Takes an flock on --lock without waiting: if another CMD holds it, two
// CMDs run at once, logged as "overlap" (the lock is released by the kernel
// when a CMD's process dies, however it dies). Then logs, every --tick-ms,
// that it is running, for a random time in [--hold-min-ms, --hold-max-ms],
// and exits 0: simba run then releases and another contender takes over.
// A SIGTERM or SIGKILL from simba run's watchdog ends it where it stands.
// Log lines (common.hpp), steady = CLOCK_MONOTONIC ns:
//   cmd PID FENCE CONTENDER STEADY       SIMBA_FENCE and SIMBA_CONTENDER
//   overlap PID FENCE STEADY             the lock file was held by another CMD
//   tick PID FENCE STEADY                running at that instant
//   done PID FENCE STEADY                exiting 0
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <iostream>
#include <random>
#include <thread>

#include "common.hpp"

int main(int argc, char** argv) {
    std::string log_path, lock_path;
    long tick_ms = 10, hold_min_ms = 300, hold_max_ms = 2000;
    chaos::Options cli("simba chaos: simba run's CMD in the HA suite (run_cmd.cpp)");
    cli.add_option("--log", log_path, "event log (appended)")->required();
    cli.add_option("--lock", lock_path, "lock file two CMDs must never hold at once")->required();
    cli.add_option("--tick-ms", tick_ms, "log that it runs this often")->check(CLI::Range(1, 1000));
    cli.add_option("--hold-min-ms", hold_min_ms, "shortest run")->check(CLI::NonNegativeNumber);
    cli.add_option("--hold-max-ms", hold_max_ms, "longest run")->check(CLI::NonNegativeNumber);
    CLI11_PARSE(cli, argc, argv);
    const char* fence_env = std::getenv("SIMBA_FENCE");
    const char* contender = std::getenv("SIMBA_CONTENDER");
    if (!fence_env || !contender) {
        std::cerr << "simba_chaos_run_cmd: SIMBA_FENCE and SIMBA_CONTENDER must be set (run it under simba run)\n";
        return 2;
    }
    const std::string fence = fence_env;
    const long pid = static_cast<long>(::getpid());
    chaos::EventLog log(log_path);
    log.write("cmd", pid, fence, contender, chaos::steady_ns());

    int lock = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock < 0) {
        std::cerr << "simba_chaos_run_cmd: cannot open " << lock_path << "\n";
        return 2;
    }
    if (::flock(lock, LOCK_EX | LOCK_NB) != 0) {
        if (errno != EWOULDBLOCK) return 2;
        log.write("overlap", pid, fence, chaos::steady_ns());
    }

    std::mt19937_64 rng(std::random_device{}());
    auto hold = std::chrono::milliseconds(
        std::uniform_int_distribution<long>(hold_min_ms, std::max(hold_min_ms, hold_max_ms))(rng));
    const auto end = std::chrono::steady_clock::now() + hold;
    while (std::chrono::steady_clock::now() < end) {
        log.write("tick", pid, fence, chaos::steady_ns());
        std::this_thread::sleep_for(std::chrono::milliseconds(tick_ms));
    }
    log.write("done", pid, fence, chaos::steady_ns());
    return 0;
}
