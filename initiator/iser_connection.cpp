// The iSER connection of a session: rdma_cm setup and teardown, buffer
// placement (registered regions or bounce slots). See iser_connection.hpp.
#include "iser_connection.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "rbio/initiator/error.hpp"
#include "rbio/initiator/log.hpp"

namespace rbio::initiator {

using namespace iser::rdma;

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

// Whether `buffer` lies wholly inside `region`.
bool within(std::span<const uint8_t> buffer, std::span<const uint8_t> region) {
    return buffer.data() >= region.data() && buffer.data() + buffer.size() <= region.data() + region.size();
}

[[noreturn]] void unreachable(const Portal& p, const std::string& why) {
    fail(ErrorKind::Unreachable, "iSER connection to " + p.to_string() + ": " + why);
}

// Waits for the next CM event on `ch` within `timeout`; it must be `want`.
CmEvent wait_event(rdma_event_channel* ch, rdma_cm_event_type want, Clock::time_point deadline,
                   const Portal& portal) {
    for (;;) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        pollfd p{ch->fd, POLLIN, 0};
        int n = ::poll(&p, 1, int(std::max<int64_t>(0, left.count())));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) unreachable(portal, std::string("no ") + rdma_event_str(want) + " in time");
        CmEvent e = next_cm_event(ch);
        if (!e) continue;
        if (e->event == want) return e;
        unreachable(portal,
                    std::string("expected ") + rdma_event_str(want) + ", got " + rdma_event_str(e->event) +
                        " (status " + std::to_string(e->status) +
                        (e->event == RDMA_CM_EVENT_REJECTED ? "; is tgtd's iSER listening there?" : "") +
                        ")");
    }
}

EndpointConfig endpoint_config() {
    EndpointConfig c;
    c.peer = iser::PduSender::Target;
    // Responses are bounded by the CmdSN window (tgt: 128) plus a few NOP-In
    // and asynchronous messages.
    c.recv_depth = 320;
    c.recv_data_max = IserConnection::kRecvDataMax;
    c.send_slots = 512;
    c.send.depth = 1024;
    c.send_copy_max = IserConnection::kRecvDataMax;
    // The session covers a tail of unsignalled sends itself, when it has
    // no command in flight (flush(true)): while commands are out, their
    // responses bring more sends and signalled completions anyway, and a
    // cover per pass would cost a signalled work request per I/O.
    return c;
}

}  // namespace

IserConnection::Resolved IserConnection::resolve(const Portal& portal, std::chrono::milliseconds timeout) {
    const Clock::time_point deadline = Clock::now() + timeout;
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const std::string port = std::to_string(portal.port);
    if (int rc = ::getaddrinfo(portal.host.c_str(), port.c_str(), &hints, &res); rc != 0)
        unreachable(portal, std::string("cannot resolve the host: ") + gai_strerror(rc));
    std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owned(res, ::freeaddrinfo);
    Resolved r;
    r.channel.reset(rdma_create_event_channel());
    if (!r.channel) unreachable(portal, std::string("rdma_create_event_channel: ") + std::strerror(errno));
    rdma_cm_id* raw = nullptr;
    if (rdma_create_id(r.channel.get(), &raw, nullptr, RDMA_PS_TCP))
        unreachable(portal, std::string("rdma_create_id: ") + std::strerror(errno));
    r.id.reset(raw);
    const int ms = int(std::max<int64_t>(1, timeout.count()));
    if (rdma_resolve_addr(r.id.get(), nullptr, res->ai_addr, ms))
        unreachable(portal, std::string("rdma_resolve_addr: ") + std::strerror(errno) +
                                " (no RDMA device for this address?)");
    wait_event(r.channel.get(), RDMA_CM_EVENT_ADDR_RESOLVED, deadline, portal);
    if (rdma_resolve_route(r.id.get(), ms))
        unreachable(portal, std::string("rdma_resolve_route: ") + std::strerror(errno));
    wait_event(r.channel.get(), RDMA_CM_EVENT_ROUTE_RESOLVED, deadline, portal);
    if (!r.id->verbs) unreachable(portal, "the route has no RDMA device");
    r.pd.reset(ibv_alloc_pd(r.id->verbs));
    if (!r.pd) unreachable(portal, std::string("ibv_alloc_pd: ") + std::strerror(errno));
    return r;
}

void IserConnection::restrict_offer(LoginOffer& offer) {
    offer.rdma_extensions = true;
    offer.initial_r2t = true;
    offer.header_digest = offer.data_digest = DigestPolicy::None;
    offer.initiator_recv_data_segment_length = kRecvDataMax;
    offer.target_recv_data_segment_length = kRecvDataMax;
}

