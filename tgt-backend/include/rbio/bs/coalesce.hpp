#pragma once
// When two requests gathered in one event-loop pass may leave as one I/O.
#include <cstdint>

namespace rbio::bs {

struct Extent {
    uint64_t offset = 0;  // bytes
    uint32_t length = 0;  // bytes
    bool write = false;
    bool fua = false;  // must be durable before status (RWF_DSYNC)
};

struct MergeLimits {
    uint32_t max_bytes = 1u << 20;
    uint32_t max_iov = 64;
};

// True when `next` starts exactly where `run` ends, goes the same direction
// with the same durability, and the merged I/O stays within the limits.
// Only adjacent, never overlapping, ranges merge: requests of one pass are
// unordered with respect to each other anyway, so a merge changes no order.
inline bool can_append(const Extent& run, uint32_t run_iovs, const Extent& next, const MergeLimits& lim) {
    if (next.length == 0 || run.write != next.write || run.fua != next.fua) return false;
    if (run.offset + run.length != next.offset) return false;
    if (run_iovs >= lim.max_iov) return false;
    return uint64_t(run.length) + next.length <= lim.max_bytes;
}

}  // namespace rbio::bs
