#pragma once
// One iSCSI session over one TCP connection, driven by one event loop on the
// caller's thread (RFC 7143, ErrorRecoveryLevel 0).
//
// Every pass of the loop (run_once) queues what is ready -- new commands
// inside the CmdSN window, Data-Out PDUs for unsolicited data and R2Ts, NOP-Out
// answers -- into iser-opt's TxQueue and sends it with ONE gather sendmsg,
// then waits with one poll() and reaps every complete PDU of ONE recvmsg from
// iser-opt's RxBuffer; large Data-In segments are received straight into the
// command's buffer. Completions run inside run_once and may submit more
// commands, which leave with the next pass -- over iSER within the same
// pass: every completion the pass reaps runs first, then the commands they
// submitted are queued and posted together with one ibv_post_send
// (doorbell batching), so a caller that resubmits from its completions
// answers a batch of responses with one post.
//
// A command past its timeout is aborted (ABORT TASK, then LOGICAL UNIT
// RESET; see SessionOptions::abort_timeout) and re-sent.
//
// Recovery (RFC 7143 §6.3.5, session reinstatement at ErrorRecoveryLevel 0):
// when the connection breaks, task management fails or a NOP-Out ping goes
// unanswered, the loop drops the connection, logs in again with the
// same ISID and TSIH 0 (the target then ends the old session) and re-sends,
// in their original order, every command that got no status. A command
// reported done was acknowledged by the target; none is reported done
// otherwise. Attempts back off from 250 ms to 4 s and end after
// replacement_timeout: run_once then throws.
//
// Anything malformed from the target (a bad field, a tag or offset that does
// not fit, a sequence number out of order) is not recovered from: run_once
// throws InitiatorError(Protocol), as it does when recovery is off or gives
// up, and the Session is unusable afterwards. Commands outstanding then never
// complete.
#include <poll.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "rbio/initiator/chap.hpp"
#include "rbio/initiator/negotiation.hpp"
#include "rbio/iser/counters.hpp"

namespace rbio::initiator {

struct Portal {
    std::string host;
    uint16_t port = 3260;
    // "HOST", "HOST:PORT", "[V6]:PORT"; throws std::invalid_argument.
    static Portal parse(std::string_view text);
    std::string to_string() const;
};

enum class Transport : uint8_t {
    Tcp,
    // iSER (RFC 7145) over RDMA (rdma_cm, e.g. soft-RoCE): PDUs as SENDs, SCSI
    // data moved by the target with RDMA WRITE/READ into/from the command's
    // buffer. Login offers RDMAExtensions=Yes, no digests, InitialR2T=Yes.
    Iser,
};

// What must happen, when a path of a multipath session (multipath.hpp)
// fails, before the commands it had that may change the LU (may_change_lu)
// are sent again on another path. The failed gateway may still hold
// copies of them (queued in tgtd, or waiting in its store: librbd waiting
// for the image's lock, a hung NFS mount); one it executes after a newer
// write to the same blocks has completed through another gateway would
// overwrite that write. (A single session's reinstatement does not fence
// yet: there the re-sent copy goes to the same store as the old one, and
// in the cases above waits behind it, in librbd's queue for the lock or on
// the same hung mount.)
enum class Fence : uint8_t {
    // Hold them until that gateway has ended its copies: a login at the
    // failed session's portal (the same ISID, so tgtd ends the old session),
    // or when that fails through another portal of the same port group,
    // that answers as the same target port group, and a LOGICAL UNIT RESET
    // answered "function complete" (tgtd answers only once the store has
    // finished every command the LU had, on every session); or every
    // connection to that portal refused, taken to mean its tgtd has exited
    // (docs/several-gateways.md says when it does not).
    // Commands that change nothing (reads, SYNCHRONIZE CACHE, inquiries)
    // move at once.
    LuReset,
    // Re-send them at once (dm-multipath's way): faster, with the risk above.
    None,
};

struct SessionOptions {
    Transport transport = Transport::Tcp;
    // iSER: memory the caller's command buffers live in, registered once per
    // connection (zero copy; must outlive the Session). Other buffers go
    // through registered bounce slots of up to 256 KiB (a copy per I/O);
    // submit() refuses larger unregistered ones.
    std::vector<std::span<uint8_t>> iser_regions;
    std::string initiator_name = "iqn.2026-11.io.rbio:initiator";
    std::string target_name;  // ignored for discovery sessions
    bool discovery = false;
    std::optional<ChapCredentials> chap;  // one-way CHAP when set
    // Mutual CHAP (with `chap`): the name and secret the target must answer
    // the initiator's challenge with (open-iscsi's username_in/password_in).
    std::optional<ChapCredentials> chap_in;
    LoginOffer offer;
    std::chrono::milliseconds connect_timeout{5000};
    std::chrono::milliseconds login_timeout{10000};
    size_t rx_buffer_bytes = 1u << 20;
    // Data-In segments of at least this size go straight into the
    // command's buffer (RxBuffer's direct path).
    uint32_t direct_data_threshold = 32 * 1024;
    // When >= 0, run_once also returns as soon as this fd is readable (it
    // polls it next to the socket), so another thread can wake the loop,
    // e.g. with an eventfd, to submit new commands. The caller drains it;
    // it must not be readable during login.
    int wake_fd = -1;
    // The ISID (RFC 7143 §11.12.5); a random one when not set. Tests and the
    // fuzzer (initiator/fuzz/) set it so replies can echo it.
    std::optional<std::array<uint8_t, 6>> isid;
    // Multipath sessions only: see Fence. Held commands wait at most the
    // multipath layer's no_path_timeout (the CLI's --replacement-timeout).
    Fence fence = Fence::LuReset;

