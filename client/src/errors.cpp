#include "simba/errors.hpp"

namespace simba {

void throw_sqlstate(const std::string& sqlstate, const std::string& message) {
    if (sqlstate == "22023" || sqlstate == "22004") throw InvalidArgumentError(message, sqlstate);
    if (sqlstate == "42501") throw PermissionDeniedError(message, sqlstate);
    if (sqlstate == "SB001") throw NotOwnerError(message, sqlstate);
    if (sqlstate == "SB002") throw StaleFenceError(message, sqlstate);
    if (sqlstate == "SB003") throw LeaseExpiredError(message, sqlstate);
    if (sqlstate.rfind("SB", 0) == 0) throw FenceError(message, sqlstate);
    if (sqlstate.rfind("08", 0) == 0) throw ConnectionError(message, sqlstate);
    throw ServerError(message, sqlstate);
}

std::size_t utf8_length(const std::string& s) {
    std::size_t n = 0;
    for (unsigned char c : s)
        if ((c & 0xC0) != 0x80) ++n;
    return n;
}

void validate_name(const std::string& value, const char* what) {
    if (value.empty()) throw InvalidArgumentError(std::string(what) + " must not be empty", "22023");
    if (utf8_length(value) > max_name_length)
        throw InvalidArgumentError(
            std::string(what) + " must be at most " + std::to_string(max_name_length) + " characters",
            "22023");
}

void validate_mutex(const std::string& mutex) { validate_name(mutex, "mutex"); }
void validate_contender_id(const std::string& contender_id) { validate_name(contender_id, "contender_id"); }

void validate_ttl(std::chrono::microseconds ttl) {
    if (ttl.count() <= 0) throw InvalidArgumentError("ttl must be positive", "22023");
}

void validate_transition(std::chrono::microseconds transition) {
    if (transition.count() < 0) throw InvalidArgumentError("transition must not be negative", "22023");
}

void validate_margin(std::chrono::microseconds release_margin, int clock_drift_ppm) {
    if (release_margin.count() < 0) throw InvalidArgumentError("release_margin must not be negative", "22023");
    if (clock_drift_ppm < 0 || clock_drift_ppm > 100000)
        throw InvalidArgumentError("clock_drift_ppm must be between 0 and 100000", "22023");
}

}  // namespace simba
