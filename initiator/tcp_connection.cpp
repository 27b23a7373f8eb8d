// The TCP backend of a session's connection. See tcp_connection.hpp.
#include "tcp_connection.hpp"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "rbio/initiator/error.hpp"

namespace rbio::initiator {

namespace {

// PDUs and bytes queued at most before a pass stops producing Data-Out and
// new commands; the TxQueue holds twice as many so NOP-Out answers always fit.
constexpr size_t kPumpPdus = 2048;
constexpr size_t kPumpBytes = 8u << 20;

// Login PDUs carry at most 8192 bytes of data (RFC 7143 §6.1) unless we
// declared more; no digests until the full feature phase.
iser::RxConfig login_rx_config(const SessionOptions& o) {
    iser::RxConfig rc;
    rc.capacity = o.rx_buffer_bytes;
    rc.sender = iser::PduSender::Target;
    rc.limits.max_recv_data_segment_length = std::max<uint32_t>(8192, o.offer.max_recv_data_segment_length);
    rc.direct_data_threshold = o.direct_data_threshold;
    return rc;
}

iser::TxConfig tx_config() {
    iser::TxConfig tc;
    tc.max_queued_pdus = 2 * kPumpPdus + 64;
    return tc;
}

}  // namespace

TcpConnection::TcpConnection(UniqueFd fd, const Portal& portal, const SessionOptions& options,
                             iser::ConnectionCounters& counters, ConnectionEvents& events)
    : Connection(portal),
      fd_(std::move(fd)),
      counters_(counters),
      events_(events),
      writer_(fd_.get()),
      rx_(std::make_unique<iser::RxBuffer>(login_rx_config(options), counters)),
      tx_(
          tx_config(), writer_, [this](uint64_t, int) { on_tx_complete(); }, counters) {}

TcpConnection::~TcpConnection() {
    // Queued PDUs point into tasks' buffers and outq_; their completions
    // give the buffers back.
    tx_.cancel_all(-ECONNRESET);
}

void TcpConnection::send_pdu(const iser::Bhs& bhs, std::vector<uint8_t> data, std::span<const uint8_t> ext,
                             uint32_t itt) {
    OutPdu& out = outq_.emplace_back();
    out.bhs = bhs;
    out.data = std::move(data);
    out.itt = ext.empty() ? kNone : itt;
    const uint32_t out_itt = out.itt;  // out goes with outq_'s entry on a refusal
    // Held before enqueue: it may write early and complete the PDU at once.
    if (out.itt != kNone) events_.buffer_held(out.itt);
    iser::TxPdu p{out.bhs.bytes(), ext.empty() ? std::span<const uint8_t>(out.data) : ext, 0};
    const iser::TxAccept accepted = tx_.enqueue(p);
    if (accepted == iser::TxAccept::Queued) return;
    // Not queued: no completion will give the buffer back, and a task that
    // stays held never finishes, even after recovery has re-sent it.
    outq_.pop_back();
    if (out_itt != kNone) events_.buffer_released(out_itt);
    if (accepted == iser::TxAccept::Invalid)
        throw std::logic_error("initiator: TxQueue refused an invalid PDU");
    // Only answers to the target's pings bypass room(): a target that sends
    // thousands of them without reading ours is broken, and recovery (a new
    // connection) is the answer, as over iSER.
    if (accepted == iser::TxAccept::Full)
        lost(std::string("send queue full: the target is not reading (") + iser::opcode_name(bhs.bytes()[0]) +
             ")");
    lost("send failed: " + tx_.error());
}

void TcpConnection::on_tx_complete() {
    // A failed status also shows as TxState::Failed, reported by flush().
    const uint32_t itt = outq_.front().itt;
    outq_.pop_front();
    if (itt != kNone) events_.buffer_released(itt);
}

bool TcpConnection::room() const { return tx_.queued_pdus() < kPumpPdus && tx_.queued_bytes() < kPumpBytes; }

void TcpConnection::enter_full_feature(const NegotiatedParams& params) {
    if (rx_->buffered() != 0)
        fail(ErrorKind::Protocol,
             "target " + portal_ + ": bytes arrived after the final login response before any request");
    iser::RxConfig rc = rx_->config();
    rc.limits.max_recv_data_segment_length = params.our_max_recv_data_segment_length;
    rc.limits.header_digest = params.header_digest;
    rc.limits.data_digest = params.data_digest;
    rx_ = std::make_unique<iser::RxBuffer>(rc, counters_);
    tx_.set_digests(params.header_digest, params.data_digest);
}

bool TcpConnection::flush(bool) {
    const iser::TxState s = tx_.flush();
    if (s == iser::TxState::Failed) lost("send failed: " + tx_.error());
    return s == iser::TxState::Blocked;
}

bool TcpConnection::wait_and_receive(int timeout_ms, int wake_fd, bool) {
    pollfd fds[2] = {{fd_.get(), short(POLLIN | (tx_.state() == iser::TxState::Blocked ? POLLOUT : 0)), 0},
                     {wake_fd, POLLIN, 0}};
    const pollfd& pfd = fds[0];
    const int n = ::poll(fds, wake_fd >= 0 ? 2 : 1, timeout_ms);
    if (n < 0) {
        if (errno == EINTR) return false;
        fail(ErrorKind::ConnectionLost, std::string("poll: ") + std::strerror(errno));
    }
    if (n == 0) return false;
    if (pfd.revents & POLLOUT) {
        if (tx_.on_writable() == iser::TxState::Failed) lost("send failed: " + tx_.error());
    }
    if (pfd.revents & (POLLIN | POLLERR | POLLHUP)) return receive();
    return false;
}

void TcpConnection::poll_fds(std::vector<pollfd>& fds) const {
    fds.push_back({fd_.get(), short(POLLIN | (tx_.state() == iser::TxState::Blocked ? POLLOUT : 0)), 0});
}

bool TcpConnection::receive() {
    const ssize_t n = iser::receive_into(fd_.get(), *rx_);
    if (n == -EAGAIN || n == -EINTR) return false;
    if (n == 0)
        fail(ErrorKind::ConnectionLost, "target " + portal_ + " closed the connection" +
                                            (rx_->mid_pdu() ? " in the middle of a PDU" : ""));
    if (n < 0) lost(std::string("receive: ") + std::strerror(int(-n)));
    for (;;) {
        iser::RxResult r = rx_->next();
        switch (r.status) {
            case iser::RxStatus::Pdu: events_.on_pdu(r.pdu); break;
            case iser::RxStatus::NeedDestination: {
                std::span<uint8_t> dst = events_.data_destination(r.pdu);
                if (dst.empty()) {
                    scratch_.resize(r.pdu.header().data_segment_length());
                    dst = scratch_;
                }
                rx_->set_data_destination(dst);
                break;
            }
            case iser::RxStatus::NeedMore: return true;
            case iser::RxStatus::Failed:
                fail(ErrorKind::Protocol, "target " + portal_ + ": " + rx_->error().message);
        }
    }
}

}  // namespace rbio::initiator
