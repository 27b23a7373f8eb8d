// extern "C" entry points of the iSER transport for the tgt glue: one
// IserEndpoint per connection, registered data buffers, and the deferred
// release of buffers that posted work requests still point into. Nothing
// here lets a C++ exception unwind into tgtd.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "rbio/bs/block_pool.hpp"
#include "rbio/bs/iser_transport.h"
#include "rbio/bs/tcp_transport.h"
#include "rbio/iser/rdma/iser_endpoint.hpp"
#include "tcp_connection.hpp"

using namespace rbio::iser;
using namespace rbio::iser::rdma;
using rbio::tp::Block;
using rbio::tp::BlockPool;
using rbio::tp::BlockPoolConfig;
using rbio::tp::ReleaseQueue;

namespace {

// ---- registered data buffers
//
// Blocks of the transports' pool (rbio/bs/block_pool.hpp), page aligned for
// the core (O_DIRECT backing stores), mapped with a page past the end (tgt
// pads data to 4 bytes in place), and registered once, when a block is made:
// freed buffers wait in the pool's size classes (4 KiB to 16 MiB, 256 MiB
// kept) still registered.

constexpr size_t kPage = 4096;
// A charged data buffer at least this large asks for a signalled send when
// it is freed with sends outstanding (rbio_iser_data_free).
constexpr size_t kSignalledReleaseBytes = size_t(1) << 20;
// An int, not the enum: verbs.h's ibv_reg_mr macro ORs the access flags with
// another enum's, which clang refuses (-Wdeprecated-enum-enum-conversion).
constexpr int kBlockAccess = IBV_ACCESS_LOCAL_WRITE;

bool register_block(void* pd, Block& b) {
    b.tag = ibv_reg_mr(static_cast<ibv_pd*>(pd), b.payload(), b.size + 4, kBlockAccess);
    return b.tag != nullptr;
}

void deregister_block(void*, Block& b) { ibv_dereg_mr(static_cast<ibv_mr*>(b.tag)); }

ibv_mr* mr_of(void* buf) { return static_cast<ibv_mr*>(Block::of(buf)->tag); }

// One pool per protection domain (so per device): a pooled buffer keeps its
// registration, and a host with several RDMA devices does not re-register
// buffers that move between them.
BlockPool& pool_for(ibv_pd* pd) {
    static std::vector<std::pair<ibv_pd*, std::unique_ptr<BlockPool>>> pools;
    for (auto& [owner, p] : pools)
        if (owner == pd) return *p;
    BlockPoolConfig c;
    c.min_shift = 12;
    c.classes = 13;
    c.pooled_max = 256u << 20;
    c.page_aligned = true;
    c.mapped = true;
    c.tail = kPage;
    c.on_make = register_block;
    c.on_destroy = deregister_block;
    c.ctx = pd;
    pools.emplace_back(pd, std::make_unique<BlockPool>(c));
    return *pools.back().second;
}

// The AHS-and-data part of every receive is a block of the device's pool
// (ReceiveBuffers' split layout): a command's immediate data then lands at
// the start of a registered, page-aligned block, which the glue takes as the
// task's data buffer (rbio_iser_ep_take_rx) instead of copying the data out;
// the core frees it like any other data buffer. Blocks are `block_min`
// bytes (iser_receive_kib) although a receive fills 8 KiB at most: a write
// of up to that size then takes its receive's block too, and the RDMA READ
// of the rest of its data lands behind its immediate data. A larger write
// gets a buffer of its own and its immediate data is copied into it.
class BlockSource final : public RecvBufferSource {
public:
    BlockSource(BlockPool& pool, size_t block_min) : pool_(pool), block_min_(block_min) {}
    Buffer acquire(size_t size) override {
        void* p = pool_.alloc(std::max(size, block_min_));
        if (!p) return {};
        return {static_cast<uint8_t*>(p), mr_of(p)->lkey, Block::of(p)->size};
    }
    void release(uint8_t* data) override { BlockPool::release(data); }

private:
    BlockPool& pool_;
    size_t block_min_;
};

// ---- protection domains, one per device for the process's lifetime

ibv_pd* pd_for(ibv_context* ctx) {
    static std::vector<std::pair<ibv_context*, PdPtr>> pds;
    for (auto& [c, pd] : pds)
        if (c == ctx) return pd.get();
    PdPtr pd(ibv_alloc_pd(ctx));
    if (!pd) throw_rdma("ibv_alloc_pd");
    pds.emplace_back(ctx, std::move(pd));
    return pds.back().second.get();
}

// NOP-In pings are off unless the admin sets a target's nop_interval, so a
// peer that vanished without a disconnect reaching us (link down, crashed
// host) would keep its QP, slot pools and tasks for ever: the glue's
// once-a-second call for a quiet connection probes an idle one and gives up
// on one whose work gets no completion (QuietWatch's default limits).

EndpointConfig endpoint_config(const rbio_tp_settings& s) {
    EndpointConfig c;
    c.peer = PduSender::Initiator;
    c.recv_depth = 256;
    c.recv_data_max = RBIO_ISER_RECV_DATA_MAX;
    c.send_slots = 512;
    c.send.depth = 1024;
    c.send.batch = s.coalesce != 0;
    c.batch_recv = s.batch_reads != 0;
    c.send.signal_every = s.coalesce ? 16 : 1;
    c.poll.spin_us = s.coalesce ? s.iser_spin_us : 0;
    c.pass_completions = s.iser_pass_completions;
    return c;
}

size_t receive_block(const rbio_tp_settings& s) { return size_t(s.iser_receive_kib) << 10; }

// ---- one shared receive queue per device, while it has connections
//
// Made by the first connection on a device, destroyed with the last one, so
// an idle tgtd posts no receives and a receive lost by a QP torn down
// mid-flight is not lost for good. (Their blocks go back to the device's
// pool, which keeps up to 256 MiB of blocks registered for reuse.)
struct DeviceReceives {
    DeviceReceives(ibv_pd* pd, uint32_t depth, size_t slot_size, size_t block_min, bool batch)
        : source(pool_for(pd), block_min), queue(pd, depth, slot_size, batch, &source) {}
    ~DeviceReceives() { publish(); }
    void publish() { publisher.publish(queue.counters(), rbio::tp::totals()); }