void IserConnection::check_buffer(std::span<const uint8_t> buffer,
                                  const std::vector<std::span<uint8_t>>& regions) {
    if (buffer.size() <= kBounceSlotBytes ||
        std::any_of(regions.begin(), regions.end(), [&](std::span<uint8_t> r) { return within(buffer, r); }))
        return;
    throw std::invalid_argument("SCSI command over iSER: a buffer of " + std::to_string(buffer.size()) +
                                " bytes outside SessionOptions::iser_regions (at most " +
                                std::to_string(kBounceSlotBytes) + " bytes go through a bounce slot)");
}

std::unique_ptr<IserConnection> IserConnection::connect(const Portal& portal,
                                                        std::chrono::milliseconds timeout,
                                                        const std::vector<std::span<uint8_t>>& regions,
                                                        iser::ConnectionCounters& counters,
                                                        ConnectionEvents& events) {
    try {
        return std::unique_ptr<IserConnection>(
            new IserConnection(resolve(portal, timeout), portal, timeout, regions, counters, events));
    } catch (const RdmaError& e) {
        unreachable(portal, e.what());
    } catch (const std::invalid_argument& e) {
        unreachable(portal, e.what());
    }
}

IserConnection::IserConnection(Resolved r, const Portal& portal, std::chrono::milliseconds timeout,
                               const std::vector<std::span<uint8_t>>& regions,
                               iser::ConnectionCounters& counters, ConnectionEvents& events)
    : Connection(portal),
      counters_(counters),
      events_(events),
      channel_(std::move(r.channel)),
      id_(std::move(r.id)),
      pd_(std::move(r.pd)),
      regions_(regions),
      bounce_(pd_.get(), kBounceSlotBytes, kBounceSlots, kAccess),
      ep_(std::move(id_), pd_.get(), endpoint_config(), counters, nullptr) {
    const Clock::time_point deadline = Clock::now() + timeout;
    for (std::span<uint8_t> reg : regions_) {
        MrPtr mr(ibv_reg_mr(pd_.get(), reg.data(), reg.size(), kAccess));
        if (!mr) throw_rdma("ibv_reg_mr of a " + std::to_string(reg.size()) + "-byte region");
        mrs_.push_back(std::move(mr));
    }
    ep_.post_receives();
    ibv_device_attr attr{};
    if (ibv_query_device(ep_.id()->verbs, &attr)) throw_rdma("ibv_query_device");
    std::array<uint8_t, iser::kIserCmPrivateLength> priv{};
    iser::IserCmRequest{}.encode(priv);
    rdma_conn_param p{};
    p.private_data = priv.data();
    p.private_data_len = uint8_t(priv.size());
    // The target RDMA READs write data from us: let it keep several in flight.
    p.responder_resources = uint8_t(std::clamp(attr.max_qp_rd_atom, 1, 16));
    p.initiator_depth = uint8_t(std::clamp(attr.max_qp_init_rd_atom, 1, 16));
    p.retry_count = 7;
    p.rnr_retry_count = 7;
    if (rdma_connect(ep_.id(), &p)) throw_rdma("rdma_connect");
    wait_event(channel_.get(), RDMA_CM_EVENT_ESTABLISHED, deadline, portal);
    connected_ = true;
    // From here on CM events (DISCONNECTED) are taken by poll_cm() without blocking.
    int fl = ::fcntl(channel_->fd, F_GETFL);
    if (fl < 0 || ::fcntl(channel_->fd, F_SETFL, fl | O_NONBLOCK) < 0)
        throw_rdma("fcntl(O_NONBLOCK) on the CM channel");
}

IserConnection::~IserConnection() {
    if (connected_) rdma_disconnect(ep_.id());
    ep_.shutdown();
}

std::string IserConnection::poll_cm() {
    for (;;) {
        CmEvent e = next_cm_event(channel_.get());
        if (!e) return {};
        switch (e->event) {
            case RDMA_CM_EVENT_DISCONNECTED: connected_ = false; return "the target disconnected";
            case RDMA_CM_EVENT_DEVICE_REMOVAL: return "the RDMA device was removed";
            case RDMA_CM_EVENT_CONNECT_ERROR:
            case RDMA_CM_EVENT_UNREACHABLE:
                return std::string("connection error: ") + rdma_event_str(e->event);
            default: RBIO_LOG(Debug, "iSER: ignoring CM event " << rdma_event_str(e->event)); break;
        }
    }
}

bool IserConnection::place(std::span<uint8_t> buffer, bool write, Placement& out) {
    for (size_t i = 0; i < regions_.size(); ++i) {
        if (within(buffer, regions_[i])) {
            out = {mrs_[i]->rkey, reinterpret_cast<uintptr_t>(buffer.data()), kNoSlot};
            return true;
        }
    }
    if (buffer.size() > kBounceSlotBytes)
        throw std::logic_error("iSER: an unregistered buffer beyond the bounce size reached place()");
    const uint32_t slot = bounce_.acquire();
    if (slot == kNoSlot) return false;
    if (write && !buffer.empty()) std::memcpy(bounce_.data(slot), buffer.data(), buffer.size());
    out = {bounce_.rkey(), reinterpret_cast<uintptr_t>(bounce_.data(slot)), slot};
    return true;
}

