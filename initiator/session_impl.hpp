#pragma once
// Session internals shared by session.cpp (event loop, full feature phase),
// login.cpp (login, discovery, logout) and recovery.cpp (NOP-Out pings,
// session reinstatement). Private to the library.
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <unordered_map>

#include "connection.hpp"
#include "rbio/common/unique_fd.hpp"
#include "rbio/initiator/error.hpp"
#include "rbio/initiator/session.hpp"
#include "rbio/iser/counters.hpp"
#include "rbio/iser/pdu.hpp"
#include "rbio/iser/rx_buffer.hpp"

namespace rbio::initiator {

using Clock = std::chrono::steady_clock;
inline constexpr uint32_t kNoTag = 0xffffffff;

// RFC 1982 serial number arithmetic on 32-bit sequence numbers (RFC 7143 §4.2.2).
inline bool sn_lt(uint32_t a, uint32_t b) { return int32_t(a - b) < 0; }
inline bool sn_gt(uint32_t a, uint32_t b) { return int32_t(a - b) > 0; }
inline bool sn_le(uint32_t a, uint32_t b) { return !sn_gt(a, b); }

// SAM single-level LUN: peripheral addressing below 256, flat space beyond,
// up to kMaxLun (check_lun refuses the rest: encoded, they would alias).
inline constexpr uint64_t kMaxLun = 0x3fff;
uint64_t encode_lun(uint64_t lun);
void check_lun(uint64_t lun, const char* what);

class Session::Impl final : private ConnectionEvents {
public:
    // `fd`: a connected TCP socket to log in over, or none (connect_and_login
    // makes the connection). `reconnectable`: the Session made the connection itself and may make
    // another one for recovery.
    Impl(UniqueFd fd, const SessionOptions& options, Portal portal, bool reconnectable);
    ~Impl();

    // ---- login.cpp
    // Connects to `start` and logs in there, following login redirects
    // (status class 1, RFC 7143 §11.13.5) for a few hops; a permanent
    // redirect also moves the portal recovery reconnects to.
    void connect_and_login(const Portal& start, std::chrono::milliseconds connect_timeout);
    // Logs in over conn_. A redirect throws LoginRedirect.
    void login();
    // What login() throws for a redirect; connect_and_login follows it.
    struct LoginRedirect {
        Portal to;
        bool permanent;
    };
    const Portal& home_portal() const { return home_portal_; }
    std::vector<DiscoveredTarget> send_targets();
    // Mutual CHAP: the target's CHAP_N and CHAP_R answer `mine`; else AuthFailure.
    void verify_target_chap(const KeyValues& keys, const ChapChallenge& mine, const std::string& target);
    void logout(std::chrono::milliseconds timeout);

    // ---- session.cpp
    void submit(ScsiCommand command);
    size_t outstanding() const { return tasks_.size(); }
    void run_once(std::chrono::milliseconds max_wait);
    void run_nowait();
    Clock::time_point poll_fds(std::vector<pollfd>& fds) const;
    SessionStats stats() const;
    const NegotiatedParams& params() const { return params_; }
    bool recovering() const { return down_; }
    const Portal& portal() const { return portal_; }
    TmfResponse lun_reset(uint64_t lun, std::chrono::milliseconds timeout);

private:
    // Command lifecycle: Pending (waits for the CmdSN window) -> Sent ->
    // (Data-In / R2T-driven Data-Out) -> Completed once its status arrived;
    // Finished (done runs, task removed) when no queued PDU still points
    // into its buffer.
    struct Task {
        ScsiCommand cmd;
        uint32_t itt = 0;
        bool sent = false;
        Clock::time_point deadline;
        uint32_t received = 0;                // Data-In bytes placed so far
        uint32_t data_sent = 0;               // Data-Out bytes (immediate, unsolicited, solicited)
        uint32_t exp_data_sn = 0;             // next Data-In DataSN
        uint32_t exp_r2t_sn = 0;              // next R2TSN
        uint32_t tx_refs = 0;                 // PDUs the connection holds that point into cmd.buffer
        uint64_t order = 0;                   // submission order: retries keep it
        unsigned resends = 0;                 // times re-sent (reinstatement, abort, LU reset)
        uint32_t cmd_sn = 0;                  // its CmdSN once sent (ABORT TASK's RefCmdSN)
        bool aborting = false;                // an ABORT TASK or LU reset covers it
        uint32_t slot = Connection::kNoSlot;  // its connection resource (iSER bounce slot), if any
        std::optional<ScsiOutcome> outcome;
        // Back to "not sent" for a re-send: the target no longer holds it.
        void restart() {
            sent = aborting = false;
            received = data_sent = exp_data_sn = exp_r2t_sn = 0;
        }
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
    // A Login Response with T set and NSG full feature phase is waiting
    // for the login code.
    bool final_login_captured() const {
        return captured_ && captured_->header().opcode() == iser::Opcode::LoginResponse &&
               (captured_->bhs[1] & 0x83) == 0x83;
    }

