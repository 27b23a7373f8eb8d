#pragma once
// The connection under a session: the one interface through which the
// session core (session.cpp, login.cpp, recovery.cpp, task_mgmt.cpp) sends
// PDUs, starts SCSI commands and runs its event-loop pass. Two backends:
// TcpConnection (a socket with iser-opt's RxBuffer and TxQueue) and
// IserConnection (rdma_cm and iser-opt's IserEndpoint, RFC 7145). The
// session picks one when it connects (Session::Impl::connect_and_login);
// past that it never asks which one it has.
//
// One pass of the session's loop:
//
//     conn.flush(quiet);                        // what is queued leaves, once
//     conn.wait_and_receive(ms, wake_fd, more); // poll; every PDU that came
//                                               // goes to ConnectionEvents
//
// Failures of the connection itself throw InitiatorError(ConnectionLost),
// a malformed PDU InitiatorError(Protocol), both naming the portal; what the
// session's handlers throw passes through. Nothing here allocates or makes
// a system call per command beyond what the backend's batching needs.
#include <poll.h>

#include <cstdint>
#include <span>
#include <vector>

#include "rbio/initiator/error.hpp"
#include "rbio/initiator/session.hpp"
#include "rbio/iser/pdu.hpp"
#include "rbio/iser/rx_buffer.hpp"

namespace rbio::initiator {

// What a connection calls back into: the session.
class ConnectionEvents {
public:
    // A whole PDU arrived; its views are valid during the call. May queue
    // PDUs; an exception ends the pass with it.
    virtual void on_pdu(const iser::RxPdu& pdu) = 0;
    // TCP's direct path: a large data segment is about to be received and
    // only its header is known. Returns where its DataSegmentLength bytes
    // go, or an empty span when the session has no place for them (the
    // connection keeps them in a buffer of its own until on_pdu).
    virtual std::span<uint8_t> data_destination(const iser::RxPdu& pdu) = 0;
    // The PDUs received so far are handled and the connection is about to
    // send: queue what they made ready (commands their completions
    // submitted, Data-Out) so that it leaves with the same post. True when
    // anything was queued. (iSER calls it while it reaps, before the pass's
    // one post; TCP does not: what the completions made ready leaves with
    // the next pass's one sendmsg anyway.)
    virtual bool fill_send_queue() = 0;
    // The connection took a reference into task `itt`'s buffer (a PDU whose
    // data it sends in place, without copying) / dropped it again (sent, or
    // cancelled). A task finishes only when no reference is left.
    virtual void buffer_held(uint32_t itt) = 0;
    virtual void buffer_released(uint32_t itt) = 0;

protected:
    ~ConnectionEvents() = default;
};

class Connection {
public:
    // A command's per-connection resource (an iSER bounce slot): none.
    static constexpr uint32_t kNoSlot = UINT32_MAX;

    virtual ~Connection() = default;

    // True when the target moves SCSI data itself with RDMA (iSER, RFC 7145
    // §7.3): no Data-In, R2T or Data-Out PDU travels; a write's data past
    // its immediate bytes is the target's to fetch, and a read's data is in
    // place before its SCSI Response arrives.
    virtual bool rdma_data() const = 0;

    // Queues one PDU: `data`, which it takes, or `ext` (when not empty), data
    // in task `itt`'s buffer (see buffer_held). Throws std::logic_error for
    // a PDU the connection can never take.
    virtual void send_pdu(const iser::Bhs& bhs, std::vector<uint8_t> data, std::span<const uint8_t> ext,
                          uint32_t itt) = 0;
    // Queues task `itt`'s SCSI Command PDU with the first `immediate` bytes
    // of `buffer` as its data. With rdma_data() it also advertises the rest
    // of the buffer; `slot` receives the resource that took (kNoSlot: none).
    // False, with nothing queued and nothing held, when there is no room
    // right now: a later pass tries again.
    virtual bool send_command(const iser::Bhs& bhs, uint32_t itt, std::span<uint8_t> buffer,
                              DataDirection dir, uint32_t immediate, uint32_t& slot) = 0;
    // A command's status arrived: a read's `bytes` move from its slot (if
    // it has one) into `buffer`, and the slot is freed.
    virtual void finish_command(uint32_t slot, std::span<uint8_t> buffer, uint32_t bytes, bool read) = 0;
    // Frees a command's slot without copying (re-sent, or dropped).
    virtual void release_slot(uint32_t slot) = 0;
    // Whether another command or Data-Out PDU may be queued in this pass;
    // some room is always kept for NOP-Out answers and task management.
    virtual bool room() const = 0;

    // After the final login response: the negotiated limits and digests
    // apply to every PDU from here on.
    virtual void enter_full_feature(const NegotiatedParams& params) = 0;

    // Sends everything queued, in as few system calls as the backend
    // allows; `quiet`: no command is in flight. Returns true when the
    // connection cannot take more bytes now (TCP: the socket is full), so
    // the pass must wait for it even with work left.
    virtual bool flush(bool quiet) = 0;
    // Waits up to `timeout_ms` for the connection or `wake_fd` (when >= 0),
    // then receives: every PDU that arrived goes to on_pdu. `more`: the
    // session has work that did not wait, so the backend may look for
    // completions without an event. Returns true when the target was heard
    // from; false also on EINTR.
    virtual bool wait_and_receive(int timeout_ms, int wake_fd, bool more) = 0;
    // Appends the fds (and events) wait_and_receive would poll, for a caller
    // polling several connections at once.
    virtual void poll_fds(std::vector<pollfd>& fds) const = 0;
    // PDUs are queued that the next flush would send now (not waiting for
    // the connection to become writable).
    virtual bool unsent() const = 0;

protected:
    explicit Connection(const Portal& portal) : portal_(portal.to_string()) {}
    // The connection is gone: ConnectionLost, naming the target.
    [[noreturn]] void lost(const std::string& why) const {
        fail(ErrorKind::ConnectionLost, "target " + portal_ + ": " + why);
    }

    const std::string portal_;  // for error messages
};

}  // namespace rbio::initiator
