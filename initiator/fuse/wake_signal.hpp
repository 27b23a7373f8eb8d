#pragma once
// How the threads that queue FUSE requests wake the session thread, which
// polls an eventfd next to its sockets (SessionOptions::wake_fd): one
// eventfd write per batch of requests (later ones see the flag set) and one
// read per wake-up.
//
// notify() sets the flag, then writes; consume() clears the flag, then
// reads. A read that falls between another thread's flag and its write
// finds nothing, and that write then leaves the eventfd readable with the
// flag clear: every poll would return at once, and the session thread spin
// at full CPU until the next request, which an idle application may never
// send. So a read that finds nothing is owed, and the next consume() does it.
#include <atomic>

#include "rbio/common/unique_fd.hpp"

namespace rbio::fuse {

class WakeSignal {
public:
    // A non-blocking eventfd of its own; throws std::system_error.
    WakeSignal();
    // One made by make_fd(), which the session was logged in with.
    explicit WakeSignal(UniqueFd fd) : fd_(std::move(fd)) {}
    WakeSignal(const WakeSignal&) = delete;
    WakeSignal& operator=(const WakeSignal&) = delete;

    static UniqueFd make_fd();
    int fd() const { return fd_.get(); }

    // Any thread, after queuing its request.
    void notify() noexcept {
        if (claim()) signal();
    }
    // The polling thread only, before it takes the queued requests.
    void consume() noexcept;

    // notify()'s two steps, apart for the test of their interleaving.
    bool claim() noexcept { return !pending_.exchange(true); }
    void signal() noexcept;

private:
    UniqueFd fd_;
    std::atomic<bool> pending_{false};
    bool read_owed_ = false;  // the polling thread's
};

}  // namespace rbio::fuse
