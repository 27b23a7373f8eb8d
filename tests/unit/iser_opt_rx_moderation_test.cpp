// Receive moderation: the level (requests waited for) rises only to what a
// pass saw arrive at once, falls when the timer ends a wait, and the
// socket's threshold covers the rest of a PDU under way.
#include <gtest/gtest.h>

#include <cstdint>

#include "rbio/iser/rx_moderation.hpp"

namespace {

using rbio::iser::RxModeration;
using rbio::iser::RxModerationConfig;

constexpr size_t kRead = 48;          // a READ command: a header alone
constexpr size_t kWrite = 48 + 4096;  // a WRITE with its data immediate

// One pass that saw n PDUs of `bytes` each.
RxModeration::Step pass(RxModeration& m, uint32_t n, size_t bytes, bool fired = false, size_t awaited = 0,
                        bool full_feature = true, bool answered = false) {
    for (uint32_t i = 0; i < n; ++i) m.on_pdu(bytes);
    return m.end_pass(fired, full_feature, awaited, answered);
}

// An initiator that sends one PDU per call, as tgtd usually sees it: a
// couple of requests per pass.
void trickle(RxModeration& m, size_t bytes = kRead) {
    for (int i = 0; i < 32; ++i) pass(m, 2, bytes);
}

TEST(RxModeration, OneInFlightNeverWaits) {
    RxModeration m;
    for (int i = 0; i < 1000; ++i) {
        const auto s = pass(m, 1, kRead);
        EXPECT_FALSE(s.set_lowat);
        EXPECT_FALSE(s.arm_timer);
    }
    EXPECT_EQ(m.level(), 1u);
    EXPECT_EQ(m.lowat(), 1u);
}

TEST(RxModeration, BelowTheMinimumItDoesNotStart) {
    RxModeration m;  // min_pdus 8: waiting for fewer costs pipelining
    trickle(m);
    for (uint32_t n = 1; n < 8; ++n) EXPECT_FALSE(pass(m, n, kRead).set_lowat) << n;
    EXPECT_EQ(m.level(), 1u);
}

TEST(RxModeration, AnInitiatorThatBatchesNeverWaits) {
    // Its requests come many per receive from the first burst on: waiting
    // would only put it in lockstep with the target.
    RxModeration m;
    for (int i = 0; i < 1000; ++i) EXPECT_FALSE(pass(m, 8 + uint32_t(i % 24), kRead).set_lowat) << i;
    EXPECT_EQ(m.level(), 1u);
    // Passes of 3 or 4 (half the minimum and more) do not bring it down.
    for (int i = 0; i < 64; ++i) pass(m, 4, kRead);
    EXPECT_FALSE(pass(m, 16, kRead).set_lowat);
    // Once its passes are usually small, a burst starts the wait.
    trickle(m);
    EXPECT_TRUE(pass(m, 16, kRead).set_lowat);
    EXPECT_EQ(m.level(), 16u);
}

TEST(RxModeration, RisesToWhatArrivedAtOnceUpToTheBound) {
    RxModeration m;
    trickle(m);
    auto s = pass(m, 9, kRead);
    EXPECT_TRUE(s.set_lowat);
    EXPECT_TRUE(s.arm_timer);
    EXPECT_EQ(m.level(), 9u);
    EXPECT_EQ(m.lowat(), 9u * kRead);
    // Woken at the threshold, more had come meanwhile: the level follows.
    s = pass(m, 12, kRead);
    EXPECT_EQ(m.level(), 12u);
    // Never above max_pdus (16), however many were in.
    pass(m, 40, kRead);
    EXPECT_EQ(m.level(), 16u);
    EXPECT_EQ(m.lowat(), 16u * kRead);
    // A pass with no requests and no responses changes nothing, arms nothing.
    s = pass(m, 0, kRead);
    EXPECT_FALSE(s.set_lowat);
    EXPECT_FALSE(s.arm_timer);
    // One that answered (a backing store's completions) re-arms the timer:
    // the initiator sends more only once it has the responses.
    s = pass(m, 0, kRead, false, 0, true, true);
    EXPECT_FALSE(s.set_lowat);
    EXPECT_TRUE(s.arm_timer);
    // Every pass that took requests re-arms the timer.
    s = pass(m, 16, kRead);
    EXPECT_FALSE(s.set_lowat);
    EXPECT_TRUE(s.arm_timer);
}

TEST(RxModeration, TheTimerLowersTheLevelToWhatCame) {
    RxModeration m;
    trickle(m);
    pass(m, 16, kRead);
    ASSERT_EQ(m.level(), 16u);
    // The initiator's depth fell to 10: the wait ran out with 10 in.
    auto s = pass(m, 10, kRead, true);
    EXPECT_EQ(m.level(), 10u);
    EXPECT_TRUE(s.set_lowat);
    EXPECT_TRUE(s.arm_timer);
    // A timer that fires with the level reached lowers nothing.
    pass(m, 10, kRead, true);
    EXPECT_EQ(m.level(), 10u);
    // Fewer than the minimum (or none): every byte wakes again, no timer.
    s = pass(m, 2, kRead, true);
    EXPECT_EQ(m.level(), 1u);
    EXPECT_EQ(m.lowat(), 1u);
    EXPECT_TRUE(s.set_lowat);
    EXPECT_FALSE(s.arm_timer);
    trickle(m);
    pass(m, 16, kRead);
    ASSERT_EQ(m.level(), 16u);
    s = pass(m, 0, kRead, true);
    EXPECT_EQ(m.lowat(), 1u);
    EXPECT_FALSE(s.arm_timer);
}

TEST(RxModeration, ThresholdInBytesOfTheSmallestRequest) {
    RxModeration m;
    trickle(m, kWrite);
    pass(m, 10, kWrite);
    EXPECT_EQ(m.lowat(), 10u * kWrite);
    // Reads and writes mixed: the smallest counts, so the wait never asks
    // for more bytes than that many requests may bring.
    m.on_pdu(kWrite);
    pass(m, 9, kRead);
    EXPECT_EQ(m.lowat(), 10u * kRead);
    // Bounded in bytes too (max_bytes, 64 KiB).
    pass(m, 16, kWrite);
    EXPECT_EQ(m.lowat(), 64u * 1024);
}

TEST(RxModeration, TheRestOfAPduUnderWayCountsAsOneRequest) {
    RxModeration m;
    trickle(m, kWrite);
    pass(m, 10, kWrite);
    // Woken mid-PDU: 1000 bytes of one write still to come, plus 9 more.
    auto s = pass(m, 10, kWrite, false, 1000);
    EXPECT_TRUE(s.set_lowat);
    EXPECT_EQ(m.lowat(), 1000u + 9u * kWrite);
    // Part of a header in, its size unknown: wake on every byte, level kept.
    s = pass(m, 10, kWrite, false, SIZE_MAX);
    EXPECT_EQ(m.lowat(), 1u);
    EXPECT_FALSE(s.arm_timer);
    EXPECT_EQ(m.level(), 10u);
    pass(m, 10, kWrite);
    EXPECT_EQ(m.lowat(), 10u * kWrite);
}

TEST(RxModeration, OnlyInFullFeaturePhase) {
    RxModeration m;
    trickle(m);
    pass(m, 12, kRead, false, 0, false);
    EXPECT_EQ(m.level(), 1u);
    pass(m, 12, kRead);
    EXPECT_EQ(m.level(), 12u);
    // A session leaving full feature phase stops waiting at once.
    const auto s = pass(m, 1, kRead, false, 0, false);
    EXPECT_TRUE(s.set_lowat);
    EXPECT_EQ(m.lowat(), 1u);
}

TEST(RxModeration, OneTimerSetServesPassesThatComeClose) {
    RxModeration m;  // wait_us 300
    // The first wait sets the timer.
    EXPECT_TRUE(m.rearm_due(1000));
    EXPECT_EQ(m.deadline_us(), 1300u);
    // A pass 150 µs later (a store's completions): 150 µs still to go, half
    // of the wait: the running timer serves.
    EXPECT_FALSE(m.rearm_due(1150));
    // At 151 µs only 149 are left: set again, 300 from now.
    EXPECT_TRUE(m.rearm_due(1151));
    EXPECT_EQ(m.deadline_us(), 1451u);
    EXPECT_FALSE(m.rearm_due(1300));
    // A deadline passed (the timer fired, or the connection sat idle).
    EXPECT_TRUE(m.rearm_due(5000));
    EXPECT_EQ(m.deadline_us(), 5300u);
    // A longer wait keeps its own half.
    RxModeration slow(RxModerationConfig{16, 64 * 1024, 8, 10000});
    EXPECT_TRUE(slow.rearm_due(0));
    EXPECT_FALSE(slow.rearm_due(5000));
    EXPECT_TRUE(slow.rearm_due(5001));
}

TEST(RxModeration, OffAndDisabled) {
    for (uint32_t max : {0u, 1u}) {
        RxModeration m(RxModerationConfig{max, 64 * 1024, 8});
        EXPECT_FALSE(m.enabled());
        EXPECT_FALSE(pass(m, 32, kRead).set_lowat);
        EXPECT_EQ(m.lowat(), 1u);
    }
    RxModeration m;
    trickle(m);
    pass(m, 16, kRead);
    ASSERT_EQ(m.level(), 16u);
    m.disable();
    EXPECT_FALSE(m.enabled());
    EXPECT_EQ(m.lowat(), 1u);
    EXPECT_FALSE(pass(m, 16, kRead).arm_timer);
}

}  // namespace
