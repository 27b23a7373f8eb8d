#include "rbio/iser/stream_rx.hpp"

#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

namespace rbio::iser {
namespace {

// Coarse: a tick's resolution is plenty for seconds, and it is the cheapest
// clock there is (no counter read).
uint64_t coarse_ms() noexcept {
    timespec t{};
    clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
    return uint64_t(t.tv_sec) * 1000 + uint64_t(t.tv_nsec) / 1000000;
}

}  // namespace

StreamRx::StreamRx(int fd, const StreamRxConfig& config, ConnectionCounters& counters)
    : fd_(fd), config_(config), counters_(counters), last_rx_ms_(coarse_ms()) {
    if (config_.capacity < 4096)
        throw std::invalid_argument("stream rx capacity " + std::to_string(config_.capacity) +
                                    " is below 4096");
    chunks_[0].mem = std::make_unique_for_overwrite<uint8_t[]>(config_.capacity);
    nchunks_ = 1;
    buf_ = chunks_[0].mem.get();
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
    else heard();
    counters_[Counter::BytesIn] += uint64_t(got);
    return got;
}

void StreamRx::heard() noexcept {
    const uint64_t now = coarse_ms();
    const uint64_t gap_s = (now - last_rx_ms_) / 1000;
    last_rx_ms_ = now;
    if (gap_s > silence_s_) silence_s_ = uint32_t(std::min<uint64_t>(gap_s, UINT32_MAX));
}

void StreamRx::make_room() {
    const bool low = config_.capacity - end_ < config_.capacity / 4;
    if (chunks_[cur_].lent > 0) {
        // Lent bytes stay where they are: move on to another chunk.
        if (low) switch_chunk();
    } else if (start_ == end_) {
        start_ = end_ = 0;
    } else if (start_ > 0 && low) {
        // Only the tail of a PDU that did not arrive whole is moved.
        std::memmove(buf_, buf_ + start_, end_ - start_);
        end_ -= start_;
        start_ = 0;
    }
}

bool StreamRx::spare_chunk() const noexcept {
    for (size_t i = 0; i < nchunks_; ++i)
        if (i != cur_ && chunks_[i].lent == 0) return true;
    return false;
}

bool StreamRx::switch_chunk() noexcept {
    for (size_t i = 0; i < nchunks_; ++i) {
        if (i == cur_ || chunks_[i].lent > 0) continue;
        uint8_t* to = chunks_[i].mem.get();
        std::memcpy(to, buf_ + start_, end_ - start_);
        end_ -= start_;
        start_ = 0;
        cur_ = i;
        buf_ = to;
        return true;
    }
    return false;
}

uint8_t* StreamRx::lend(size_t offset, size_t len) noexcept {
    if (!config_.batch_reads || len == 0 || offset > buffered() || len > buffered() - offset) return refuse();
    if (chunks_[cur_].lent == 0 && !spare_chunk()) {
        // The first lend from this chunk: another must be there to move on
        // to while it is out. Allocated once, when lends first need it.
        if (nchunks_ == kMaxChunks) return refuse();
        try {
            chunks_[nchunks_].mem = std::make_unique_for_overwrite<uint8_t[]>(config_.capacity);
        } catch (...) {
            return refuse();
        }
        ++nchunks_;
    }
    ++chunks_[cur_].lent;
    ++counters_[Counter::Lent];
    return buf_ + start_ + offset;
}

uint8_t* StreamRx::refuse() noexcept {
    ++counters_[Counter::LendRefused];
    return nullptr;
}

bool StreamRx::give_back(const void* p) noexcept {
    const auto at = reinterpret_cast<uintptr_t>(p);
    for (size_t i = 0; i < nchunks_; ++i) {
        const auto base = reinterpret_cast<uintptr_t>(chunks_[i].mem.get());
        if (at < base || at - base >= config_.capacity) continue;
        if (chunks_[i].lent > 0) --chunks_[i].lent;
        return true;
    }
    return false;
}

size_t StreamRx::lent() const noexcept {
    size_t n = 0;
    for (size_t i = 0; i < nchunks_; ++i) n += chunks_[i].lent;
    return n;
}

ssize_t StreamRx::fill() {
    if (!config_.batch_reads || direct_pending_ || !may_receive_ || eof_) return -EAGAIN;
    make_room();
    if (end_ == config_.capacity) return -EAGAIN;  // the core has not drained it yet
    iovec iov{buf_ + end_, config_.capacity - end_};
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
    else heard();
    counters_[Counter::BytesIn] += uint64_t(got);
    return got;
}

ssize_t StreamRx::read(std::span<uint8_t> dst) {
    if (dst.empty()) return 0;
    if (!config_.batch_reads) return unbatched_read(dst);

    size_t served = std::min(buffered(), dst.size());
    // Bytes lent in place (lend()) are where the core wants them already.
    if (dst.data() != buf_ + start_) std::memcpy(dst.data(), buf_ + start_, served);
    start_ += served;
    size_t rest = dst.size() - served;
    direct_pending_ = rest >= config_.direct_threshold;
    if (direct_pending_ && may_receive_ && !eof_ && (chunks_[cur_].lent == 0 || switch_chunk())) {
        // The buffer is empty now: the kernel places the data in dst and
        // whatever follows it in the buffer, in one receive.
        start_ = end_ = 0;
        iovec iov[2] = {{dst.data() + served, rest}, {buf_, config_.capacity}};
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
