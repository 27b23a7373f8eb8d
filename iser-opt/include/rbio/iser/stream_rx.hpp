#pragma once
// The receive side of one connection for a protocol core that frames PDUs
// itself and pulls bytes with read(dst, n) calls (tgt's iSCSI core asks for
// the BHS, then the AHS, the digest, the data... one read() each).
//
// RxBuffer frames PDUs for cores that take whole PDUs; StreamRx keeps the
// same batching for a pulling core: one receive per readiness event brings as
// many bytes as the socket holds into a buffer allocated once per connection,
// and the core's reads are then served from memory, so a pass of the event
// loop handles every PDU that arrived with one system call.
//
// Large data segments skip the buffer. When the core asks for at least
// StreamRxConfig::direct_threshold bytes that are not buffered yet, the read
// goes straight into the core's destination (plus the buffer's free space for
// whatever follows), so the data is copied by the kernel only. Such a read
// uses the event's receive: at most one receive system call per event either
// way (take_event() starts an event).
//
// With batch_reads off every read() is its own read system call into the
// destination, as stock tgt does, so benchmarks can show what batching buys.
//
// Buffered bytes can be lent instead of copied: lend() hands out a pointer
// to bytes not yet read (a write's data, to become the task's buffer), and
// the chunk of buffer they lie in is not reused until every lent pointer
// into it is given back. Meanwhile receives go on in another chunk; chunks
// are allocated the first time they are needed (at most kMaxChunks per
// connection) and kept, so lending allocates nothing once warm. A lend is
// refused unless a chunk stays free to move on to, so the receive side
// never waits for a lent pointer to come back.
#include <sys/types.h>
#include <sys/uio.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "rbio/iser/counters.hpp"

namespace rbio::iser {

struct StreamRxConfig {
    // Bytes allocated once per connection; at least 4096.
    size_t capacity = 256 * 1024;
    // Reads of at least this many missing bytes go directly to the caller.
    size_t direct_threshold = 64 * 1024;
    bool batch_reads = true;
};

class StreamRx {
public:
    // Throws std::invalid_argument for a capacity below 4096.
    StreamRx(int fd, const StreamRxConfig& config, ConnectionCounters& counters);
    StreamRx(const StreamRx&) = delete;
    StreamRx& operator=(const StreamRx&) = delete;

    // A readiness event: allows one receive system call until the next one.
    void take_event() { may_receive_ = true; }
    // The event's receive into the buffer, unless the core waits for a
    // direct read (then its next read() does the receive). Returns the bytes
    // received, 0 at end of stream, -EAGAIN when nothing came or no receive
    // was allowed, or another -errno.
    ssize_t fill();

    // Serves up to dst.size() bytes: buffered ones first, then a direct
    // receive when the rest is large and the event's receive is unused.
    // Returns the bytes served (> 0), 0 at end of stream, -EAGAIN when none
    // are there now, or another -errno.
    ssize_t read(std::span<uint8_t> dst);

    // A pointer to the buffered bytes [offset, offset + len) counted from
    // the next byte read() serves, valid until give_back(); nullptr when
    // they are not all buffered or no chunk would be left to move on to.
    // A later read() into the lent bytes themselves skips the copy.
    // Counts Counter::Lent or Counter::LendRefused.
    uint8_t* lend(size_t offset, size_t len) noexcept;
    // p came from lend(): its chunk may be reused once nothing else is lent
    // from it. false (and nothing done) when p lies in no chunk.
    bool give_back(const void* p) noexcept;
    // Pointers lent and not given back.
    size_t lent() const noexcept;
    // Chunks allocated so far (the first at construction).
    size_t chunks() const noexcept { return nchunks_; }
    static constexpr size_t kMaxChunks = 4;

    // The buffered bytes, to look at a header before serving it.
    std::span<const uint8_t> peek() const { return {buf_ + start_, end_ - start_}; }
    size_t buffered() const { return end_ - start_; }
    // A read() asked for more than was there, enough for a direct receive:
    // the next event should go to the core instead of fill().
    bool direct_pending() const { return direct_pending_; }
    // The peer closed its side; bytes may still be buffered.
    bool at_eof() const { return eof_; }
    const StreamRxConfig& config() const { return config_; }
    // The longest time without a byte from the peer that a receive ended
    // since the last call, in whole seconds (0: none of a second or more).
    // A write that comes after a long silence may be one its host gave up
    // on (tgt-backend/glue/rx_quiet.h).
    uint32_t take_silence_s() noexcept {
        const uint32_t s = silence_s_;
        silence_s_ = 0;
        return s;
    }

private:
    ssize_t receive(iovec* iov, int n);
    // A receive brought bytes: one coarse clock read per receive call.
    void heard() noexcept;
    ssize_t unbatched_read(std::span<uint8_t> dst);
    // lend()'s refusal: counted, nullptr.
    uint8_t* refuse() noexcept;
    void make_room();
    // Starts receiving into a chunk with nothing lent, moving the unread
    // bytes there; false when there is none (never while a lend is out,
    // see lend()).
    bool switch_chunk() noexcept;
    bool spare_chunk() const noexcept;

    struct Chunk {
        std::unique_ptr<uint8_t[]> mem;
        uint32_t lent = 0;
    };

    int fd_;
    StreamRxConfig config_;
    ConnectionCounters& counters_;
    std::array<Chunk, kMaxChunks> chunks_;
    size_t nchunks_ = 0;
    size_t cur_ = 0;
    uint8_t* buf_ = nullptr;  // chunks_[cur_].mem
    size_t start_ = 0;
    size_t end_ = 0;
    bool may_receive_ = false;
    bool direct_pending_ = false;
    bool eof_ = false;
    uint64_t last_rx_ms_;     // CLOCK_MONOTONIC_COARSE; set at construction
    uint32_t silence_s_ = 0;  // see take_silence_s()
};

}  // namespace rbio::iser
