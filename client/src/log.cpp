#include "simba/log.hpp"

#include <cstdio>
#include <mutex>

namespace simba {
namespace {

std::mutex& handler_mutex() {
    static std::mutex m;
    return m;
}
LogHandler& handler() {
    static LogHandler h;
    return h;
}

void default_handler(LogLevel level, const std::string& message) {
    if (level < LogLevel::warning) return;
    std::fprintf(stderr, "simba %s: %s\n", to_string(level), message.c_str());
}

}  // namespace

const char* to_string(LogLevel level) noexcept {
    switch (level) {
        case LogLevel::debug: return "debug";
        case LogLevel::info: return "info";
        case LogLevel::warning: return "warning";
        case LogLevel::error: return "error";
    }
    return "?";
}

LogHandler set_log_handler(LogHandler h) {
    std::lock_guard<std::mutex> lock(handler_mutex());
    LogHandler old = std::move(handler());
    handler() = std::move(h);
    return old;
}

void log(LogLevel level, const std::string& message) {
    LogHandler h;
    {
        std::lock_guard<std::mutex> lock(handler_mutex());
        h = handler();
    }
    try {
        if (h)
            h(level, message);
        else
            default_handler(level, message);
    } catch (...) {
        // A throwing log handler must not take a library thread down.
    }
}

}  // namespace simba
