#pragma once
// One receive queue for every connection on a device (an SRQ). Without it
// each connection posts its own receive buffers for the most commands it may
// have in flight, so memory and registrations grow with the number of
// connections while most buffers sit idle; with it the device's connections
// draw from one pool sized for the traffic, and reposts of a pass still leave
// in one ibv_post_srq_recv.
//
// Completions of these receives arrive on the CQ of the connection the
// message came on; the connection hands the slot back with repost() whatever
// happened to it, because the buffer belongs to the device, not to it.
// Single-threaded like the rest (one event loop owns it).
#include <cstdint>

#include "rbio/iser/counters.hpp"
#include "rbio/iser/rdma/receive_buffers.hpp"
#include "rbio/iser/rdma/verbs.hpp"
#include "rbio/iser/rdma/work_queues.hpp"

namespace rbio::iser::rdma {

class SharedReceiveQueue {
public:
    // `depth` buffers of `slot_size` bytes, registered on `pd` and posted;
    // with a source, split as ReceiveBuffers says. Throws RdmaError.
    SharedReceiveQueue(ibv_pd* pd, uint32_t depth, size_t slot_size, bool batch,
                       RecvBufferSource* source = nullptr);
    SharedReceiveQueue(const SharedReceiveQueue&) = delete;
    SharedReceiveQueue& operator=(const SharedReceiveQueue&) = delete;

    ibv_srq* get() const { return srq_.get(); }
    ReceiveBuffers& buffers() { return buffers_; }
    const ReceiveBuffers& buffers() const { return buffers_; }
    size_t slot_size() const { return buffers_.message_size(); }
    uint32_t depth() const { return buffers_.count(); }
    // Queues the slot for the next flush(). 0, or the errno of a post that
    // had to happen now.
    int repost(uint32_t slot);
    int flush();
    // recv_requests / recv_post_calls of every connection on the device.
    ConnectionCounters& counters() { return counters_; }

private:
    ConnectionCounters counters_;
    ReceiveBuffers buffers_;
    SrqPtr srq_;
    SrqRecvPoster poster_;
    RecvQueue rq_;
};

}  // namespace rbio::iser::rdma
