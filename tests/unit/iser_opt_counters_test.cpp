// Per-connection counters and their process-wide totals.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "rbio/iser/counters.hpp"

namespace {

using namespace rbio::iser;

TEST(IserCounters, RatiosAndNames) {
    ConnectionCounters c;
    EXPECT_EQ(c.pdus_per_recv(), 0.0);  // no division by zero
    c[Counter::PdusIn] = 30;
    c[Counter::RecvCalls] = 4;
    c[Counter::PdusOut] = 9;
    c[Counter::SendCalls] = 3;
    EXPECT_DOUBLE_EQ(c.pdus_per_recv(), 7.5);
    EXPECT_DOUBLE_EQ(c.pdus_per_send(), 3.0);
    EXPECT_STREQ(counter_name(Counter::WouldBlock), "would_block");
    EXPECT_STREQ(counter_name(Counter::BytesIn), "bytes_in");
}

TEST(IserCounters, PublisherAddsOnlyWhatIsNew) {
    CounterTotals totals;
    CounterPublisher pub;
    ConnectionCounters c;
    c[Counter::PdusIn] = 5;
    pub.publish(c, totals);
    c[Counter::PdusIn] = 8;
    c[Counter::SendCalls] = 2;
    pub.publish(c, totals);
    pub.publish(c, totals);  // nothing new
    ConnectionCounters s = totals.snapshot();
    EXPECT_EQ(s[Counter::PdusIn], 8u);
    EXPECT_EQ(s[Counter::SendCalls], 2u);
}

TEST(IserCounters, CopyStopsAtTheSmallerEnd) {
    ConnectionCounters c;
    for (size_t i = 0; i < kCounterCount; ++i) c.values[i] = 100 + i;
    std::vector<uint64_t> out(kCounterCount + 4, 7);
    EXPECT_EQ(copy_counters(c, out.data(), 2), 2u);
    EXPECT_EQ(out[0], 100u);
    EXPECT_EQ(out[1], 101u);
    EXPECT_EQ(out[2], 7u) << "nothing past n";
    EXPECT_EQ(copy_counters(c, out.data(), out.size()), kCounterCount);
    EXPECT_EQ(out[size_t(Counter::SpinMisses)], 100u + size_t(Counter::SpinMisses));
    EXPECT_EQ(out[kCounterCount], 7u) << "nothing past the counters";
}

TEST(IserCounters, TotalsTakeAddsFromManyThreads) {
    CounterTotals totals;
    std::vector<std::thread> threads;
    threads.reserve(4);
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&totals] {
            ConnectionCounters one;
            one[Counter::BytesOut] = 3;
            one[Counter::PdusOut] = 1;
            for (int i = 0; i < 10000; ++i) totals.add(one);
        });
    for (auto& t : threads) t.join();
    ConnectionCounters expect;
    expect[Counter::BytesOut] = 120000;
    expect[Counter::PdusOut] = 40000;
    EXPECT_EQ(totals.snapshot(), expect);
    ConnectionCounters sum;
    sum += expect;
    sum += expect;
    EXPECT_EQ(sum[Counter::PdusOut], 80000u);
}

}  // namespace