    BlockSource source;  // outlives queue, whose receives hold its blocks
    SharedReceiveQueue queue;
    CounterPublisher publisher;
};

std::shared_ptr<DeviceReceives> receives_for(ibv_context* ctx, ibv_pd* pd, const rbio_tp_settings& s) {
    const EndpointConfig c = endpoint_config(s);
    auto make = [&] {
        return std::make_shared<DeviceReceives>(pd, s.iser_srq_depth, recv_slot_size(c), receive_block(s),
                                                c.batch_recv);
    };
    static std::vector<std::pair<ibv_context*, std::weak_ptr<DeviceReceives>>> devices;
    for (auto& [dev, weak] : devices)
        if (dev == ctx) {
            if (auto shared = weak.lock()) return shared;
            auto fresh = make();
            weak = fresh;
            return fresh;
        }
    auto fresh = make();
    devices.emplace_back(ctx, fresh);
    return fresh;
}

EndpointConfig with_receives(EndpointConfig c, DeviceReceives* r, RecvBufferSource* own) {
    c.srq = r ? &r->queue : nullptr;
    c.recv_source = own;
    return c;
}

}  // namespace

struct rbio_iser_ep {
    rbio_iser_ep(CmIdPtr id, const rbio_tp_settings& s, rbio_iser_done_fn done_fn, void* ctx)
        : pd(pd_for(id->verbs)),
          buffers(&pool_for(pd)),
          source(*buffers, receive_block(s)),
          done(done_fn),
          done_ctx(ctx),
          receives(s.iser_srq_depth ? receives_for(id->verbs, pd, s) : nullptr),
          ep(std::move(id), pd, with_receives(endpoint_config(s), receives.get(), &source), counters,
             [this](uint64_t token, int status) { done(done_ctx, token, status); }) {}

