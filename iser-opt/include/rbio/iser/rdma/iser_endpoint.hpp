#pragma once
// One iSER connection's data path: a reliable-connected QP with one CQ for
// sends and receives, its registered receive and header slots, and the
// send/receive queues of work_queues.hpp. Both ends use it: tgtd's transport
// (target) and the rbio initiator. Connection management (listen, accept,
// connect, disconnect events) stays with the owner, who hands over the
// rdma_cm_id once it has one.
//
// A received SEND is [iSER header][BHS][AHS][data segment]: poll() checks it
// (iSER opcode, BHS against the limits, lengths against the bytes that came)
// and hands it to the owner as views into the receive slot, which is
// reposted when the handler returns. A PDU to send is copied into a header
// slot (iSER header, BHS, AHS, and its data when it is small) or sent with
// its data from the owner's registered memory (zero copy). RDMA WRITE and
// READ move SCSI data to and from the buffers the initiator advertised.
//
// The event-loop pass (channel fd readable):
//
//     ep.run_pass(handle_pdu);   // take the event, reap in bulk, handle
//                                // every PDU, post everything once,
//                                // re-arm only when nothing is left
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <type_traits>

#include "rbio/iser/counters.hpp"
#include "rbio/iser/iser_header.hpp"
#include "rbio/iser/pdu.hpp"
#include "rbio/iser/rdma/completion_poller.hpp"
#include "rbio/iser/rdma/quiet_watch.hpp"
#include "rbio/iser/rdma/registered_pool.hpp"
#include "rbio/iser/rdma/shared_receive_queue.hpp"
#include "rbio/iser/rdma/verbs.hpp"
#include "rbio/iser/rdma/work_queues.hpp"

namespace rbio::iser::rdma {

struct EndpointConfig {
    uint32_t recv_depth = 128;  // receive buffers posted (without an SRQ)
    // The device's shared receive queue, whose slots must hold
    // recv_slot_size(); it must outlive the endpoint. Null: the connection
    // posts recv_depth buffers of its own.
    SharedReceiveQueue* srq = nullptr;
    // Without an SRQ: the owner's buffers for the AHS and data of each
    // receive (ReceiveBuffers' split layout, so take_rx_data() works);
    // must outlive the endpoint. Null: one registered slot per receive.
    RecvBufferSource* recv_source = nullptr;
    uint32_t recv_data_max = 8192;  // largest data segment the peer may SEND us
    uint32_t max_ahs = 256;         // AHS bytes accepted and sent
    uint32_t send_slots = 256;      // header slots (PDUs in flight)
    uint32_t send_copy_max = 8192;  // data up to this is copied into the header slot
    uint32_t max_inline = 256;      // asked of the QP; SENDs up to it go inline
    SendConfig send{};              // depth asked of the QP (and kept to); inline size set from it
    PollConfig poll{};
    bool batch_recv = true;  // off: one ibv_post_recv per buffer
    // Cover a quiet tail at the end of every pass (see cover_quiet_tail()),
    // for owners without a timer; costs a completion per idle pass.
    bool cover_every_pass = false;
    // Completions one run_pass() reaps before it gives the event loop back
    // (yielded()), though the peer keeps it busy; 0: no limit. A fast peer
    // whose commands complete inline keeps finding new completions (its
    // next commands answer the responses the pass just posted), and the
    // spin catches them: without a limit such a pass never ends, and the
    // loop's other connections and the store's completions wait for it.
    uint32_t pass_completions = 0;
    PduSender peer = PduSender::Initiator;  // who sends what we receive
};

// Bytes a receive slot needs: iSER header, BHS, AHS and data segment.
size_t recv_slot_size(const EndpointConfig& c);

// One received PDU; the views are valid until the handler returns.
struct IserRx {
    IserHeader iser;
    BhsView bhs;
    std::span<const uint8_t> ahs;
    std::span<const uint8_t> data;
};

// Runs once per PDU sent or RDMA operation with a non-zero token, when it is
// known complete (status 0) or failed / cancelled (negative errno).
using TokenRelease = std::function<void(uint64_t token, int status)>;

class IserEndpoint {
public:
    // Takes the CM id (its device is known: route resolved, or a connect
    // request), creates CQ, QP and pools on `pd` (of the same device). Throws
    // RdmaError / std::invalid_argument.
    IserEndpoint(CmIdPtr id, ibv_pd* pd, const EndpointConfig& config, ConnectionCounters& counters,
                 TokenRelease release);
    ~IserEndpoint();
    IserEndpoint(const IserEndpoint&) = delete;
    IserEndpoint& operator=(const IserEndpoint&) = delete;

    rdma_cm_id* id() const { return id_.get(); }
    int fd() const { return poller_.fd(); }
    ibv_pd* pd() const { return pd_; }

