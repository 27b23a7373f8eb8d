#include "rbio/iser/crc32c.hpp"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace rbio::iser {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78u;  // reflected Castagnoli

// Slicing-by-8: table[k][b] is the CRC of byte b followed by k zero bytes, so
// eight input bytes cost eight lookups and no per-bit work.
using Tables = std::array<std::array<uint32_t, 256>, 8>;

constexpr Tables make_tables() {
    Tables t{};
    for (uint32_t b = 0; b < 256; ++b) {
        uint32_t c = b;
        for (int i = 0; i < 8; ++i) c = (c >> 1) ^ ((c & 1u) ? kPolynomial : 0u);
        t[0][b] = c;
    }
    for (size_t k = 1; k < 8; ++k)
        for (uint32_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xffu];
    return t;
}

constexpr Tables kTables = make_tables();

uint32_t load_le32(const uint8_t* p) {
    return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t extend_sse42(uint32_t crc, const uint8_t* p, size_t len) {
    uint64_t state = ~crc;
    while (len > 0 && (reinterpret_cast<uintptr_t>(p) & 7u) != 0) {
        state = _mm_crc32_u8(uint32_t(state), *p++);
        --len;
    }
    while (len >= 8) {
        uint64_t word;
        std::memcpy(&word, p, sizeof word);
        state = _mm_crc32_u64(state, word);
        p += 8;
        len -= 8;
    }
    while (len > 0) {
        state = _mm_crc32_u8(uint32_t(state), *p++);
        --len;
    }
    return ~uint32_t(state);
}
#endif

using ExtendFn = uint32_t (*)(uint32_t, const void*, size_t);

ExtendFn choose() { return crc32c_hardware_available() ? crc32c_extend_hardware : crc32c_extend_portable; }

}  // namespace

uint32_t crc32c_extend_portable(uint32_t crc, const void* data, size_t len) {
    const auto* p = static_cast<const uint8_t*>(data);
    uint32_t c = ~crc;
    while (len >= 8) {
        uint32_t lo = load_le32(p) ^ c;
        uint32_t hi = load_le32(p + 4);
        c = kTables[7][lo & 0xffu] ^ kTables[6][(lo >> 8) & 0xffu] ^ kTables[5][(lo >> 16) & 0xffu] ^
            kTables[4][lo >> 24] ^ kTables[3][hi & 0xffu] ^ kTables[2][(hi >> 8) & 0xffu] ^
            kTables[1][(hi >> 16) & 0xffu] ^ kTables[0][hi >> 24];
        p += 8;
        len -= 8;
    }
    while (len-- > 0) c = (c >> 8) ^ kTables[0][(c ^ *p++) & 0xffu];
    return ~c;
}

bool crc32c_hardware_available() {
#if defined(__x86_64__)
    return __builtin_cpu_supports("sse4.2");
#else
    return false;
#endif
}

uint32_t crc32c_extend_hardware(uint32_t crc, const void* data, size_t len) {
#if defined(__x86_64__)
    return extend_sse42(crc, static_cast<const uint8_t*>(data), len);
#else
    return crc32c_extend_portable(crc, data, len);
#endif
}

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t len) {
    static const ExtendFn impl = choose();
    return impl(crc, data, len);
}

const char* crc32c_implementation() { return crc32c_hardware_available() ? "sse4.2" : "portable"; }

}  // namespace rbio::iser
