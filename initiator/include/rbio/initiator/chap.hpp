#pragma once
// CHAP for iSCSI login (RFC 7143 §12.1.3, RFC 1994): the initiator answers
// the target's identifier and challenge with MD5(id || secret || challenge).
// Only one-way CHAP (the target authenticates the initiator) for now.
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace rbio::initiator {

struct ChapCredentials {
    std::string username;  // CHAP_N
    std::string secret;
};

// CHAP_A value of MD5, the only algorithm offered.
inline constexpr int kChapMd5 = 5;

// MD5 over the one-byte identifier, the secret and the challenge.
std::array<uint8_t, 16> chap_md5_response(uint8_t id, std::span<const uint8_t> secret,
                                          std::span<const uint8_t> challenge);

// A binary value of an iSCSI key (RFC 7143 §6.1): "0x" + hex digits, or
// "0b" + base64. Throws InitiatorError(Protocol) when malformed or empty.
std::vector<uint8_t> decode_binary_value(std::string_view text);
// "0x" followed by lower-case hex digits.
std::string encode_hex_value(std::span<const uint8_t> bytes);

}  // namespace rbio::initiator
