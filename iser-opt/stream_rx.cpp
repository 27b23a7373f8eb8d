#include "rbio/iser/stream_rx.hpp"

#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace rbio::iser {

StreamRx::StreamRx(int fd, const StreamRxConfig& config, ConnectionCounters& counters)
    : fd_(fd), config_(config), counters_(counters) {
    if (config_.capacity < 4096)
        throw std::invalid_argument("stream rx capacity " + std::to_string(config_.capacity) +
                                    " is below 4096");
    buf_ = std::make_unique_for_overwrite<uint8_t[]>(config_.capacity);
}

ssize_t StreamRx::receive(iovec* iov, int n) {
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = size_t(n);
    ssize_t got;
    do {
        ++counters_[Counter::RecvCalls];
        got = ::recvmsg(fd_, &msg, MSG_DONTWAIT);
    } while (got < 0 && errno == EINTR);
    may_receive_ = false;
    if (got < 0) return -errno;
    if (got == 0) eof_ = true;
    counters_[Counter::BytesIn] += uint64_t(got);
    return got;
}

void StreamRx::make_room() {
    if (start_ == end_) {
        start_ = end_ = 0;
    } else if (start_ > 0 && config_.capacity - end_ < config_.capacity / 4) {
        // Only the tail of a PDU that did not arrive whole is moved.
        std::memmove(buf_.get(), buf_.get() + start_, end_ - start_);
        end_ -= start_;
        start_ = 0;
    }
}

ssize_t StreamRx::fill() {
    if (!config_.batch_reads || direct_pending_ || !may_receive_ || eof_) return -EAGAIN;
    make_room();
    if (end_ == config_.capacity) return -EAGAIN;  // the core has not drained it yet
    iovec iov{buf_.get() + end_, config_.capacity - end_};
    ssize_t got = receive(&iov, 1);
    if (got > 0) end_ += size_t(got);
    return got;
}

ssize_t StreamRx::unbatched_read(std::span<uint8_t> dst) {
    ssize_t got;
    do {
        ++counters_[Counter::RecvCalls];
        got = ::read(fd_, dst.data(), dst.size());
    } while (got < 0 && errno == EINTR);
    if (got < 0) return -errno;
    if (got == 0) eof_ = true;
    counters_[Counter::BytesIn] += uint64_t(got);
    return got;
}

ssize_t StreamRx::read(std::span<uint8_t> dst) {
    if (dst.empty()) return 0;
    if (!config_.batch_reads) return unbatched_read(dst);

    size_t served = std::min(buffered(), dst.size());
    std::memcpy(dst.data(), buf_.get() + start_, served);
    start_ += served;
    size_t rest = dst.size() - served;
    direct_pending_ = rest >= config_.direct_threshold;
    if (direct_pending_ && may_receive_ && !eof_) {
        // The buffer is empty now: the kernel places the data in dst and
        // whatever follows it in the buffer, in one receive.
        start_ = end_ = 0;
        iovec iov[2] = {{dst.data() + served, rest}, {buf_.get(), config_.capacity}};
        ssize_t got = receive(iov, 2);
        if (got < 0 && served == 0) return got;
        if (got > 0) {
            size_t direct = std::min(size_t(got), rest);
            served += direct;
            end_ = size_t(got) - direct;
            direct_pending_ = dst.size() - served >= config_.direct_threshold;
        }
    }
    if (served > 0) return ssize_t(served);
    return eof_ ? 0 : -EAGAIN;
}

}  // namespace rbio::iser
