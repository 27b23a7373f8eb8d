#include "rbio/iser/rx_buffer.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

namespace rbio::iser {
namespace {

size_t ahs_limit(const PduLimits& l) { return std::min<size_t>(l.max_ahs_length, kMaxAhsLength); }

std::string hex32(uint32_t v) {
    char s[11];
    std::snprintf(s, sizeof s, "0x%08x", v);
    return s;
}

}  // namespace

size_t RxBuffer::min_capacity(const PduLimits& limits) {
    // Header with digest, then padding (3) and data digest (4) of a PDU
    // whose data went to a destination of its own.
    return kBhsLength + ahs_limit(limits) + kDigestLength + 3 + kDigestLength;
}

RxBuffer::RxBuffer(const RxConfig& config, ConnectionCounters& counters)
    : config_(config), counters_(counters), cap_(config.capacity) {
    if (cap_ < min_capacity(config.limits))
        throw std::invalid_argument("rx buffer capacity " + std::to_string(cap_) +
                                    " is below the largest header and trailer (" +
                                    std::to_string(min_capacity(config.limits)) + " bytes)");
    buf_ = std::make_unique_for_overwrite<uint8_t[]>(cap_);
}

RxPdu RxBuffer::header_views() const {
    const uint8_t* p = buf_.get() + start_;
    return RxPdu{{p, kBhsLength}, {p + kBhsLength, layout_.ahs_length}, {}};
}

bool RxBuffer::goes_direct() const {
    return layout_.data_length > 0 &&
           (layout_.data_length >= config_.direct_data_threshold || layout_.total_bytes() > cap_);
}

void RxBuffer::consume(size_t bytes) {
    start_ += bytes;
    bhs_checked_ = false;
    header_checked_ = false;
    dest_ = {};
    dest_have_ = 0;
    trailer_at_ = 0;
    state_ = State::Header;
    ++counters_[Counter::PdusIn];
}

RxResult RxBuffer::fail(PduError e) {
    error_ = std::move(e);
    state_ = State::Failed;
    return RxResult{RxStatus::Failed, {}};
}

RxResult RxBuffer::next() {
    switch (state_) {
        case State::Header: return parse_in_buffer();
        case State::AwaitDestination: return RxResult{RxStatus::NeedDestination, header_views()};
        case State::DirectData: return finish_direct();
        case State::Failed: break;
    }
    return RxResult{RxStatus::Failed, {}};
}

RxResult RxBuffer::parse_in_buffer() {
    const size_t avail = end_ - start_;
    if (avail < kBhsLength) return RxResult{RxStatus::NeedMore, {}};
    const uint8_t* p = buf_.get() + start_;
    const PduLimits& lim = config_.limits;
    if (!bhs_checked_) {
        BhsView bhs(p);
        if (auto e = validate_bhs(bhs, lim, config_.sender)) return fail(std::move(*e));
        layout_ = layout_of(bhs, lim.header_digest, lim.data_digest);
        bhs_checked_ = true;
    }
    const size_t header_bytes = layout_.header_bytes();
    if (avail < header_bytes) return RxResult{RxStatus::NeedMore, {}};
    if (!header_checked_) {
        const size_t covered = kBhsLength + layout_.ahs_length;
        if (lim.header_digest) {
            uint32_t got = load_digest(p + covered);
            uint32_t want = header_digest_of({p, covered});
            if (got != want)
                return fail(
                    PduError{PduErrc::HeaderDigestMismatch,
                             "header digest mismatch: got " + hex32(got) + " expected " + hex32(want)});
        }
        if (auto e = validate_ahs({p + kBhsLength, layout_.ahs_length})) return fail(std::move(*e));
        header_checked_ = true;
    }
    if (goes_direct()) {
        state_ = State::AwaitDestination;
        return RxResult{RxStatus::NeedDestination, header_views()};
    }
    if (avail < layout_.total_bytes()) return RxResult{RxStatus::NeedMore, {}};

    std::span<const uint8_t> data(p + header_bytes, layout_.data_length);
    if (layout_.data_digest_bytes() > 0) {
        const uint8_t* pad = p + header_bytes + layout_.data_length;
        uint32_t got = load_digest(pad + layout_.padding());
        uint32_t want = data_digest_of(data, {pad, layout_.padding()});
        if (got != want)
            return fail(PduError{PduErrc::DataDigestMismatch,
                                 "data digest mismatch: got " + hex32(got) + " expected " + hex32(want) +
                                     " (" + opcode_name(BhsView(p).opcode_byte()) + ", ITT " +
                                     hex32(BhsView(p).itt()) + ", " + std::to_string(layout_.data_length) +
                                     " bytes)"});
    }
    RxPdu pdu = header_views();
    pdu.data = data;
    consume(layout_.total_bytes());
    return RxResult{RxStatus::Pdu, pdu};
}

void RxBuffer::set_data_destination(std::span<uint8_t> destination) {
    if (state_ != State::AwaitDestination)
        throw std::logic_error("set_data_destination: no PDU waits for a data destination");
    if (destination.size() != layout_.data_length)
        throw std::invalid_argument("data destination of " + std::to_string(destination.size()) +
                                    " bytes for a data segment of " + std::to_string(layout_.data_length) +
                                    " bytes");
    const size_t header_bytes = layout_.header_bytes();
    const size_t present = end_ - start_ - header_bytes;
    const size_t take = std::min<size_t>(present, layout_.data_length);
    uint8_t* data_at = buf_.get() + start_ + header_bytes;
    std::memcpy(destination.data(), data_at, take);
    dest_ = destination;
    dest_have_ = take;
    trailer_at_ = header_bytes + take;
    const size_t after = present - take;
    if (after < layout_.trailer_bytes()) {
        // The trailer is not all in: what is there of it (under 7 bytes) moves
        // up to the header, so the buffer never has to hold header, data and
        // trailer together -- the data may be larger than the buffer.
        std::memmove(data_at, data_at + take, after);
        trailer_at_ = header_bytes;
        end_ = start_ + header_bytes + after;
    }
    state_ = State::DirectData;
}

RxResult RxBuffer::finish_direct() {
    if (dest_have_ < layout_.data_length) return RxResult{RxStatus::NeedMore, {}};
    if (end_ - start_ < trailer_at_ + layout_.trailer_bytes()) return RxResult{RxStatus::NeedMore, {}};
    const uint8_t* pad = buf_.get() + start_ + trailer_at_;
    if (layout_.data_digest_bytes() > 0) {
        uint32_t got = load_digest(pad + layout_.padding());
        uint32_t want = data_digest_of(dest_, {pad, layout_.padding()});
        if (got != want) {
            BhsView bhs(buf_.get() + start_);
            return fail(PduError{PduErrc::DataDigestMismatch,
                                 "data digest mismatch: got " + hex32(got) + " expected " + hex32(want) +
                                     " (" + opcode_name(bhs.opcode_byte()) + ", ITT " + hex32(bhs.itt()) +
                                     ", " + std::to_string(layout_.data_length) + " bytes)"});
        }
    }
    RxPdu pdu = header_views();
    pdu.data = dest_;
    consume(trailer_at_ + layout_.trailer_bytes());
    return RxResult{RxStatus::Pdu, pdu};
}

size_t RxBuffer::wanted_in_buffer() const {
    const size_t avail = end_ - start_;
    switch (state_) {
        case State::Header: {
            if (avail < kBhsLength) return kBhsLength - avail;
            // Only sizes a read: an unchecked length is harmless here, the
            // read is bounded by the free space and next() checks it.
            PduLayout l = layout_of(BhsView(buf_.get() + start_), config_.limits.header_digest,
                                    config_.limits.data_digest);
            if (avail < l.header_bytes()) return l.header_bytes() - avail;
            size_t total = std::min(l.total_bytes(), cap_);
            return total > avail ? total - avail : 0;
        }
        case State::AwaitDestination: return 0;
        case State::DirectData: {
            size_t need = trailer_at_ + layout_.trailer_bytes();
            return need > avail ? need - avail : 0;
        }
        case State::Failed: break;
    }
    return 0;
}

std::span<const iovec> RxBuffer::read_vectors() {
    offered_dest_ = offered_buf_ = 0;
    if (state_ == State::Failed) return {};
    if (start_ == end_) start_ = end_ = 0;
    const size_t want = wanted_in_buffer();
    // Move the unconsumed tail (one partial PDU at most, or the header of a
    // direct PDU) to the front only when the free space is short of it or
    // below a quarter of the buffer: every byte moves at most once per three
    // quarters of a buffer read, and a large partial PDU is not moved on
    // every read.
    if (start_ > 0 && (cap_ - end_ < want || cap_ - end_ < cap_ / 4)) {
        std::memmove(buf_.get(), buf_.get() + start_, end_ - start_);
        end_ -= start_;
        start_ = 0;
    }
    size_t n = 0;
    if (state_ == State::DirectData && dest_have_ < dest_.size()) {
        offered_dest_ = dest_.size() - dest_have_;
        iov_[n++] = iovec{dest_.data() + dest_have_, offered_dest_};
    }
    size_t room = cap_ - end_;
    if (!config_.batch_reads) room = std::min(room, want);
    if (room > 0) {
        offered_buf_ = room;
        iov_[n++] = iovec{buf_.get() + end_, room};
    }
    return {iov_.data(), n};
}

void RxBuffer::commit(size_t n) {
    if (n > offered_dest_ + offered_buf_)
        throw std::logic_error("rx commit of " + std::to_string(n) + " bytes, but only " +
                               std::to_string(offered_dest_ + offered_buf_) + " were offered");
    ++counters_[Counter::RecvCalls];
    counters_[Counter::BytesIn] += n;
    const size_t to_dest = std::min(n, offered_dest_);
    dest_have_ += to_dest;
    end_ += n - to_dest;
    offered_dest_ = offered_buf_ = 0;
}

}  // namespace rbio::iser
