#pragma once
// RAII io_uring (liburing) with the few operations the engine uses: queue
// SQEs, submit them with one call, reap completions in bulk.
#include <liburing.h>

#include <cstdint>

#include "rbio/common/unique_fd.hpp"

namespace rbio::bs {

// Makes an eventfd readable, from any thread: how work finished elsewhere
// (librbd's callbacks, a reopened image) wakes tgtd's loop.
void signal_event_fd(int fd) noexcept;

class Ring {
public:
    // entries: SQ size (power of two). The CQ is twice that, so completions
    // of everything in flight always fit.
    explicit Ring(uint32_t entries);
    ~Ring();
    Ring(const Ring&) = delete;
    Ring& operator=(const Ring&) = delete;

    // A free SQE, or nullptr when the SQ is full (submit() first).
    io_uring_sqe* get_sqe() { return io_uring_get_sqe(&ring_); }
    // SQEs prepared but not yet handed to the kernel.
    uint32_t pending() const { return io_uring_sq_ready(&ring_); }
    // One io_uring_enter for everything prepared; returns SQEs consumed or
    // -errno. Counts the system call.
    int submit();
    // Blocks until at least one completion is there (used only to drain on
    // close); returns 0 or -errno.
    int wait_one();

    // Calls fn(cqe) for every completion now in the CQ, in batches, without
    // a system call; returns how many.
    template <class Fn>
    unsigned reap(Fn&& fn) {
        unsigned total = 0;
        io_uring_cqe* batch[64];
        for (;;) {
            unsigned n = io_uring_peek_batch_cqe(&ring_, batch, 64);
            if (n == 0) break;
            for (unsigned i = 0; i < n; ++i) fn(*batch[i]);
            io_uring_cq_advance(&ring_, n);
            total += n;
            if (n < 64) break;
        }
        return total;
    }

    // The eventfd the kernel signals for every completion it posts.
    int event_fd() const { return event_fd_.get(); }
    // Resets the eventfd's counter (one read; nothing to do when it is
    // already zero). Called before reaping, so that the eventfd is readable
    // again only for completions posted after the reap looked at the CQ.
    void clear_event();
    // Turns the eventfd's signal for posted completions off or on (the
    // CQ ring's IORING_CQ_EVENTFD_DISABLED flag, no system call). Off while
    // a pass submits and reaps itself, so a completion it reaps does not
    // wake tgtd again for nothing; false when the kernel cannot.
    bool signal_completions(bool on) { return io_uring_cq_eventfd_toggle(&ring_, on) == 0; }
    // Completions posted and not yet reaped.
    unsigned completions_ready() const { return io_uring_cq_ready(&ring_); }
    uint64_t enter_calls() const { return enter_calls_; }
    uint32_t entries() const { return entries_; }

private:
    io_uring ring_{};
    UniqueFd event_fd_;
    uint32_t entries_;
    uint64_t enter_calls_ = 0;
};

}  // namespace rbio::bs
