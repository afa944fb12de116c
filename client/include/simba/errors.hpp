// simba client: exception hierarchy and argument validation.
//
// Every error thrown by the library derives from simba::Error and carries the
// SQLSTATE the server used (or would use) for it, so callers can branch on
// types or on sqlstate() alike. Bad arguments are rejected in the client with
// the server's own wording and SQLSTATE before any round trip.
// Exceptions and the validate_* functions hold no shared state: use them
// from any thread.
#pragma once

#include <chrono>
#include <stdexcept>
#include <string>

namespace simba {

/// Base of every simba exception. sqlstate() is empty when no SQLSTATE applies.
class Error : public std::runtime_error {
public:
    explicit Error(const std::string& what, std::string sqlstate = {})
        : std::runtime_error(what), sqlstate_(std::move(sqlstate)) {}
    /// Five-character SQLSTATE ("22023", "SB001", ...), or "" if none.
    [[nodiscard]] const std::string& sqlstate() const noexcept { return sqlstate_; }

private:
    std::string sqlstate_;
};

/// Invalid argument: SQLSTATE 22023 (invalid_parameter_value) or 22004 (null).
class InvalidArgumentError : public Error {
public:
    using Error::Error;
};

/// The role lacks a privilege (SQLSTATE 42501); see simba_grant(role).
class PermissionDeniedError : public Error {
public:
    using Error::Error;
};

/// Every SQLSTATE of class SB: simba_fence_check failures (SB001-SB003,
/// the subclasses below), SB004 (a session that has ended, is unknown or
/// is another role's) and SB005 (a reader of a read-write lock asked to write).
class FenceError : public Error {
public:
    using Error::Error;
};
/// SB001: the caller does not hold the mutex.
class NotOwnerError : public FenceError {
public:
    using FenceError::FenceError;
};
/// SB002: the fence is not the current holder's fence.
class StaleFenceError : public FenceError {
public:
    using FenceError::FenceError;
};
/// SB003: the caller's lease has expired.
class LeaseExpiredError : public FenceError {
public:
    using FenceError::FenceError;
};

/// The server could not be reached or the connection broke (SQLSTATE class 08).
class ConnectionError : public Error {
public:
    using Error::Error;
};

/// Any other server-side error; sqlstate() tells which.
class ServerError : public Error {
public:
    using Error::Error;
};

/// An operation was called in a state that does not allow it
/// (start() when not INITIAL, stop() when not RUNNING, a second acquire()).
class IllegalStateError : public Error {
public:
    using Error::Error;
};

/// A wait for a lock was cancelled from another thread (Locker::cancel() or
/// release()); the lock is not taken. An IllegalStateError, as 1.3 reported it.
class CancelledError : public IllegalStateError {
public:
    using IllegalStateError::IllegalStateError;
};

/// Locker::acquire(timeout) did not get the lock in time.
class TimeoutError : public Error {
public:
    using Error::Error;
};

/// Throws the Error subclass matching a server SQLSTATE.
[[noreturn]] void throw_sqlstate(const std::string& sqlstate, const std::string& message);

/// Client-side validation, same rules and wording as the server.
/// All throw InvalidArgumentError with SQLSTATE 22023.
void validate_mutex(const std::string& mutex);
void validate_contender_id(const std::string& contender_id);
void validate_ttl(std::chrono::microseconds ttl);
void validate_transition(std::chrono::microseconds transition);
void validate_margin(std::chrono::microseconds release_margin, int clock_drift_ppm);

/// Checks a name the server limits the same way (mutex, contender_id, key,
/// holder): not empty, at most max_name_length characters.
void validate_name(const std::string& value, const char* what);
/// Characters as the server counts them in a UTF-8 database: code points.
std::size_t utf8_length(const std::string& s);

/// Longest mutex / contender id / semaphore key / holder, in characters (UTF-8 code points).
inline constexpr std::size_t max_name_length = 256;
/// Longest semaphore permit context, in characters.
inline constexpr std::size_t max_context_length = 256;

}  // namespace simba
