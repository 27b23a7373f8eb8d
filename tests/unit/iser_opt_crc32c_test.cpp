// CRC32C against the vectors of RFC 3720 Appendix B.4 (referenced by RFC
// 7143 §13.1), for every implementation this machine can run.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <random>
#include <vector>

#include "rbio/iser/crc32c.hpp"

namespace {

using namespace rbio::iser;
using ExtendFn = uint32_t (*)(uint32_t, const void*, size_t);

struct Impl {
    const char* name;
    ExtendFn fn;
};

std::vector<Impl> implementations() {
    std::vector<Impl> v{{"dispatch", crc32c_extend}, {"portable", crc32c_extend_portable}};
    if (crc32c_hardware_available()) v.push_back({"hardware", crc32c_extend_hardware});
    return v;
}

TEST(IserCrc32c, Rfc3720AppendixB4Vectors) {
    std::array<uint8_t, 32> zeros{}, ones{}, inc{}, dec{};
    ones.fill(0xff);
    for (int i = 0; i < 32; ++i) {
        inc[i] = uint8_t(i);
        dec[i] = uint8_t(31 - i);
    }
    for (const Impl& impl : implementations()) {
        SCOPED_TRACE(impl.name);
        EXPECT_EQ(impl.fn(0, zeros.data(), 32), 0x8a9136aau);
        EXPECT_EQ(impl.fn(0, ones.data(), 32), 0x62a8ab43u);
        EXPECT_EQ(impl.fn(0, inc.data(), 32), 0x46dd794eu);
        EXPECT_EQ(impl.fn(0, dec.data(), 32), 0x113fdb5cu);
        // The catalogue check value of CRC-32/ISCSI.
        EXPECT_EQ(impl.fn(0, "123456789", 9), 0xe3069283u);
        EXPECT_EQ(impl.fn(0, nullptr, 0), 0u);
    }
}

TEST(IserCrc32c, ExtendingEqualsOneRunAtEverySplitAndAlignment) {
    std::mt19937 rng(7);
    std::vector<uint8_t> buf(300 + 8);
    for (auto& b : buf) b = uint8_t(rng());
    for (const Impl& impl : implementations()) {
        SCOPED_TRACE(impl.name);
        for (size_t align = 0; align < 8; ++align) {
            const uint8_t* p = buf.data() + align;
            uint32_t whole = impl.fn(0, p, 300);
            EXPECT_EQ(whole, crc32c_extend_portable(0, p, 300));
            for (size_t cut = 0; cut <= 300; cut += 7)
                EXPECT_EQ(impl.fn(impl.fn(0, p, cut), p + cut, 300 - cut), whole) << cut;
        }
    }
}

TEST(IserCrc32c, HardwareAndPortableAgreeOnRandomLengths) {
    if (!crc32c_hardware_available()) GTEST_SKIP() << "CPU has no SSE4.2";
    std::mt19937 rng(11);
    std::vector<uint8_t> buf(70000);
    for (auto& b : buf) b = uint8_t(rng());
    for (int i = 0; i < 200; ++i) {
        size_t off = rng() % 64, len = rng() % (buf.size() - 64);
        ASSERT_EQ(crc32c_extend_hardware(0, buf.data() + off, len),
                  crc32c_extend_portable(0, buf.data() + off, len));
    }
    EXPECT_STREQ(crc32c_implementation(), "sse4.2");
}

}  // namespace
