// A minimal blocking RESP client over a unix socket: enough for SET NX PX,
// SCRIPT LOAD and EVALSHA (the reference lock of benchmark 1).
#pragma once

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace bench {

class Redis {
public:
    explicit Redis(const std::string& path) {
        fd_ = ::socket(AF_UNIX, SOCK_STREAM, 0);
        if (fd_ < 0) throw std::runtime_error("redis: socket");
        sockaddr_un a{};
        a.sun_family = AF_UNIX;
        std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
        if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
            ::close(fd_);
            throw std::runtime_error("redis: cannot connect to " + path);
        }
    }
    ~Redis() { ::close(fd_); }
    Redis(const Redis&) = delete;
    Redis& operator=(const Redis&) = delete;

    /// Sends one command; returns the reply: "+OK", ":1", "$value", "$nil" (null bulk), "-ERR ...".
    std::string cmd(const std::vector<std::string>& args) {
        out_.clear();
        out_ += "*" + std::to_string(args.size()) + "\r\n";
        for (auto& a : args) out_ += "$" + std::to_string(a.size()) + "\r\n" + a + "\r\n";
        const char* p = out_.data();
        std::size_t left = out_.size();
        while (left > 0) {
            auto n = ::write(fd_, p, left);
            if (n <= 0) throw std::runtime_error("redis: write");
            p += n;
            left -= static_cast<std::size_t>(n);
        }
        return reply();
    }

private:
    std::string line() {
        for (;;) {
            auto pos = buf_.find("\r\n", start_);
            if (pos != std::string::npos) {
                std::string l = buf_.substr(start_, pos - start_);
                start_ = pos + 2;
                return l;
            }
            fill();
        }
    }
    void fill() {
        if (start_ > 0) {
            buf_.erase(0, start_);
            start_ = 0;
        }
        char tmp[4096];
        auto n = ::read(fd_, tmp, sizeof tmp);
        if (n <= 0) throw std::runtime_error("redis: read");
        buf_.append(tmp, static_cast<std::size_t>(n));
    }
    std::string reply() {
        std::string l = line();
        if (l.empty()) throw std::runtime_error("redis: empty reply");
        if (l[0] == '$') {
            long len = std::stol(l.substr(1));
            if (len < 0) return "$nil";
            while (buf_.size() - start_ < static_cast<std::size_t>(len) + 2) fill();
            std::string v = buf_.substr(start_, static_cast<std::size_t>(len));
            start_ += static_cast<std::size_t>(len) + 2;
            return "$" + v;
        }
        if (l[0] == '-') throw std::runtime_error("redis: " + l);
        return l;  // +OK, :n (arrays are not used here)
    }

    int fd_ = -1;
    std::string out_;
    std::string buf_;
    std::size_t start_ = 0;
};

}  // namespace bench
