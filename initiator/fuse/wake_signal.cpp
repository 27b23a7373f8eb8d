#include "wake_signal.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <system_error>

namespace rbio::fuse {

UniqueFd WakeSignal::make_fd() {
    int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fd < 0) throw std::system_error(errno, std::generic_category(), "eventfd");
    return UniqueFd(fd);
}

WakeSignal::WakeSignal() : fd_(make_fd()) {}

void WakeSignal::signal() noexcept {
    const uint64_t one = 1;
    ssize_t n = ::write(fd_.get(), &one, sizeof one);
    (void)n;  // EAGAIN: the counter is saturated, the fd is readable anyway
}

void WakeSignal::consume() noexcept {
    if (!pending_.exchange(false) && !read_owed_) return;
    uint64_t v;
    // Nothing to read: a notify() between its flag and its write, whose
    // write is still to come (see the header).
    read_owed_ = ::read(fd_.get(), &v, sizeof v) < 0 && errno == EAGAIN;
}

}  // namespace rbio::fuse
