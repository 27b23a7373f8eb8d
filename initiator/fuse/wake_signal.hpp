#pragma once
// How the threads that queue FUSE requests wake the session thread, which
// polls an eventfd next to its sockets (SessionOptions::wake_fd): one
// eventfd write per batch of requests (later ones see the flag set) and one
// read per wake-up.
//
// notify() sets the flag and, if it was clear, writes; consume() clears
// the flag and reads. The two steps on each side interleave: a read can
// come before the write of a flag it cleared (it finds nothing, and the
// write then leaves the eventfd readable with the flag clear: every poll
// returns at once, a spin until the next request), or drain the write of a
// flag set after it cleared the flag (which then stays set over an empty
// eventfd: later requests skip their write, and wait for the poll's
// timeout). So consume() counts the writes it is owed, one per flag it
// cleared, against the writes it read (the eventfd's counter sums them):
// it reads while any is owed, and a write read ahead of its flag clears
// that flag at once.
#include <atomic>
#include <cstdint>

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
    void consume() noexcept {
        observe();
        drain();
    }

    // The two steps of each, apart for the test of their interleavings.
    bool claim() noexcept { return !pending_.exchange(true); }
    void signal() noexcept;
    void observe() noexcept {
        if (pending_.exchange(false)) ++owed_;
    }
    void drain() noexcept;

private:
    UniqueFd fd_;
    std::atomic<bool> pending_{false};
    // The polling thread's: flags cleared minus writes read; never below 0
    // after consume() (within drain() -1 when a write was read before its
    // flag was cleared, which drain() then clears).
    int64_t owed_ = 0;
};

}  // namespace rbio::fuse
