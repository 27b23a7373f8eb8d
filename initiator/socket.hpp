#pragma once
// The TCP connection of a session: an owned, connected, non-blocking socket.
#include <chrono>

#include "rbio/initiator/session.hpp"

namespace rbio::initiator {

// Owns one file descriptor.
class UniqueFd {
public:
    UniqueFd() = default;
    explicit UniqueFd(int fd) : fd_(fd) {}
    UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
    UniqueFd& operator=(UniqueFd&& o) noexcept;
    UniqueFd(const UniqueFd&) = delete;
    UniqueFd& operator=(const UniqueFd&) = delete;
    ~UniqueFd();
    int get() const { return fd_; }
    int release() {
        int fd = fd_;
        fd_ = -1;
        return fd;
    }

private:
    int fd_ = -1;
};

// Resolves the portal and connects to its first address that answers within
// `timeout` (all addresses share it), with TCP_NODELAY. Throws
// InitiatorError(Unreachable) naming the portal and the reason.
UniqueFd connect_tcp(const Portal& portal, std::chrono::milliseconds timeout);

}  // namespace rbio::initiator
