// extern "C" entry points of the iSER transport for the tgt glue: one
// IserEndpoint per connection, registered data buffers, and the deferred
// release of buffers that posted work requests still point into. Nothing
// here lets a C++ exception unwind into tgtd.
#include <sys/mman.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <memory>
#include <new>
#include <vector>

#include "rbio/bs/iser_transport.h"
#include "rbio/bs/tcp_transport.h"
#include "rbio/iser/rdma/iser_endpoint.hpp"
#include "tcp_connection.hpp"

using namespace rbio::iser;
using namespace rbio::iser::rdma;

namespace {

// ---- registered data buffers
//
// A buffer is [one page: header at its end][payload], so the core gets page
// aligned memory (O_DIRECT backing stores) and the header is found from the
// payload. Freed buffers wait in per-size-class stacks, still registered.

constexpr size_t kPage = 4096;
constexpr int kMinShift = 12;          // 4 KiB
constexpr int kClasses = 13;           // up to 16 MiB
constexpr size_t kPooledMax = 256u << 20;
constexpr uint32_t kMagic = 0x72424953;  // "rBIS"

struct BufHeader {
    uint32_t magic;
    int cls;          // size class, or -1: not pooled
    size_t size;      // usable bytes
    size_t mapped;    // bytes mapped, header page included
    ibv_mr* mr;       // registration over the payload
    BufHeader* next;  // free stack
};

BufHeader* header_of(void* payload) {
    return reinterpret_cast<BufHeader*>(static_cast<uint8_t*>(payload) - sizeof(BufHeader));
}
void* payload_of(BufHeader* h) { return reinterpret_cast<uint8_t*>(h) + sizeof(BufHeader); }

struct BufferPool {
    BufHeader* free[kClasses] = {};
    size_t pooled = 0;
    ~BufferPool() {
        for (auto*& f : free)
            while (f) {
                BufHeader* h = f;
                f = h->next;
                destroy(h);
            }
    }
    static void destroy(BufHeader* h) {
        if (h->mr) ibv_dereg_mr(h->mr);
        munmap(reinterpret_cast<uint8_t*>(payload_of(h)) - kPage, h->mapped);
    }
};
// One pool per protection domain (so per device): a pooled buffer keeps its
// registration, and a host with several RDMA devices does not re-register
// buffers that move between them.
BufferPool& pool_for(ibv_pd* pd) {
    static std::vector<std::pair<ibv_pd*, std::unique_ptr<BufferPool>>> pools;
    for (auto& [owner, p] : pools)
        if (owner == pd) return *p;
    pools.emplace_back(pd, std::make_unique<BufferPool>());
    return *pools.back().second;
}

int size_class(size_t size) {
    for (int c = 0; c < kClasses; ++c)
        if ((size_t(1) << (kMinShift + c)) >= size) return c;
    return -1;
}

void release_buffer(BufHeader* h) {
    if (!h->mr) {
        BufferPool::destroy(h);
        return;
    }
    BufferPool& p = pool_for(h->mr->pd);
    if (h->cls >= 0 && p.pooled + h->size <= kPooledMax) {
        h->next = p.free[h->cls];
        p.free[h->cls] = h;
        p.pooled += h->size;
        return;
    }
    BufferPool::destroy(h);
}

void* alloc_buffer(ibv_pd* pd, size_t size) {
    BufferPool& p = pool_for(pd);
    const int cls = size_class(size);
    BufHeader* h = nullptr;
    if (cls >= 0 && p.free[cls]) {
        h = p.free[cls];
        p.free[cls] = h->next;
        p.pooled -= h->size;
    } else {
        const size_t usable = cls >= 0 ? size_t(1) << (kMinShift + cls) : (size + kPage - 1) / kPage * kPage;
        // + a page: tgt pads data to 4 bytes in place; the header page in front.
        const size_t mapped = kPage + usable + kPage;
        void* m = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) return nullptr;
        h = reinterpret_cast<BufHeader*>(static_cast<uint8_t*>(m) + kPage - sizeof(BufHeader));
        *h = BufHeader{kMagic, cls, usable, mapped, nullptr, nullptr};
    }
    // Registered once, when the buffer is made; pooled buffers keep theirs.
    if (!h->mr) {
        h->mr = ibv_reg_mr(pd, payload_of(h), h->size + 4, IBV_ACCESS_LOCAL_WRITE);
        if (!h->mr) {
            BufferPool::destroy(h);
            return nullptr;
        }
    }
    return payload_of(h);
}

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

