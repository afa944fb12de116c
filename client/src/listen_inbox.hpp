// simba client (internal): ListenInbox, what the LISTEN connection brought
// while the I/O thread slept in poll(), kept until the loop acts on it:
// NOTIFYs of names a service or hold of ours waits on, what fair waiters
// heard on their own channels, and names whose registration just took
// effect (whoever waits on those attempts once more, for a release that
// may have gone by before: ListenConnection::want_name). I/O thread only;
// read without io_state, delivered with it.
#pragma once

#include <string>
#include <vector>

#include "connections.hpp"
#include "io_state.hpp"
#include "notify_subscribers.hpp"
#include "service_driver.hpp"

namespace simba::pg::detail {

class ListenInbox {
public:
    ListenInbox(Connections& connections, ServiceDriver& driver, NotifySubscribers& holds)
        : conn_(connections), driver_(driver), holds_(holds) {}

    /// Steps the LISTEN connection (`revents`: poll()'s for its socket)
    /// and keeps what concerns us; false if the connection failed.
    bool read(short revents) EXCLUDES(io_state);
    /// Something to act on: the loop wakes for it.
    [[nodiscard]] bool pending() const {
        return heard_ || !notified_.empty() || !woken_.empty() || !registered_.empty();
    }
    /// Hands it to the services (while connected) and the holds, then
    /// forgets it.
    void deliver() REQUIRES(io_state);

private:
    Connections& conn_;
    ServiceDriver& driver_;
    NotifySubscribers& holds_;
    bool heard_ = false;                   // a hold's subscription heard one: to run
    std::vector<std::string> notified_;    // NOTIFYs of our mutexes
    std::vector<std::string> woken_;       // fair waiters' channels heard or just listened on
    std::vector<std::string> registered_;  // names whose registration just took effect
};

}  // namespace simba::pg::detail
