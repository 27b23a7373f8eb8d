#pragma once
// The iSER connection of a session (RFC 7145): rdma_cm connection
// management around iser-opt's IserEndpoint. Every PDU leaves as a SEND
// ([iSER header][BHS][data]); a SCSI command advertises its buffer in the
// iSER header (read STag/VA: the target RDMA WRITEs the data there; write
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
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "rbio/initiator/session.hpp"
#include "rbio/iser/counters.hpp"
#include "rbio/iser/rdma/iser_endpoint.hpp"

namespace rbio::initiator {

class IserConnection {
public:
    static constexpr uint32_t kNoSlot = iser::rdma::RegisteredPool::kNone;
    // Largest command buffer a bounce slot takes; larger ones must be registered.
    static constexpr uint32_t kBounceSlotBytes = 256u << 10;
    static constexpr uint32_t kBounceSlots = 16;
    // Data segment bytes we accept in a SEND from the target
    // (InitiatorRecvDataSegmentLength), and that login requests carry at most.
    static constexpr uint32_t kRecvDataMax = 8192;

    // Resolves the portal's address and route, creates the QP with its
    // receives posted, and connects with the iSER CM private data; the
    // regions are registered with the connection's protection domain.
    // Throws InitiatorError(Unreachable) naming the portal and the step.
    static std::unique_ptr<IserConnection> connect(const Portal& portal, std::chrono::milliseconds timeout,
                                                   const std::vector<std::span<uint8_t>>& regions,
                                                   iser::ConnectionCounters& counters);
    ~IserConnection();
    IserConnection(const IserConnection&) = delete;
    IserConnection& operator=(const IserConnection&) = delete;

    int completion_fd() const { return ep_.fd(); }
    int cm_fd() const { return channel_->fd; }

    // Where the target finds `buffer`: a registered region's rkey and the
    // buffer's address, or a bounce slot (slot != kNoSlot, data copied in
    // for writes). False when no bounce slot is free right now.
    struct Placement {
        uint32_t stag = 0;
        uint64_t va = 0;
        uint32_t slot = kNoSlot;
    };
    bool place(std::span<uint8_t> buffer, bool write, Placement& out);
    // Copies a read's `bytes` out of its bounce slot (if any) and frees it.
    void finish(const Placement& p, std::span<uint8_t> buffer, uint32_t bytes, bool read);
    // Frees a bounce slot without copying (command re-sent or dropped).
    void release(uint32_t slot);
    bool needs_bounce(std::span<uint8_t> buffer) const;

    // Queues a PDU (data copied into the send slot, at most kRecvDataMax
    // bytes). False when the send queue or its slots are full.
    bool send(const iser::IserHeader& ih, std::span<const uint8_t> bhs, std::span<const uint8_t> data) {
        return ep_.send_pdu(ih, bhs, data, 0);
    }
    bool has_room(uint32_t pdus) const { return ep_.has_room(pdus); }
    // Posts what is queued; `quiet` (no command in flight): also releases
    // what unsignalled sends still hold, as nothing else will.
    void flush(bool quiet) {
        ep_.flush();
        if (quiet) ep_.cover_quiet_tail();
    }

    // Handles every completion (handler(const IserRx&) per PDU received).
    // False once the connection failed (error() says why).
    template <class Handler>
    bool run(Handler&& h) {
        return ep_.run_pass(std::forward<Handler>(h));
    }
    const std::string& error() const { return ep_.error(); }
    // Takes pending CM events; a non-empty string says why the connection ended.
    std::string poll_cm();

private:
    struct Resolved {
        iser::rdma::EventChannelPtr channel;
        iser::rdma::CmIdPtr id;
        iser::rdma::PdPtr pd;
    };
    static Resolved resolve(const Portal& portal, std::chrono::milliseconds timeout);
    IserConnection(Resolved r, const Portal& portal, std::chrono::milliseconds timeout,
                   const std::vector<std::span<uint8_t>>& regions, iser::ConnectionCounters& counters);

    iser::rdma::EventChannelPtr channel_;
    iser::rdma::PdPtr pd_;
    std::vector<iser::rdma::MrPtr> mrs_;  // the caller's regions
    std::vector<std::span<uint8_t>> regions_;
    iser::rdma::RegisteredPool bounce_;
    iser::rdma::IserEndpoint ep_;
    bool connected_ = false;
};

}  // namespace rbio::initiator
