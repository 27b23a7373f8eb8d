#pragma once
// A completion queue with its completion channel, reaped the way the third
// optimisation wants (asynchronous send-path events): completions are polled
// in arrays (one ibv_poll_cq call reaps up to `batch`), the queue is polled
// again inline after the pass has posted its sends, and the channel - an fd
// in the owner's event loop, i.e. an interrupt - is armed only when a poll
// finds nothing, after a bounded spin whose length adapts (SpinBudget).
// Stock tgt's iSER polls one completion per call and re-arms after every
// event.
//
//     poller.on_channel_event();              // channel fd readable
//     poller.drain(handle_wc);                // reap everything
//     ...post the pass's sends...
//     if (poller.drain_and_arm(handle_wc))    // empty: armed, wait for the fd
//         ;                                   // else more came: loop again
#include <infiniband/verbs.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>

#include "rbio/iser/counters.hpp"
#include "rbio/iser/rdma/verbs.hpp"

namespace rbio::iser::rdma {

struct PollConfig {
    uint32_t batch = 32;           // completions per ibv_poll_cq call (at most kMaxBatch)
    uint32_t spin_us = 16;         // the longest an empty CQ is polled before arming; 0: never
    bool adaptive = true;          // the spin follows what spinning earns (SpinBudget)
    bool arm_every_event = false;  // off switch: re-arm after every event (stock)
};

// How long to poll an empty CQ before sleeping on the channel. A spin that
// catches the next completion saves an interrupt and an event-loop wake-up
// (the peer often answers within a round trip); one that catches nothing
// burns CPU and, in tgtd's single event loop, holds up every other
// connection and the backing store's completions. So the budget follows the
// outcome: a hit restores the full bound, a miss halves it, down to nothing;
// with nothing left, every kProbeEvery-th idle arm spins an eighth of the
// bound once, so a workload that starts to benefit is noticed.
class SpinBudget {
public:
    static constexpr uint32_t kProbeEvery = 64;

    SpinBudget(uint32_t max_us, bool adaptive) : max_(max_us), cur_(max_us), adaptive_(adaptive) {}
    // Microseconds to spin now; 0: arm at once.
    uint32_t next_us() {
        if (!adaptive_ || cur_ > 0) return cur_;
        if (max_ == 0 || ++idle_ < kProbeEvery) return 0;
        idle_ = 0;
        return std::max<uint32_t>(1, max_ / 8);
    }
    void hit() { cur_ = max_; }
    void miss() {
        if (adaptive_) cur_ /= 2;
    }
    uint32_t current_us() const { return cur_; }

private:
    uint32_t max_, cur_;
    bool adaptive_;
    uint32_t idle_ = 0;
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

    // The channel fd was readable: takes its event (acknowledged in bulk)
    // with one read(), none when not armed. False when there was none (a
    // spurious wake-up, or a pass run without one).
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

    // End of a pass: drains (spinning for the budget while empty), then arms
    // the channel and polls once more, because a completion that arrived
    // between the last poll and the arming raises no event. Returns true when
    // armed with nothing pending (wait for the fd), false when that last poll
    // found completions (they were handled: run the pass again).
    template <class Handler>
    bool drain_and_arm(Handler&& handle) {
        size_t got = drain(handle);
        if (got == 0) got = spin(handle);
        if (got != 0 && !config_.arm_every_event) return false;
        arm();
        return drain(handle) == 0;
    }

private:
    int poll_once();
    void arm();
    template <class Handler>
    size_t spin(Handler& handle) {
        const uint32_t us = budget_.next_us();
        if (us == 0) return 0;
        const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
        do {
            if (size_t got = drain(handle)) {
                budget_.hit();
                counters_[Counter::SpinHits] += 1;
                return got;
            }
        } while (std::chrono::steady_clock::now() < until);
        budget_.miss();
        counters_[Counter::SpinMisses] += 1;
        return 0;
    }

    PollConfig config_;
    SpinBudget budget_;
    ConnectionCounters& counters_;
    CompChannelPtr channel_;
    CqPtr cq_;
    unsigned unacked_ = 0;
    bool armed_ = false;
    std::array<ibv_wc, kMaxBatch> wcs_{};
};

}  // namespace rbio::iser::rdma
