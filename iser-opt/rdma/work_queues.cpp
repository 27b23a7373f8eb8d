#include "rbio/iser/rdma/work_queues.hpp"

#include <algorithm>
#include <cerrno>
#include <stdexcept>
#include <utility>

namespace rbio::iser::rdma {

SendQueue::SendQueue(const SendConfig& config, SendPoster& poster, SendRelease release,
                     ConnectionCounters& counters)
    : config_(config), poster_(poster), release_(std::move(release)), counters_(counters) {
    if (config.depth == 0 || config.signal_every == 0)
        throw std::invalid_argument("send queue: depth and signal_every must be positive");
    ring_.resize(config.depth);
}

bool SendQueue::push(const SendRequest& r) {
    if (!has_room() || r.sge.size() > kMaxSge) return false;
    Entry& e = at(next_);
    e.token = r.token;
    e.slot = r.slot;
    e.wr = ibv_send_wr{};
    e.wr.wr_id = next_;
    uint32_t bytes = 0;
    for (size_t i = 0; i < r.sge.size(); ++i) {
        e.sge[i] = r.sge[i];
        bytes += r.sge[i].length;
    }
    e.wr.sg_list = r.sge.empty() ? nullptr : e.sge.data();
    e.wr.num_sge = int(r.sge.size());
    switch (r.kind) {
        case WrKind::Send:
            e.wr.opcode = IBV_WR_SEND;
            // Inline data is copied by the post call: the provider never reads
            // the buffer later, and small responses need no DMA of their own.
            if (bytes <= config_.max_inline) e.wr.send_flags |= IBV_SEND_INLINE;
            break;
        case WrKind::RdmaWrite:
            e.wr.opcode = IBV_WR_RDMA_WRITE;
            e.wr.wr.rdma.remote_addr = r.remote_addr;
            e.wr.wr.rdma.rkey = r.rkey;
            break;
        case WrKind::RdmaRead:
            e.wr.opcode = IBV_WR_RDMA_READ;
            e.wr.wr.rdma.remote_addr = r.remote_addr;
            e.wr.wr.rdma.rkey = r.rkey;
            break;
    }
    ++next_;
    if (!config_.batch) flush();  // a failure is kept for the next flush() to report
    return true;
}

bool SendQueue::wants_signal(const Entry& e, uint64_t covered) const {
    if (config_.signal_every <= 1 || e.wr.opcode == IBV_WR_RDMA_READ) return true;
    if (unsignaled_run_ + 1 >= config_.signal_every) return true;
    // Keep the unsignalled stretch well inside the send queue, so a full
    // queue always has a completion on its way that frees it.
    return e.wr.wr_id + 1 - std::max(covered, completed_) >= std::max(config_.depth / 2, 1u);
}

int SendQueue::flush() {
    if (post_error_ != 0) return post_error_;
    if (next_ == posted_) return 0;
    uint32_t signaled = 0;
    uint64_t covered = last_signaled_;
    for (uint64_t s = posted_; s < next_; ++s) {
        Entry& e = at(s);
        e.wr.next = s + 1 < next_ ? &at(s + 1).wr : nullptr;
        if (wants_signal(e, covered)) {
            e.wr.send_flags |= IBV_SEND_SIGNALED;
            unsignaled_run_ = 0;
            covered = s + 1;
            ++signaled;
        } else {
            e.wr.send_flags &= ~unsigned(IBV_SEND_SIGNALED);
            ++unsignaled_run_;
        }
    }
    ibv_send_wr* bad = nullptr;
    const uint64_t first = posted_;
    int rc = poster_.post(&at(first).wr, &bad);
    uint64_t end = next_;
    if (rc != 0) {
        // Requests before `bad` went out; the rest stay queued for cancel_all().
        end = first;
        if (bad) {
            for (uint64_t s = first; s < next_; ++s)
                if (&at(s).wr == bad) {
                    end = s;
                    break;
                }
        }
    }
    for (uint64_t s = first; s < end; ++s)
        if (at(s).wr.send_flags & IBV_SEND_SIGNALED) last_signaled_ = s + 1;
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
    e.wr = ibv_send_wr{};
    e.wr.wr_id = next_;
    e.wr.opcode = IBV_WR_RDMA_WRITE;  // zero length: no R_Key is checked, nothing is written
    ++next_;
    unsignaled_run_ = config_.signal_every;  // forces the signal
    return flush();
}

bool SendQueue::on_completion(uint64_t wr_id, int status) {
    if (wr_id < completed_ || wr_id >= posted_) return false;
    while (completed_ <= wr_id) {
        const Entry& e = at(completed_);
        const uint64_t token = e.token;
        const uint32_t slot = e.slot;
        const int st = completed_ == wr_id ? status : 0;
        ++completed_;
        release_(token, slot, st);
    }
    return true;
}

void SendQueue::cancel_all(int status) {
    while (completed_ < next_) {
        const Entry& e = at(completed_);
        const uint64_t token = e.token;
        const uint32_t slot = e.slot;
        ++completed_;
        release_(token, slot, status);
    }
    posted_ = next_ = completed_;
    last_signaled_ = completed_;
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
