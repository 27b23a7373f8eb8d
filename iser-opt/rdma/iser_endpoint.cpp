#include "rbio/iser/rdma/iser_endpoint.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <utility>

namespace rbio::iser::rdma {

size_t recv_slot_size(const EndpointConfig& c) {
    return kIserHeaderLength + kBhsLength + c.max_ahs + c.recv_data_max;
}

namespace {

uint32_t recv_cq_entries(const EndpointConfig& c) { return c.srq ? c.srq->depth() : c.recv_depth; }

size_t send_slot_size(const EndpointConfig& c) {
    return kIserHeaderLength + kBhsLength + c.max_ahs + c.send_copy_max;
}

ibv_qp_init_attr qp_attr(const EndpointConfig& c, ibv_cq* cq) {
    ibv_qp_init_attr a{};
    a.send_cq = cq;
    a.recv_cq = cq;
    a.qp_type = IBV_QPT_RC;
    a.sq_sig_all = 0;
    a.cap.max_send_wr = c.send.depth;
    a.cap.max_send_sge = uint32_t(kMaxSge);
    if (c.srq) {
        a.srq = c.srq->get();
    } else {
        a.cap.max_recv_wr = c.recv_depth;
        a.cap.max_recv_sge = kMaxRecvSge;
    }
    a.cap.max_inline_data = c.max_inline;
    return a;
}

CmQp make_qp(rdma_cm_id* id, ibv_pd* pd, const EndpointConfig& c, ibv_cq* cq, SendConfig& send_out) {
    ibv_qp_init_attr a = qp_attr(c, cq);
    CmQp qp(id, pd, a);
    // The provider may round the capabilities up (rxe: 1024 send requests
    // become 2047). The send queue still keeps to the depth asked for: the
    // completion queue was sized for that many, and a flush at teardown
    // completes every outstanding request, signalled or not.
    send_out = c.send;
    send_out.depth = std::min(c.send.depth, a.cap.max_send_wr);
    send_out.max_inline = a.cap.max_inline_data;
    return qp;
}

}  // namespace

IserEndpoint::IserEndpoint(CmIdPtr id, ibv_pd* pd, const EndpointConfig& config, ConnectionCounters& counters,
                           TokenRelease release)
    : config_(config),
      counters_(counters),
      release_(std::move(release)),
      pd_(pd),
      id_(std::move(id)),
      poller_(id_->verbs, int(config.send.depth + recv_cq_entries(config)), config.poll, counters),
      send_pool_(pd, send_slot_size(config), config.send_slots, IBV_ACCESS_LOCAL_WRITE),
      qp_(make_qp(id_.get(), pd, config, poller_.cq(), config_.send)),
      send_poster_(qp_.get()),
      recv_poster_(qp_.get()),
      sq_(config_.send, send_poster_, counters) {
    if (config.srq) {
        if (config.srq->slot_size() < recv_slot_size(config))
            throw std::invalid_argument("the shared receive queue's slots are smaller than a message");
    } else {
        recv_buffers_.emplace(pd, config.recv_depth, recv_slot_size(config), config.recv_source);
        rq_.emplace(recv_poster_, config.recv_depth, counters, config.batch_recv);
    }
    limits_.max_recv_data_segment_length = config.recv_data_max;
    limits_.max_ahs_length = config.max_ahs;
}

IserEndpoint::~IserEndpoint() { shutdown(); }

void IserEndpoint::shutdown() {
    if (config_.srq && qp_.get()) {
        // Shared receives this QP took (completed, or flushed by the error
        // state) sit in its CQ: they go back to the SRQ before the CQ does.
        ibv_qp_attr a{};
        a.qp_state = IBV_QPS_ERR;
        ibv_modify_qp(qp_.get(), &a, IBV_QP_STATE);
        poller_.drain([this](const ibv_wc& wc) {
            if (is_recv_wr(wc.wr_id)) config_.srq->repost(recv_slot_of(wc.wr_id));
        });
        config_.srq->flush();
    }
    // With the QP gone nothing touches the slots or the owner's buffers.
    qp_.reset();
    sq_.cancel_all(-ECANCELED,
                   [this](uint64_t token, uint32_t slot, int status) { on_release(token, slot, status); });
}

void IserEndpoint::post_receives() {
    if (config_.srq) return;  // the device's queue is posted already
    for (uint32_t i = recv_buffers_->available(); i > 0; --i) repost(recv_buffers_->acquire());
    flush();
}

void IserEndpoint::give_back(uint32_t slot) {
    if (config_.srq) config_.srq->repost(slot);
    else recv_buffers_->release(slot);
}

void IserEndpoint::repost(uint32_t slot) {
    if (failed_ || config_.srq) {
        give_back(slot);
        return;
    }
    int rc = rq_->repost(slot, recv_buffers_->sges(slot), recv_buffers_->sge_count());
    if (rc != 0) fail(std::string("ibv_post_recv refused: ") + std::strerror(rc));
}

void IserEndpoint::flush() {
    if (int rc = sq_.flush(); rc != 0 && !failed_)
        fail(std::string("ibv_post_send refused: ") + std::strerror(rc));
    if (int rc = config_.srq ? config_.srq->flush() : rq_->flush(); rc != 0 && !failed_)
        fail(std::string("ibv_post_recv refused: ") + std::strerror(rc));
}

bool IserEndpoint::parse(uint32_t slot, uint32_t bytes, IserRx& rx) {
    const uint8_t* p = rx_buffers().head(slot);
    const uint8_t* rest = rx_buffers().rest(slot);  // AHS and data: contiguous, maybe not with p
    if (bytes >= kIserHeaderLength + kBhsLength && (p[0] >> 4) == uint8_t(IserOpcode::Control)) [[likely]] {
        // A whole BHS behind a Control header: decoded without an error
        // string in the way.
        rx.iser =
            IserHeader::decode_control(std::span<const uint8_t, kIserHeaderLength>(p, kIserHeaderLength));
    } else {
        std::string why;
        auto iser = IserHeader::decode({p, std::min<size_t>(bytes, kIserHeaderLength + kBhsLength)}, why);
        if (!iser) {
            fail(why);
            return false;
        }
        fail("iSER message of " + std::to_string(bytes) + " bytes has no complete BHS");
        return false;
    }
    rx.bhs = BhsView(p + kIserHeaderLength);
    if (auto e = validate_bhs(rx.bhs, limits_, config_.peer)) [[unlikely]] {
        fail(e->message);
        return false;
    }
    const size_t ahs = rx.bhs.ahs_length();
    const size_t dsl = rx.bhs.data_segment_length();
    const size_t need = kIserHeaderLength + kBhsLength + ahs + dsl;
    // Some senders pad the data segment to a word; nothing else may follow.
    if (bytes < need || bytes > pad4(need)) {
        char m[160];
        std::snprintf(m, sizeof m, "iSER message of %u bytes does not match its PDU (%s, AHS %zu, data %zu)",
                      bytes, opcode_name(rx.bhs.opcode_byte()), ahs, dsl);
        fail(m);
        return false;
    }
    rx.ahs = {rest, ahs};
    if (ahs > 0) {
        if (auto e = validate_ahs(rx.ahs)) {
            fail(e->message);
            return false;
        }
    }
    rx.data = {rest + ahs, dsl};
    counters_[Counter::PdusIn] += 1;
    counters_[Counter::BytesIn] += bytes;
    return true;
}

bool IserEndpoint::queue_send(const IserHeader& iser, std::span<const uint8_t> header,
                              std::span<const uint8_t> copy, const ibv_sge* data, uint64_t token) {
    if (failed_ || header.size() < kBhsLength || header.size() > kBhsLength + config_.max_ahs ||
        copy.size() > config_.send_copy_max || !has_room(1))
        return false;
    const uint32_t slot = send_pool_.acquire();
    uint8_t* p = send_pool_.data(slot);
    // A target's header advertises no buffer: a constant, copied. The BHS
    // alone (most PDUs) is copied with a constant size too: a few moves
    // instead of a call per PDU.
    static constexpr std::array<uint8_t, kIserHeaderLength> kControl{
        uint8_t(uint8_t(IserOpcode::Control) << 4)};
    if (iser.opcode == IserOpcode::Control && !iser.write_stag_valid && !iser.read_stag_valid)
        std::memcpy(p, kControl.data(), kIserHeaderLength);
    else iser.encode(std::span<uint8_t, kIserHeaderLength>(p, kIserHeaderLength));
    if (header.size() == kBhsLength) std::memcpy(p + kIserHeaderLength, header.data(), kBhsLength);
    else std::memcpy(p + kIserHeaderLength, header.data(), header.size());
    size_t len = kIserHeaderLength + header.size();
    if (!copy.empty()) {
        std::memcpy(p + len, copy.data(), copy.size());
        len += copy.size();
    }
    std::array<ibv_sge, 2> sge{ibv_sge{reinterpret_cast<uintptr_t>(p), uint32_t(len), send_pool_.lkey()}};
    size_t n = 1;
    if (data && data->length > 0) sge[n++] = *data;
    sq_.push({WrKind::Send, {sge.data(), n}, 0, 0, token, slot});
    counters_[Counter::PdusOut] += 1;
    counters_[Counter::BytesOut] += len + (n > 1 ? data->length : 0);
    return true;
}

bool IserEndpoint::send_pdu(const IserHeader& iser, std::span<const uint8_t> header,
                            std::span<const uint8_t> data, uint64_t token) {
    return queue_send(iser, header, data, nullptr, token);
}

bool IserEndpoint::send_pdu_registered(const IserHeader& iser, std::span<const uint8_t> header,
                                       const ibv_sge& data, uint64_t token) {
    return queue_send(iser, header, {}, &data, token);
}

bool IserEndpoint::rdma_write(const ibv_sge& local, uint64_t remote_va, uint32_t rkey, uint64_t token) {
    if (failed_ || !sq_.has_room()) return false;
    return sq_.push({WrKind::RdmaWrite, {&local, 1}, remote_va, rkey, token, kNoSlot});
}

bool IserEndpoint::rdma_write_send(const ibv_sge& local, uint64_t remote_va, uint32_t rkey,
                                   std::span<const uint8_t, kBhsLength> bhs) {
    if (failed_ || !has_room(2)) return false;
    sq_.push({WrKind::RdmaWrite, {&local, 1}, remote_va, rkey, 0, kNoSlot});
    return queue_send(IserHeader{}, bhs, {}, nullptr, 0);
}

bool IserEndpoint::rdma_read(const ibv_sge& local, uint64_t remote_va, uint32_t rkey, uint64_t token) {
    if (failed_ || !sq_.has_room()) return false;
    if (!sq_.push({WrKind::RdmaRead, {&local, 1}, remote_va, rkey, token, kNoSlot})) return false;
    counters_[Counter::RdmaReads] += 1;
    return true;
}

void IserEndpoint::fail(std::string why) {
    if (failed_) return;
    failed_ = true;
    error_ = std::move(why);
}

void IserEndpoint::fail_wc(const char* what, const ibv_wc& wc) {
    // A flush after the QP entered the error state follows the real cause.
    if (wc.status == IBV_WC_WR_FLUSH_ERR && failed_) return;
    char m[128];
    std::snprintf(m, sizeof m, "%s work completion failed: %s (vendor error 0x%x)", what,
                  wc_status_name(wc.status), wc.vendor_err);
    fail(m);
}

}  // namespace rbio::iser::rdma
