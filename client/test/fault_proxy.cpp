#include "fault_proxy.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace simba_test {

FaultProxy::FaultProxy(int upstream_port, bool blackhole) {
    int out[2];
    if (pipe(out) != 0) throw std::runtime_error("pipe");
    pid_ = fork();
    if (pid_ == 0) {
        dup2(out[1], 1);
        close(out[0]);
        const std::string port = std::to_string(upstream_port);
        if (blackhole)
            execl(SIMBA_FAULT_PROXY, SIMBA_FAULT_PROXY, "--target-port", port.c_str(), "--blackhole", nullptr);
        else
            execl(SIMBA_FAULT_PROXY, SIMBA_FAULT_PROXY, "--target-port", port.c_str(), nullptr);
        _exit(127);
    }
    close(out[1]);
    FILE* f = fdopen(out[0], "r");
    if (!f || std::fscanf(f, "ready %d %d", &port_, &control_) != 2)
        throw std::runtime_error("simba_fault_proxy did not start");
    std::fclose(f);
}

FaultProxy::~FaultProxy() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
}

std::string FaultProxy::command(const std::string& line) const {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(control_));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        close(fd);
        return "error: control port";
    }
    std::string l = line + "\n";
    [[maybe_unused]] auto n = write(fd, l.data(), l.size());
    std::string reply;
    char buf[256];
    ssize_t r;
    while ((r = read(fd, buf, sizeof buf)) > 0) reply.append(buf, static_cast<std::size_t>(r));
    close(fd);
    return reply;
}

int tcp_port() {
    const char* p = std::getenv("SIMBA_PG_TCP_PORT");
    return p ? std::atoi(p) : 0;
}

simba::pg::FactoryOptions fault_options(const std::string& app) {
    auto o = test_options(app);
    o.connect_timeout = std::chrono::seconds(2);  // libpq's minimum
    o.listen_ping_interval = 1000ms;
    return o;
}

}  // namespace simba_test
