// The TCP connection's C API as the glue's direct path uses it: a look at
// buffered bytes in place before they are read, over a real socket pair.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "rbio/bs/tcp_transport.h"

namespace {

struct Fd {
    int fd = -1;
    ~Fd() {
        if (fd >= 0) ::close(fd);
    }
};

struct ConnFree {
    void operator()(rbio_tcp_conn* c) const { rbio_tcp_conn_free(c); }
};

rbio_tp_settings defaults() {
    ::setenv("RBIO_CONFIG", "/dev/null", 1);
    rbio_tp_settings s{};
    char err[256] = "";
    EXPECT_EQ(rbio_tp_load_settings(&s, err, sizeof err), 0) << err;
    ::unsetenv("RBIO_CONFIG");
    return s;
}

TEST(TcpConnCApi, PeekShowsBufferedBytesInPlaceUntilTheyAreRead) {
    Fd ours, peer;
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    ours.fd = sv[0];
    peer.fd = sv[1];
    rbio_tp_settings s = defaults();
    char err[256] = "";
    std::unique_ptr<rbio_tcp_conn, ConnFree> c(rbio_tcp_conn_new(ours.fd, &s, err, sizeof err));
    ASSERT_TRUE(c) << err;

    EXPECT_EQ(rbio_tcp_conn_peek(c.get(), 1), nullptr) << "nothing buffered yet";
    std::array<uint8_t, 100> sent{};
    for (size_t i = 0; i < sent.size(); ++i) sent[i] = uint8_t(i);
    ASSERT_EQ(::write(peer.fd, sent.data(), sent.size()), ssize_t(sent.size()));
    rbio_tcp_conn_take_event(c.get());
    ASSERT_EQ(rbio_tcp_conn_fill(c.get()), long(sent.size()));

    const auto* p = static_cast<const uint8_t*>(rbio_tcp_conn_peek(c.get(), 48));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(std::memcmp(p, sent.data(), 48), 0);
    EXPECT_EQ(rbio_tcp_conn_peek(c.get(), sent.size()), p) << "all of it, from the same place";
    EXPECT_EQ(rbio_tcp_conn_peek(c.get(), sent.size() + 1), nullptr) << "more than is buffered";

    // Peeking consumed nothing: a read serves the same bytes, and a peek
    // after it starts where the read stopped.
    std::array<uint8_t, 48> got{};
    ASSERT_EQ(rbio_tcp_conn_read(c.get(), got.data(), got.size()), long(got.size()));
    EXPECT_EQ(std::memcmp(got.data(), sent.data(), got.size()), 0);
    p = static_cast<const uint8_t*>(rbio_tcp_conn_peek(c.get(), 52));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(std::memcmp(p, sent.data() + 48, 52), 0);
    EXPECT_EQ(rbio_tcp_conn_peek(c.get(), 53), nullptr);
}

}  // namespace
