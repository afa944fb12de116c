#include "simba/contender.hpp"

#include "simba/errors.hpp"

namespace simba {

MutexContender::MutexContender(std::string mutex, std::string contender_id)
    : mutex_(std::move(mutex)), contender_id_(std::move(contender_id)) {
    validate_mutex(mutex_);
    validate_contender_id(contender_id_);
}

void MutexContender::on_acquired(const MutexState&) {}
void MutexContender::on_released(const MutexState&) {}
void MutexContender::on_suspended(const Lease&) {}
void MutexContender::on_resumed(const Lease&) {}

FunctionContender::FunctionContender(std::string mutex, Callback on_acquired, Callback on_released,
                                     std::string contender_id)
    : MutexContender(std::move(mutex), std::move(contender_id)),
      acquired_(std::move(on_acquired)),
      released_(std::move(on_released)) {}

void FunctionContender::on_acquired(const MutexState& state) {
    if (acquired_) acquired_(state);
}
void FunctionContender::on_released(const MutexState& state) {
    if (released_) released_(state);
}
void FunctionContender::on_suspended(const Lease& lease) {
    if (suspended_) suspended_(lease);
}
void FunctionContender::on_resumed(const Lease& lease) {
    if (resumed_) resumed_(lease);
}

}  // namespace simba
