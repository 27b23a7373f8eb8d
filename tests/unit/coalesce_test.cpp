#include <gtest/gtest.h>

#include "rbio/bs/coalesce.hpp"

using rbio::bs::can_append;
using rbio::bs::Extent;
using rbio::bs::MergeLimits;

TEST(Coalesce, AdjacentSameDirectionMerges) {
    MergeLimits lim;
    EXPECT_TRUE(can_append({0, 4096, false, false}, 1, {4096, 4096, false, false}, lim));
    EXPECT_TRUE(can_append({8192, 8192, true, false}, 2, {16384, 512, true, false}, lim));
}

TEST(Coalesce, GapsOverlapsAndBackwardsDoNotMerge) {
    MergeLimits lim;
    EXPECT_FALSE(can_append({0, 4096, false, false}, 1, {8192, 4096, false, false}, lim));
    EXPECT_FALSE(can_append({0, 4096, false, false}, 1, {2048, 4096, false, false}, lim));
    EXPECT_FALSE(can_append({4096, 4096, false, false}, 1, {0, 4096, false, false}, lim));
}

TEST(Coalesce, DirectionAndDurabilityMustMatch) {
    MergeLimits lim;
    EXPECT_FALSE(can_append({0, 4096, true, false}, 1, {4096, 4096, false, false}, lim));
    EXPECT_FALSE(can_append({0, 4096, true, false}, 1, {4096, 4096, true, true}, lim));
    EXPECT_TRUE(can_append({0, 4096, true, true}, 1, {4096, 4096, true, true}, lim));
}

TEST(Coalesce, LimitsAreHonoured) {
    MergeLimits lim{16384, 3};
    EXPECT_TRUE(can_append({0, 12288, false, false}, 2, {12288, 4096, false, false}, lim));
    EXPECT_FALSE(can_append({0, 12288, false, false}, 2, {12288, 8192, false, false}, lim));
    EXPECT_FALSE(can_append({0, 12288, false, false}, 3, {12288, 4096, false, false}, lim));
    EXPECT_FALSE(can_append({0, 4096, false, false}, 1, {4096, 0, false, false}, lim));
}
