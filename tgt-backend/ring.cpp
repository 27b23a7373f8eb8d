#include "rbio/bs/ring.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>

#include "rbio/bs/error.hpp"

namespace rbio::bs {

void signal_event_fd(int fd) noexcept {
    const uint64_t one = 1;
    ssize_t n = ::write(fd, &one, sizeof one);
    (void)n;  // an eventfd write fails only on counter overflow: already readable
}

Ring::Ring(uint32_t entries) : entries_(entries) {
    io_uring_params p{};
    p.flags = IORING_SETUP_CQSIZE;
    p.cq_entries = entries * 2;
    int rc = io_uring_queue_init_params(entries, &ring_, &p);
    if (rc < 0) throw sys_error("io_uring_queue_init(" + std::to_string(entries) + ")", -rc);
    event_fd_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (!event_fd_) {
        int err = errno;
        io_uring_queue_exit(&ring_);
        throw sys_error("eventfd", err);
    }
    // Every posted completion signals the eventfd. The "async only" variant
    // signals only completions posted by io-wq workers; one finished through
    // task work in tgtd's own context (seen with short writes on a full
    // tmpfs) then never woke tgtd and its command hung. Completions reaped
    // right after submitting cost at most one spurious wake-up per pass.
    rc = io_uring_register_eventfd(&ring_, event_fd_.get());
    if (rc < 0) {
        io_uring_queue_exit(&ring_);
        throw sys_error("io_uring_register_eventfd", -rc);
    }
}

Ring::~Ring() { io_uring_queue_exit(&ring_); }

int Ring::submit() {
    ++enter_calls_;
    for (;;) {
        int rc = io_uring_submit(&ring_);
        if (rc != -EINTR) return rc;
    }
}

void Ring::clear_event() {
    uint64_t count;
    // Non-blocking: EAGAIN means the counter was already zero. A failed
    // read leaves the eventfd readable, which costs a spurious wake-up only.
    while (::read(event_fd_.get(), &count, sizeof count) < 0 && errno == EINTR) {
    }
}

int Ring::wait_one() {
    io_uring_cqe* cqe = nullptr;
    ++enter_calls_;
    for (;;) {
        int rc = io_uring_wait_cqe(&ring_, &cqe);
        if (rc != -EINTR) return rc;
    }
}

}  // namespace rbio::bs
