#pragma once
// The iSER backend of Connection (connection.hpp, RFC 7145): rdma_cm
// connection management around iser-opt's IserEndpoint. Every PDU leaves as
// a SEND ([iSER header][BHS][data]); a SCSI command advertises its buffer in
// the iSER header (read STag/VA: the target RDMA WRITEs the data there; write
// STag/VA: the target RDMA READs it), so no Data-In, R2T or solicited
// Data-Out PDU ever travels.
//
// Command buffers must lie in registered memory. The session registers the
// regions its caller declared (Session::register_memory) once per
// connection; any other buffer goes through a bounce slot of a pool
// registered with the connection (copied in for writes, out for reads).
// Nothing is registered per I/O.
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "connection.hpp"
#include "rbio/initiator/session.hpp"
#include "rbio/iser/counters.hpp"
#include "rbio/iser/rdma/iser_endpoint.hpp"

namespace rbio::initiator {

class IserConnection final : public Connection {
public:
    static_assert(kNoSlot == iser::rdma::RegisteredPool::kNone, "a command's slot is a bounce slot");
    // Largest command buffer a bounce slot takes; larger ones must be registered.
    static constexpr uint32_t kBounceSlotBytes = 256u << 10;
    static constexpr uint32_t kBounceSlots = 16;
    // Data segment bytes we accept in a SEND from the target
    // (InitiatorRecvDataSegmentLength), and that login requests carry at most.
    static constexpr uint32_t kRecvDataMax = 8192;

    // What a session offers at login over iSER (RFC 7145):
    // RDMAExtensions=Yes, no digests, no unsolicited Data-Out PDUs
    // (InitialR2T=Yes), immediate data within TargetRecvDataSegmentLength.
    static void restrict_offer(LoginOffer& offer);
    // Throws std::invalid_argument for a command buffer that neither lies in
    // one of `regions` nor fits a bounce slot. (Checked at submission, when
    // there may be no connection yet.)
    static void check_buffer(std::span<const uint8_t> buffer, const std::vector<std::span<uint8_t>>& regions);

    // Resolves the portal's address and route, creates the QP with its
    // receives posted, and connects with the iSER CM private data; the
    // regions are registered with the connection's protection domain.
    // `counters` and `events` must outlive the connection.
    // Throws InitiatorError(Unreachable) naming the portal and the step.
    static std::unique_ptr<IserConnection> connect(const Portal& portal, std::chrono::milliseconds timeout,
                                                   const std::vector<std::span<uint8_t>>& regions,
                                                   iser::ConnectionCounters& counters,
                                                   ConnectionEvents& events);
    ~IserConnection() override;
    IserConnection(const IserConnection&) = delete;
    IserConnection& operator=(const IserConnection&) = delete;

    // ---- Connection
    bool rdma_data() const override { return true; }
    // Copied into a registered send slot (at most kRecvDataMax bytes):
    // nothing is held. A full send queue loses the connection.
    void send_pdu(const iser::Bhs& bhs, std::vector<uint8_t> data, std::span<const uint8_t> ext,
                  uint32_t itt) override;
    // Advertises the buffer in the iSER header (read STag/VA: the target
    // RDMA WRITEs the data there; write STag/VA: it RDMA READs what the
    // command's SEND does not carry). False when the send queue or the
    // bounce slots are full.
    bool send_command(const iser::Bhs& bhs, uint32_t itt, std::span<uint8_t> buffer, DataDirection dir,
                      uint32_t immediate, uint32_t& slot) override;
    void finish_command(uint32_t slot, std::span<uint8_t> buffer, uint32_t bytes, bool read) override;
    void release_slot(uint32_t slot) override {
        if (slot != kNoSlot) bounce_.release(slot);
    }
    // Keeps a few send slots for NOP-Out answers and task management.
    bool room() const override { return ep_.has_room(8); }
    void enter_full_feature(const NegotiatedParams& params) override;
    // Posts what is queued; `quiet` (no command in flight): also releases
    // what unsignalled sends still hold, as nothing else will.
    bool flush(bool quiet) override {
        ep_.flush();
        if (quiet) ep_.cover_quiet_tail();
        return false;
    }
    bool wait_and_receive(int timeout_ms, int wake_fd, bool more) override;
    void poll_fds(std::vector<pollfd>& fds) const override;
    // What a pass's completions queue is posted within that pass (see
    // ConnectionEvents::fill_send_queue).
    bool unsent() const override { return false; }

private:
    struct Resolved {
        iser::rdma::EventChannelPtr channel;
        iser::rdma::CmIdPtr id;
        iser::rdma::PdPtr pd;
    };
    static Resolved resolve(const Portal& portal, std::chrono::milliseconds timeout);
    IserConnection(Resolved r, const Portal& portal, std::chrono::milliseconds timeout,
                   const std::vector<std::span<uint8_t>>& regions, iser::ConnectionCounters& counters,
                   ConnectionEvents& events);

    // Where the target finds `buffer`: a registered region's rkey and the
    // buffer's address, or a bounce slot (slot != kNoSlot, data copied in
    // for writes). False when no bounce slot is free right now.
    struct Placement {
        uint32_t stag = 0;
        uint64_t va = 0;
        uint32_t slot = kNoSlot;
    };
    bool place(std::span<uint8_t> buffer, bool write, Placement& out);
    // Handles every completion; a PDU goes to events_.on_pdu. Returns true
    // when anything completed.
    bool receive();
    // Takes pending CM events; a non-empty string says why the connection ended.
    std::string poll_cm();

    iser::ConnectionCounters& counters_;
    ConnectionEvents& events_;
    iser::rdma::EventChannelPtr channel_;
    // The CM id from resolve() until ep_ takes it: a member after channel_,
    // so that when the constructor throws before (a bounce pool beyond
    // RLIMIT_MEMLOCK) the id is destroyed while its channel still exists.
    iser::rdma::CmIdPtr id_;
    iser::rdma::PdPtr pd_;
    std::vector<iser::rdma::MrPtr> mrs_;  // the caller's regions
    std::vector<std::span<uint8_t>> regions_;
    iser::rdma::RegisteredPool bounce_;
    iser::rdma::IserEndpoint ep_;
    // TargetRecvDataSegmentLength from the full feature phase on; login
    // PDUs are only bounded by the send slots.
    uint32_t max_send_data_ = UINT32_MAX;
    std::exception_ptr rx_error_;  // thrown by a PDU handler inside a pass
    bool connected_ = false;
};

}  // namespace rbio::initiator
