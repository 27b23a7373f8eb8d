#include "tcp_connection.hpp"

#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <system_error>

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

// CLOCK_MONOTONIC itself, not std::chrono::steady_clock: the moderation's
// deadline is handed to a CLOCK_MONOTONIC timerfd as an absolute time.
uint64_t monotonic_us() {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * 1000000 + uint64_t(ts.tv_nsec) / 1000;
}

iser::RxModerationConfig moderation_config(const rbio_tp_settings& s) {
    iser::RxModerationConfig c;
    c.max_pdus = s.rx_wait_pdus;
    c.wait_us = s.rx_wait_us;
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
          tx_config(s), writer_, [this](uint64_t, int) { ++done_total_; }, counters_),
      fd_(fd),
      moderation_(moderation_config(s)) {
    if (moderation_.enabled()) {
        timer_.reset(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
        if (!timer_)
            throw std::system_error(errno, std::generic_category(), "timerfd_create (receive moderation)");
    }
}

int TcpConnection::rx_wait_end_pass(bool timer_fired, bool full_feature) {
    if (!moderation_.enabled()) return 0;
    // Bytes in beyond the headers read: part of a header the core has not
    // read yet; short of them: the rest of the PDU under way.
    const uint64_t in = counters_[iser::Counter::BytesIn];
    const size_t awaited = in > announced_ ? SIZE_MAX : size_t(announced_ - in);
    const bool answered = queued_total_ != queued_at_last_pass_;
    queued_at_last_pass_ = queued_total_;
    const auto step = moderation_.end_pass(timer_fired, full_feature, awaited, answered);
    if (step.set_lowat) {
        const int v = int(moderation_.lowat());
        ++counters_[iser::Counter::RxWaitCalls];
        if (::setsockopt(fd_, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof v) < 0) return stop_moderating();
    }
    // (the clock is read through the vDSO: no system call)
    if (step.arm_timer && moderation_.rearm_due(monotonic_us())) return set_timer();
    return 0;
}

// A socket call of the moderation failed: wake on every byte from now on,
// so no wait depends on a timer that may not run.
int TcpConnection::stop_moderating() {
    const int err = errno;
    moderation_.disable();
    const int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof one);
    return -err;
}

// To the moderation's deadline, absolute: the clock it was reckoned on.
int TcpConnection::set_timer() {
    const uint64_t at = moderation_.deadline_us();
    itimerspec t{};
    t.it_value.tv_sec = time_t(at / 1000000);
    t.it_value.tv_nsec = long(at % 1000000) * 1000;
    ++counters_[iser::Counter::RxWaitCalls];
    if (::timerfd_settime(timer_.get(), TFD_TIMER_ABSTIME, &t, nullptr) < 0) return stop_moderating();
    return 0;
}

bool TcpConnection::rx_wait_take_expiry() {
    uint64_t expirations = 0;
    ++counters_[iser::Counter::RxWaitCalls];
    if (::read(timer_.get(), &expirations, sizeof expirations) != ssize_t(sizeof expirations)) return false;
    ++counters_[iser::Counter::RxWaitExpired];
    return true;
}

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
