#include "rbio/iser/socket_io.hpp"

#include <sys/socket.h>

#include <cerrno>

namespace rbio::iser {

ssize_t SocketWriter::write(std::span<const iovec> iov) {
    msghdr msg{};
    msg.msg_iov = const_cast<iovec*>(iov.data());
    msg.msg_iovlen = iov.size();
    ssize_t n = ::sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    return n < 0 ? -errno : n;
}

ssize_t receive_into(int fd, RxBuffer& rx) {
    std::span<const iovec> iov = rx.read_vectors();
    if (iov.empty()) return -ENOBUFS;
    msghdr msg{};
    msg.msg_iov = const_cast<iovec*>(iov.data());
    msg.msg_iovlen = iov.size();
    ssize_t n;
    do {
        n = ::recvmsg(fd, &msg, MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    if (n < 0) return -errno;
    if (n > 0) rx.commit(size_t(n));
    return n;
}

}  // namespace rbio::iser
