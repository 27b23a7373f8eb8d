#include "rbio/bs/ring.hpp"

#include <sys/eventfd.h>

#include "rbio/bs/error.hpp"

namespace rbio::bs {

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
    rc = io_uring_register_eventfd_async(&ring_, event_fd_.get());
    if (rc < 0) {
        io_uring_queue_exit(&ring_);
        throw sys_error("io_uring_register_eventfd_async", -rc);
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

int Ring::wait_one() {
    io_uring_cqe* cqe = nullptr;
    ++enter_calls_;
    for (;;) {
        int rc = io_uring_wait_cqe(&ring_, &cqe);
        if (rc != -EINTR) return rc;
    }
}

}  // namespace rbio::bs
