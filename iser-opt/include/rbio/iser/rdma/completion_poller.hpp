#pragma once
// A completion queue with its completion channel, reaped the way the third
// optimisation wants (asynchronous send-path events): completions are polled
// in arrays (one ibv_poll_cq call reaps up to `batch`), the queue is polled
// again inline after the pass has posted its sends, and the channel - an fd
// in the owner's event loop, i.e. an interrupt - is armed only when a poll
// finds nothing, after an optional bounded spin. Stock tgt's iSER polls one
// completion per call and re-arms after every event.
//
//     poller.on_channel_event();              // channel fd readable
//     poller.drain(handle_wc);                // reap everything
//     ...post the pass's sends...
//     if (poller.drain_and_arm(handle_wc))    // empty: armed, wait for the fd
//         ;                                   // else more came: loop again
#include <infiniband/verbs.h>

#include <array>
#include <chrono>
#include <cstdint>

#include "rbio/iser/counters.hpp"
#include "rbio/iser/rdma/verbs.hpp"

namespace rbio::iser::rdma {

struct PollConfig {
    uint32_t batch = 32;    // completions per ibv_poll_cq call (at most kMaxBatch)
    uint32_t spin_us = 0;   // keep polling this long on empty before arming
    bool arm_every_event = false;  // off switch: re-arm after every event (stock)
};

class CompletionPoller {
public:
    static constexpr uint32_t kMaxBatch = 64;

    // A CQ of `entries` on `context`, with its own non-blocking channel.
    // Throws RdmaError.
    CompletionPoller(ibv_context* context, int entries, const PollConfig& config,
                     ConnectionCounters& counters);
    ~CompletionPoller();
    CompletionPoller(const CompletionPoller&) = delete;
    CompletionPoller& operator=(const CompletionPoller&) = delete;

    ibv_cq* cq() const { return cq_.get(); }
    int fd() const { return channel_->fd; }

    // The channel fd was readable: takes its events (acknowledged in bulk).
    // False when there was none (a spurious wake-up).
    bool on_channel_event();

    // Polls until the CQ is empty; `handle(const ibv_wc&)` runs per
    // completion. Returns how many were reaped.
    template <class Handler>
    size_t drain(Handler&& handle) {
        size_t total = 0;
        for (;;) {
            int n = poll_once();
            for (int i = 0; i < n; ++i) handle(wcs_[size_t(i)]);
            total += size_t(n);
            if (n < int(config_.batch)) return total;
        }
    }

    // End of a pass: drains (spinning up to spin_us while empty), then arms
    // the channel and polls once more, because a completion that arrived
    // between the last poll and the arming raises no event. Returns true when
    // armed with nothing pending (wait for the fd), false when that last poll
    // found completions (they were handled: run the pass again).
    template <class Handler>
    bool drain_and_arm(Handler&& handle) {
        size_t got = drain(handle);
        if (got == 0 && config_.spin_us > 0) got = spin(handle);
        if (got != 0 && !config_.arm_every_event) return false;
        arm();
        return drain(handle) == 0;
    }

private:
    int poll_once();
    void arm();
    template <class Handler>
    size_t spin(Handler& handle) {
        const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(config_.spin_us);
        do {
            if (size_t got = drain(handle)) return got;
        } while (std::chrono::steady_clock::now() < until);
        return 0;
    }

    PollConfig config_;
    ConnectionCounters& counters_;
    CompChannelPtr channel_;
    CqPtr cq_;
    unsigned unacked_ = 0;
    bool armed_ = false;
    std::array<ibv_wc, kMaxBatch> wcs_{};
};

}  // namespace rbio::iser::rdma