    // Sends `request` and runs the loop until a PDU with opcode `expect`
    // arrives or the deadline passes (Timeout, naming `what`).
    Captured exchange(const iser::Bhs& request, std::vector<uint8_t> data, iser::Opcode expect,
                      Clock::time_point deadline, const char* what);
    // Queues one PDU; `ext` (if not empty) is data in a task's buffer.
    void queue_pdu(const iser::Bhs& bhs, std::vector<uint8_t> data, uint32_t task_itt,
                   std::span<const uint8_t> ext = {});
    // ---- ConnectionEvents
    void on_pdu(const iser::RxPdu& pdu) override { dispatch(pdu); }
    bool fill_send_queue() override { return pump(); }
    std::span<uint8_t> data_destination(const iser::RxPdu& pdu) override;
    void buffer_held(uint32_t itt) override { tasks_.at(itt).tx_refs++; }
    void buffer_released(uint32_t itt) override;
    // The base is private: the connection gets it from here.
    ConnectionEvents& events() { return *this; }
    void pass(Clock::time_point wait_until, bool nowait = false);
    // pass + deadlines + pings; a failure recovery can handle starts it.
    void step(Clock::time_point wait_until, bool nowait);
    // Queues Data-Out and the commands the CmdSN window and the connection
    // have room for; true when it queued anything.
    bool pump();
    bool room() const;
    iser::Bhs command_bhs(const Task& t, uint8_t flags, uint32_t immediate, uint32_t edtl) const;
    // Sends the command; false (nothing sent) when the connection has no
    // room for it right now.
    bool start_command(Task& t);
    void release_slot(Task& t);
    void emit_data_out(DataOutWork& w);
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
    // After login: the connection takes the session's limits and digests.
    void enter_full_feature();

    // ---- task_mgmt.cpp
    // An outstanding task management request; `done` gets the response code.
    struct Tmf {
        uint8_t function = 0;
        uint64_t lun = 0;
        uint32_t ref_itt = kNoTag;
        Clock::time_point deadline;
        std::function<void(uint8_t)> done;
    };
    void send_tmf(uint8_t function, uint64_t lun, uint32_t ref_itt, uint32_t ref_cmd_sn,
                  std::chrono::milliseconds timeout, std::function<void(uint8_t)> done);
    void handle_tmf_response(const iser::RxPdu& pdu);
    // A sent command past its timeout: ABORT TASK, escalating (see SessionOptions).
    void abort_timed_out(Task& t);
    // LOGICAL UNIT RESET; on Complete the LU's commands are re-sent, then `after` runs.
    void reset_lun(uint64_t lun, std::chrono::milliseconds timeout, std::function<void(uint8_t)> after);
    // Puts a command the target no longer holds back in front of the queue.
    void resend(Task& t);
    // Fails (Timeout) when a request is past its deadline.
    void check_tmf_deadlines(Clock::time_point now);

    // ---- recovery.cpp
    // Latest time the loop may sleep until for pings, or `until`.
    Clock::time_point ping_wake(Clock::time_point until) const;
    // Sends a NOP-Out ping when the target has been silent for the
    // interval; a ping unanswered past its timeout fails (Timeout).
    void check_ping(Clock::time_point now);
    void handle_ping_answer(iser::BhsView h);
    bool may_recover() const;
    // Drops the connection and puts every command without status back in
    // the queue; the next run_once passes try to log in again.
    void connection_failed(const InitiatorError& error);
    // One reconnect attempt if it is due, else a wait (wake_fd, until).
    void recover(Clock::time_point until);
    [[noreturn]] void protocol_error(const std::string& what);

    SessionOptions options_;
    Portal portal_;       // the portal of the current connection
    Portal home_portal_;  // where recovery reconnects: the first one, or a permanent redirect's
    iser::ConnectionCounters counters_;
    // The current connection (TCP or iSER, by options_.transport); none
    // while recovery has not made a new one. Reset explicitly in ~Impl: it
    // calls back into tasks_.
    std::unique_ptr<Connection> conn_;

    NegotiatedParams params_;
    bool full_feature_ = false;
    // The last pump stopped at a command the connection had no resource
    // for (an iSER bounce slot): only a response frees one, so the pass
    // waits for the target instead of polling without a timeout.
    bool no_slot_ = false;
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
    uint64_t next_order_ = 0;
    std::unordered_map<uint32_t, Tmf> tmfs_;  // by ITT

    // NOP-Out ping in flight (kNoTag: none) and when the target last sent anything.
    uint32_t ping_itt_ = kNoTag;
    Clock::time_point ping_deadline_;
    Clock::time_point last_rx_;

    // Recovery state: down_ from a failure until a login succeeds again.
    const bool reconnectable_;
    bool down_ = false;
    Clock::time_point down_since_;
    Clock::time_point next_attempt_;
    std::chrono::milliseconds backoff_{0};
    std::string down_reason_;
    std::string last_attempt_error_;
};

}  // namespace rbio::initiator
