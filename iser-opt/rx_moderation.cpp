#include "rbio/iser/rx_moderation.hpp"

#include <algorithm>

namespace rbio::iser {

uint32_t RxModeration::lowat_for(uint32_t level, size_t smallest, size_t awaited) const {
    if (level <= 1 || awaited == SIZE_MAX) return 1;
    // The PDU under way counts as one of the level's requests.
    const uint64_t bytes =
        awaited > 0 ? awaited + uint64_t(level - 1) * smallest : uint64_t(level) * smallest;
    return uint32_t(std::min<uint64_t>(bytes, config_.max_bytes));
}

RxModeration::Step RxModeration::end_pass(bool timer_fired, bool full_feature, size_t awaited,
                                          bool answered) {
    const uint32_t n = pdus_;
    if (n > 0) pdu_bytes_ = smallest_;
    pdus_ = 0;
    smallest_ = SIZE_MAX;

    uint32_t level = level_;
    if (!enabled() || !full_feature) {
        level = 1;
    } else if (timer_fired && n < level) {
        // The initiator sent fewer than the level within the wait: its depth
        // fell, or it sends more slowly than the timer runs. Wait for what
        // it did send, no more (none: wake on every byte).
        level = n >= config_.min_pdus ? n : 1;
    } else if (n > level && n >= config_.min_pdus && (level > 1 || usual_x8_ < config_.min_pdus * 4)) {
        // n requests were in flight together: waiting for n is safe while
        // the initiator keeps that depth. From no wait, only when passes
        // usually see fewer than half the minimum: an initiator that sends
        // its requests in batches gets nothing from waiting.
        level = std::min(n, config_.max_pdus);
    }
    // (rounded up, so that a steady n settles at 8n, not above)
    if (level_ == 1 && n > 0) usual_x8_ = usual_x8_ - (usual_x8_ + 7) / 8 + std::min(n, 1024u);
    level_ = level;

    Step s;
    const uint32_t lowat = lowat_for(level, pdu_bytes_, awaited);
    if (lowat != lowat_) {
        lowat_ = lowat;
        s.set_lowat = true;
    }
    // A pass that took requests or answered some goes back to waiting:
    // above one request, only as long as the timer allows.
    s.arm_timer = lowat_ > 1 && (n > 0 || answered || s.set_lowat);
    return s;
}

}  // namespace rbio::iser
