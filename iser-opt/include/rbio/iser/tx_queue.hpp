#pragma once
// The send side of one connection on a byte stream (TCP): message
// coalescing.
//
// Stock tgt writes each response PDU with one write() per part between two
// setsockopt(TCP_CORK) calls. TxQueue instead queues the PDUs an event-loop
// pass produces as iovecs that point at the caller's header and data (only
// digests are stored here; padding points at constant zeros) and writes them
// all with one gather write when the pass ends. It writes earlier only when
// the queued iovecs or bytes reach the configured limits (IOV_MAX is also
// the most one sendmsg takes).
//
// A partial write leaves the rest queued, at any byte -- in a header, a
// digest or the data. When the socket takes less than offered or nothing
// (EAGAIN), the queue reports Blocked and writes nothing more until
// on_writable(): the caller arms EPOLLOUT only then, and disarms it when a
// flush returns Idle. When every byte of a PDU has been written its
// completion runs (in queue order) so the caller can release the PDU's
// buffers.
//
// The event-loop pass of a transport:
//
//     for (each response) tx.enqueue({header, data, user_data});
//     TxState s = tx.flush();                // end of the pass
//     // on EPOLLOUT: s = tx.on_writable();
//     arm_epollout(s == TxState::Blocked);
//     if (s == TxState::Failed) close_connection(tx.error());
#include <sys/types.h>
#include <sys/uio.h>

#include <array>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "rbio/iser/counters.hpp"

namespace rbio::iser {

// The kernel boundary of the send side: one non-blocking gather write. Tests
// implement it to cut writes short or refuse them; SocketWriter is the real
// one.
class StreamWriter {
public:
    virtual ~StreamWriter() = default;
    // Writes a prefix of the bytes `iov` describes (never empty) without
    // blocking. Returns how many bytes (> 0), -EAGAIN when none can be
    // written now, -EINTR to be called again, or another -errno when the
    // stream is broken.
    virtual ssize_t write(std::span<const iovec> iov) = 0;
};

struct TxConfig {
    // PDUs queued at most; enqueue() answers Full beyond that. Sized once.
    size_t max_queued_pdus = 1024;
    // iovecs in one gather write (at most IOV_MAX). Reaching it while
    // queueing writes early.
    size_t max_iov = IOV_MAX;
    // Queued bytes that make enqueue() write early, to bound latency and
    // how far a pass runs ahead of the socket.
    size_t max_queued_bytes = 4u << 20;
    bool header_digest = false;  // negotiated HeaderDigest=CRC32C
    bool data_digest = false;    // negotiated DataDigest=CRC32C
    // Off switch of coalescing: false writes every PDU as it is queued, as
    // stock tgt does, so benchmarks can show what coalescing buys.
    bool coalesce = true;
};

// One PDU to send. header and data stay valid and unchanged until the
// PDU's completion has run.
struct TxPdu {
    std::span<const uint8_t> header;  // BHS and AHS
    std::span<const uint8_t> data;    // DataSegmentLength bytes, no padding
    uint64_t user_data = 0;           // handed back to the completion
};

enum class TxAccept : uint8_t {
    Queued,   // will be written; the completion runs later (or at once when
              // the queue wrote early from inside enqueue())
    Full,     // max_queued_pdus queued: flush / wait for on_writable()
    Failed,   // the stream is broken; nothing more is sent
    Invalid,  // header shorter than a BHS, not in 4-byte words, or its
              // TotalAHSLength / DataSegmentLength disagree with the spans
};

enum class TxState : uint8_t {
    Idle,     // nothing queued
    Pending,  // queued, not yet offered to the socket: flush() at pass end
    Blocked,  // the socket is full: arm EPOLLOUT, then on_writable()
    Failed,   // broken stream: error() says why; close the connection
};

const char* to_string(TxState s);

// Runs once per PDU, in queue order: status 0 when every byte was written,
// -errno when the PDU was dropped (broken stream or cancel_all()). It may
// enqueue more PDUs; they go out in the same flush.
using TxCompletion = std::function<void(uint64_t user_data, int status)>;

class TxQueue {
public:
    // `writer` and `counters` must outlive the queue. Throws
    // std::invalid_argument for limits of 0 or max_iov beyond IOV_MAX.
    TxQueue(const TxConfig& config, StreamWriter& writer, TxCompletion completion,
            ConnectionCounters& counters);
    TxQueue(const TxQueue&) = delete;
    TxQueue& operator=(const TxQueue&) = delete;
    // Completions of PDUs still queued do not run: call cancel_all() first
    // where their buffers must be released.
    ~TxQueue() = default;

    // Queues one PDU (computing its digests). Writes early when a limit is
    // reached or coalescing is off, unless the socket is known to be full.
    TxAccept enqueue(const TxPdu& pdu);
    // End of an event-loop pass: one gather write for everything queued
    // (more only beyond max_iov). No system call while Blocked.
    TxState flush();
    // The socket became writable (EPOLLOUT): leaves Blocked and flushes.
    TxState on_writable();
    // Digests of the PDUs queued from now on (RFC 7143: they start with the
    // first PDU after the final login response); queued ones keep theirs.
    void set_digests(bool header, bool data) {
        config_.header_digest = header;
        config_.data_digest = data;
    }
    // Drops every queued PDU, running its completion with `status`.
    void cancel_all(int status);

    TxState state() const {
        if (failed_) return TxState::Failed;
        if (blocked_) return TxState::Blocked;
        return count_ > 0 ? TxState::Pending : TxState::Idle;
    }
    size_t queued_pdus() const { return count_; }
    size_t queued_bytes() const { return unsent_bytes_; }
    // Why the stream broke; empty unless state() is Failed.
    const std::string& error() const { return error_; }
    const TxConfig& config() const { return config_; }

private:
    struct Entry {
        std::array<iovec, 5> seg{};  // header, digest, data, padding, digest
        uint8_t nseg = 0;
        std::array<uint8_t, 4> header_digest{};
        std::array<uint8_t, 4> data_digest{};
        uint64_t user_data = 0;
        size_t total = 0;
        size_t sent = 0;
    };

    TxState write_out();
    size_t gather(size_t& bytes);
    void advance(size_t n);
    void pop_and_complete(int status);

    TxConfig config_;
    StreamWriter& writer_;
    TxCompletion completion_;
    ConnectionCounters& counters_;
    std::vector<Entry> ring_;  // fixed size: entries' iovecs point into them
    std::vector<iovec> iov_;   // gather list, max_iov long
    size_t head_ = 0;
    size_t count_ = 0;
    size_t unsent_bytes_ = 0;
    size_t unsent_iov_ = 0;
    bool blocked_ = false;
    bool failed_ = false;
    bool in_flush_ = false;
    std::string error_;
};

}  // namespace rbio::iser