// ---- one shared receive queue per device, while it has connections
//
// Made by the first connection on a device, destroyed with the last one, so
// an idle tgtd holds no receive buffers and a receive lost by a QP torn
// down mid-flight is not lost for good.
struct DeviceReceives {
    DeviceReceives(ibv_pd* pd, uint32_t depth, size_t slot_size, bool batch)
        : queue(pd, depth, slot_size, batch) {}
    ~DeviceReceives() { publish(); }
    void publish() { publisher.publish(queue.counters(), rbio::tp::totals()); }

    SharedReceiveQueue queue;
    CounterPublisher publisher;
};

std::shared_ptr<DeviceReceives> receives_for(ibv_context* ctx, ibv_pd* pd, const EndpointConfig& c,
                                             uint32_t depth) {
    static std::vector<std::pair<ibv_context*, std::weak_ptr<DeviceReceives>>> devices;
    for (auto& [dev, weak] : devices)
        if (dev == ctx) {
            if (auto shared = weak.lock()) return shared;
            auto fresh = std::make_shared<DeviceReceives>(pd, depth, recv_slot_size(c), c.batch_recv);
            weak = fresh;
            return fresh;
        }
    auto fresh = std::make_shared<DeviceReceives>(pd, depth, recv_slot_size(c), c.batch_recv);
    devices.emplace_back(ctx, fresh);
    return fresh;
}

// NOP-In pings are off unless the admin sets a target's nop_interval, so a
// peer that vanished without a disconnect reaching us (link down, crashed
// host) would keep its QP, slot pools and tasks for ever: after this many
// of the glue's once-a-second calls for a quiet connection in a row, the
// idle QP gets a liveness probe (IserEndpoint::probe_idle()), whose
// failure ends it.
constexpr unsigned kQuietSecondsBeforeProbe = 5;

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
    return c;
}

EndpointConfig with_srq(EndpointConfig c, DeviceReceives* r) {
    c.srq = r ? &r->queue : nullptr;
    return c;
}

}  // namespace

struct rbio_iser_ep {
    struct Deferred {
        BufHeader* buf;
        uint64_t after;
    };
    rbio_iser_ep(CmIdPtr id, const rbio_tp_settings& s, rbio_iser_done_fn done_fn, void* ctx)
        : pd(pd_for(id->verbs)),
          done(done_fn),
          done_ctx(ctx),
          receives(s.iser_srq_depth ? receives_for(id->verbs, pd, endpoint_config(s), s.iser_srq_depth)
                                    : nullptr),
          ep(std::move(id), pd, with_srq(endpoint_config(s), receives.get()), counters,
             [this](uint64_t token, int status) { done(done_ctx, token, status); }) {}

    void release_deferred(bool all) {
        const uint64_t d = ep.sends_done_total();
        while (deferred_count > 0) {
            Deferred& f = deferred[deferred_head];
            if (!all && f.after > d) break;
            release_buffer(f.buf);
            deferred_head = (deferred_head + 1) % deferred.size();
            --deferred_count;
        }
    }
    // A ring sized for the send queue; it grows (rarely) rather than lose a
    // buffer or free one under a posted work request.
    void defer(BufHeader* h, uint64_t after) {
        if (deferred_count == deferred.size()) {
            std::vector<Deferred> bigger(deferred.empty() ? 1024 : deferred.size() * 2);
            for (size_t i = 0; i < deferred_count; ++i)
                bigger[i] = deferred[(deferred_head + i) % deferred.size()];
            deferred.swap(bigger);
            deferred_head = 0;
        }
        deferred[(deferred_head + deferred_count) % deferred.size()] = {h, after};
        ++deferred_count;
    }

    ibv_pd* pd;
    rbio_iser_done_fn done;
    void* done_ctx;
    ConnectionCounters counters;
    CounterPublisher publisher;
    std::shared_ptr<DeviceReceives> receives;  // outlives ep, whose QP uses it
    std::vector<Deferred> deferred = std::vector<Deferred>(1024);
    size_t deferred_head = 0;
    size_t deferred_count = 0;
    unsigned quiet_seconds = 0;  // rbio_iser_ep_cover() calls since the last pass
    IserEndpoint ep;
};

