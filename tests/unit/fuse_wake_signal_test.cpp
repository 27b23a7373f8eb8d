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

// A requester's write comes after the thread consumed its flag, and another
// requester's whole wake-up lands before it. The late write must still be
// read: a readable eventfd left over makes every poll return at once.
TEST(WakeSignal, AWriteThatComesAfterItsFlagWasConsumedIsRead) {
    WakeSignal w;
    ASSERT_TRUE(w.claim());  // requester A sets the flag...
    w.consume();             // ...the thread consumes before A's write
    EXPECT_FALSE(readable(w));
    w.notify();  // requester B: flag and write
    EXPECT_TRUE(readable(w));
    w.consume();
    w.signal();  // A's write lands
    EXPECT_TRUE(readable(w)) << "the thread's poll must wake for it";
    w.consume();
    EXPECT_FALSE(readable(w)) << "the eventfd stays readable: every poll returns at once (a spin)";
    w.notify();
    EXPECT_TRUE(readable(w)) << "a later request must wake the thread again";
    w.consume();
    EXPECT_FALSE(readable(w));
}

// A requester's whole wake-up lands between the thread's clearing of the
// flag and its read, which drains both writes. The flag that requester set
// must not stay set over an empty eventfd: the next request would skip its
// write and wait for the poll's timeout.
TEST(WakeSignal, AWriteReadBeforeItsFlagWasClearedDoesNotSilenceTheNextRequest) {
    WakeSignal w;
    w.notify();   // requester A
    w.observe();  // the thread clears A's flag...
    w.notify();   // ...requester B sets it again and writes
    w.drain();    // the thread reads both writes
    EXPECT_FALSE(readable(w));
    w.notify();  // requester C
    EXPECT_TRUE(readable(w)) << "a request after the consume must wake the thread";
    w.consume();
    EXPECT_FALSE(readable(w));
}

// Two requesters have set their flags and neither has written when the
// thread consumes: both writes are owed, and each is read once it lands.
TEST(WakeSignal, TwoWritesOwedAreBothRead) {
    WakeSignal w;
    ASSERT_TRUE(w.claim());  // requester A
    w.consume();             // owes A's write (the read finds nothing)
    ASSERT_TRUE(w.claim());  // requester B
    w.consume();             // owes B's too
    EXPECT_FALSE(readable(w));
    w.signal();  // A's write
    EXPECT_TRUE(readable(w));
    w.consume();
    EXPECT_FALSE(readable(w));
    w.signal();  // B's write
    EXPECT_TRUE(readable(w)) << "the thread's poll must wake for the second late write";
    w.consume();
    EXPECT_FALSE(readable(w));
    w.notify();
    EXPECT_TRUE(readable(w));
    w.consume();
    EXPECT_FALSE(readable(w));
}
