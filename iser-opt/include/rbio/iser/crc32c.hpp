#pragma once
// CRC32C (Castagnoli, reflected polynomial 0x82F63B78): the iSCSI header and
// data digest (RFC 7143 §13.1; test vectors in RFC 3720 Appendix B.4).
//
// Debian ships Intel ISA-L (libisal-dev, crc32_iscsi), which interleaves
// three CRC streams and is a few times faster on large buffers than the one
// stream of SSE4.2 instructions below. The project's setup does not install
// it yet, and digests only run when a connection negotiates them; if profiles
// show them hot, ISA-L goes in behind crc32c_extend() with this as fallback.
#include <cstddef>
#include <cstdint>
#include <span>

namespace rbio::iser {

// The CRC32C of `len` bytes at `data`, continued from `crc`, the CRC32C of
// the bytes before them (0 for none), so that
// crc32c_extend(crc32c(a), b) == crc32c(a followed by b).
// Uses SSE4.2 when the CPU has it (checked once at run time).
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t len);

inline uint32_t crc32c(std::span<const uint8_t> bytes) {
    return crc32c_extend(0, bytes.data(), bytes.size());
}

// The implementations behind crc32c_extend, so tests can check each one.
uint32_t crc32c_extend_portable(uint32_t crc, const void* data, size_t len);
// Whether crc32c_extend_hardware may be called on this CPU.
bool crc32c_hardware_available();
// Only when crc32c_hardware_available().
uint32_t crc32c_extend_hardware(uint32_t crc, const void* data, size_t len);
// "sse4.2" or "portable": which one crc32c_extend uses, for logs.
const char* crc32c_implementation();

}  // namespace rbio::iser
