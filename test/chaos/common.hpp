// simba chaos suite: what the worker, the nemesis and the checker share.
//
// Event logs are text, one event per line, fields separated by one space,
// the event type first. Every line is written with one write(2) on an
// O_APPEND descriptor, so a SIGKILL never leaves a half-buffered log behind
// (at most the line being written is cut; readers skip malformed lines).
//
// Times: "steady" = CLOCK_MONOTONIC in nanoseconds (std::chrono::steady_clock
// on Linux), one clock for every process on the machine, so workers, nemesis
// and checker compare them directly. "server" = the server's clock_timestamp()
// in microseconds since the Unix epoch.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace chaos {

/// The tools' options (CLI11: unknown options and bad values are errors;
/// --help lists every option with its default). A value that starts with
/// "--" is passed as --opt=--value.
struct Options : CLI::App {
    explicit Options(std::string description) : CLI::App(std::move(description)) {
        option_defaults()->always_capture_default();
    }
};

inline std::int64_t steady_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

/// An append-only event log, safe to use from several threads.
class EventLog {
public:
    explicit EventLog(const std::string& path) {
        fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd_ < 0) throw std::runtime_error("cannot open log " + path);
    }
    ~EventLog() {
        if (fd_ >= 0) ::close(fd_);
    }
    EventLog(const EventLog&) = delete;
    EventLog& operator=(const EventLog&) = delete;

    /// Writes the fields joined by spaces (spaces inside a field become '_').
    template <typename... Args>
    void write(const Args&... fields) {
        std::ostringstream os;
        bool first = true;
        (append(os, first, fields), ...);
        os << '\n';
        std::string line = os.str();
        std::lock_guard<std::mutex> lock(m_);
        const char* p = line.data();
        std::size_t left = line.size();
        while (left > 0) {
            ssize_t n = ::write(fd_, p, left);
            if (n <= 0) return;  // nothing sensible to do: the checker will see the gap
            p += n;
            left -= static_cast<std::size_t>(n);
        }
    }

private:
    template <typename T>
    static void append(std::ostringstream& os, bool& first, const T& v) {
        if (!first) os << ' ';
        first = false;
        std::ostringstream one;
        one << v;
        std::string s = one.str();
        if (s.empty()) s = "-";
        for (auto& c : s)
            if (c == ' ' || c == '\n' || c == '\t') c = '_';
        os << s;
    }
    int fd_ = -1;
    std::mutex m_;
};

inline std::vector<std::string> split(const std::string& line) {
    std::vector<std::string> out;
    std::istringstream is(line);
    std::string f;
    while (is >> f) out.push_back(f);
    return out;
}

/// pid from a ContenderId::host() id "{counter}:{pid}@{host}", or -1.
inline long pid_of_contender(const std::string& id) {
    auto colon = id.find(':');
    auto at = id.find('@');
    if (colon == std::string::npos || at == std::string::npos || at <= colon + 1) return -1;
    try {
        return std::stol(id.substr(colon + 1, at - colon - 1));
    } catch (...) {
        return -1;
    }
}

}  // namespace chaos
