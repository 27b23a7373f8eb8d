// extern "C" entry points of the TCP transport for the tgt glue. Nothing
// here lets a C++ exception unwind into tgtd.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <span>

#include "rbio/bs/tcp_transport.h"
#include "tcp_connection.hpp"

using rbio::iser::Counter;
using rbio::iser::TxAccept;
using rbio::iser::TxState;

struct rbio_tcp_conn {
    rbio_tcp_conn(int fd, const rbio_tp_settings& s) : conn(fd, s) {}
    rbio::tp::TcpConnection conn;
};

namespace {

rbio_tx_state to_c(TxState s) {
    switch (s) {
        case TxState::Idle: return RBIO_TX_IDLE;
        case TxState::Pending: return RBIO_TX_PENDING;
        case TxState::Blocked: return RBIO_TX_BLOCKED;
        case TxState::Failed: break;
    }
    return RBIO_TX_FAILED;
}

}  // namespace

extern "C" {

rbio_tcp_conn* rbio_tcp_conn_new(int fd, const rbio_tp_settings* s, char* err, size_t errlen) {
    try {
        return std::make_unique<rbio_tcp_conn>(fd, *s).release();
    } catch (const std::exception& e) {
        std::snprintf(err, errlen, "%s", e.what());
    } catch (...) {
        std::snprintf(err, errlen, "unexpected error setting up the connection");
    }
    return nullptr;
}

void rbio_tcp_conn_free(rbio_tcp_conn* c) {
    std::unique_ptr<rbio_tcp_conn> owned(c);
    if (c) c->conn.publish();
}

void rbio_tcp_conn_take_event(rbio_tcp_conn* c) { c->conn.rx().take_event(); }

long rbio_tcp_conn_fill(rbio_tcp_conn* c) { return c->conn.rx().fill(); }

uint32_t rbio_tcp_conn_take_silence(rbio_tcp_conn* c) { return c->conn.rx().take_silence_s(); }

long rbio_tcp_conn_read(rbio_tcp_conn* c, void* buf, size_t n) {
    return c->conn.rx().read(std::span<uint8_t>(static_cast<uint8_t*>(buf), n));
}

void* rbio_tcp_conn_lend(rbio_tcp_conn* c, size_t offset, size_t len) {
    return c->conn.rx().lend(offset, len);
}

int rbio_tcp_conn_give_back(rbio_tcp_conn* c, const void* p) { return c->conn.rx().give_back(p) ? 1 : 0; }

const void* rbio_tcp_conn_peek(const rbio_tcp_conn* c, size_t len) {
    const auto bytes = c->conn.rx().peek();
    return bytes.size() >= len ? bytes.data() : nullptr;
}

int rbio_tcp_conn_rx_ready(const rbio_tcp_conn* c) {
    const auto& rx = c->conn.rx();
    if (!rx.config().batch_reads) return 1;  // every read is its own read()
    return rx.buffered() > 0 || rx.at_eof() || rx.direct_pending();
}

int rbio_tcp_conn_check_bhs(rbio_tcp_conn* c, const void* bhs, uint32_t max_data, int header_digest,
                            int data_digest, char* err, size_t errlen) {
    rbio::iser::PduLimits limits;
    limits.max_recv_data_segment_length = max_data;
    rbio::iser::BhsView view(static_cast<const uint8_t*>(bhs));
    if (auto e = rbio::iser::validate_bhs(view, limits, rbio::iser::PduSender::Initiator)) [[unlikely]] {
        std::snprintf(err, errlen, "%s", e->message.c_str());
        return -1;
    }
    ++c->conn.counters()[Counter::PdusIn];
    c->conn.on_request_header(view, header_digest != 0, data_digest != 0);
    return 0;
}

int rbio_tcp_conn_rx_wait_fd(const rbio_tcp_conn* c) { return c->conn.rx_wait_fd(); }

int rbio_tcp_conn_rx_wait_expired(rbio_tcp_conn* c) { return c->conn.rx_wait_take_expiry() ? 1 : 0; }

int rbio_tcp_conn_rx_wait_end_pass(rbio_tcp_conn* c, int timer_fired, int full_feature, char* err,
                                   size_t errlen) {
    const int rc = c->conn.rx_wait_end_pass(timer_fired != 0, full_feature != 0);
    if (rc == 0) return 0;
    std::snprintf(err, errlen, "receive moderation off: %s", std::strerror(-rc));
    return -1;
}

int rbio_tcp_conn_tx_open(const rbio_tcp_conn* c) { return c->conn.tx_open() ? 1 : 0; }

void rbio_tcp_conn_tx_header(rbio_tcp_conn* c, const void* bhs) {
    c->conn.tx_header(static_cast<const uint8_t*>(bhs));
}

void rbio_tcp_conn_tx_data(rbio_tcp_conn* c, const void* data, size_t len) {
    c->conn.tx_data(std::span<const uint8_t>(static_cast<const uint8_t*>(data), len));
}

int rbio_tcp_conn_tx_end(rbio_tcp_conn* c, int header_digest, int data_digest) {
    if (c->conn.tx_end(header_digest != 0, data_digest != 0) != TxAccept::Queued) return -1;
    return c->conn.tx_open() ? 1 : 0;
}

rbio_tx_state rbio_tcp_conn_flush(rbio_tcp_conn* c) { return to_c(c->conn.tx().flush()); }

rbio_tx_state rbio_tcp_conn_on_writable(rbio_tcp_conn* c) { return to_c(c->conn.tx().on_writable()); }

rbio_tx_state rbio_tcp_conn_tx_state(const rbio_tcp_conn* c) { return to_c(c->conn.tx().state()); }

void rbio_tcp_conn_tx_cancel(rbio_tcp_conn* c) { c->conn.tx().cancel_all(-ECONNABORTED); }

const char* rbio_tcp_conn_tx_error(const rbio_tcp_conn* c) { return c->conn.tx().error().c_str(); }

uint64_t rbio_tcp_conn_tx_queued_total(const rbio_tcp_conn* c) { return c->conn.queued_total(); }

uint64_t rbio_tcp_conn_tx_done_total(const rbio_tcp_conn* c) { return c->conn.done_total(); }

void rbio_tcp_conn_count_event_ctl(rbio_tcp_conn* c) { ++c->conn.counters()[Counter::EventCtl]; }

void rbio_tcp_conn_count_direct(rbio_tcp_conn* c) { ++c->conn.counters()[Counter::DirectCommands]; }

void rbio_tcp_conn_describe(const rbio_tcp_conn* c, char* out, size_t len) {
    const auto& k = c->conn.counters();
    std::snprintf(out, len,
                  "pdus_in=%llu pdus_out=%llu recv_calls=%llu send_calls=%llu "
                  "pdus_per_recv=%.2f pdus_per_send=%.2f bytes_in=%llu bytes_out=%llu "
                  "lent=%llu lend_refused=%llu rx_wait_calls=%llu rx_wait_expired=%llu rx_wait_level=%u "
                  "direct_commands=%llu",
                  (unsigned long long)k[Counter::PdusIn], (unsigned long long)k[Counter::PdusOut],
                  (unsigned long long)k[Counter::RecvCalls], (unsigned long long)k[Counter::SendCalls],
                  k.pdus_per_recv(), k.pdus_per_send(), (unsigned long long)k[Counter::BytesIn],
                  (unsigned long long)k[Counter::BytesOut], (unsigned long long)k[Counter::Lent],
                  (unsigned long long)k[Counter::LendRefused], (unsigned long long)k[Counter::RxWaitCalls],
                  (unsigned long long)k[Counter::RxWaitExpired], c->conn.moderation().level(),
                  (unsigned long long)k[Counter::DirectCommands]);
}

void rbio_tcp_conn_publish(rbio_tcp_conn* c) { c->conn.publish(); }

size_t rbio_tcp_conn_counters(const rbio_tcp_conn* c, uint64_t* out, size_t n) {
    return rbio::iser::copy_counters(c->conn.counters(), out, n);
}

}  // extern "C"
