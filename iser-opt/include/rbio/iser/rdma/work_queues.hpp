#pragma once
// The send and receive queues of one RDMA connection, as the three
// optimisations want them:
//
// * Doorbell batching (request batching): work requests queued during an
//   event-loop pass leave in one ibv_post_send / ibv_post_recv chain at its
//   end (flush()), e.g. an RDMA WRITE of read data chained with the SEND of
//   its response, and those of every other command of the pass. `batch =
//   false` posts each request on its own, as stock tgt's iSER does not.
// * Selective signalling (message coalescing of completions): only one send
//   in `signal_every` asks for a completion. Sends on one RC queue pair
//   complete in order, so a signalled completion proves every earlier send
//   done: each queued request carries a token, and the tokens of all requests
//   up to a completed one are released together (to free the buffers they
//   point into, e.g. a response header slot or a task's data buffer). A send
//   is signalled anyway when it is an RDMA READ (the caller needs the data)
//   and before the unsignalled run could fill the send queue. When the
//   connection goes quiet with unsignalled sends after the last signalled
//   one, the owner calls cover(): one signalled zero-length RDMA WRITE, so
//   nothing is held for ever. This is the per-queue-pair tracking whose
//   absence made the kernel iSER initiator drop selective signalling.
//
// wr_id encoding, shared by both queues on one CQ: bit 63 set for receives
// (low 32 bits: the receive slot), clear for sends (the send's sequence
// number).
#include <infiniband/verbs.h>

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "rbio/iser/counters.hpp"

namespace rbio::iser::rdma {

inline constexpr uint64_t kRecvWrFlag = uint64_t(1) << 63;
inline bool is_recv_wr(uint64_t wr_id) { return (wr_id & kRecvWrFlag) != 0; }
inline uint32_t recv_slot_of(uint64_t wr_id) { return uint32_t(wr_id); }

// The kernel boundary of the send side, so the policy can be unit-tested
// without a device. QpSendPoster is the real one.
class SendPoster {
public:
    virtual ~SendPoster() = default;
    // ibv_post_send semantics: 0, or an errno with *bad at the first request
    // not posted.
    virtual int post(ibv_send_wr* first, ibv_send_wr** bad) = 0;
};

class QpSendPoster final : public SendPoster {
public:
    explicit QpSendPoster(ibv_qp* qp) : qp_(qp) {}
    int post(ibv_send_wr* first, ibv_send_wr** bad) override { return ibv_post_send(qp_, first, bad); }

private:
    ibv_qp* qp_;
};

struct SendConfig {
    uint32_t depth = 256;        // requests in flight at most: within the QP's max_send_wr and the CQ
    uint32_t signal_every = 16;  // 1: every send signalled (selective signalling off)
    uint32_t max_inline = 0;     // the QP's max_inline_data: SENDs up to it go inline
    bool batch = true;           // false: one post call per work request
};

enum class WrKind : uint8_t { Send, RdmaWrite, RdmaRead };

inline constexpr size_t kMaxSge = 4;

struct SendRequest {
    WrKind kind = WrKind::Send;
    std::span<const ibv_sge> sge;  // at most kMaxSge, registered memory
    uint64_t remote_addr = 0;      // RDMA WRITE / READ
    uint32_t rkey = 0;
    // Handed to the owner's release once the request is known complete; a token of
    // 0 releases nothing but is still tracked.
    uint64_t token = 0;
    // The owner's own registered slot the request reads from (e.g. a header
    // slot), handed back with the token; kNoSlot for none.
    uint32_t slot = UINT32_MAX;
};

inline constexpr uint32_t kNoSlot = UINT32_MAX;

class SendQueue {
public:
    // Throws std::invalid_argument for a depth or signal_every of 0.
    SendQueue(const SendConfig& config, SendPoster& poster, ConnectionCounters& counters);
    SendQueue(const SendQueue&) = delete;
    SendQueue& operator=(const SendQueue&) = delete;