extern "C" {

rbio_iser_ep* rbio_iser_ep_new(rdma_cm_id* id, const rbio_tp_settings* s, rbio_iser_done_fn done,
                               void* ctx, char* err, size_t errlen) {
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
    e->quiet_seconds = 0;
    try {
        bool ok = e->ep.run_pass([&](const IserRx& r) {
            rbio_iser_rx c{};
            c.pdu = r.bhs.bytes().data();
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

void rbio_iser_ep_cover(rbio_iser_ep* e) {
    e->ep.cover_quiet_tail();
    // From the accept on, whether or not anything was sent: rdma_accept
    // moved the QP to RTS before the CM's reply went out, so the post is
    // taken, and a peer that vanished before its first PDU (its RTU or its
    // login lost to a link going down) answers no probe either. Waiting for
    // a first send left such a connection, which nothing else ends (tgt has
    // no login timeout, no disconnect can come), with its QP for good.
    if (++e->quiet_seconds >= kQuietSecondsBeforeProbe) {
        e->quiet_seconds = 0;
        e->ep.probe_idle();
    }
}

void rbio_iser_ep_flush(rbio_iser_ep* e) {
    e->ep.end_pass();
    e->release_deferred(false);
}

int rbio_iser_ep_send(rbio_iser_ep* e, const void* hdr, size_t hdr_len, const void* data,
                      size_t data_len) {
    return e->ep.send_pdu({}, {static_cast<const uint8_t*>(hdr), hdr_len},
                          {static_cast<const uint8_t*>(data), data_len}, 0)
               ? 0
               : -1;
}

static ibv_sge buffer_sge(void* buf, size_t offset, size_t len) {
    BufHeader* h = header_of(buf);
    return ibv_sge{reinterpret_cast<uintptr_t>(buf) + offset, uint32_t(len), h->mr->lkey};
}

static bool registered(rbio_iser_ep* e, void* buf, size_t offset, size_t len) {
    BufHeader* h = header_of(buf);
    return h->magic == kMagic && h->mr && h->mr->pd == e->pd && offset <= h->size &&
           len <= h->size - offset;
}

int rbio_iser_ep_rdma_write(rbio_iser_ep* e, void* buf, size_t offset, size_t len, uint64_t va,
                            uint32_t rkey) {
    if (!registered(e, buf, offset, len)) return -1;
    return e->ep.rdma_write(buffer_sge(buf, offset, len), va, rkey, 0) ? 0 : -1;
}

int rbio_iser_ep_rdma_read(rbio_iser_ep* e, void* buf, size_t offset, size_t len, uint64_t va,
                           uint32_t rkey, uint64_t token) {
    if (!registered(e, buf, offset, len)) return -1;
    return e->ep.rdma_read(buffer_sge(buf, offset, len), va, rkey, token) ? 0 : -1;
}

int rbio_iser_ep_room(const rbio_iser_ep* e, unsigned n) { return e->ep.has_room(n); }
uint64_t rbio_iser_ep_queued_total(const rbio_iser_ep* e) { return e->ep.sends_queued_total(); }
uint64_t rbio_iser_ep_done_total(const rbio_iser_ep* e) { return e->ep.sends_done_total(); }

void rbio_iser_ep_describe(const rbio_iser_ep* e, char* out, size_t len) {
    const auto& k = e->counters;
    const double posts = double(k[Counter::PostCalls]);
    std::snprintf(out, len,
                  "pdus_in=%llu pdus_out=%llu work_requests=%llu post_calls=%llu wrs_per_post=%.2f "
                  "signaled=%llu completions=%llu completions_per_poll=%.2f channel_wakeups=%llu "
                  "rdma_reads=%llu spin_hits=%llu spin_misses=%llu",
                  (unsigned long long)k[Counter::PdusIn], (unsigned long long)k[Counter::PdusOut],
                  (unsigned long long)k[Counter::WorkRequests],
                  (unsigned long long)k[Counter::PostCalls],
                  posts > 0 ? double(k[Counter::WorkRequests]) / posts : 0.0,
                  (unsigned long long)k[Counter::Signaled],
                  (unsigned long long)k[Counter::Completions], k.completions_per_poll(),
                  (unsigned long long)k[Counter::ChannelWakeups],
                  (unsigned long long)k[Counter::RdmaReads],
                  (unsigned long long)k[Counter::SpinHits],
                  (unsigned long long)k[Counter::SpinMisses]);
}

void rbio_iser_ep_publish(rbio_iser_ep* e) {
    e->publisher.publish(e->counters, rbio::tp::totals());
    if (e->receives) e->receives->publish();
}

size_t rbio_iser_ep_counters(const rbio_iser_ep* e, uint64_t* out, size_t n) {
    return rbio::iser::copy_counters(e->counters, out, n);
}

void* rbio_iser_data_alloc(rbio_iser_ep* e, size_t size) {
    try {
        return alloc_buffer(e->pd, size);
    } catch (...) {
        return nullptr;
    }
}

void rbio_iser_data_free(rbio_iser_ep* e, void* buf) {
    if (!buf) return;
    BufHeader* h = header_of(buf);
    if (!e || e->ep.sends_done_total() >= e->ep.sends_queued_total()) {
        release_buffer(h);
        return;
    }
    try {
        e->defer(h, e->ep.sends_queued_total());
    } catch (...) {
        // Out of memory for the bookkeeping: keep the buffer rather than
        // free it under a posted work request.
    }
}

}  // extern "C"
