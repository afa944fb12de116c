// Deliberately wrong (test/thread-safety/run.sh): compiled with the library's
// own flags, it must draw its three warnings, or the check has lost its flags.
#include "../../client/src/io_state.hpp"
#include "../../client/src/thread_annotations.hpp"

namespace {

class Counter {
public:
    void bump() { ++n_; }      // writes n_ without m_
    void reset() { zero(); }   // calls a REQUIRES(m_) helper without m_

private:
    void zero() REQUIRES(m_) { n_ = 0; }

    simba::detail::Mutex m_;
    int n_ GUARDED_BY(m_) = 0;
};

// The I/O state without the factory's IoLock.
void send() REQUIRES(simba::pg::detail::io_state) {}
void send_unlocked() { send(); }

}  // namespace

int simba_thread_safety_canary() {
    Counter c;
    c.bump();
    c.reset();
    send_unlocked();
    return 0;
}
