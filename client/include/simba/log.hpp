// simba client: logging hook. Errors are reported here, never swallowed.
// set_log_handler() and log() may be called from any threads at once, and
// from a handler (it is called without a lock held); a message goes to the
// handler installed when it was logged, which may run a moment after
// set_log_handler() replaced it.
#pragma once

#include <functional>
#include <string>

namespace simba {

enum class LogLevel { debug, info, warning, error };

/// Receives every message the library logs. Called from library threads
/// (the I/O thread, the handle thread, scheduler threads): keep it quick and
/// thread-safe.
using LogHandler = std::function<void(LogLevel, const std::string&)>;

/// Installs the process-wide handler; an empty handler restores the default
/// (warnings and errors to stderr). Returns the previous handler.
LogHandler set_log_handler(LogHandler handler);

/// Logs through the installed handler.
void log(LogLevel level, const std::string& message);

const char* to_string(LogLevel level) noexcept;

}  // namespace simba
