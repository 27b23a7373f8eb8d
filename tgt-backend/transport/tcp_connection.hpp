#pragma once
// One TCP connection of the transport as tgt's iSCSI core drives it: the
// core pulls request bytes (served from StreamRx: one receive per event) and
// pushes each response as header, data and end (queued in a TxQueue: one
// sendmsg per event-loop pass).
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "rbio/common/unique_fd.hpp"
#include "rbio/iser/counters.hpp"
#include "rbio/iser/pdu.hpp"
#include "rbio/iser/rx_moderation.hpp"
#include "rbio/iser/socket_io.hpp"
#include "rbio/iser/stream_rx.hpp"
#include "rbio/iser/tx_queue.hpp"

struct rbio_tp_settings;

namespace rbio::tp {

class TcpConnection {
public:
    TcpConnection(int fd, const rbio_tp_settings& s);
    TcpConnection(const TcpConnection&) = delete;
    TcpConnection& operator=(const TcpConnection&) = delete;

    iser::StreamRx& rx() { return rx_; }
    const iser::StreamRx& rx() const { return rx_; }
    iser::TxQueue& tx() { return tx_; }
    const iser::TxQueue& tx() const { return tx_; }
    iser::ConnectionCounters& counters() { return counters_; }
    const iser::ConnectionCounters& counters() const { return counters_; }

    // The core's response under construction. Headers are copied (the core
    // reuses its header buffer for the next response at once); data is not.
    void tx_header(const uint8_t* bhs);
    void tx_data(std::span<const uint8_t> data) { data_ = data; }
    iser::TxAccept tx_end(bool header_digest, bool data_digest);
    // The queue takes a response now: not blocked, not failed, room left.
    bool tx_open() const {
        const iser::TxState s = tx_.state();
        return s != iser::TxState::Blocked && s != iser::TxState::Failed &&
               tx_.queued_pdus() < tx_.config().max_queued_pdus;
    }

    // Receive moderation (rbio/iser/rx_moderation.hpp). The wait timer's
    // descriptor, for the event loop; -1 when moderation is off.
    int rx_wait_fd() const { return timer_.get(); }
    // A header the core just read, with the session's digests. Its bytes
    // count towards the PDU under way; a Data-Out is no request to the
    // moderation: the Data-Outs of one write arrive together and say
    // nothing of how many commands the initiator keeps in flight (counted,
    // one 128 KiB write set a wait of 15 requests that its next command,
    // alone, sat out until the timer).
    void on_request_header(iser::BhsView bhs, bool header_digest, bool data_digest) {
        const size_t bytes = iser::layout_of(bhs, header_digest, data_digest).total_bytes();
        announced_ += bytes;
        if (bhs.opcode() != iser::Opcode::DataOut) moderation_.on_pdu(bytes);
    }
    // The end of a pass: sets the socket's SO_RCVLOWAT and arms the wait
    // timer as the moderation says. 0, or -errno of a call that failed (then
    // moderation is off for good and the socket wakes on every byte).
    int rx_wait_end_pass(bool timer_fired, bool full_feature);
    // The wait timer's event: true when it expired (read and counted).
    bool rx_wait_take_expiry();
    const iser::RxModeration& moderation() const { return moderation_; }

    uint64_t queued_total() const { return queued_total_; }
    uint64_t done_total() const { return done_total_; }
    void publish();

private:
    int stop_moderating();
    int set_timer();

    iser::ConnectionCounters counters_;
    iser::CounterPublisher publisher_;
    iser::StreamRx rx_;
    iser::SocketWriter writer_;
    // One header slot per queue entry: a slot is reused only after the PDU
    // that used it is complete.
    std::vector<std::array<uint8_t, iser::kBhsLength>> headers_;
    std::span<const uint8_t> data_;
    bool have_header_ = false;
    uint64_t queued_total_ = 0;
    uint64_t done_total_ = 0;
    iser::TxQueue tx_;
    int fd_;
    iser::RxModeration moderation_;
    UniqueFd timer_;          // CLOCK_MONOTONIC timerfd, when moderating
    uint64_t announced_ = 0;  // bytes of the PDUs whose headers were read
    uint64_t queued_at_last_pass_ = 0;
};

// Counters summed over every connection of the process.
iser::CounterTotals& totals();

}  // namespace rbio::tp
