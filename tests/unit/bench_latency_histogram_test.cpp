// rbio bench's latency histogram: fixed memory, percentiles within 1/64.
#include <gtest/gtest.h>

#include <cstdint>

#include "cli/latency_histogram.hpp"

namespace {

using rbio::cli::LatencyHistogram;

TEST(BenchLatencyHistogram, PercentilesWithinOneSixtyFourth) {
    LatencyHistogram h;
    EXPECT_EQ(h.percentile_us(50), 0.0) << "nothing recorded";
    for (uint64_t ns = 1; ns <= 1'000'000; ++ns) h.record(ns);  // 1 ns .. 1 ms, evenly
    EXPECT_EQ(h.count(), 1'000'000u);
    EXPECT_NEAR(h.percentile_us(50), 500.0, 500.0 / 64);
    EXPECT_NEAR(h.percentile_us(99), 990.0, 990.0 / 64);
    EXPECT_NEAR(h.percentile_us(99.9), 999.0, 999.0 / 64);
    EXPECT_NEAR(h.percentile_us(100), 1000.0, 1000.0 / 64);
    h.clear();
    EXPECT_EQ(h.count(), 0u);
    EXPECT_EQ(h.percentile_us(99), 0.0);
}

TEST(BenchLatencyHistogram, SmallAndHugeValues) {
    LatencyHistogram h;
    h.record(0);
    h.record(37);  // below 64 ns: exact
    EXPECT_NEAR(h.percentile_us(100), 0.037, 0.001);
    LatencyHistogram slow;
    const uint64_t hour = 3600ull * 1'000'000'000;  // beyond the 4.3 s a 32-bit count held
    slow.record(hour);
    slow.record(UINT64_MAX);
    EXPECT_NEAR(slow.percentile_us(50), hour / 1000.0, hour / 1000.0 / 64);
    EXPECT_GT(slow.percentile_us(100), 1.8e16);
}

// A few slow I/Os among many fast ones show in the tail, not the median.
TEST(BenchLatencyHistogram, TheTailIsTheTail) {
    LatencyHistogram h;
    for (int i = 0; i < 9990; ++i) h.record(20'000);   // 20 us
    for (int i = 0; i < 10; ++i) h.record(5'000'000);  // 5 ms
    EXPECT_NEAR(h.percentile_us(50), 20.0, 20.0 / 64);
    EXPECT_NEAR(h.percentile_us(99), 20.0, 20.0 / 64);
    EXPECT_NEAR(h.percentile_us(99.95), 5000.0, 5000.0 / 64);
}

}  // namespace
