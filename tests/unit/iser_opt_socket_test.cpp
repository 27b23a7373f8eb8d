// RxBuffer and TxQueue over a real socketpair: thousands of PDUs, some larger
// than the receive buffer, through small socket buffers so writes block and
// reads see arbitrary cuts; every byte is checked on arrival.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

#include "iser_opt_test_pdus.hpp"
#include "rbio/iser/socket_io.hpp"

namespace {

using namespace rbio::iser;
using namespace rbio::iser::test;

struct SocketPair {
    int fd[2] = {-1, -1};
    SocketPair() {
        if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fd) != 0) fd[0] = fd[1] = -1;
    }
    ~SocketPair() {
        for (int f : fd)
            if (f >= 0) ::close(f);
    }
    void close_end(int i) {
        ::close(fd[i]);
        fd[i] = -1;
    }
};

TEST(IserSocketPair, ThousandsOfPdusArriveWithEveryByteIntact) {
    SocketPair sp;
    ASSERT_GE(sp.fd[0], 0) << std::strerror(errno);
    int small = 32 * 1024;
    ASSERT_EQ(setsockopt(sp.fd[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small), 0);
    ASSERT_EQ(setsockopt(sp.fd[1], SOL_SOCKET, SO_RCVBUF, &small, sizeof small), 0);

    constexpr size_t kPdus = 4000;
    std::mt19937 rng(42);
    std::vector<Parts> pdus;
    for (size_t i = 0; i < kPdus; ++i) {
        uint32_t len = i % 97 == 0 ? 50000 + uint32_t(i) : uint32_t(rng() % 2100);
        pdus.push_back(
            make_pdu(i % 2 ? Opcode::DataOut : Opcode::ScsiCommand, uint32_t(i), i % 13 == 0 ? 2 : 0, len));
    }

    ConnectionCounters tx_counters, rx_counters;
    SocketWriter writer(sp.fd[0]);
    size_t completed = 0;
    bool in_order = true;
    TxConfig tcfg;
    tcfg.header_digest = tcfg.data_digest = true;
    tcfg.max_queued_pdus = 256;
    TxQueue tx(
        tcfg, writer,
        [&](uint64_t ud, int st) {
            in_order = in_order && ud == completed && st == 0;
            ++completed;
        },
        tx_counters);

    RxConfig rcfg;
    rcfg.capacity = 24 * 1024;  // the 50 KB segments go direct
    rcfg.limits.max_recv_data_segment_length = 65536;
    rcfg.limits.header_digest = rcfg.limits.data_digest = true;
    RxBuffer rx(rcfg, rx_counters);

    size_t sent = 0, received = 0, direct = 0;
    Bytes destination;
    while (received < kPdus) {
        // One pass of the sender: queue a burst, flush once.
        if (tx.state() != TxState::Blocked) {
            for (size_t k = 0; k < 64 && sent < kPdus; ++k, ++sent)
                if (tx.enqueue({pdus[sent].header, pdus[sent].data, sent}) != TxAccept::Queued) break;
            ASSERT_NE(tx.flush(), TxState::Failed) << tx.error();
        }
        pollfd p[2] = {{sp.fd[0], short(tx.state() == TxState::Blocked ? POLLOUT : 0), 0},
                       {sp.fd[1], POLLIN, 0}};
        ASSERT_GT(::poll(p, 2, 5000), 0) << "stalled at " << received << " of " << kPdus;
        if (p[0].revents & POLLOUT) {
            ASSERT_NE(tx.on_writable(), TxState::Failed) << tx.error();
        }
        if (!(p[1].revents & POLLIN)) continue;
        ssize_t n = receive_into(sp.fd[1], rx);
        ASSERT_TRUE(n > 0 || n == -EAGAIN) << n;
        for (;;) {
            RxResult r = rx.next();
            if (r.status == RxStatus::NeedDestination) {
                ++direct;
                destination.assign(r.pdu.header().data_segment_length(), 0);
                rx.set_data_destination(destination);
                continue;
            }
            ASSERT_NE(r.status, RxStatus::Failed) << rx.error().message;
            if (r.status == RxStatus::NeedMore) break;
            const Parts& want = pdus[received];
            ASSERT_EQ(r.pdu.bhs.size() + r.pdu.ahs.size(), want.header.size()) << received;
            ASSERT_TRUE(std::equal(r.pdu.bhs.begin(), r.pdu.bhs.end(), want.header.begin()));
            ASSERT_TRUE(std::equal(r.pdu.ahs.begin(), r.pdu.ahs.end(), want.header.begin() + 48));
            ASSERT_EQ(Bytes(r.pdu.data.begin(), r.pdu.data.end()), want.data) << received;
            ++received;
        }
    }
    EXPECT_EQ(tx.state(), TxState::Idle);
    EXPECT_EQ(completed, kPdus);
    EXPECT_TRUE(in_order);
    EXPECT_EQ(direct, (kPdus + 96) / 97);
    EXPECT_EQ(rx_counters[Counter::PdusIn], kPdus);
    EXPECT_EQ(tx_counters[Counter::PdusOut], kPdus);
    EXPECT_EQ(rx_counters[Counter::BytesIn], tx_counters[Counter::BytesOut]);
    EXPECT_EQ(rx_counters[Counter::BytesIn], concat(pdus, true, true).size());
    EXPECT_GT(tx_counters[Counter::WouldBlock], 0u);  // the small buffers did fill
    // Batching and coalescing at work: well over one PDU per system call.
    EXPECT_GT(rx_counters.pdus_per_recv(), 1.5);
    EXPECT_GT(tx_counters.pdus_per_send(), 1.5);
    std::printf("pdus/recv %.1f, pdus/send %.1f, would-block %llu\n", rx_counters.pdus_per_recv(),
                tx_counters.pdus_per_send(),
                static_cast<unsigned long long>(tx_counters[Counter::WouldBlock]));
}

TEST(IserSocketPair, EndOfStreamAndBrokenPipeAreReported) {
    SocketPair sp;
    ASSERT_GE(sp.fd[0], 0);
    ConnectionCounters c;
    RxBuffer rx(RxConfig{}, c);
    EXPECT_EQ(receive_into(sp.fd[1], rx), -EAGAIN);
    sp.close_end(0);
    EXPECT_EQ(receive_into(sp.fd[1], rx), 0);
    EXPECT_FALSE(rx.mid_pdu());

    SocketPair sp2;
    ASSERT_GE(sp2.fd[0], 0);
    sp2.close_end(1);
    SocketWriter w(sp2.fd[0]);
    std::vector<int> statuses;
    TxQueue tx(
        TxConfig{}, w, [&](uint64_t, int st) { statuses.push_back(st); }, c);
    Parts p = make_pdu(Opcode::NopOut, 1, 0, 4);
    tx.enqueue({p.header, p.data, 1});
    EXPECT_EQ(tx.flush(), TxState::Failed);  // EPIPE, and no SIGPIPE killed us
    EXPECT_EQ(statuses, std::vector<int>{-EPIPE});
}

}  // namespace
