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
// commands, which leave with the next pass.
//
// Anything malformed from the target (a bad field, a tag or offset that does
// not fit, a sequence number out of order), a command past its timeout, or a
// lost connection ends the session: run_once throws InitiatorError, and the
// Session is unusable afterwards. Commands outstanding then never complete.
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

struct SessionOptions {
    std::string initiator_name = "iqn.2026-11.io.rbio:initiator";
    std::string target_name;  // ignored for discovery sessions
    bool discovery = false;
    std::optional<ChapCredentials> chap;  // one-way CHAP when set
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
};

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
    uint64_t data_direct_bytes = 0;  // Data-In bytes received in place
    uint64_t syscalls() const {
        return transport[iser::Counter::RecvCalls] + transport[iser::Counter::SendCalls] + poll_calls;
    }
};

class Session {
public:
    // Connects (non-blocking, connect_timeout) and logs in. Throws
    // InitiatorError: Unreachable, LoginRefused, AuthFailure, UnknownTarget,
    // Timeout, Protocol, ConnectionLost.
    static std::unique_ptr<Session> login(const Portal& portal, const SessionOptions& options);
    // Logs in over a connected stream socket `fd` that the Session takes
    // over (closed with it, also when this throws). For transports set up
    // elsewhere and for the fuzzer, which feeds a socketpair; `portal` only
    // names the peer in messages.
    static std::unique_ptr<Session> login_on(int fd, const Portal& portal,
                                             const SessionOptions& options);
    ~Session();
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;

    const NegotiatedParams& params() const;
    // Discovery sessions: SendTargets=All (following text continuations).
    std::vector<DiscoveredTarget> send_targets();

    // Queues a command; it leaves with the next pass. Throws
    // std::invalid_argument for a bad CDB length or a buffer beyond 4 GiB.
    void submit(ScsiCommand command);
    // Commands submitted and not yet completed.
    size_t outstanding() const;
    // One pass of the event loop; waits at most max_wait for input (less if a
    // command's deadline comes first). Throws InitiatorError when the
    // session ends.
    void run_once(std::chrono::milliseconds max_wait);
    // One pass that never waits: sends what is ready (one flush) and reaps
    // what has already arrived. For callers with their own submit/complete
    // rhythm (the fio engine's ->commit). run_once(0) may still wait up to
    // a millisecond (it rounds up so deadlines pass).
    void run_nowait();
    // submit + run_once until done.
    ScsiOutcome execute(ScsiCommand command);
    // Logout (reason: close the session). Needs no outstanding commands.
    void logout(std::chrono::milliseconds timeout = std::chrono::milliseconds(5000));

    SessionStats stats() const;

    class Impl;

private:
    explicit Session(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace rbio::initiator