    // How long the session tries to reinstate itself after a failure before
    // run_once gives up (open-iscsi's replacement_timeout); 0: no recovery,
    // the first failure ends the session. Sessions made with login_on and
    // discovery sessions never recover (there is nothing to reconnect to,
    // or nothing to retry).
    std::chrono::milliseconds replacement_timeout{120000};
    // A command re-sent this many times (once per reinstatement while it was
    // outstanding) and failing again ends the session: it is the command,
    // not the connection, that the target cannot complete.
    unsigned command_retries = 5;
    // NOP-Out pings (open-iscsi's noop_out_interval / noop_out_timeout): one
    // after `interval` without any PDU from the target; no answer within
    // `timeout` counts as a lost connection. 0 interval: no pings.
    std::chrono::milliseconds noop_out_interval{5000};
    std::chrono::milliseconds noop_out_timeout{5000};
    // Task management (RFC 7143 §11.5) when a sent command passes its
    // timeout: ABORT TASK, answered within abort_timeout, re-sends just that
    // command; if the target cannot abort it, LOGICAL UNIT RESET (answered
    // within lu_reset_timeout) re-sends every command of the LU; anything
    // else, or no answer, escalates to session reinstatement. 0
    // abort_timeout: straight to reinstatement (open-iscsi's abort_timeout
    // and lu_reset_timeout).
    std::chrono::milliseconds abort_timeout{15000};
    std::chrono::milliseconds lu_reset_timeout{30000};
};

// Task Management Function Response codes (RFC 7143 §11.6.1).
enum class TmfResponse : uint8_t {
    Complete = 0,
    NoSuchTask = 1,
    NoSuchLun = 2,
    TaskStillAllegiant = 3,
    ReassignmentNotSupported = 4,
    NotSupported = 5,
    AuthorizationFailed = 6,
    Rejected = 255,
};
// E.g. "function complete"; "response N" for codes RFC 7143 does not define.
std::string to_string(TmfResponse r);

enum class DataDirection : uint8_t { None, Read, Write };

// How a SCSI command ended at the target.
struct ScsiOutcome {
    uint8_t response = 0;  // iSCSI Response: 0 = command completed at target
    uint8_t status = 0;    // SCSI status: 0 GOOD, 2 CHECK CONDITION, 8 BUSY, ...
    bool underflow = false;
    bool overflow = false;
    uint32_t residual = 0;
    uint32_t bytes_transferred = 0;  // Data-In bytes placed / Data-Out bytes sent
    std::vector<uint8_t> sense;      // sense data, without the 2-byte length
    bool good() const { return response == 0 && status == 0; }
};

struct ScsiCommand {
    uint64_t lun = 0;
    std::array<uint8_t, 16> cdb{};
    uint8_t cdb_length = 0;  // 6..16
    DataDirection direction = DataDirection::None;
    // Read: where the data goes; write: what is sent. Expected Data Transfer
    // Length is its size. Must stay valid until `done` has run.
    std::span<uint8_t> buffer;
    std::chrono::milliseconds timeout{30000};
    std::function<void(const ScsiOutcome&)> done;
};

struct DiscoveredTarget {
    std::string name;
    std::vector<std::string> addresses;  // "host:port,tpgt" as the target sent them
};

// Loop statistics next to the transport's counters.
struct SessionStats {
    iser::ConnectionCounters transport;
    uint64_t poll_calls = 0;
    uint64_t passes = 0;
    uint64_t commands = 0;
    uint64_t data_direct_bytes = 0;   // Data-In bytes received in place
    uint64_t reinstatements = 0;      // successful session reinstatements
    uint64_t reconnect_attempts = 0;  // logins tried for them, successful or not
    uint64_t commands_retried = 0;    // commands re-sent on a reinstated session
    uint64_t pings_sent = 0;          // NOP-Out pings
    uint64_t pings_answered = 0;      // the target's NOP-In pings answered
    uint64_t tasks_aborted = 0;       // ABORT TASK requests
    uint64_t lun_resets = 0;          // LOGICAL UNIT RESET requests
    uint64_t syscalls() const {
        return transport[iser::Counter::RecvCalls] + transport[iser::Counter::SendCalls] + poll_calls;
    }
};

// What the SCSI helpers (scsi.hpp) and the I/O drivers (rbio bench, the
// fio engine, the FUSE export) need of a session: one Session, or a
// MultipathSession (multipath.hpp) over one Session per portal of an LU.
// One thread drives it; completions run inside run_once/run_nowait.
class IoSession {
public:
    virtual ~IoSession() = default;
    // Queues a command; it leaves with the next pass.
    virtual void submit(ScsiCommand command) = 0;
    // Commands submitted and not yet completed.
    virtual size_t outstanding() const = 0;
    // One pass of the event loop, waiting at most max_wait for input.
    // Throws InitiatorError when the session ends.
    virtual void run_once(std::chrono::milliseconds max_wait) = 0;
    // One pass that never waits.
    virtual void run_nowait() = 0;
    virtual const NegotiatedParams& params() const = 0;
    virtual SessionStats stats() const = 0;
    // Logout; needs no outstanding commands.
    virtual void logout(std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) = 0;
    // Once run_once has thrown: whether it gave up on commands that may
    // change the LU at a gateway it could not fence, which may still apply
    // them. A new session must then not write to the LU before that
    // gateway is seen to (stopped, or its sessions ended), or an old write
    // may land over a newer one.
    virtual bool left_unfenced_writes() const { return false; }
    // submit + run_once until done.
    ScsiOutcome execute(ScsiCommand command);
};

class Session final : public IoSession {
public:
    // Connects (non-blocking, connect_timeout) and logs in. Throws
    // InitiatorError: Unreachable, LoginRefused, AuthFailure, UnknownTarget,
    // Timeout, Protocol, ConnectionLost.
    static std::unique_ptr<Session> login(const Portal& portal, const SessionOptions& options);
    // TCP only. Logs in over a connected stream socket `fd` that the Session takes
    // over (closed with it, also when this throws). For transports set up
    // elsewhere and for the fuzzer, which feeds a socketpair; `portal` only
    // names the peer in messages.
    static std::unique_ptr<Session> login_on(int fd, const Portal& portal, const SessionOptions& options);
    ~Session();
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;