void IserConnection::send_pdu(const iser::Bhs& bhs, std::vector<uint8_t> data, std::span<const uint8_t> ext,
                              uint32_t) {
    const std::span<const uint8_t> d = ext.empty() ? std::span<const uint8_t>(data) : ext;
    if (d.size() > max_send_data_)
        throw std::logic_error("initiator: iSER PDU data beyond TargetRecvDataSegmentLength");
    if (!ep_.send_pdu(iser::IserHeader{}, bhs.bytes(), d, 0))
        lost(std::string("iSER send queue full (") + iser::opcode_name(bhs.bytes()[0]) + ")");
}

bool IserConnection::send_command(const iser::Bhs& bhs, uint32_t, std::span<uint8_t> buffer,
                                  DataDirection dir, uint32_t immediate, uint32_t& slot) {
    const bool write = dir == DataDirection::Write;
    const bool read = dir == DataDirection::Read;
    // Immediate data travels in the command's SEND; the rest the target
    // RDMA READs from the advertised buffer, past the immediate bytes (no
    // unsolicited Data-Out: InitialR2T=Yes).
    iser::IserHeader ih;
    Placement where;
    if ((read || write) && buffer.size() > immediate) {
        if (!place(buffer, write, where)) return false;  // no bounce slot free
        if (read) {
            ih.read_stag_valid = true;
            ih.read_stag = where.stag;
            ih.read_va = where.va;
        } else {
            ih.write_stag_valid = true;
            ih.write_stag = where.stag;
            ih.write_va = where.va + immediate;
        }
    }
    if (!ep_.send_pdu(ih, bhs.bytes(), buffer.first(immediate), 0)) {
        release_slot(where.slot);
        return false;
    }
    slot = where.slot;
    return true;
}

void IserConnection::finish_command(uint32_t slot, std::span<uint8_t> buffer, uint32_t bytes, bool read) {
    if (slot == kNoSlot) return;
    if (read && bytes) std::memcpy(buffer.data(), bounce_.data(slot), std::min<size_t>(bytes, buffer.size()));
    bounce_.release(slot);
}

void IserConnection::enter_full_feature(const NegotiatedParams& params) {
    max_send_data_ = params.target_max_recv_data_segment_length;
}

bool IserConnection::wait_and_receive(int timeout_ms, int wake_fd, bool more) {
    pollfd fds[3] = {{ep_.fd(), POLLIN, 0}, {channel_->fd, POLLIN, 0}, {wake_fd, POLLIN, 0}};
    const int n = ::poll(fds, wake_fd >= 0 ? 3 : 2, timeout_ms);
    if (n < 0) {
        if (errno == EINTR) return false;
        fail(ErrorKind::ConnectionLost, std::string("poll: ") + std::strerror(errno));
    }
    // Completions first: a response that arrived before a disconnect counts.
    bool heard = false;
    try {
        if (fds[0].revents || more) heard = receive();
        if (fds[1].revents)
            if (std::string why = poll_cm(); !why.empty()) lost(why);
    } catch (const iser::rdma::RdmaError& e) {
        // A verbs or CM call that failed (polling the CQ, rearming it,
        // reading a CM event): the connection is gone, which recovery
        // handles; RdmaError itself would pass it by and end the session.
        lost(e.what());
    }
    return heard;
}

void IserConnection::poll_fds(std::vector<pollfd>& fds) const {
    fds.push_back({ep_.fd(), POLLIN, 0});
    fds.push_back({channel_->fd, POLLIN, 0});
}

bool IserConnection::receive() {
    const uint64_t before = counters_[iser::Counter::Completions];
    // Neither may throw through the endpoint's pass: it must repost the
    // receive and keep its queues consistent.
    const bool ok = ep_.run_pass(
        [this](const iser::rdma::IserRx& rx) {
            if (rx_error_) return;  // the session ends with the first error
            try {
                events_.on_pdu(iser::RxPdu{rx.bhs.bytes(), rx.ahs, rx.data});
            } catch (...) {
                rx_error_ = std::current_exception();
            }
        },
        [this] {
            if (rx_error_) return false;
            try {
                return events_.fill_send_queue();
            } catch (...) {
                rx_error_ = std::current_exception();
                return false;
            }
        });
    if (rx_error_) std::rethrow_exception(std::exchange(rx_error_, nullptr));
    if (!ok) lost("iSER: " + ep_.error());
    return counters_[iser::Counter::Completions] != before;
}

}  // namespace rbio::initiator
