#include "tcp_connection.hpp"

#include <cstring>

#include "rbio/bs/tcp_transport.h"

namespace rbio::tp {

namespace {

constexpr size_t kMaxQueuedPdus = 1024;

iser::StreamRxConfig rx_config(const rbio_tp_settings& s) {
    iser::StreamRxConfig c;
    c.capacity = size_t(s.rx_buffer_kib) * 1024;
    c.direct_threshold = size_t(s.direct_read_kib) * 1024;
    c.batch_reads = s.batch_reads != 0;
    return c;
}

iser::TxConfig tx_config(const rbio_tp_settings& s) {
    iser::TxConfig c;
    c.max_queued_pdus = kMaxQueuedPdus;
    c.max_queued_bytes = size_t(s.max_queued_kib) * 1024;
    c.coalesce = s.coalesce != 0;
    return c;
}

}  // namespace

iser::CounterTotals& totals() {
    static iser::CounterTotals t;
    return t;
}

TcpConnection::TcpConnection(int fd, const rbio_tp_settings& s)
    : rx_(fd, rx_config(s), counters_),
      writer_(fd),
      headers_(kMaxQueuedPdus),
      tx_(
          tx_config(s), writer_, [this](uint64_t, int) { ++done_total_; }, counters_) {}

void TcpConnection::tx_header(const uint8_t* bhs) {
    std::memcpy(headers_[queued_total_ % headers_.size()].data(), bhs, iser::kBhsLength);
    have_header_ = true;
    data_ = {};
}

iser::TxAccept TcpConnection::tx_end(bool header_digest, bool data_digest) {
    if (!have_header_) return iser::TxAccept::Invalid;
    have_header_ = false;
    tx_.set_digests(header_digest, data_digest);
    auto& h = headers_[queued_total_ % headers_.size()];
    iser::TxAccept a = tx_.enqueue({std::span<const uint8_t>(h), data_, queued_total_});
    if (a == iser::TxAccept::Queued) ++queued_total_;
    data_ = {};
    return a;
}

void TcpConnection::publish() { publisher_.publish(counters_, totals()); }

}  // namespace rbio::tp
