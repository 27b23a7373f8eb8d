#pragma once
// The two system calls a byte-stream transport makes per readiness event,
// over a connected non-blocking socket: one recvmsg into an RxBuffer, one
// sendmsg for a TxQueue. The TCP backend and the socket tests use them.
#include <sys/types.h>

#include "rbio/iser/rx_buffer.hpp"
#include "rbio/iser/tx_queue.hpp"

namespace rbio::iser {

// sendmsg(MSG_NOSIGNAL | MSG_DONTWAIT): a peer that went away is -EPIPE,
// not SIGPIPE, and a blocking socket never stalls the event loop.
class SocketWriter final : public StreamWriter {
public:
    explicit SocketWriter(int fd) : fd_(fd) {}
    ssize_t write(std::span<const iovec> iov) override;

private:
    int fd_;
};

// One recvmsg(MSG_DONTWAIT) into rx.read_vectors(), committing what came.
// Returns the bytes read (> 0), 0 at end of stream, -EAGAIN when nothing
// is there, -ENOBUFS when rx offers no room (it failed, or waits for a data
// destination), or another -errno.
ssize_t receive_into(int fd, RxBuffer& rx);

}  // namespace rbio::iser
