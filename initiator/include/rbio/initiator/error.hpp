#pragma once
// Errors of the initiator. Each kind maps to one exit code of the `rbio`
// CLI. Thrown out of Session::run_once, every one ends the session; inside
// it, Timeout and ConnectionLost first lead to task management or session
// reinstatement (see session.hpp) and escape only when those give up.
#include <stdexcept>
#include <string>
#include <utility>

namespace rbio::initiator {

enum class ErrorKind : int {
    Unreachable = 3,      // the portal did not accept a TCP connection
    LoginRefused = 4,     // login status other than those below, or negotiation failed
    AuthFailure = 5,      // login status 0x0201/0x0202, or CHAP refused
    UnknownTarget = 6,    // login status 0x0203/0x0204
    Io = 7,               // a SCSI command failed (CHECK CONDITION, bad status)
    Timeout = 8,          // a command or login step did not complete in time
    Protocol = 9,         // the target broke the protocol: malformed PDU, bad field
    ConnectionLost = 10,  // the target closed or reset the connection
};

// Short name, e.g. "auth-failure".
const char* to_string(ErrorKind kind);

class InitiatorError : public std::runtime_error {
public:
    InitiatorError(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
    ErrorKind kind() const { return kind_; }
    // The `rbio` exit code of this error.
    int exit_code() const { return int(kind_); }

private:
    ErrorKind kind_;
};

// Every address of `portal` refused the TCP connection (a reset, or ICMP
// port unreachable): nothing listens there. Session::login throws it
// before any byte is sent.
class ConnectionRefused : public InitiatorError {
public:
    ConnectionRefused(std::string portal, const std::string& message)
        : InitiatorError(ErrorKind::Unreachable, message), portal_(std::move(portal)) {}
    const std::string& portal() const { return portal_; }

private:
    std::string portal_;
};

[[noreturn]] inline void fail(ErrorKind kind, const std::string& message) {
    throw InitiatorError(kind, message);
}

}  // namespace rbio::initiator
