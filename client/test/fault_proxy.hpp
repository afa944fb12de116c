// The tests' handle on simba_fault_proxy (test/fault_proxy), the TCP proxy
// that injects network faults between a factory and a real server. For the
// tests run on a cluster of their own that also listens on TCP
// (SIMBA_CLUSTER_TCP=1: pg_fault_test.cpp, pg_suspend_test.cpp).
#pragma once

#include <sys/types.h>

#include <string>

#include "pg_support.hpp"

namespace simba_test {

/// One simba_fault_proxy process in front of the test server.
class FaultProxy {
public:
    /// `upstream_port`: the server's TCP port (SIMBA_PG_TCP_PORT);
    /// `blackhole`: connections start hung.
    explicit FaultProxy(int upstream_port, bool blackhole = false);
    ~FaultProxy();
    FaultProxy(const FaultProxy&) = delete;
    FaultProxy& operator=(const FaultProxy&) = delete;

    int port() const { return port_; }
    std::string conninfo() const { return "host=127.0.0.1 port=" + std::to_string(port_); }

    /// Sends one control command ("pass", "blackhole", "hang PORT", ...);
    /// returns the reply (ends in "ok\n" on success).
    std::string command(const std::string& line) const;

private:
    pid_t pid_ = -1;
    int port_ = 0, control_ = 0;
};

/// The test server's TCP port (0 unless SIMBA_CLUSTER_TCP=1).
int tcp_port();

/// test_options() for a factory behind the proxy: libpq's shortest
/// connect_timeout, a LISTEN ping every second.
simba::pg::FactoryOptions fault_options(const std::string& app);

}  // namespace simba_test

#define REQUIRE_TCP()                                                                    \
    if (simba_test::tcp_port() == 0) FAIL() << "run inside test/with-cluster.sh with SIMBA_CLUSTER_TCP=1"