    // Room for n more requests (queued plus in flight stay within depth).
    bool has_room(uint32_t n = 1) const { return queued() + in_flight() + n <= config_.depth; }
    // Queues one request; false (nothing queued) without room or with more
    // than kMaxSge segments. Posts at once when batching is off.
    bool push(const SendRequest& request);
    // Posts everything queued with one call. 0, or the errno of the post
    // call (from now on every call returns it); requests it refused stay
    // queued (the connection is to be closed, cancel_all() releases them).
    int flush();
    // A send completion from the CQ: releases every request up to and
    // including wr_id, in posting order, each with
    // release(token, slot, status): status 0 when it completed, the
    // completed one's `status` (0 or -EIO) for it. False when wr_id is not a
    // request in flight. The owner's release is a template argument, so it
    // is inlined here rather than called through a std::function per request.
    template <class Release>
    bool on_completion(uint64_t wr_id, int status, Release&& release) {
        if (wr_id < completed_ || wr_id >= posted_) return false;
        while (completed_ <= wr_id) {
            const Entry& e = at(completed_);
            const uint64_t token = e.token;
            const uint32_t slot = e.slot;
            const int st = completed_ == wr_id ? status : 0;
            ++completed_;
            release(token, slot, st);
        }
        return true;
    }
    // The last request of the next flush() that posts any asks for a
    // completion, whatever the signalled run: memory waiting for the sends
    // queued so far (a large data buffer, counted against its connection's
    // budget) then comes back with it, not signal_every sends later. With
    // nothing queued, the next flush() covers an unsignalled posted tail
    // (cover()) instead.
    void signal_next_flush() { signal_last_ = true; }
    // Unsignalled requests were posted after the newest signalled one: their
    // tokens wait for a completion that no posted request will bring.
    bool needs_cover() const { return queued() == 0 && last_signaled_ < posted_; }
    // Posts one signalled zero-length RDMA WRITE (no memory is touched at
    // either end) so the requests before it are released when it completes.
    // 0, or the post's errno; nothing when !needs_cover() or without room.
    int cover();
    // Posts the same signalled zero-length RDMA WRITE when nothing at all is
    // queued or in flight: a liveness probe. The peer's adapter acknowledges
    // it without its software seeing anything; a peer that is gone (its QP
    // destroyed without a disconnect reaching us, the link down) makes it
    // complete with an error, which is how an idle connection learns it is
    // dead. 0 (also when nothing was posted), or the post's errno.
    int probe();
    // Releases everything queued and in flight, release(token, slot,
    // status) each; for a QP that is destroyed or flushed, when no
    // completion will come any more.
    template <class Release>
    void cancel_all(int status, Release&& release) {
        while (completed_ < next_) {
            const Entry& e = at(completed_);
            const uint64_t token = e.token;
            const uint32_t slot = e.slot;
            ++completed_;
            release(token, slot, status);
        }
        posted_ = next_ = completed_;
        last_signaled_ = completed_;
    }

    uint32_t queued() const { return uint32_t(next_ - posted_); }
    uint32_t in_flight() const { return uint32_t(posted_ - completed_); }
    // Requests queued so far / known complete (or cancelled) so far: memory a
    // request queued now points into is free once done_total() reaches
    // today's queued_total().
    uint64_t queued_total() const { return next_; }
    uint64_t done_total() const { return completed_; }
    const SendConfig& config() const { return config_; }

private:
    // One per ring position, its work request built in place: sg_list points
    // at the entry's own segments from the start, and push() writes only the
    // fields the request's opcode uses (the provider reads no other), so no
    // request is zeroed or copied on its way to the post.
    struct Entry {
        ibv_send_wr wr{};
        std::array<ibv_sge, kMaxSge> sge{};
        uint64_t token = 0;
        uint32_t slot = kNoSlot;
    };
    // The ring is a power of two (at least depth) so a sequence number finds
    // its entry with a mask, not a division.
    Entry& at(uint64_t seq) { return ring_[seq & mask_]; }
    int post_empty_write();

    SendConfig config_;
    SendPoster& poster_;
    ConnectionCounters& counters_;
    std::unique_ptr<Entry[]> ring_;
    uint64_t mask_ = 0;
    uint64_t unsignaled_max_ = 0;  // the longest unsignalled stretch the queue allows
    uint64_t completed_ = 0;       // [completed_, posted_) in flight
    uint64_t posted_ = 0;          // [posted_, next_) queued
    uint64_t next_ = 0;
    uint64_t last_signaled_ = 0;  // sequence of the newest signalled request + 1
    uint32_t unsignaled_run_ = 0;
    bool signal_last_ = false;  // signal_next_flush()
    int post_error_ = 0;        // sticky: a refused post ends the connection
};

// The kernel boundary of the receive side: a QP's receive queue or an SRQ.
class RecvPoster {
public:
    virtual ~RecvPoster() = default;
    virtual int post(ibv_recv_wr* first, ibv_recv_wr** bad) = 0;
};

class QpRecvPoster final : public RecvPoster {
public:
    explicit QpRecvPoster(ibv_qp* qp) : qp_(qp) {}
    int post(ibv_recv_wr* first, ibv_recv_wr** bad) override { return ibv_post_recv(qp_, first, bad); }

private:
    ibv_qp* qp_;
};

class SrqRecvPoster final : public RecvPoster {
public:
    explicit SrqRecvPoster(ibv_srq* srq) : srq_(srq) {}
    int post(ibv_recv_wr* first, ibv_recv_wr** bad) override { return ibv_post_srq_recv(srq_, first, bad); }

private:
    ibv_srq* srq_;
};

// Segments a receive may scatter into (a header slot, a data buffer).
inline constexpr int kMaxRecvSge = 2;

// Receive buffers handed back during a pass, posted in one chain by flush().
class RecvQueue {
public:
    // Slots are `slot_size` bytes of memory registered under `lkey`, found by
    // `slot_address(index)`. At most `capacity` buffers wait for flush().
    RecvQueue(RecvPoster& poster, uint32_t capacity, ConnectionCounters& counters, bool batch = true);

    // Queues slot `index` at `addr` (length bytes, key lkey) for posting.
    // Posts at once when batching is off or the batch is full.
    int repost(uint32_t index, uint64_t addr, uint32_t length, uint32_t lkey);
    // The same with n (at most kMaxRecvSge) segments, posted from where
    // they are (no copy): they must stay unchanged until flush().
    int repost(uint32_t index, ibv_sge* sge, int n);
    int flush();
    uint32_t queued() const { return count_; }

private:
    RecvPoster& poster_;
    ConnectionCounters& counters_;
    bool batch_;
    std::vector<ibv_recv_wr> wrs_;
    std::vector<ibv_sge> sges_;
    uint32_t count_ = 0;
};

}  // namespace rbio::iser::rdma