    const NegotiatedParams& params() const override;
    // The portal of the current (or last) connection: the one asked for,
    // or where a login redirect led.
    const Portal& portal() const;
    // Discovery sessions: SendTargets=All (following text continuations).
    std::vector<DiscoveredTarget> send_targets();

    // Queues a command; it leaves with the next pass. Throws
    // std::invalid_argument for a bad CDB length or a buffer beyond 4 GiB.
    void submit(ScsiCommand command) override;
    // Commands submitted and not yet completed.
    size_t outstanding() const override;
    // One pass of the event loop; waits at most max_wait for input (less if a
    // command's deadline comes first). While the session is down it makes
    // at most one reconnect attempt (connect and login, which may take up to
    // connect_timeout + login_timeout). Throws InitiatorError when the
    // session ends.
    void run_once(std::chrono::milliseconds max_wait) override;
    // One pass that never waits: sends what is ready (one flush) and reaps
    // what has already arrived. For callers with their own submit/complete
    // rhythm (the fio engine's ->commit). run_once(0) may still wait up to
    // a millisecond (it rounds up so deadlines pass).
    void run_nowait() override;
    // For a caller that drives several sessions from one poll()
    // (MultipathSession): appends what this session waits on (its
    // connection's fds and events; nothing while it has no connection) and
    // returns the latest time its next pass must run by (a command's or
    // task management's deadline, a NOP-Out ping; now when it has PDUs
    // ready to send, e.g. Data-Out for an R2T it received). After the poll,
    // a run_nowait() receives what arrived and handles what is due.
    std::chrono::steady_clock::time_point poll_fds(std::vector<struct pollfd>& fds) const;
    // LOGICAL UNIT RESET of `lun` (RFC 7143 §11.5.1): runs the loop until the
    // target answers and returns its answer. On Complete, the LU's commands
    // that had no status were ended by the reset and are re-sent. Throws
    // InitiatorError: Timeout without an answer in time, ConnectionLost if
    // the session fails meanwhile (it is then being reinstated).
    TmfResponse lun_reset(uint64_t lun, std::chrono::milliseconds timeout = std::chrono::milliseconds(30000));
    // True while the connection is down and being reinstated.
    bool recovering() const;
    // Logout (reason: close the session). Needs no outstanding commands.
    // While recovering there is nothing to log out of: it returns at once.
    void logout(std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) override;

    SessionStats stats() const override;

    class Impl;

private:
    explicit Session(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace rbio::initiator
