#pragma once
// The TCP backend of Connection (connection.hpp): an owned, connected,
// non-blocking socket, iser-opt's RxBuffer (every PDU of one receive in one
// pass; large Data-In segments straight into the command's buffer) and
// TxQueue (every PDU of a pass in one gather sendmsg; data sent in place
// from the caller's buffers).
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "connection.hpp"
#include "rbio/common/unique_fd.hpp"
#include "rbio/iser/counters.hpp"
#include "rbio/iser/socket_io.hpp"
#include "rbio/iser/tx_queue.hpp"

namespace rbio::initiator {

class TcpConnection final : public Connection {
public:
    // Over `fd` (connected), with login limits and no digests. `counters`
    // and `events` must outlive the connection.
    TcpConnection(UniqueFd fd, const Portal& portal, const SessionOptions& options,
                  iser::ConnectionCounters& counters, ConnectionEvents& events);
    // Drops what is still queued: the tasks' buffers are released.
    ~TcpConnection() override;

    bool rdma_data() const override { return false; }
    void send_pdu(const iser::Bhs& bhs, std::vector<uint8_t> data, std::span<const uint8_t> ext,
                  uint32_t itt) override;
    bool send_command(const iser::Bhs& bhs, uint32_t itt, std::span<uint8_t> buffer, DataDirection,
                      uint32_t immediate, uint32_t& slot) override {
        slot = kNoSlot;
        send_pdu(bhs, {}, buffer.first(immediate), itt);
        return true;
    }
    void finish_command(uint32_t, std::span<uint8_t>, uint32_t, bool) override {}
    void release_slot(uint32_t) override {}
    bool room() const override;
    void enter_full_feature(const NegotiatedParams& params) override;
    bool flush(bool quiet) override;
    bool wait_and_receive(int timeout_ms, int wake_fd, bool more) override;
    void poll_fds(std::vector<pollfd>& fds) const override;
    bool unsent() const override { return tx_.queued_pdus() > 0 && tx_.state() != iser::TxState::Blocked; }

private:
    // A PDU handed to the TxQueue: its header (and owned data) live here
    // until its completion runs. Completions run in queue order, so the
    // oldest entry of outq_ belongs to the next completion.
    struct OutPdu {
        iser::Bhs bhs;
        std::vector<uint8_t> data;
        uint32_t itt;  // the task whose buffer the PDU's data points into, or kNone
    };
    static constexpr uint32_t kNone = UINT32_MAX;

    void on_tx_complete();
    bool receive();

    UniqueFd fd_;
    iser::ConnectionCounters& counters_;
    ConnectionEvents& events_;
    iser::SocketWriter writer_;
    std::deque<OutPdu> outq_;  // before tx_: destroyed after it
    std::unique_ptr<iser::RxBuffer> rx_;
    iser::TxQueue tx_;
    std::vector<uint8_t> scratch_;  // data the session has no place for
};

}  // namespace rbio::initiator
