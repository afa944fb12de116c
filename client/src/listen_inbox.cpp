#include "listen_inbox.hpp"

#include <utility>

namespace simba::pg::detail {

bool ListenInbox::read(short revents) {
    ListenConnection::Heard got;
    const bool ok = conn_.step_listen(revents, got);
    heard_ = holds_.heard(got.payloads) || heard_;
    driver_.registry().keep_ours(got.payloads);
    notified_.insert(notified_.end(), got.payloads.begin(), got.payloads.end());
    woken_.insert(woken_.end(), got.channels.begin(), got.channels.end());
    woken_.insert(woken_.end(), got.listening.begin(), got.listening.end());
    heard_ = holds_.heard(got.registered, true) || heard_;
    driver_.registry().keep_ours(got.registered);
    registered_.insert(registered_.end(), got.registered.begin(), got.registered.end());
    return ok;
}

void ListenInbox::deliver() {
    if (conn_.up() && !notified_.empty()) driver_.notified(notified_);
    notified_.clear();
    if (conn_.up() && !registered_.empty()) driver_.notified(registered_, true);
    registered_.clear();
    if (std::exchange(heard_, false)) holds_.run();
    if (conn_.up() && !woken_.empty()) driver_.woken(woken_);
    woken_.clear();
}

}  // namespace simba::pg::detail
