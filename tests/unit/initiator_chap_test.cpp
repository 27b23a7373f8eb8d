// CHAP response computation (RFC 1994 §4.1, RFC 7143 §12.1.3):
// CHAP_R = MD5(CHAP_I as one byte || secret || CHAP_C). Expected values
// computed independently (Python hashlib.md5).
#include <gtest/gtest.h>

#include "rbio/initiator/chap.hpp"
#include "rbio/initiator/error.hpp"

using namespace rbio::initiator;

namespace {
std::span<const uint8_t> bytes_of(const std::string& s) {
    return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}
}  // namespace

TEST(InitiatorChap, Md5ResponseVectors) {
    std::vector<uint8_t> challenge(16);
    for (int i = 0; i < 16; ++i) challenge[i] = uint8_t(i);
    std::string secret = "rbio-secret-1";
    EXPECT_EQ(encode_hex_value(chap_md5_response(0x2a, bytes_of(secret), challenge)),
              "0xa83701debd260d87e2eb67083314c2a7");
    std::string s2 = "secret";
    std::vector<uint8_t> c2 = {1, 2, 3, 4, 5};
    EXPECT_EQ(encode_hex_value(chap_md5_response(0, bytes_of(s2), c2)), "0x2f405eb9c21089ded1f07d717ba4f01c");
}

TEST(InitiatorChap, ChallengeAsTheTargetSendsIt) {
    // The same challenge in hex and in base64 (RFC 7143 §6.1 binary values).
    auto hex = decode_binary_value("0x000102030405060708090a0b0c0d0e0f");
    auto b64 = decode_binary_value("0bAAECAwQFBgcICQoLDA0ODw==");
    EXPECT_EQ(hex, b64);
    ASSERT_EQ(hex.size(), 16u);
    EXPECT_EQ(hex[15], 15);
    std::string secret = "rbio-secret-1";
    EXPECT_EQ(encode_hex_value(chap_md5_response(0x2a, bytes_of(secret), hex)),
              "0xa83701debd260d87e2eb67083314c2a7");
    EXPECT_EQ(decode_binary_value("0xABC"), (std::vector<uint8_t>{0x0a, 0xbc}));  // odd digit count
}

TEST(InitiatorChap, MalformedValuesAreProtocolErrors) {
    for (const char* bad : {"", "0x", "0xzz", "ab", "0q12", "0b@@@@"}) {
        try {
            decode_binary_value(bad);
            ADD_FAILURE() << "accepted '" << bad << "'";
        } catch (const InitiatorError& e) {
            EXPECT_EQ(e.kind(), ErrorKind::Protocol) << bad;
        }
    }
}

TEST(InitiatorChap, MutualChallengeAndCheck) {
    // RFC 7143 §12.1.3: the initiator's challenge to the target; 16 random
    // bytes each time, and only MD5(id || secret || challenge) matches.
    ChapChallenge a = make_chap_challenge(), b = make_chap_challenge();
    ASSERT_EQ(a.challenge.size(), 16u);
    EXPECT_NE(a.challenge, b.challenge);
    std::string secret = "target-secret-2", other = "target-secret-3";
    auto right = chap_md5_response(a.id, bytes_of(secret), a.challenge);
    EXPECT_TRUE(chap_md5_matches(a.id, bytes_of(secret), a.challenge, right));
    EXPECT_FALSE(chap_md5_matches(a.id, bytes_of(other), a.challenge, right));
    EXPECT_FALSE(chap_md5_matches(uint8_t(a.id + 1), bytes_of(secret), a.challenge, right));
    EXPECT_FALSE(chap_md5_matches(a.id, bytes_of(secret), b.challenge, right));
    EXPECT_FALSE(chap_md5_matches(a.id, bytes_of(secret), a.challenge,
                                  std::span<const uint8_t>(right.data(), 15)));  // truncated
}
