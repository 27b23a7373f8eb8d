// StreamRx over a real socketpair: the receive side tgt's iSCSI core pulls
// from. One receive per event however many reads the core makes, any cut of
// the byte stream reassembled, large reads placed directly.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <vector>

#include "rbio/iser/stream_rx.hpp"

namespace {

using namespace rbio::iser;

struct SocketPair {
    int fd[2] = {-1, -1};
    SocketPair() { ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fd); }
    ~SocketPair() {
        for (int f : fd)
            if (f >= 0) ::close(f);
    }
};

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
    std::vector<uint8_t> v(n);
    std::mt19937 rng(seed);
    for (auto& b : v) b = uint8_t(rng());
    return v;
}

void send_all(int fd, const uint8_t* p, size_t n) {
    while (n > 0) {
        ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
        ASSERT_GT(w, 0) << std::strerror(errno);
        p += w;
        n -= size_t(w);
    }
}

TEST(StreamRx, OneReceiveServesEveryRequestOfTheEvent) {
    SocketPair sp;
    ASSERT_GE(sp.fd[0], 0);
    auto bytes = pattern(20 * (48 + 512), 1);
    send_all(sp.fd[1], bytes.data(), bytes.size());

    ConnectionCounters c;
    StreamRx rx(sp.fd[0], StreamRxConfig{}, c);
    rx.take_event();
    ASSERT_EQ(rx.fill(), ssize_t(bytes.size()));
    std::vector<uint8_t> got;
    for (int i = 0; i < 20; ++i) {
        uint8_t bhs[48], data[512];
        ASSERT_EQ(rx.read(bhs), 48);
        ASSERT_EQ(rx.read(data), 512);
        got.insert(got.end(), bhs, bhs + 48);
        got.insert(got.end(), data, data + 512);
    }
    EXPECT_EQ(got, bytes);
    EXPECT_EQ(c[Counter::RecvCalls], 1u);
    EXPECT_EQ(c[Counter::BytesIn], bytes.size());
    uint8_t more[8];
    EXPECT_EQ(rx.read(more), -EAGAIN);
    EXPECT_EQ(c[Counter::RecvCalls], 1u) << "a read beyond the event's bytes must not receive";
}

TEST(StreamRx, NoSecondReceiveInOneEvent) {
    SocketPair sp;
    auto bytes = pattern(100, 2);
    send_all(sp.fd[1], bytes.data(), bytes.size());
    ConnectionCounters c;
    StreamRx rx(sp.fd[0], StreamRxConfig{}, c);
    EXPECT_EQ(rx.fill(), -EAGAIN) << "no event taken yet";
    rx.take_event();
    EXPECT_EQ(rx.fill(), 100);
    send_all(sp.fd[1], bytes.data(), bytes.size());
    EXPECT_EQ(rx.fill(), -EAGAIN);
    EXPECT_EQ(c[Counter::RecvCalls], 1u);
}

