#pragma once
// The TCP connection of a session: an owned, connected, non-blocking socket.
#include <chrono>

#include "rbio/common/unique_fd.hpp"
#include "rbio/initiator/session.hpp"

namespace rbio::initiator {

using rbio::UniqueFd;

// Resolves the portal and connects to its first address that answers within
// `timeout` (all addresses share it), with TCP_NODELAY. Throws
// InitiatorError(Unreachable) naming the portal and the reason.
UniqueFd connect_tcp(const Portal& portal, std::chrono::milliseconds timeout);

}  // namespace rbio::initiator