    void release_deferred(bool all) {
        if (all) releases.release_all();
        else releases.release_done(ep.sends_done_total());
    }

    ibv_pd* pd;
    BlockPool* buffers;  // this device's registered data buffers
    BlockSource source;  // receives of its own (no SRQ) come from buffers
    rbio_iser_done_fn done;
    void* done_ctx;
    ConnectionCounters counters;
    CounterPublisher publisher;
    std::shared_ptr<DeviceReceives> receives;  // outlives ep, whose QP uses it
    // Data buffers the core freed while a posted work request still points
    // into them: released once the send queue has completed past it.
    ReleaseQueue releases;
    QuietWatch watch;
    IserEndpoint ep;
};

extern "C" {

rbio_iser_ep* rbio_iser_ep_new(rdma_cm_id* id, const rbio_tp_settings* s, rbio_iser_done_fn done, void* ctx,
                               char* err, size_t errlen) {
    try {
        auto e = std::make_unique<rbio_iser_ep>(CmIdPtr(id), *s, done, ctx);
        e->ep.post_receives();
        return e.release();
    } catch (const std::exception& e) {
        std::snprintf(err, errlen, "%s", e.what());
    } catch (...) {
        std::snprintf(err, errlen, "unexpected error setting up the connection");
    }
    return nullptr;
}

void rbio_iser_ep_free(rbio_iser_ep* e) {
    if (!e) return;
    std::unique_ptr<rbio_iser_ep> owned(e);
    e->ep.shutdown();  // QP gone: nothing points into the buffers any more
    e->release_deferred(true);
    e->publisher.publish(e->counters, rbio::tp::totals());
}

int rbio_iser_ep_accept(rbio_iser_ep* e, int initiator_depth, int responder_resources, char* err,
                        size_t errlen) {
    rdma_conn_param p{};
    ibv_device_attr attr{};
    if (ibv_query_device(e->ep.id()->verbs, &attr) == 0) {
        initiator_depth = std::min(initiator_depth, attr.max_qp_init_rd_atom);
        responder_resources = std::min(responder_resources, attr.max_qp_rd_atom);
    }
    p.initiator_depth = uint8_t(std::max(0, initiator_depth));
    p.responder_resources = uint8_t(std::max(0, responder_resources));
    p.rnr_retry_count = 7;
    if (rdma_accept(e->ep.id(), &p) != 0) {
        std::snprintf(err, errlen, "rdma_accept: %s", std::strerror(errno));
        return -1;
    }
    return 0;
}

void rbio_iser_ep_disconnect(rbio_iser_ep* e) { rdma_disconnect(e->ep.id()); }

int rbio_iser_ep_fd(const rbio_iser_ep* e) { return e->ep.fd(); }

int rbio_iser_ep_run(rbio_iser_ep* e, rbio_iser_rx_fn rx, void* ctx, char* err, size_t errlen) {
    try {
        bool ok = e->ep.run_pass([&](const IserRx& r) {
            rbio_iser_rx c{};
            c.bhs = r.bhs.bytes().data();
            c.rest = r.ahs.empty() ? r.data.data() : r.ahs.data();
            c.len = uint32_t(kBhsLength + r.ahs.size() + r.data.size());
            c.read_valid = r.iser.read_stag_valid;
            c.read_stag = r.iser.read_stag;
            c.read_va = r.iser.read_va;
            c.write_valid = r.iser.write_stag_valid;
            c.write_stag = r.iser.write_stag;
            c.write_va = r.iser.write_va;
            rx(ctx, &c);
        });
        e->release_deferred(false);
        if (!ok) {
            std::snprintf(err, errlen, "%s", e->ep.error().c_str());
            return -1;
        }
        return 0;
    } catch (const std::exception& x) {
        std::snprintf(err, errlen, "%s", x.what());
    } catch (...) {
        std::snprintf(err, errlen, "unexpected error in the completion pass");
    }
    return -1;
}

int rbio_iser_ep_yielded(const rbio_iser_ep* e) { return e->ep.yielded() ? 1 : 0; }

int rbio_iser_ep_quiet_tick(rbio_iser_ep* e, char* why, size_t whylen) {
    // From the accept on, whether or not anything was sent: rdma_accept
    // moved the QP to RTS before the CM's reply went out, so the post is
    // taken, and a peer that vanished before its first PDU (its RTU or its
    // login lost to a link going down) answers no probe either. Waiting for
    // a first send left such a connection, which nothing else ends (tgt has
    // no login timeout, no disconnect can come), with its QP for good.
    // Recording a refused post builds a message, which may throw: it must
    // not cross into tgtd, and a connection that cannot record its failure
    // is ended.
    try {
        switch (e->ep.quiet_second(e->watch)) {
            case QuietAction::Reap: return RBIO_ISER_QUIET_REAP;
            case QuietAction::End:
                std::snprintf(why, whylen, "no work completion for %u s with %u work requests outstanding",
                              e->watch.stalled_seconds(), e->ep.sends_outstanding());
                return RBIO_ISER_QUIET_END;
            case QuietAction::None:
            case QuietAction::Probe: break;
        }
    } catch (const std::exception& x) {
        std::snprintf(why, whylen, "liveness check failed: %s", x.what());
        return RBIO_ISER_QUIET_END;
    } catch (...) {
        std::snprintf(why, whylen, "liveness check failed");
        return RBIO_ISER_QUIET_END;
    }
    return RBIO_ISER_QUIET_OK;
}

void rbio_iser_ep_flush(rbio_iser_ep* e) {
    e->ep.end_pass();
    e->release_deferred(false);
}

int rbio_iser_ep_send(rbio_iser_ep* e, const void* hdr, size_t hdr_len, const void* data, size_t data_len) {
    return e->ep.send_pdu({}, {static_cast<const uint8_t*>(hdr), hdr_len},
                          {static_cast<const uint8_t*>(data), data_len}, 0)
               ? 0
               : -1;
}

static ibv_sge buffer_sge(void* buf, size_t offset, size_t len) {
    return ibv_sge{reinterpret_cast<uintptr_t>(buf) + offset, uint32_t(len), mr_of(buf)->lkey};
}

// buf is a data buffer registered with e's device and holds [offset, +len).
static bool registered(rbio_iser_ep* e, void* buf, size_t offset, size_t len) {
    const Block* b = Block::of(buf);
    return e->buffers->owns(buf) && offset <= b->size && len <= b->size - offset;
}

int rbio_iser_ep_rdma_write(rbio_iser_ep* e, void* buf, size_t offset, size_t len, uint64_t va,
                            uint32_t rkey) {
    if (!registered(e, buf, offset, len)) return -1;
    return e->ep.rdma_write(buffer_sge(buf, offset, len), va, rkey, 0) ? 0 : -1;
}

int rbio_iser_ep_rdma_write_send(rbio_iser_ep* e, void* buf, size_t offset, size_t len, uint64_t va,
                                 uint32_t rkey, const void* bhs) {
    if (!registered(e, buf, offset, len)) return -1;
    return e->ep.rdma_write_send(
               buffer_sge(buf, offset, len), va, rkey,
               std::span<const uint8_t, kBhsLength>(static_cast<const uint8_t*>(bhs), kBhsLength))
               ? 0
               : -1;
}

int rbio_iser_ep_rdma_read(rbio_iser_ep* e, void* buf, size_t offset, size_t len, uint64_t va, uint32_t rkey,
                           uint64_t token) {
    if (!registered(e, buf, offset, len)) return -1;
    return e->ep.rdma_read(buffer_sge(buf, offset, len), va, rkey, token) ? 0 : -1;
}

int rbio_iser_ep_room(const rbio_iser_ep* e, unsigned n) { return e->ep.has_room(n); }
int rbio_iser_ep_sends_pending(rbio_iser_ep* e) {
    try {
        e->ep.cover_quiet_tail();  // a refused post fails the endpoint: nothing to wait for
    } catch (...) {
        return 0;
    }
    return !e->ep.failed() && e->ep.sends_done_total() < e->ep.sends_queued_total() ? 1 : 0;
}

uint64_t rbio_iser_ep_queued_total(const rbio_iser_ep* e) { return e->ep.sends_queued_total(); }
uint64_t rbio_iser_ep_done_total(const rbio_iser_ep* e) { return e->ep.sends_done_total(); }

void rbio_iser_ep_describe(const rbio_iser_ep* e, char* out, size_t len) {
    const auto& k = e->counters;
    const double posts = double(k[Counter::PostCalls]);
    std::snprintf(
        out, len,
        "pdus_in=%llu pdus_out=%llu work_requests=%llu post_calls=%llu wrs_per_post=%.2f "
        "signaled=%llu completions=%llu completions_per_poll=%.2f channel_wakeups=%llu "
        "rdma_reads=%llu spin_hits=%llu spin_misses=%llu direct_commands=%llu lent=%llu lend_refused=%llu "
        "passes_yielded=%llu",
        (unsigned long long)k[Counter::PdusIn], (unsigned long long)k[Counter::PdusOut],
        (unsigned long long)k[Counter::WorkRequests], (unsigned long long)k[Counter::PostCalls],
        posts > 0 ? double(k[Counter::WorkRequests]) / posts : 0.0, (unsigned long long)k[Counter::Signaled],
        (unsigned long long)k[Counter::Completions], k.completions_per_poll(),
        (unsigned long long)k[Counter::ChannelWakeups], (unsigned long long)k[Counter::RdmaReads],
        (unsigned long long)k[Counter::SpinHits], (unsigned long long)k[Counter::SpinMisses],
        (unsigned long long)k[Counter::DirectCommands], (unsigned long long)k[Counter::Lent],
        (unsigned long long)k[Counter::LendRefused], (unsigned long long)k[Counter::PassesYielded]);
}

void rbio_iser_ep_count_direct(rbio_iser_ep* e) { ++e->counters[Counter::DirectCommands]; }

void rbio_iser_ep_publish(rbio_iser_ep* e) {
    e->publisher.publish(e->counters, rbio::tp::totals());
    if (e->receives) e->receives->publish();
}

size_t rbio_iser_ep_counters(const rbio_iser_ep* e, uint64_t* out, size_t n) {
    return rbio::iser::copy_counters(e->counters, out, n);
}

void* rbio_iser_data_alloc(rbio_iser_ep* e, size_t size) { return e->buffers->alloc(size); }

void* rbio_iser_ep_take_rx(rbio_iser_ep* e, size_t size) { return e->ep.take_rx_data(size); }

void rbio_iser_data_free(rbio_iser_ep* e, void* buf) {
    if (!buf) return;
    if (!e) {
        BlockPool::release(buf);
        return;
    }
    Block* b = Block::of(buf);
    const uint64_t queued = e->ep.sends_queued_total();
    const uint64_t done = e->ep.sends_done_total();
    // A large buffer counted against its connection's data_budget_mib waits
    // for a signalled completion, not for up to signal_every more sends:
    // 16 responses of 8 MiB I/Os held 128 MiB after their commands had
    // ended, and closed a connection that had 32 MiB in flight. One more
    // completion per MiB moved costs nothing measurable.
    if (b->charged && b->size >= kSignalledReleaseBytes && done < queued) e->ep.signal_next_flush();
    e->releases.release_after(b, queued, done);
}

}  // extern "C"