TEST(StreamRx, LargeReadGoesStraightToTheDestinationWithWhatFollowsBuffered) {
    SocketPair sp;
    int big = 4 << 20;
    setsockopt(sp.fd[1], SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    setsockopt(sp.fd[0], SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    StreamRxConfig cfg;
    cfg.capacity = 16 * 1024;
    cfg.direct_threshold = 8 * 1024;
    ConnectionCounters c;
    StreamRx rx(sp.fd[0], cfg, c);

    auto head = pattern(48, 3), data = pattern(100000, 4), next = pattern(48, 5);
    send_all(sp.fd[1], head.data(), head.size());
    rx.take_event();
    ASSERT_EQ(rx.fill(), 48);
    std::vector<uint8_t> bhs(48), dst(data.size());
    ASSERT_EQ(rx.read(bhs), 48);
    EXPECT_EQ(rx.read(dst), -EAGAIN);
    EXPECT_TRUE(rx.direct_pending());

    send_all(sp.fd[1], data.data(), data.size());
    send_all(sp.fd[1], next.data(), next.size());
    size_t have = 0;
    int events = 0;
    while (have < dst.size() && events < 100) {
        rx.take_event();
        ++events;
        EXPECT_EQ(rx.fill(), -EAGAIN) << "the event's receive belongs to the direct read";
        ssize_t n = rx.read(std::span<uint8_t>(dst).subspan(have));
        ASSERT_GT(n, 0);
        have += size_t(n);
    }
    EXPECT_EQ(dst, data);
    EXPECT_EQ(c[Counter::RecvCalls], uint64_t(1 + events)) << "one receive per event";
    std::vector<uint8_t> tail(48);
    if (rx.buffered() < 48) {
        rx.take_event();
        rx.fill();
    }
    ASSERT_EQ(rx.read(tail), 48);
    EXPECT_EQ(tail, next);
}

TEST(StreamRx, AnyCutOfTheStreamIsReassembled) {
    SocketPair sp;
    StreamRxConfig cfg;
    cfg.capacity = 8192;
    cfg.direct_threshold = 3000;
    ConnectionCounters c;
    StreamRx rx(sp.fd[0], cfg, c);
    auto bytes = pattern(400000, 6);
    std::mt19937 rng(7);
    std::vector<uint8_t> got;
    size_t sent = 0;
    std::vector<uint8_t> want_buf;
    size_t want = 0, have = 0;
    while (got.size() < bytes.size()) {
        if (sent < bytes.size()) {
            size_t n = std::min<size_t>(bytes.size() - sent, 1 + rng() % 9000);
            ssize_t w = ::send(sp.fd[1], bytes.data() + sent, n, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w > 0) sent += size_t(w);
        }
        rx.take_event();
        ssize_t f = rx.fill();
        ASSERT_TRUE(f > 0 || f == -EAGAIN) << f;
        for (;;) {
            if (want == 0) {
                // Requests like tgt's: a header, then a data part of any size.
                want = rng() % 3 == 0 ? 48 : 1 + rng() % 12000;
                want = std::min(want, bytes.size() - got.size() - have);
                want_buf.assign(want, 0);
                have = 0;
            }
            ssize_t n = rx.read(std::span<uint8_t>(want_buf).subspan(have, want - have));
            if (n == -EAGAIN) break;
            ASSERT_GT(n, 0);
            have += size_t(n);
            if (have == want) {
                got.insert(got.end(), want_buf.begin(), want_buf.end());
                want = have = 0;
                if (got.size() == bytes.size()) break;
            }
        }
    }
    EXPECT_EQ(got, bytes);
}

TEST(StreamRx, EndOfStreamComesAfterTheBufferedBytes) {
    SocketPair sp;
    auto bytes = pattern(100, 8);
    send_all(sp.fd[1], bytes.data(), bytes.size());
    ::shutdown(sp.fd[1], SHUT_WR);
    ConnectionCounters c;
    StreamRx rx(sp.fd[0], StreamRxConfig{}, c);
    rx.take_event();
    ASSERT_EQ(rx.fill(), 100);
    rx.take_event();
    EXPECT_EQ(rx.fill(), 0);
    EXPECT_TRUE(rx.at_eof());
    std::vector<uint8_t> got(200);
    EXPECT_EQ(rx.read(got), 100);
    EXPECT_EQ(rx.read(got), 0);
}

TEST(StreamRx, UnbatchedModeReadsEachRequestLikeStockTgt) {
    SocketPair sp;
    auto bytes = pattern(48 * 4, 9);
    send_all(sp.fd[1], bytes.data(), bytes.size());
    StreamRxConfig cfg;
    cfg.batch_reads = false;
    ConnectionCounters c;
    StreamRx rx(sp.fd[0], cfg, c);
    rx.take_event();
    EXPECT_EQ(rx.fill(), -EAGAIN);
    uint8_t bhs[48];
    for (int i = 0; i < 4; ++i) ASSERT_EQ(rx.read(bhs), 48);
    EXPECT_EQ(c[Counter::RecvCalls], 4u);
}

// A write's data lent in place: read() into the lent bytes copies nothing,
// and the bytes stay while later receives go on in another chunk.
TEST(StreamRx, LentBytesStayUntilGivenBackWhileReceivingGoesOn) {
    SocketPair sp;
    StreamRxConfig cfg;
    cfg.capacity = 16 * 1024;
    ConnectionCounters c;
    StreamRx rx(sp.fd[0], cfg, c);
    auto first = pattern(48 + 4096, 10);
    send_all(sp.fd[1], first.data(), first.size());
    rx.take_event();
    ASSERT_EQ(rx.fill(), ssize_t(first.size()));
    uint8_t bhs[48];
    ASSERT_EQ(rx.read(bhs), 48);
    EXPECT_EQ(rx.lend(0, 4097), nullptr) << "one byte more than is buffered";
    uint8_t* lent = rx.lend(0, 4096);
    ASSERT_NE(lent, nullptr);
    EXPECT_EQ(rx.lent(), 1u);
    EXPECT_EQ(c[Counter::Lent], 1u);
    EXPECT_EQ(c[Counter::LendRefused], 1u) << "the lend of one byte too many";
    ASSERT_EQ(rx.read(std::span<uint8_t>(lent, 4096)), 4096);
    const std::vector<uint8_t> want(first.begin() + 48, first.end());
    EXPECT_EQ(std::vector<uint8_t>(lent, lent + 4096), want);

    // Many buffers' worth more: the lent chunk must not be written.
    auto more = pattern(20 * cfg.capacity, 11);
    std::vector<uint8_t> got(more.size());
    size_t have = 0, sent = 0;
    while (have < more.size()) {
        if (sent < more.size()) {
            size_t n = std::min<size_t>(cfg.capacity / 2, more.size() - sent);
            send_all(sp.fd[1], more.data() + sent, n);
            sent += n;
        }
        rx.take_event();
        rx.fill();
        ssize_t n = rx.read(std::span<uint8_t>(got).subspan(have, std::min<size_t>(1000, got.size() - have)));
        while (n > 0) {
            have += size_t(n);
            if (have == got.size()) break;
            n = rx.read(std::span<uint8_t>(got).subspan(have, std::min<size_t>(1000, got.size() - have)));
        }
    }
    EXPECT_EQ(got, more);
    EXPECT_EQ(std::vector<uint8_t>(lent, lent + 4096), want) << "lent bytes were overwritten";
    EXPECT_EQ(rx.chunks(), 2u) << "one chunk lent, one to receive into";
    EXPECT_TRUE(rx.give_back(lent + 100));
    EXPECT_EQ(rx.lent(), 0u);
    EXPECT_FALSE(rx.give_back(want.data())) << "not from the receive buffer";
}

// Lends never stop the receive side: without any given back, at most
// kMaxChunks chunks are made, a lend that would leave none free is refused
// (the core copies), and every byte still arrives in order.
TEST(StreamRx, LendsThatAreNeverGivenBackDoNotStallReceiving) {
    SocketPair sp;
    StreamRxConfig cfg;
    cfg.capacity = 8192;
    ConnectionCounters c;
    StreamRx rx(sp.fd[0], cfg, c);
    constexpr size_t kData = 1024, kPdus = 200;
    auto stream = pattern(kPdus * (48 + kData), 12);
    std::vector<uint8_t*> lent;
    std::vector<size_t> lent_pdu;
    size_t refused = 0, sent = 0;
    for (size_t pdu = 0; pdu < kPdus; ++pdu) {
        uint8_t bhs[48];
        std::vector<uint8_t> copy(kData);
        auto refill = [&] {
            if (sent < stream.size()) {
                size_t n = std::min<size_t>(3000, stream.size() - sent);
                send_all(sp.fd[1], stream.data() + sent, n);
                sent += n;
            }
            rx.take_event();
            rx.fill();
        };
        size_t got = 0;
        while (got < 48) {
            ssize_t n = rx.read(std::span<uint8_t>(bhs + got, 48 - got));
            if (n > 0) got += size_t(n);
            else refill();
        }
        ASSERT_EQ(std::memcmp(bhs, stream.data() + pdu * (48 + kData), 48), 0) << "pdu " << pdu;
        while (rx.buffered() < kData) refill();
        uint8_t* p = rx.lend(0, kData);
        if (p) {
            ASSERT_EQ(rx.read(std::span<uint8_t>(p, kData)), ssize_t(kData));
            lent.push_back(p);
            lent_pdu.push_back(pdu);
        } else {
            ++refused;
            ASSERT_EQ(rx.read(copy), ssize_t(kData));
            ASSERT_EQ(std::memcmp(copy.data(), stream.data() + pdu * (48 + kData) + 48, kData), 0);
        }
    }
    EXPECT_LE(rx.chunks(), StreamRx::kMaxChunks);
    EXPECT_GT(refused, 0u);
    EXPECT_GT(lent.size(), 0u);
    EXPECT_EQ(rx.lent(), lent.size());
    EXPECT_EQ(c[Counter::Lent], lent.size());
    EXPECT_EQ(c[Counter::LendRefused], refused);
    for (size_t i = 0; i < lent.size(); ++i) {
        EXPECT_EQ(std::memcmp(lent[i], stream.data() + lent_pdu[i] * (48 + kData) + 48, kData), 0)
            << "lent data of pdu " << lent_pdu[i] << " overwritten";
        EXPECT_TRUE(rx.give_back(lent[i]));
    }
    EXPECT_EQ(rx.lent(), 0u);
}

TEST(StreamRx, RejectsATinyBuffer) {
    ConnectionCounters c;
    StreamRxConfig cfg;
    cfg.capacity = 100;
    EXPECT_THROW(StreamRx(0, cfg, c), std::invalid_argument);
}

}  // namespace

// The silence a receive ends, for rbd_quiet_s: whole seconds, taken once,
// on every receive path. The second of silence is real time.
TEST(StreamRx, NotesTheSilenceAReceiveEnds) {
    for (bool batched : {true, false}) {
        SCOPED_TRACE(batched ? "batched" : "batch_reads off");
        SocketPair sp;
        ASSERT_GE(sp.fd[0], 0);
        ConnectionCounters c;
        StreamRxConfig config;
        config.batch_reads = batched;
        StreamRx rx(sp.fd[0], config, c);
        auto receive = [&](uint8_t byte) {
            send_all(sp.fd[1], &byte, 1);
            rx.take_event();
            if (batched) {
                ASSERT_EQ(rx.fill(), 1);
            }
            uint8_t got = 0;
            ASSERT_EQ(rx.read(std::span<uint8_t>(&got, 1)), 1);
            EXPECT_EQ(got, byte);
        };
        receive(1);
        EXPECT_EQ(rx.take_silence_s(), 0u);
        ::usleep(1'100'000);  // the stimulus: a silence of over a second
        EXPECT_EQ(rx.take_silence_s(), 0u) << "noted before a receive ended it";
        receive(2);
        EXPECT_EQ(rx.take_silence_s(), 1u);
        EXPECT_EQ(rx.take_silence_s(), 0u) << "taken once";
        receive(3);
        EXPECT_EQ(rx.take_silence_s(), 0u);
    }
}
