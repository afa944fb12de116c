// The client guide's metrics endpoint: a service that leads "billing-sync"
// and serves its client metrics to Prometheus on /metrics (cpp-httplib,
// libcpp-httplib-dev on Debian). `metrics_endpoint PORT` serves until ^C;
// `metrics_endpoint --check` scrapes itself once and exits (make test).
#include <simba/simba.hpp>

#include <httplib.h>

#include <csignal>
#include <cstdio>
#include <string>
#include <thread>

using namespace std::chrono_literals;

int main(int argc, char** argv) try {
    const std::string arg = argc > 1 ? argv[1] : "9809";
    const bool check = arg == "--check";
    // ^C and SIGTERM end the serving: blocked before any thread starts, so
    // they wait for sigwait() below instead of killing the process.
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, nullptr);

    simba::pg::ContendServiceFactory factory;  // connection from PGHOST, PGDATABASE, ...
    auto leader = factory.create(std::make_shared<simba::MutexContender>("billing-sync", "metrics-example"));
    leader->start();

    httplib::Server server;
    server.Get("/metrics", [&](const httplib::Request&, httplib::Response& res) {
        res.set_content(simba::to_prometheus(factory.metrics(), {{"service", "billing"}}),
                        "text/plain; version=0.0.4; charset=utf-8");
    });
    const int port = check ? server.bind_to_any_port("127.0.0.1") : std::stoi(arg);
    if (!check && !server.bind_to_port("127.0.0.1", port)) {
        std::fprintf(stderr, "could not listen on 127.0.0.1:%d\n", port);
        return 1;
    }
    std::printf("serving http://127.0.0.1:%d/metrics\n", port);
    std::fflush(stdout);
    std::thread http([&] { server.listen_after_bind(); });

    int rc = 0;
    if (check) {
        const bool owner = leader->wait_owner(std::chrono::steady_clock::now() + 10s);
        httplib::Client client("127.0.0.1", port);
        auto res = client.Get("/metrics");
        const bool ok = owner && res && res->status == 200 &&
                        res->body.find("simba_client_is_owner{service=\"billing\",mutex=\"billing-sync\"") != std::string::npos;
        std::printf("%s", res ? res->body.c_str() : "no answer\n");
        rc = ok ? 0 : 1;
    } else {
        int sig = 0;
        sigwait(&stop, &sig);
    }
    server.stop();
    http.join();
    leader->stop();
    return rc;
} catch (const simba::Error& e) {  // a setup mistake: no server, no extension, no grant
    std::fprintf(stderr, "%s (SQLSTATE %s)\n", e.what(), e.sqlstate().c_str());
    return 1;
}
