#include <gtest/gtest.h>
#include <sys/epoll.h>

#include "rbio/bs/ring.hpp"
#include "rbio/common/unique_fd.hpp"

using rbio::bs::Ring;

TEST(Ring, ManySqesLeaveWithOneSubmitAndAreReapedInBulk) {
    Ring ring(64);
    for (uintptr_t i = 1; i <= 40; ++i) {
        io_uring_sqe* sqe = ring.get_sqe();
        ASSERT_NE(sqe, nullptr);
        io_uring_prep_nop(sqe);
        io_uring_sqe_set_data(sqe, reinterpret_cast<void*>(i));
    }
    EXPECT_EQ(ring.pending(), 40u);
    EXPECT_EQ(ring.submit(), 40);
    EXPECT_EQ(ring.enter_calls(), 1u);
    uintptr_t sum = 0;
    unsigned n = ring.reap(
        [&](const io_uring_cqe& c) { sum += reinterpret_cast<uintptr_t>(io_uring_cqe_get_data(&c)); });
    EXPECT_EQ(n, 40u);
    EXPECT_EQ(sum, 40u * 41u / 2u);
    EXPECT_EQ(ring.reap([](const io_uring_cqe&) {}), 0u);
}

TEST(Ring, SqIsBoundedByItsSize) {
    Ring ring(8);
    int got = 0;
    while (io_uring_sqe* sqe = ring.get_sqe()) {
        io_uring_prep_nop(sqe);
        ++got;
    }
    EXPECT_EQ(got, 8);
    EXPECT_EQ(ring.submit(), 8);
    EXPECT_EQ(ring.reap([](const io_uring_cqe&) {}), 8u);
}

TEST(Ring, EventFdIsValidAndWatchable) {
    Ring ring(4);
    ASSERT_GE(ring.event_fd(), 0);
    rbio::UniqueFd ep(epoll_create1(EPOLL_CLOEXEC));
    ASSERT_TRUE(ep);
    epoll_event ev{};
    ev.events = EPOLLIN;  // level-triggered, as tgtd watches it
    EXPECT_EQ(epoll_ctl(ep.get(), EPOLL_CTL_ADD, ring.event_fd(), &ev), 0);
}
