#pragma once
// CHAP for iSCSI login (RFC 7143 §12.1.3, RFC 1994): the initiator answers
// the target's identifier and challenge with MD5(id || secret || challenge).
// With mutual CHAP the initiator then challenges the target the same way and
// checks its answer.
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

// The initiator's challenge to the target (mutual CHAP): a random
// identifier and 16 random bytes from OpenSSL's CSPRNG.
struct ChapChallenge {
    uint8_t id = 0;
    std::vector<uint8_t> challenge;
};
// Throws InitiatorError(AuthFailure) when no random bytes are available.
ChapChallenge make_chap_challenge();
// Whether `response` is MD5(id || secret || challenge), compared in constant time.
bool chap_md5_matches(uint8_t id, std::span<const uint8_t> secret, std::span<const uint8_t> challenge,
                      std::span<const uint8_t> response);

// A binary value of an iSCSI key (RFC 7143 §6.1): "0x" + hex digits, or
// "0b" + base64. Throws InitiatorError(Protocol) when malformed or empty.
std::vector<uint8_t> decode_binary_value(std::string_view text);
// "0x" followed by lower-case hex digits.
std::string encode_hex_value(std::span<const uint8_t> bytes);

}  // namespace rbio::initiator
