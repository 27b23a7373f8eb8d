#include "rbio/iser/tx_queue.hpp"

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "rbio/iser/pdu.hpp"

namespace rbio::iser {

const char* to_string(TxState s) {
    switch (s) {
        case TxState::Idle: return "idle";
        case TxState::Pending: return "pending";
        case TxState::Blocked: return "blocked";
        case TxState::Failed: return "failed";
    }
    return "unknown";
}

TxQueue::TxQueue(const TxConfig& config, StreamWriter& writer, TxCompletion completion,
                 ConnectionCounters& counters)
    : config_(config), writer_(writer), completion_(std::move(completion)), counters_(counters) {
    if (config_.max_queued_pdus == 0 || config_.max_iov == 0 || config_.max_queued_bytes == 0)
        throw std::invalid_argument("tx queue limits must be above 0");
    if (config_.max_iov > IOV_MAX)
        throw std::invalid_argument("tx max_iov " + std::to_string(config_.max_iov) + " exceeds IOV_MAX " +
                                    std::to_string(IOV_MAX));
    ring_.resize(config_.max_queued_pdus);
    iov_.resize(config_.max_iov);
}

TxAccept TxQueue::enqueue(const TxPdu& pdu) {
    if (failed_) return TxAccept::Failed;
    if (pdu.header.size() < kBhsLength || pdu.header.size() % 4 != 0) return TxAccept::Invalid;
    BhsView bhs(pdu.header.data());
    if (bhs.ahs_length() != pdu.header.size() - kBhsLength || bhs.data_segment_length() != pdu.data.size())
        return TxAccept::Invalid;
    if (count_ == ring_.size()) return TxAccept::Full;

    Entry& e = ring_[(head_ + count_) % ring_.size()];
    auto seg = [&e](const void* base, size_t len) { e.seg[e.nseg++] = iovec{const_cast<void*>(base), len}; };
    e.nseg = 0;
    e.user_data = pdu.user_data;
    e.sent = 0;
    seg(pdu.header.data(), pdu.header.size());
    if (config_.header_digest) {
        store_digest(e.header_digest.data(), header_digest_of(pdu.header));
        seg(e.header_digest.data(), kDigestLength);
    }
    if (!pdu.data.empty()) {
        seg(pdu.data.data(), pdu.data.size());
        size_t pad = pad4(pdu.data.size()) - pdu.data.size();
        if (pad > 0) seg(kZeroPad.data(), pad);
        if (config_.data_digest) {
            store_digest(e.data_digest.data(),
                         data_digest_of(pdu.data, std::span<const uint8_t>(kZeroPad).first(pad)));
            seg(e.data_digest.data(), kDigestLength);
        }
    }
    e.total = 0;
    for (uint8_t i = 0; i < e.nseg; ++i) e.total += e.seg[i].iov_len;
    ++count_;
    unsent_bytes_ += e.total;
    unsent_iov_ += e.nseg;

    if (!in_flush_ && !blocked_ &&
        (!config_.coalesce || unsent_iov_ >= config_.max_iov || unsent_bytes_ >= config_.max_queued_bytes))
        write_out();
    return TxAccept::Queued;
}

TxState TxQueue::flush() {
    if (in_flush_ || failed_ || blocked_) return state();
    return write_out();
}

TxState TxQueue::on_writable() {
    if (in_flush_ || failed_) return state();
    blocked_ = false;
    return write_out();
}

size_t TxQueue::gather(size_t& bytes) {
    size_t n = 0;
    bytes = 0;
    for (size_t i = 0; i < count_; ++i) {
        const Entry& e = ring_[(head_ + i) % ring_.size()];
        size_t skip = i == 0 ? e.sent : 0;
        for (uint8_t s = 0; s < e.nseg; ++s) {
            size_t len = e.seg[s].iov_len;
            if (skip >= len) {
                skip -= len;
                continue;
            }
            iov_[n++] = iovec{static_cast<uint8_t*>(e.seg[s].iov_base) + skip, len - skip};
            bytes += len - skip;
            skip = 0;
            if (n == iov_.size()) return n;
        }
    }
    return n;
}

void TxQueue::pop_and_complete(int status) {
    Entry& e = ring_[head_];
    uint64_t user_data = e.user_data;
    unsent_bytes_ -= e.total - e.sent;
    unsent_iov_ -= e.nseg;
    head_ = (head_ + 1) % ring_.size();
    --count_;
    if (status == 0) ++counters_[Counter::PdusOut];
    // Last: the completion may enqueue, which reuses the slot just freed.
    if (completion_) completion_(user_data, status);
}

void TxQueue::advance(size_t n) {
    while (n > 0 && count_ > 0) {
        Entry& e = ring_[head_];
        size_t left = e.total - e.sent;
        if (n < left) {
            e.sent += n;
            unsent_bytes_ -= n;
            return;
        }
        n -= left;
        unsent_bytes_ -= left;
        e.sent = e.total;
        pop_and_complete(0);
    }
}

TxState TxQueue::write_out() {
    struct InFlush {
        bool& flag;
        explicit InFlush(bool& f) : flag(f) { flag = true; }
        ~InFlush() { flag = false; }
    } guard(in_flush_);

    while (count_ > 0) {
        size_t offered = 0;
        size_t niov = gather(offered);
        ssize_t r = writer_.write(std::span<const iovec>(iov_.data(), niov));
        ++counters_[Counter::SendCalls];
        if (r == -EINTR) continue;
        if (r == -EAGAIN || r == -EWOULDBLOCK) {
            blocked_ = true;
            ++counters_[Counter::WouldBlock];
            break;
        }
        if (r <= 0) {
            int err = r < 0 ? int(-r) : EIO;
            failed_ = true;
            error_ = std::string("send of ") + std::to_string(offered) + " bytes in " + std::to_string(niov) +
                     " iovecs: " + std::strerror(err);
            while (count_ > 0) pop_and_complete(-err);
            break;
        }
        counters_[Counter::BytesOut] += size_t(r);
        advance(size_t(r));
        // A non-blocking socket takes less than offered only when its send
        // buffer is full; asking again would cost a call to learn EAGAIN.
        if (size_t(r) < offered) {
            blocked_ = true;
            ++counters_[Counter::WouldBlock];
            break;
        }
    }
    return state();
}

void TxQueue::cancel_all(int status) {
    while (count_ > 0) pop_and_complete(status);
}

}  // namespace rbio::iser
