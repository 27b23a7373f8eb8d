// TcpConnection's send side against a real socket whose peer is gone: a PDU
// whose data points into a task's buffer holds the task until its send
// completes or is cancelled, and one the queue refuses must not keep it.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <map>
#include <string>
#include <vector>

#include "rbio/initiator/error.hpp"
#include "tcp_connection.hpp"

namespace {

using rbio::UniqueFd;
using rbio::initiator::ConnectionEvents;
using rbio::initiator::ErrorKind;
using rbio::initiator::InitiatorError;
using rbio::initiator::TcpConnection;
namespace iser = rbio::iser;

// The session's side of the interface, counting each task's references.
class Holds final : public ConnectionEvents {
public:
    void on_pdu(const iser::RxPdu&) override {}
    std::span<uint8_t> data_destination(const iser::RxPdu&) override { return {}; }
    bool fill_send_queue() override { return false; }
    void buffer_held(uint32_t itt) override { ++refs[itt]; }
    void buffer_released(uint32_t itt) override { --refs[itt]; }
    std::map<uint32_t, int> refs;
};

iser::Bhs data_out(uint32_t itt, size_t bytes) {
    iser::Bhs b(iser::Opcode::DataOut);
    b.set_final(true).set_itt(itt).set_data_segment_length(uint32_t(bytes));
    return b;
}

TEST(InitiatorTcpConnection, ARefusedPduDoesNotKeepItsTaskHeld) {
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    UniqueFd ours(sv[0]);
    ::close(sv[1]);  // the target reset the connection
    Holds events;
    iser::ConnectionCounters counters;
    rbio::initiator::SessionOptions options;
    TcpConnection conn(std::move(ours), rbio::initiator::Portal{"127.0.0.1", 3260}, options, counters,
                       events);

    // Over the queue's byte limit: the queue writes at once, the write
    // fails, and every queued PDU is cancelled; the enqueue itself still
    // counts as queued, and its cancellation gives the buffer back.
    std::vector<uint8_t> big(5u << 20, 0xab);
    conn.send_pdu(data_out(1, big.size()), {}, big, 1);
    EXPECT_EQ(events.refs[1], 0) << "the cancelled PDU gave task 1's buffer back";

    // The queue has failed: the next PDU is refused outright.
    std::vector<uint8_t> small(4096, 0xcd);
    try {
        conn.send_pdu(data_out(2, small.size()), {}, small, 2);
        ADD_FAILURE() << "a failed connection took a PDU";
    } catch (const InitiatorError& e) {
        EXPECT_EQ(e.kind(), ErrorKind::ConnectionLost) << e.what();
    }
    EXPECT_EQ(events.refs[2], 0) << "a refused PDU must not keep task 2 held: it would never finish";
}

// Answers to the target's pings bypass the session's room check: a target
// that floods pings and reads nothing fills the queue. That is a broken
// connection to recover from, not a programming error that ends the session.
TEST(InitiatorTcpConnection, AFullQueueIsALostConnection) {
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    UniqueFd ours(sv[0]);
    UniqueFd target(sv[1]);  // open, never read
    Holds events;
    iser::ConnectionCounters counters;
    rbio::initiator::SessionOptions options;
    TcpConnection conn(std::move(ours), rbio::initiator::Portal{"127.0.0.1", 3260}, options, counters,
                       events);
    int queued = 0;
    try {
        for (; queued < 100000; ++queued) {
            iser::Bhs nop(iser::Opcode::NopOut);
            nop.set_final(true).set_itt(0xffffffff).set_data_segment_length(512);
            conn.send_pdu(nop, std::vector<uint8_t>(512, 0), {}, 0);
            conn.flush(false);
        }
        ADD_FAILURE() << "100000 PDUs queued to a peer that reads nothing";
    } catch (const InitiatorError& e) {
        EXPECT_EQ(e.kind(), ErrorKind::ConnectionLost) << e.what();
        EXPECT_NE(std::string(e.what()).find("send queue full"), std::string::npos) << e.what();
    }
    EXPECT_GT(queued, 1000) << "the queue took its PDUs until it was full";
}

}  // namespace
