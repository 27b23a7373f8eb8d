#pragma once
// Session internals shared by session.cpp (event loop, full feature phase)
// and login.cpp (login, discovery, logout). Private to the library.
#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <unordered_map>

#include "rbio/initiator/session.hpp"
#include "rbio/iser/pdu.hpp"
#include "rbio/iser/rx_buffer.hpp"
#include "rbio/iser/socket_io.hpp"
#include "rbio/iser/tx_queue.hpp"
#include "socket.hpp"

namespace rbio::initiator {

using Clock = std::chrono::steady_clock;
inline constexpr uint32_t kNoTag = 0xffffffff;

// RFC 1982 serial number arithmetic on 32-bit sequence numbers (RFC 7143 §4.2.2).
inline bool sn_lt(uint32_t a, uint32_t b) { return int32_t(a - b) < 0; }
inline bool sn_gt(uint32_t a, uint32_t b) { return int32_t(a - b) > 0; }
inline bool sn_le(uint32_t a, uint32_t b) { return !sn_gt(a, b); }

// SAM single-level LUN: peripheral addressing below 256, flat space beyond.
uint64_t encode_lun(uint64_t lun);

class Session::Impl {
public:
    Impl(UniqueFd fd, const SessionOptions& options, Portal portal);
    ~Impl();

    // ---- login.cpp
    void login();
    std::vector<DiscoveredTarget> send_targets();
    void logout(std::chrono::milliseconds timeout);

    // ---- session.cpp
    void submit(ScsiCommand command);
    size_t outstanding() const { return tasks_.size(); }
    void run_once(std::chrono::milliseconds max_wait);
    void run_nowait();
    SessionStats stats() const;
    const NegotiatedParams& params() const { return params_; }

private:
    // A PDU handed to the TxQueue: its header (and owned data) live here
    // until its completion runs. Completions run in queue order, so the
    // oldest entry of outq_ belongs to the next completion.
    struct OutPdu {
        iser::Bhs bhs;
        std::vector<uint8_t> data;
        uint32_t task_itt = kNoTag;  // the task whose buffer `data` of the PDU points into
    };
    // Command lifecycle: Pending (waits for the CmdSN window) -> Sent ->
    // (Data-In / R2T-driven Data-Out) -> Completed once its status arrived;
    // Finished (done runs, task removed) when no queued PDU still points
    // into its buffer.
    struct Task {
        ScsiCommand cmd;
        uint32_t itt = 0;
        bool sent = false;
        Clock::time_point deadline;
        uint32_t received = 0;       // Data-In bytes placed so far
        uint32_t data_sent = 0;      // Data-Out bytes (immediate, unsolicited, solicited)
        uint32_t exp_data_sn = 0;    // next Data-In DataSN
        uint32_t exp_r2t_sn = 0;     // next R2TSN
        uint32_t tx_refs = 0;        // queued PDUs pointing into cmd.buffer
        std::optional<ScsiOutcome> outcome;
    };
    // Data-Out PDUs still to send for one unsolicited burst or one R2T.
    struct DataOutWork {
        uint32_t itt;
        uint32_t ttt;
        uint32_t offset;  // next byte to send
        uint32_t end;
        uint32_t data_sn = 0;
    };
    // A response a synchronous exchange (login, text, logout) waits for.
    struct Captured {
        std::array<uint8_t, iser::kBhsLength> bhs{};
        std::vector<uint8_t> data;
        iser::BhsView header() const { return iser::BhsView(bhs.data()); }
    };

    // Sends `request` and runs the loop until a PDU with opcode `expect`
    // arrives or the deadline passes (Timeout, naming `what`).
    Captured exchange(const iser::Bhs& request, std::vector<uint8_t> data, iser::Opcode expect,
                      Clock::time_point deadline, const char* what);
    // Queues one PDU; `ext` (if not empty) is data in a task's buffer.
    void queue_pdu(const iser::Bhs& bhs, std::vector<uint8_t> data, uint32_t task_itt,
                   std::span<const uint8_t> ext = {});
    void on_tx_complete(int status);
    void pass(Clock::time_point wait_until, bool nowait = false);
    void pump();
    bool room() const;
    void start_command(Task& t);
    void emit_data_out(DataOutWork& w);
    void receive();
    void place(const iser::RxPdu& pdu);
    void dispatch(const iser::RxPdu& pdu);
    void handle_scsi_response(const iser::RxPdu& pdu);
    void handle_data_in(const iser::RxPdu& pdu);
    void handle_r2t(const iser::RxPdu& pdu);
    void handle_nop_in(const iser::RxPdu& pdu);
    void handle_async(const iser::RxPdu& pdu);
    void update_window(iser::BhsView h);
    void check_stat_sn(iser::BhsView h, const char* what);
    Task& task_for(iser::BhsView h, const char* what);
    void complete(Task& t, ScsiOutcome outcome);
    void finish_if_released(uint32_t itt);
    void check_deadlines();
    uint32_t allocate_itt();
    // After login: RxBuffer with the session's limits and digests.
    void enter_full_feature();
    [[noreturn]] void protocol_error(const std::string& what);

    SessionOptions options_;
    Portal portal_;
    UniqueFd fd_;
    iser::ConnectionCounters counters_;
    iser::SocketWriter writer_;
    std::deque<OutPdu> outq_;  // before tx_: destroyed after it
    std::unique_ptr<iser::RxBuffer> rx_;
    std::unique_ptr<iser::TxQueue> tx_;
    std::vector<uint8_t> scratch_;  // direct path for non-Data-In PDUs

    NegotiatedParams params_;
    bool full_feature_ = false;
    std::array<uint8_t, 6> isid_{};
    uint16_t tsih_ = 0;
    uint32_t cmd_sn_ = 1;  // next CmdSN to assign
    uint32_t exp_cmd_sn_ = 1;
    uint32_t max_cmd_sn_ = 1;
    uint32_t exp_stat_sn_ = 0;
    uint32_t next_itt_ = 1;

    std::unordered_map<uint32_t, Task> tasks_;
    std::deque<uint32_t> pending_;  // ITTs waiting for the CmdSN window
    std::deque<DataOutWork> dataout_;
    std::optional<iser::Opcode> awaiting_;
    std::optional<Captured> captured_;
    SessionStats stats_;
};

}  // namespace rbio::initiator
