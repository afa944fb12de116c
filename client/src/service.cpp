#include "simba/service.hpp"

#include "simba/errors.hpp"

namespace simba {

const char* to_string(Status status) noexcept {
    switch (status) {
        case Status::INITIAL: return "INITIAL";
        case Status::STARTING: return "STARTING";
        case Status::RUNNING: return "RUNNING";
        case Status::STOPPING: return "STOPPING";
    }
    return "?";
}

void ContendOptions::validate() const {
    validate_ttl(ttl);
    validate_transition(transition);
    validate_margin(release_margin, clock_drift_ppm);
}

MutexContendService::MutexContendService(std::shared_ptr<MutexContender> contender)
    : contender_(std::move(contender)) {
    if (!contender_) throw InvalidArgumentError("contender must not be null", "22004");
}

void MutexContendService::when_owner(std::function<void(std::exception_ptr)>) {
    throw IllegalStateError("when_owner() is not supported by this backend");
}

void MutexContendService::start() { start_with(&MutexContendService::start_contend); }

bool MutexContendService::start_and_wait(SteadyClock::time_point until) {
    start_with(&MutexContendService::start_contend_now);
    return wait_owner(until);
}

void MutexContendService::start_with(void (MutexContendService::*how)()) {
    Status expected = Status::INITIAL;
    if (!status_.compare_exchange_strong(expected, Status::STARTING))
        throw IllegalStateError(std::string("start() needs status INITIAL, not ") + to_string(expected));
    try {
        (this->*how)();
    } catch (...) {
        status_.store(Status::INITIAL);
        throw;
    }
    status_.store(Status::RUNNING);
}

void MutexContendService::stop() {
    enter_stopping();
    try {
        stop_contend();
    } catch (...) {
        leave_stopping();
        throw;
    }
    leave_stopping();
}

void MutexContendService::enter_stopping() {
    Status expected = Status::RUNNING;
    if (!status_.compare_exchange_strong(expected, Status::STOPPING))
        throw IllegalStateError(std::string("stop() needs status RUNNING, not ") + to_string(expected));
}

}  // namespace simba
