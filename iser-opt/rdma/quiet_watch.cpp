#include "rbio/iser/rdma/quiet_watch.hpp"

namespace rbio::iser::rdma {

QuietAction QuietWatch::tick(uint64_t completions, uint32_t outstanding) {
    if (completions != completions_) {
        completions_ = completions;
        quiet_ = stalled_ = 0;
    }
    ++quiet_;
    if (outstanding == 0) {
        stalled_ = 0;
        return limits_.probe_every != 0 && quiet_ % limits_.probe_every == 0 ? QuietAction::Probe
                                                                             : QuietAction::None;
    }
    ++stalled_;
    if (stalled_ >= limits_.end_after) return QuietAction::End;
    if (stalled_ == limits_.reap_after) return QuietAction::Reap;
    return QuietAction::None;
}

QuietAction quiet_second(SendQueue& sq, QuietWatch& watch, uint64_t completions, int& post_error) {
    post_error = sq.cover();
    const QuietAction a = watch.tick(completions, sq.queued() + sq.in_flight());
    if (a == QuietAction::Probe && post_error == 0) post_error = sq.probe();
    return a;
}

}  // namespace rbio::iser::rdma
