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
        unreachable(portal, std::string("expected ") + rdma_event_str(want) + ", got " +
                                rdma_event_str(e->event) + " (status " + std::to_string(e->status) +
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

std::unique_ptr<IserConnection> IserConnection::connect(const Portal& portal, std::chrono::milliseconds timeout,
                                                        const std::vector<std::span<uint8_t>>& regions,
                                                        iser::ConnectionCounters& counters) {
    try {
        return std::unique_ptr<IserConnection>(
            new IserConnection(resolve(portal, timeout), portal, timeout, regions, counters));
    } catch (const RdmaError& e) {
        unreachable(portal, e.what());
    } catch (const std::invalid_argument& e) {
        unreachable(portal, e.what());
    }
}

IserConnection::IserConnection(Resolved r, const Portal& portal, std::chrono::milliseconds timeout,
                               const std::vector<std::span<uint8_t>>& regions,
                               iser::ConnectionCounters& counters)
    : channel_(std::move(r.channel)),
      pd_(std::move(r.pd)),
      regions_(regions),
      bounce_(pd_.get(), kBounceSlotBytes, kBounceSlots, kAccess),
      ep_(std::move(r.id), pd_.get(), endpoint_config(), counters, nullptr) {
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
    if (fl < 0 || ::fcntl(channel_->fd, F_SETFL, fl | O_NONBLOCK) < 0) throw_rdma("fcntl(O_NONBLOCK) on the CM channel");
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
        case RDMA_CM_EVENT_DISCONNECTED:
            connected_ = false;
            return "the target disconnected";
        case RDMA_CM_EVENT_DEVICE_REMOVAL: return "the RDMA device was removed";
        case RDMA_CM_EVENT_CONNECT_ERROR:
        case RDMA_CM_EVENT_UNREACHABLE:
            return std::string("connection error: ") + rdma_event_str(e->event);
        default: RBIO_LOG(Debug, "iSER: ignoring CM event " << rdma_event_str(e->event)); break;
        }
    }
}

bool IserConnection::needs_bounce(std::span<uint8_t> buffer) const {
    for (std::span<uint8_t> reg : regions_)
        if (buffer.data() >= reg.data() && buffer.data() + buffer.size() <= reg.data() + reg.size()) return false;
    return true;
}

bool IserConnection::place(std::span<uint8_t> buffer, bool write, Placement& out) {
    for (size_t i = 0; i < regions_.size(); ++i) {
        std::span<uint8_t> reg = regions_[i];
        if (buffer.data() >= reg.data() && buffer.data() + buffer.size() <= reg.data() + reg.size()) {
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

void IserConnection::finish(const Placement& p, std::span<uint8_t> buffer, uint32_t bytes, bool read) {
    if (p.slot == kNoSlot) return;
    if (read && bytes) std::memcpy(buffer.data(), bounce_.data(p.slot), std::min<size_t>(bytes, buffer.size()));
    bounce_.release(p.slot);
}

void IserConnection::release(uint32_t slot) {
    if (slot != kNoSlot) bounce_.release(slot);
}

}  // namespace rbio::initiator
