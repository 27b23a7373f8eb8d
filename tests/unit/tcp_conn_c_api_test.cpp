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
#include <string>

#include "rbio/bs/tcp_transport.h"
#include "rbio/iser/pdu.hpp"

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

// A connection on one end of a socket pair; `peer` is the other end.
struct Connected {
    Fd ours, peer;
    rbio_tp_settings settings = defaults();
    std::unique_ptr<rbio_tcp_conn, ConnFree> conn;
};
void connect(Connected& x) {
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    x.ours.fd = sv[0];
    x.peer.fd = sv[1];
    char err[256] = "";
    x.conn.reset(rbio_tcp_conn_new(x.ours.fd, &x.settings, err, sizeof err));
    ASSERT_TRUE(x.conn) << err;
}

TEST(TcpConnCApi, PeekShowsBufferedBytesInPlaceUntilTheyAreRead) {
    Connected x;
    ASSERT_NO_FATAL_FAILURE(connect(x));
    auto& c = x.conn;
    auto& peer = x.peer;

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

// Receive moderation's level, from the connection's description.
unsigned rx_wait_level(const rbio_tcp_conn* c) {
    char out[2048];
    rbio_tcp_conn_describe(c, out, sizeof out);
    const std::string d(out);
    const size_t at = d.find("rx_wait_level=");
    return at == std::string::npos ? ~0u : unsigned(std::stoul(d.substr(at + 14)));
}

// The headers of one pass, as the core reads them, then the pass's end.
void pass(rbio_tcp_conn* c, unsigned commands, unsigned data_outs) {
    using rbio::iser::Bhs;
    using rbio::iser::Opcode;
    char err[256] = "";
    for (unsigned i = 0; i < commands; ++i) {
        Bhs b(Opcode::ScsiCommand);
        b.set_flags(0x80 | 0x20 | 0x01).set_itt(i).set_expected_data_transfer_length(131072);
        ASSERT_EQ(rbio_tcp_conn_check_bhs(c, b.bytes().data(), 8192, 0, 0, err, sizeof err), 0) << err;
    }
    for (unsigned i = 0; i < data_outs; ++i) {
        Bhs b(Opcode::DataOut);
        b.set_final(i + 1 == data_outs).set_data_segment_length(8192).set_ttt(1);
        ASSERT_EQ(rbio_tcp_conn_check_bhs(c, b.bytes().data(), 8192, 0, 0, err, sizeof err), 0) << err;
    }
    ASSERT_EQ(rbio_tcp_conn_rx_wait_end_pass(c, 0, 1, err, sizeof err), 0) << err;
}

// An initiator at one command in flight that now and then writes 128 KiB
// in Data-Outs after an R2T: the 15 Data-Outs that arrive together are one
// command's, and no reason to wait for 15 requests before its next.
TEST(TcpConnCApi, DataOutsOfOneWriteSetNoReceiveWait) {
    Connected x;
    ASSERT_NO_FATAL_FAILURE(connect(x));
    auto& c = x.conn;
    for (int i = 0; i < 32; ++i) pass(c.get(), 1, 0);  // passes usually see one request
    ASSERT_EQ(rx_wait_level(c.get()), 1u);
    pass(c.get(), 1, 15);
    EXPECT_EQ(rx_wait_level(c.get()), 1u) << "Data-Outs counted as requests";
    // The control: 16 commands in one pass were in flight together.
    pass(c.get(), 16, 0);
    EXPECT_EQ(rx_wait_level(c.get()), 16u);
}

}  // namespace
