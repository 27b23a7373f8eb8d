#include "rbio/iser/rdma/work_queues.hpp"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <stdexcept>

namespace rbio::iser::rdma {

SendQueue::SendQueue(const SendConfig& config, SendPoster& poster, ConnectionCounters& counters)
    : config_(config), poster_(poster), counters_(counters) {
    if (config.depth == 0 || config.signal_every == 0)
        throw std::invalid_argument("send queue: depth and signal_every must be positive");
    const uint64_t size = std::bit_ceil(uint64_t(config.depth));
    ring_ = std::make_unique<Entry[]>(size);
    mask_ = size - 1;
    for (uint64_t i = 0; i < size; ++i) ring_[i].wr.sg_list = ring_[i].sge.data();
    // Keep the unsignalled stretch well inside the send queue, so a full
    // queue always has a completion on its way that frees it.
    unsignaled_max_ = std::max(config.depth / 2, 1u);
}

bool SendQueue::push(const SendRequest& r) {
    const size_t n = r.sge.size();
    if (!has_room() || n > kMaxSge) return false;
    Entry& e = at(next_);
    e.token = r.token;
    e.slot = r.slot;
    ibv_send_wr& wr = e.wr;
    wr.wr_id = next_;
    uint32_t bytes = 0;
    for (size_t i = 0; i < n; ++i) {
        e.sge[i] = r.sge[i];
        bytes += r.sge[i].length;
    }
    wr.num_sge = int(n);
    switch (r.kind) {
        case WrKind::Send:
            wr.opcode = IBV_WR_SEND;
            // Inline data is copied by the post call: the provider never reads
            // the buffer later, and small responses need no DMA of their own.
            wr.send_flags = bytes <= config_.max_inline ? unsigned(IBV_SEND_INLINE) : 0u;
            break;
        case WrKind::RdmaWrite:
        case WrKind::RdmaRead:
            wr.opcode = r.kind == WrKind::RdmaWrite ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ;
            wr.send_flags = 0;
            wr.wr.rdma.remote_addr = r.remote_addr;
            wr.wr.rdma.rkey = r.rkey;
            break;
    }
    ++next_;
    if (!config_.batch) flush();  // a failure is kept for the next flush() to report
    return true;
}

int SendQueue::flush() {
    if (post_error_ != 0) return post_error_;
    if (next_ == posted_) {
        // signal_next_flush() with nothing queued: the sends it waits for
        // were posted already. Unsignalled, they are covered now, not at
        // the next send or the quiet tick (which a peer that keeps sending
        // requests without responses would put off for ever); covered
        // already, or done, nothing is needed.
        if (!signal_last_ || (needs_cover() && !has_room())) return 0;
        signal_last_ = false;
        return needs_cover() ? post_empty_write() : 0;
    }
    uint32_t signaled = 0;
    uint64_t covered = last_signaled_;
    const bool signal_all = config_.signal_every <= 1;
    ibv_send_wr* prev = nullptr;
    for (uint64_t s = posted_; s < next_; ++s) {
        ibv_send_wr& wr = at(s).wr;
        if (prev) prev->next = &wr;
        prev = &wr;
        // Signalled: every request when selective signalling is off, an
        // RDMA READ (its data is awaited), one in signal_every, one before
        // the unsignalled stretch grows past half the queue, and the last
        // one after signal_next_flush().
        if (signal_all || wr.opcode == IBV_WR_RDMA_READ || unsignaled_run_ + 1 >= config_.signal_every ||
            s + 1 - std::max(covered, completed_) >= unsignaled_max_ || (signal_last_ && s + 1 == next_)) {
            wr.send_flags |= IBV_SEND_SIGNALED;
            unsignaled_run_ = 0;
            covered = s + 1;
            ++signaled;
        } else {
            wr.send_flags &= ~unsigned(IBV_SEND_SIGNALED);
            ++unsignaled_run_;
        }
    }
    prev->next = nullptr;
    signal_last_ = false;
    ibv_send_wr* bad = nullptr;
    const uint64_t first = posted_;
    int rc = poster_.post(&at(first).wr, &bad);
    uint64_t end = next_;
    if (rc == 0) {
        last_signaled_ = covered;
    } else {
        // Requests before `bad` went out; the rest stay queued for cancel_all().
        end = first;
        if (bad) {
            for (uint64_t s = first; s < next_; ++s)
                if (&at(s).wr == bad) {
                    end = s;
                    break;
                }
        }
        for (uint64_t s = first; s < end; ++s)
            if (at(s).wr.send_flags & IBV_SEND_SIGNALED) last_signaled_ = s + 1;
    }
    counters_[Counter::PostCalls] += 1;
    counters_[Counter::WorkRequests] += end - first;
    counters_[Counter::Signaled] += rc == 0 ? signaled : 0;
    posted_ = end;
    post_error_ = rc;
    return rc;
}

int SendQueue::cover() {
    if (!needs_cover() || !has_room()) return 0;
    return post_empty_write();
}

int SendQueue::probe() {
    if (queued() != 0 || in_flight() != 0) return 0;  // those complete or fail by themselves
    return post_empty_write();
}

int SendQueue::post_empty_write() {
    Entry& e = at(next_);
    e.token = 0;
    e.slot = kNoSlot;
    e.wr.wr_id = next_;
    e.wr.num_sge = 0;
    e.wr.opcode = IBV_WR_RDMA_WRITE;  // zero length: no R_Key is checked, nothing is written
    e.wr.send_flags = 0;
    e.wr.wr.rdma.remote_addr = 0;
    e.wr.wr.rdma.rkey = 0;
    ++next_;
    unsignaled_run_ = config_.signal_every;  // forces the signal
    return flush();
}

RecvQueue::RecvQueue(RecvPoster& poster, uint32_t capacity, ConnectionCounters& counters, bool batch)
    : poster_(poster), counters_(counters), batch_(batch), wrs_(capacity), sges_(capacity) {
    if (capacity == 0) throw std::invalid_argument("receive queue: capacity must be positive");
}

int RecvQueue::repost(uint32_t index, uint64_t addr, uint32_t length, uint32_t lkey) {
    ibv_sge& sge = sges_[count_];
    sge = ibv_sge{addr, length, lkey};
    return repost(index, &sge, 1);
}

int RecvQueue::repost(uint32_t index, ibv_sge* sge, int n) {
    ibv_recv_wr& wr = wrs_[count_];
    wr = ibv_recv_wr{};
    wr.wr_id = kRecvWrFlag | index;
    wr.sg_list = sge;
    wr.num_sge = n;
    ++count_;
    if (!batch_ || count_ == wrs_.size()) return flush();
    return 0;
}

int RecvQueue::flush() {
    if (count_ == 0) return 0;
    for (uint32_t i = 0; i + 1 < count_; ++i) wrs_[i].next = &wrs_[i + 1];
    wrs_[count_ - 1].next = nullptr;
    ibv_recv_wr* bad = nullptr;
    int rc = poster_.post(wrs_.data(), &bad);
    counters_[Counter::RecvPostCalls] += 1;
    counters_[Counter::RecvRequests] += count_;
    count_ = 0;
    return rc;
}

}  // namespace rbio::iser::rdma
