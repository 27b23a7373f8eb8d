#pragma once
// What a quiet RDMA connection needs, decided once a second by its owner's
// timer (no device here, so the policy is unit-tested on its own).
//
// A peer can vanish without a disconnect reaching us (its host crashed, the
// link went down). An idle connection then learns nothing: it gets a
// liveness probe (one signalled zero-length RDMA WRITE), whose failure ends
// it. A connection with work requests outstanding is not probed, since
// those complete or fail by themselves, except when they do neither:
// soft-RoCE (rxe) treats a retry count of 7, which the kernel's iSER
// initiator asks for and the passive side's queue pair inherits, as
// "retry for ever", so a request whose acknowledgement was lost with the
// link is resent into the void with no error, ever. So outstanding work
// with no completion at all for a while first gets its completion queue
// reaped (a completion nobody took would show up), and then the
// connection is given up.
#include <cstdint>

#include "rbio/iser/rdma/work_queues.hpp"

namespace rbio::iser::rdma {

enum class QuietAction : uint8_t {
    None,   // nothing to do this second
    Probe,  // idle: post a liveness probe
    Reap,   // work outstanding without a completion: reap the CQ (run a pass)
    End,    // still none: the peer is gone, end the connection
};

struct QuietLimits {
    unsigned probe_every = 5;  // quiet seconds between probes of an idle connection
    unsigned reap_after = 5;   // seconds of outstanding work with no completion
    // An acknowledgement takes a round trip, retries about a second each on
    // RoCE: a live peer's adapter answers well within this.
    unsigned end_after = 15;
};

class QuietWatch {
public:
    explicit QuietWatch(QuietLimits limits = {}) : limits_(limits) {}

    // One second went by with the connection quiet (no pass of its own).
    // `completions`: how many work completions it has reaped so far (any
    // change is progress); `outstanding`: send work requests queued or
    // posted and not yet known complete.
    QuietAction tick(uint64_t completions, uint32_t outstanding);

    // Seconds in a row that work has been outstanding with no completion.
    unsigned stalled_seconds() const { return stalled_; }

private:
    QuietLimits limits_;
    uint64_t completions_ = 0;
    unsigned quiet_ = 0;    // seconds in a row without a completion
    unsigned stalled_ = 0;  // of those, in a row with work outstanding
};

// One quiet second of a connection's send queue: an unsignalled tail is
// covered (so its requests can complete, and outstanding work always ends
// in a signalled one), then the watch decides, and a Probe is posted here.
// `post_error` gets the errno of a refused post (the connection is to be
// failed); the returned action is the watch's, Reap and End for the owner.
QuietAction quiet_second(SendQueue& sq, QuietWatch& watch, uint64_t completions, int& post_error);

}  // namespace rbio::iser::rdma