    // Posts every receive buffer: before rdma_accept / rdma_connect.
    void post_receives();

    // ---- send side; false when no header slot or send-queue room is left
    // (flush, reap and try again) or the header does not fit a slot.
    bool send_pdu(const IserHeader& iser, std::span<const uint8_t> header, std::span<const uint8_t> data,
                  uint64_t token);
    // `data` lies in memory registered by the owner (lkey), sent in place.
    bool send_pdu_registered(const IserHeader& iser, std::span<const uint8_t> header, const ibv_sge& data,
                             uint64_t token);
    bool rdma_write(const ibv_sge& local, uint64_t remote_va, uint32_t rkey, uint64_t token);
    // An RDMA WRITE of `local` to (remote_va, rkey) and the SEND of a PDU
    // that is a BHS alone right behind it, in the same post (a READ's data
    // and its SCSI Response): both queued, or neither.
    bool rdma_write_send(const ibv_sge& local, uint64_t remote_va, uint32_t rkey,
                         std::span<const uint8_t, kBhsLength> bhs);
    bool rdma_read(const ibv_sge& local, uint64_t remote_va, uint32_t rkey, uint64_t token);
    // During the handler of run_pass(): hands the current PDU's AHS-and-data
    // buffer to the owner (the PDU's AHS, if any, then its data, from the
    // buffer's start) when it holds at least min_size bytes, so the data can
    // be used in place; the receive is reposted with a fresh buffer from
    // the source. Once per PDU; nullptr when there is no source, outside a
    // handler, or no fresh buffer (or one too small). For a PDU with data,
    // counts lent, or lend_refused once (the owner then copies the data).
    uint8_t* take_rx_data(size_t min_size) {
        if (rx_current_ == kNoSlot || rx_taken_) return nullptr;
        uint8_t* p = rx_buffers().take(rx_current_, min_size);
        rx_taken_ = p != nullptr;
        if (!rx_has_data_) return p;
        if (p) {
            ++counters_[Counter::Lent];
        } else if (!rx_refused_) {
            ++counters_[Counter::LendRefused];
            rx_refused_ = true;
        }
        return p;
    }
    bool has_room(uint32_t requests) const { return sq_.has_room(requests) && send_pool_.available() > 0; }
    // Posts what is queued (sends, receive reposts): one call each.
    void flush();
    // For passes the owner runs outside run_pass().
    void end_pass() {
        flush();
        if (config_.cover_every_pass) cover_quiet_tail();
    }
    // Unsignalled sends after the last signalled one hold their slots and
    // tokens until some later signalled completion: one signalled
    // zero-length RDMA WRITE releases them. The owner calls this when the
    // connection has gone quiet (e.g. from a timer), so that a busy
    // connection pays nothing and a single outstanding command does not pay
    // an extra completion and wake-up each.
    void cover_quiet_tail() {
        if (!failed_ && sq_.needs_cover() && sq_.cover() != 0) fail("ibv_post_send (cover) refused");
    }
    // Once a second while the connection is quiet (no pass of its own):
    // covers a quiet tail, probes an idle connection, and says when work
    // outstanding has had no completion for too long (quiet_watch.hpp).
    // Reap also when the connection failed here (a refused post), so that a
    // pass reports it.
    QuietAction quiet_second(QuietWatch& watch) {
        if (failed_) return QuietAction::Reap;
        int err = 0;
        const QuietAction a = rdma::quiet_second(sq_, watch, counters_[Counter::Completions], err);
        if (err != 0) {
            fail(std::string("ibv_post_send (cover or probe) refused: ") + std::strerror(err));
            return QuietAction::Reap;
        }
        return a;
    }
    // Send work requests queued or posted and not yet known complete.
    uint32_t sends_outstanding() const { return sq_.queued() + sq_.in_flight(); }

