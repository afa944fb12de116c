#include "simba/log.hpp"

#include <cstdio>

#include "thread_annotations.hpp"

namespace simba {
namespace {

struct Handler {
    detail::Mutex m;
    LogHandler h GUARDED_BY(m);
};
Handler& handler() {
    static Handler h;
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
    auto& s = handler();
    detail::MutexLock lock(s.m);
    LogHandler old = std::move(s.h);
    s.h = std::move(h);
    return old;
}

void log(LogLevel level, const std::string& message) {
    LogHandler h;
    {
        auto& s = handler();
        detail::MutexLock lock(s.m);
        h = s.h;
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
