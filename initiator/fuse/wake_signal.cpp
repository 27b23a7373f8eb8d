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

void WakeSignal::drain() noexcept {
    if (owed_ <= 0) return;
    uint64_t writes = 0;
    // EAGAIN: a write still to come after its flag; the poll wakes for it.
    if (::read(fd_.get(), &writes, sizeof writes) == sizeof writes) owed_ -= int64_t(writes);
    if (owed_ < 0 && pending_.exchange(false)) ++owed_;
}

}  // namespace rbio::fuse
