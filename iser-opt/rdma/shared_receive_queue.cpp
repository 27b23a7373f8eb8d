#include "rbio/iser/rdma/shared_receive_queue.hpp"

#include <cerrno>
#include <string>

namespace rbio::iser::rdma {
namespace {

SrqPtr make_srq(ibv_pd* pd, uint32_t depth) {
    ibv_srq_init_attr a{};
    a.attr.max_wr = depth;
    a.attr.max_sge = kMaxRecvSge;
    SrqPtr srq(ibv_create_srq(pd, &a));
    if (!srq) throw_rdma("ibv_create_srq of " + std::to_string(depth) + " receives");
    return srq;
}

}  // namespace

SharedReceiveQueue::SharedReceiveQueue(ibv_pd* pd, uint32_t depth, size_t slot_size, bool batch,
                                       RecvBufferSource* source)
    : buffers_(pd, depth, slot_size, source),
      srq_(make_srq(pd, depth)),
      poster_(srq_.get()),
      rq_(poster_, depth, counters_, batch) {
    for (uint32_t slot = buffers_.acquire(); slot != RegisteredPool::kNone; slot = buffers_.acquire())
        if (int rc = repost(slot); rc != 0) throw_rdma("ibv_post_srq_recv", rc);
    if (int rc = flush(); rc != 0) throw_rdma("ibv_post_srq_recv", rc);
}

int SharedReceiveQueue::repost(uint32_t slot) {
    return rq_.repost(slot, buffers_.sges(slot), buffers_.sge_count());
}

int SharedReceiveQueue::flush() { return rq_.flush(); }

}  // namespace rbio::iser::rdma
