#pragma once
// The receive side of one connection: request batching.
//
// Stock tgt reads every PDU in two or three read() calls (header, then data,
// then digest). RxBuffer instead lets the transport read once per readiness
// event, as many bytes as the socket holds and the buffer has room for, and
// then yields every complete PDU in those bytes as views into the buffer,
// keeping a partial PDU for the next read. The buffer is allocated once per
// connection; nothing is allocated or copied per PDU.
//
// The event-loop pass of a transport:
//
//     auto iov = rx.read_vectors();           // may be empty: see below
//     ssize_t n = readv(fd, iov.data(), iov.size());   // one call
//     if (n > 0) rx.commit(n);
//     for (;;) {
//         RxResult r = rx.next();
//         if (r.status == RxStatus::Pdu) hand_to_iscsi_core(r.pdu);
//         else if (r.status == RxStatus::NeedDestination)
//             rx.set_data_destination(buffer_for(r.pdu.header()));
//         else break;                        // NeedMore or Failed
//     }
//
// Large data segments (the direct path). When a PDU's data segment is at
// least RxConfig::direct_data_threshold bytes, or the whole PDU would not fit
// in the buffer, next() stops after the header with NeedDestination: the
// caller looks at the header (e.g. finds the SCSI command a Data-Out belongs
// to) and hands over a destination of exactly DataSegmentLength bytes with
// set_data_destination(). Data bytes that already arrived with the header are
// copied there once; from then on read_vectors() points the read straight at
// the rest of the destination, followed by the buffer's free space for the
// padding, the digest and whatever PDUs come next, so even the direct path
// costs one readv per event. Once the data and its digest are in, next()
// yields the PDU with `data` being the destination.
//
// Malformed input (unknown opcode, a length beyond the limits, a bad AHS, a
// digest mismatch) puts the buffer into a failed state for good: next()
// returns Failed, error() says why, and the connection is to be closed.
#include <sys/uio.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>

#include "rbio/iser/counters.hpp"
#include "rbio/iser/error.hpp"
#include "rbio/iser/pdu.hpp"

namespace rbio::iser {

struct RxConfig {
    // Bytes allocated once per connection. At least large enough for the
    // largest header plus a data trailer (min_capacity()); the larger, the
    // more PDUs one read can bring. Room for a few full data segments keeps
    // the direct path for PDUs beyond the threshold only.
    size_t capacity = 512 * 1024;
    PduLimits limits{};
    // Who sends the PDUs this buffer receives (a target receives from
    // initiators).
    PduSender sender = PduSender::Initiator;
    // Data segments of at least this many bytes are offered for direct
    // placement (NeedDestination) even when they would fit in the buffer.
    // The default leaves the direct path to PDUs that do not fit.
    uint32_t direct_data_threshold = UINT32_MAX;
    // Off switch of request batching: false reads only the bytes of the
    // current PDU part (header, then data), as stock tgt does, so benchmarks
    // can show what batching buys.
    bool batch_reads = true;
};

enum class RxStatus : uint8_t {
    Pdu,              // pdu holds one complete PDU
    NeedMore,         // read more, then call next() again
    NeedDestination,  // pdu.bhs/ahs hold a verified header; call
                      // set_data_destination(), then next() again
    Failed,           // error() says why; close the connection
};

// Views of one PDU. bhs and ahs point into the buffer and stay valid until
// the next read_vectors() call; data points into the buffer too, or is the
// caller's destination on the direct path.
struct RxPdu {
    std::span<const uint8_t> bhs;   // kBhsLength bytes
    std::span<const uint8_t> ahs;   // TotalAHSLength * 4 bytes
    std::span<const uint8_t> data;  // DataSegmentLength bytes, no padding
    BhsView header() const { return BhsView(bhs.data()); }
};

struct RxResult {
    RxStatus status;
    RxPdu pdu;
};

class RxBuffer {
public:
    // Throws std::invalid_argument when the capacity is below min_capacity().
    RxBuffer(const RxConfig& config, ConnectionCounters& counters);
    RxBuffer(const RxBuffer&) = delete;
    RxBuffer& operator=(const RxBuffer&) = delete;

    // Smallest capacity for `limits`: the largest header and a data trailer.
    static size_t min_capacity(const PduLimits& limits);

    // ---- fill side: one read per readiness event
    //
    // Where the next read may put bytes, for one readv/recvmsg: the buffer's
    // free space, preceded on the direct path by the rest of the caller's
    // destination. May move the unconsumed tail to the front of the buffer
    // (so every view handed out before is invalid afterwards). Empty when
    // nothing may be read now: the buffer failed, or it is full while a PDU
    // waits for set_data_destination().
    std::span<const iovec> read_vectors();
    // The read put n bytes into the vectors of the last read_vectors(), in
    // order. Counts one receive call. Throws std::logic_error when n is more
    // than those vectors hold.
    void commit(size_t n);

    // ---- consume side
    //
    // The next complete PDU, or why there is none. Call until it returns
    // NeedMore or Failed.
    RxResult next();
    // Where the data segment of the PDU that next() reported with
    // NeedDestination goes; exactly DataSegmentLength bytes, kept alive by
    // the caller until next() yields the PDU or the buffer is dropped.
    // Throws std::logic_error when no PDU waits for one, and
    // std::invalid_argument when the size is wrong.
    void set_data_destination(std::span<uint8_t> destination);

    bool failed() const { return state_ == State::Failed; }
    // Why the buffer failed; only when failed().
    const PduError& error() const { return *error_; }
    // Bytes of an unfinished PDU are held: end of stream now would cut a PDU.
    bool mid_pdu() const { return state_ != State::Header || end_ > start_; }
    // Bytes received and not yet yielded as (part of) a PDU.
    size_t buffered() const { return end_ - start_; }
    size_t capacity() const { return cap_; }
    const RxConfig& config() const { return config_; }

private:
    enum class State : uint8_t {
        Header,            // reading and checking the next PDU in the buffer
        AwaitDestination,  // header reported with NeedDestination
        DirectData,        // data segment goes to dest_
        Failed,            // framing lost; yields nothing more
    };

    RxResult parse_in_buffer();
    RxResult finish_direct();
    RxResult fail(PduError e);
    RxPdu header_views() const;
    // Bytes the buffer itself still needs for the PDU part being read.
    size_t wanted_in_buffer() const;
    bool goes_direct() const;
    void consume(size_t bytes);

    RxConfig config_;
    ConnectionCounters& counters_;
    std::unique_ptr<uint8_t[]> buf_;
    size_t cap_;
    size_t start_ = 0;  // first byte not yet yielded
    size_t end_ = 0;    // one past the last byte received
    State state_ = State::Header;
    // The BHS at start_ passed validate_bhs; layout_ describes it.
    bool bhs_checked_ = false;
    // The whole header at start_ is in and its digest and AHSs are good.
    bool header_checked_ = false;
    PduLayout layout_{};
    // Direct path: the caller's destination and how much of it is filled.
    std::span<uint8_t> dest_;
    size_t dest_have_ = 0;
    // Direct path: where padding and data digest lie, relative to start_.
    size_t trailer_at_ = 0;
    // What the last read_vectors() offered.
    std::array<iovec, 2> iov_{};
    size_t offered_dest_ = 0;
    size_t offered_buf_ = 0;
    std::optional<PduError> error_;
};

}  // namespace rbio::iser
