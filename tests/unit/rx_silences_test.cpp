// The silences of a connection its host has not yet shown it lived
// through (rbd_quiet_s): which acknowledgements clear which silences.
#include <gtest/gtest.h>

#include "rbio/bs/rx_silences.h"

namespace {

TEST(RxSilences, ALateBurstCannotClearTheSilenceBeforeIt) {
    rbio_rx_silences q{};
    // A 30 s silence ended when the next response was to carry StatSN 100.
    rbio_rx_silences_push(&q, 30, 100);
    // Commands sent before the host gave up acknowledge at most StatSN 99.
    EXPECT_EQ(rbio_rx_silences_ack(&q, 100), 30u);
    EXPECT_EQ(rbio_rx_silences_ack(&q, 42), 30u);
    // A host that read response 100 sends ExpStatSN 101.
    EXPECT_EQ(rbio_rx_silences_ack(&q, 101), 0u);
    EXPECT_EQ(q.n, 0u);
}

TEST(RxSilences, AShortSilenceLaterDoesNotHideTheAcknowledgementOfALongOne) {
    rbio_rx_silences q{};
    rbio_rx_silences_push(&q, 30, 100);  // answered with StatSN 100
    rbio_rx_silences_push(&q, 2, 101);   // the host's next command, 2 s later
    // It acknowledges 100: the 30 s silence is lived through; the 2 s one
    // (StatSN 101 not yet read) is left, and is short.
    EXPECT_EQ(rbio_rx_silences_ack(&q, 101), 2u);
    EXPECT_EQ(rbio_rx_silences_ack(&q, 102), 0u);
}

TEST(RxSilences, ALongerSilenceReplacesTheShorterOnesBeforeIt) {
    rbio_rx_silences q{};
    rbio_rx_silences_push(&q, 5, 10);
    rbio_rx_silences_push(&q, 3, 20);
    rbio_rx_silences_push(&q, 12, 30);
    EXPECT_EQ(q.n, 1u);
    EXPECT_EQ(rbio_rx_silences_ack(&q, 25), 12u) << "acknowledging the older ones clears nothing";
    EXPECT_EQ(rbio_rx_silences_ack(&q, 31), 0u);
}

TEST(RxSilences, ALaterShorterSilenceOutlivesTheClearingOfAnOlderLongerOne) {
    rbio_rx_silences q{};
    rbio_rx_silences_push(&q, 30, 100);
    rbio_rx_silences_push(&q, 15, 200);
    EXPECT_EQ(rbio_rx_silences_ack(&q, 150), 15u) << "the 30 s one is cleared, the 15 s one is not";
    EXPECT_EQ(rbio_rx_silences_ack(&q, 200), 15u);
    EXPECT_EQ(rbio_rx_silences_ack(&q, 201), 0u);
}

TEST(RxSilences, AFullStackMergesTowardsHarderToClear) {
    rbio_rx_silences q{};
    rbio_rx_silences_push(&q, 40, 1);
    rbio_rx_silences_push(&q, 30, 2);
    rbio_rx_silences_push(&q, 20, 3);
    rbio_rx_silences_push(&q, 10, 4);
    ASSERT_EQ(q.n, uint32_t(RBIO_RX_SILENCES));
    rbio_rx_silences_push(&q, 5, 9);  // takes in the 10 s one: 10 s, from StatSN 9
    EXPECT_EQ(q.n, uint32_t(RBIO_RX_SILENCES));
    EXPECT_EQ(rbio_rx_silences_ack(&q, 5), 10u) << "40, 30, 20 cleared; 10 now needs StatSN 9 read";
    EXPECT_EQ(rbio_rx_silences_ack(&q, 9), 10u);
    EXPECT_EQ(rbio_rx_silences_ack(&q, 10), 0u);
}

TEST(RxSilences, SerialNumbersWrap) {
    rbio_rx_silences q{};
    rbio_rx_silences_push(&q, 20, 0xfffffffeu);
    EXPECT_EQ(rbio_rx_silences_ack(&q, 0xfffffffeu), 20u);
    EXPECT_EQ(rbio_rx_silences_ack(&q, 3), 0u) << "3 is past 0xfffffffe in serial arithmetic";
    rbio_rx_silences_push(&q, 0, 7);
    EXPECT_EQ(q.n, 0u) << "less than a second is no silence";
}

}  // namespace