    // ---- receive side
    // What run_pass() does between reaping and posting without a refill.
    struct NoRefill {
        bool operator()() const { return false; }
    };
    // The channel fd was readable, or the owner wants to make progress:
    // handles every completion (handler(const IserRx&) per PDU), posts,
    // loops until the CQ is empty and the channel armed, or until
    // pass_completions are reaped: then it has posted what the pass queued,
    // leaves the channel unarmed (completions may be waiting, and no event
    // would tell of them) and yielded() is true, and the owner must run
    // another pass soon. False once the connection failed (error() says
    // why).
    //
    // Doorbell batching, for an owner whose handlers free room for new work
    // (an initiator: each response frees a command slot): after each batch
    // of completions, refill() queues that work (send_pdu...) and says
    // whether it queued any, and if so the CQ is reaped again; the pass
    // posts once, when the CQ is empty, so the work for every response the
    // pass reaped leaves with one ibv_post_send. (Without it the owner
    // queues that work after the pass, for a post in its next pass.)
    // Without a refill, what the handlers queued is posted after each batch.
    template <class Handler, class Refill = NoRefill>
    bool run_pass(Handler&& handle, Refill&& refill = {}) {
        constexpr bool post_per_batch = std::is_same_v<std::decay_t<Refill>, NoRefill>;
        poller_.on_channel_event();
        auto dispatch = [&](const ibv_wc& wc) { on_wc(wc, handle); };
        const uint64_t reaped_before = counters_[Counter::Completions];
        yielded_ = false;
        for (;;) {
            do poller_.drain(dispatch);
            while (refill() && !failed_);
            if constexpr (post_per_batch) flush();
            if (failed_) return false;
            if (config_.pass_completions != 0 &&
                counters_[Counter::Completions] - reaped_before >= config_.pass_completions) {
                flush();
                counters_[Counter::PassesYielded] += 1;
                yielded_ = true;
                return !failed_;
            }
            if (poller_.drain_and_arm(dispatch)) {
                refill();  // what an arm_every_event drain handled
                flush();
                if (config_.cover_every_pass) cover_quiet_tail();
                return !failed_;
            }
        }
    }

    bool failed() const { return failed_; }
    // The last run_pass() stopped at pass_completions, the CQ perhaps not
    // empty and the channel not armed.
    bool yielded() const { return yielded_; }
    const std::string& error() const { return error_; }
    uint64_t sends_queued_total() const { return sq_.queued_total(); }
    // The next flush's last send is signalled (SendQueue::signal_next_flush).
    void signal_next_flush() { sq_.signal_next_flush(); }
    uint64_t sends_done_total() const { return sq_.done_total(); }
    // Releases every token still held (the QP is destroyed first, so no
    // device access can follow): for teardown.
    void shutdown();

private:
    template <class Handler>
    void on_wc(const ibv_wc& wc, Handler& handle) {
        if (is_recv_wr(wc.wr_id)) {
            const uint32_t slot = recv_slot_of(wc.wr_id);
            if (wc.status != IBV_WC_SUCCESS) {
                give_back(slot);
                fail_wc("receive", wc);
                return;
            }
            IserRx rx{{}, BhsView(rx_buffers().head(slot) + kIserHeaderLength), {}, {}};
            if (!failed_ && parse(slot, wc.byte_len, rx)) {
                rx_current_ = slot;
                rx_taken_ = rx_refused_ = false;
                rx_has_data_ = !rx.data.empty();
                handle(static_cast<const IserRx&>(rx));
                rx_current_ = kNoSlot;
            }
            repost(slot);
            return;
        }
        sq_.on_completion(
            wc.wr_id, wc.status == IBV_WC_SUCCESS ? 0 : -EIO,
            [this](uint64_t token, uint32_t slot, int status) { on_release(token, slot, status); });
        if (wc.status != IBV_WC_SUCCESS) fail_wc("send", wc);
    }
    bool parse(uint32_t slot, uint32_t bytes, IserRx& rx);
    void repost(uint32_t slot);
    // A receive slot that will not be reposted on this QP: back to its
    // pool, or (SRQ) back on the shared queue, which other QPs still use.
    void give_back(uint32_t slot);
    ReceiveBuffers& rx_buffers() { return config_.srq ? config_.srq->buffers() : *recv_buffers_; }
    bool queue_send(const IserHeader& iser, std::span<const uint8_t> header, std::span<const uint8_t> copy,
                    const ibv_sge* data, uint64_t token);
    void fail(std::string why);
    void fail_wc(const char* what, const ibv_wc& wc);
    // A send request is done (or cancelled): its header slot comes back,
    // and the owner hears of its token.
    void on_release(uint64_t token, uint32_t slot, int status) {
        if (slot != kNoSlot) send_pool_.release(slot);
        if (token != 0 && release_) release_(token, status);
    }

    EndpointConfig config_;
    ConnectionCounters& counters_;
    TokenRelease release_;
    ibv_pd* pd_;
    CmIdPtr id_;
    CompletionPoller poller_;
    std::optional<ReceiveBuffers> recv_buffers_;  // without an SRQ
    RegisteredPool send_pool_;
    CmQp qp_;
    QpSendPoster send_poster_;
    QpRecvPoster recv_poster_;
    SendQueue sq_;
    std::optional<RecvQueue> rq_;  // without an SRQ
    PduLimits limits_{};
    bool failed_ = false;
    bool yielded_ = false;
    std::string error_;
    uint32_t rx_current_ = kNoSlot;  // the receive whose PDU is being handled
    bool rx_taken_ = false;          // its data buffer went to the owner
    bool rx_has_data_ = false;       // its PDU has a data segment
    bool rx_refused_ = false;        // a take of it was refused (and counted)
};

}  // namespace rbio::iser::rdma
