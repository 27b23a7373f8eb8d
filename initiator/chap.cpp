#include "rbio/initiator/chap.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <memory>

#include "rbio/initiator/error.hpp"
#include "rbio/initiator/text.hpp"

namespace rbio::initiator {

std::array<uint8_t, 16> chap_md5_response(uint8_t id, std::span<const uint8_t> secret,
                                          std::span<const uint8_t> challenge) {
    std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
    std::array<uint8_t, 16> out{};
    unsigned int len = 0;
    if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_md5(), nullptr) != 1 ||
        EVP_DigestUpdate(ctx.get(), &id, 1) != 1 ||
        EVP_DigestUpdate(ctx.get(), secret.data(), secret.size()) != 1 ||
        EVP_DigestUpdate(ctx.get(), challenge.data(), challenge.size()) != 1 ||
        EVP_DigestFinal_ex(ctx.get(), out.data(), &len) != 1 || len != out.size())
        fail(ErrorKind::AuthFailure, "CHAP: MD5 is not available from OpenSSL's libcrypto");
    return out;
}

ChapChallenge make_chap_challenge() {
    ChapChallenge c;
    c.challenge.resize(16);
    uint8_t id = 0;
    if (RAND_bytes(&id, 1) != 1 || RAND_bytes(c.challenge.data(), int(c.challenge.size())) != 1)
        fail(ErrorKind::AuthFailure, "CHAP: no random bytes from OpenSSL for the challenge to the target");
    c.id = id;
    return c;
}

bool chap_md5_matches(uint8_t id, std::span<const uint8_t> secret, std::span<const uint8_t> challenge,
                      std::span<const uint8_t> response) {
    auto want = chap_md5_response(id, secret, challenge);
    return response.size() == want.size() && CRYPTO_memcmp(want.data(), response.data(), want.size()) == 0;
}

namespace {

int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

int base64_digit(char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

}  // namespace

std::vector<uint8_t> decode_binary_value(std::string_view text) {
    auto bad = [&](const char* why) {
        fail(ErrorKind::Protocol, std::string("binary value '") + printable(text, 40) + "': " + why);
    };
    if (text.size() < 3 || text[0] != '0') bad("no 0x or 0b prefix, or empty");
    std::string_view body = text.substr(2);
    std::vector<uint8_t> out;
    if (text[1] == 'x' || text[1] == 'X') {
        // An odd number of digits has an implied leading zero.
        size_t i = 0;
        if (body.size() % 2) {
            int d = hex_digit(body[0]);
            if (d < 0) bad("not a hex digit");
            out.push_back(uint8_t(d));
            i = 1;
        }
        for (; i < body.size(); i += 2) {
            int hi = hex_digit(body[i]), lo = hex_digit(body[i + 1]);
            if (hi < 0 || lo < 0) bad("not a hex digit");
            out.push_back(uint8_t(hi << 4 | lo));
        }
    } else if (text[1] == 'b' || text[1] == 'B') {
        uint32_t acc = 0;
        int bits = 0;
        size_t pad = 0;
        for (char c : body) {
            if (c == '=') {
                ++pad;
                continue;
            }
            if (pad) bad("base64 data after '='");
            int d = base64_digit(c);
            if (d < 0) bad("not a base64 digit");
            acc = acc << 6 | uint32_t(d);
            bits += 6;
            if (bits >= 8) {
                bits -= 8;
                out.push_back(uint8_t(acc >> bits));
            }
        }
        if (pad > 2) bad("too much base64 padding");
    } else {
        bad("no 0x or 0b prefix");
    }
    if (out.empty()) bad("empty");
    return out;
}

std::string encode_hex_value(std::span<const uint8_t> bytes) {
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string s = "0x";
    for (uint8_t b : bytes) {
        s.push_back(kDigits[b >> 4]);
        s.push_back(kDigits[b & 15]);
    }
    return s;
}

}  // namespace rbio::initiator
