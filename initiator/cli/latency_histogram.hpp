#pragma once
// Latencies of `rbio bench` in a fixed-size log-linear histogram: memory
// stays the same however long the run (a list of every latency grew by 4
// bytes per I/O: 7 GiB in an hour at 500K IOPS), and a percentile is off by
// at most 1/64 of its value (64 buckets per power of two).
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>

namespace rbio::cli {

class LatencyHistogram {
public:
    void record(uint64_t ns) {
        ++counts_[bucket_of(ns)];
        ++total_;
    }
    void clear() {
        counts_.fill(0);
        total_ = 0;
    }
    uint64_t count() const { return total_; }

    // The p-th percentile (0 < p <= 100) in microseconds: the middle of the
    // bucket that holds it; 0 with nothing recorded.
    double percentile_us(double p) const {
        if (total_ == 0) return 0;
        // The rank of the sample that is the percentile (1-based).
        const uint64_t rank =
            std::max<uint64_t>(1, uint64_t(std::llround(std::min(p, 100.0) / 100.0 * double(total_))));
        uint64_t seen = 0;
        for (size_t b = 0; b < kBuckets; ++b) {
            seen += counts_[b];
            if (seen >= rank) return middle_of(b) / 1000.0;
        }
        return middle_of(kBuckets - 1) / 1000.0;
    }

private:
    static constexpr unsigned kSubBits = 6;  // 64 buckets per power of two
    static constexpr uint64_t kSub = uint64_t(1) << kSubBits;
    // Values below kSub ns have a bucket each; above, 64 per octave up to 2^64.
    static constexpr size_t kBuckets = kSub + (64 - kSubBits) * kSub;

    static size_t bucket_of(uint64_t v) {
        if (v < kSub) return size_t(v);
        const unsigned octave = unsigned(std::bit_width(v)) - 1;  // >= kSubBits
        const uint64_t sub = (v >> (octave - kSubBits)) & (kSub - 1);
        return size_t(kSub + (octave - kSubBits) * kSub + sub);
    }
    // The middle of the values that fall in bucket b.
    static double middle_of(size_t b) {
        if (b < kSub) return double(b);
        const unsigned octave = unsigned((b - kSub) / kSub) + kSubBits;
        const uint64_t sub = (b - kSub) % kSub;
        const double width = double(uint64_t(1) << (octave - kSubBits));
        return double((kSub + sub) << (octave - kSubBits)) + width / 2;
    }

    std::array<uint64_t, kBuckets> counts_{};
    uint64_t total_ = 0;
};

}  // namespace rbio::cli
