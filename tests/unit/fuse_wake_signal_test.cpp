// The FUSE export's wake-up of its session thread: after every interleaving
// of a request's notify() with the thread's consume(), the eventfd the
// session polls is readable exactly while a wake-up is unconsumed. A
// readable eventfd that nothing consumes makes every poll return at once:
// the session thread would spin at full CPU while the application waits.
#include "fuse/wake_signal.hpp"

#include <gtest/gtest.h>
#include <poll.h>

using rbio::fuse::WakeSignal;

namespace {

bool readable(const WakeSignal& w) {
    pollfd p{w.fd(), POLLIN, 0};
    return ::poll(&p, 1, 0) == 1;
}

}  // namespace

TEST(WakeSignal, OneWakeUpPerBatchConsumedOnce) {
    WakeSignal w;
    EXPECT_FALSE(readable(w));
    w.notify();
    w.notify();  // the same batch: the flag is set, no second write
    EXPECT_TRUE(readable(w));
    w.consume();
    EXPECT_FALSE(readable(w));
    w.consume();  // nothing pending: no read, nothing changes
    EXPECT_FALSE(readable(w));
    w.notify();
    EXPECT_TRUE(readable(w)) << "a request after the consume must wake the thread";
    w.consume();
    EXPECT_FALSE(readable(w));
}

// The race: the session thread consumes between a request's flag and its
// write. Its read finds nothing; the write then makes the eventfd readable
// with the flag clear. The next consume() must still read it.
TEST(WakeSignal, AWriteAfterAnEmptyReadIsConsumedNextTime) {
    WakeSignal w;
    ASSERT_TRUE(w.claim());  // a requester set the flag...
    w.consume();             // ...the thread consumes before its write
    EXPECT_FALSE(readable(w));
    w.signal();  // the write lands
    EXPECT_TRUE(readable(w)) << "the thread's poll must wake for it";
    w.consume();
    EXPECT_FALSE(readable(w)) << "the eventfd stays readable: every poll returns at once (a spin)";
    w.notify();
    EXPECT_TRUE(readable(w)) << "a later request must wake the thread again";
    w.consume();
    EXPECT_FALSE(readable(w));
}
