#include "rbio/initiator/text.hpp"

#include "rbio/initiator/error.hpp"

namespace rbio::initiator {

const char* to_string(ErrorKind kind) {
    switch (kind) {
        case ErrorKind::Unreachable: return "unreachable";
        case ErrorKind::LoginRefused: return "login-refused";
        case ErrorKind::AuthFailure: return "auth-failure";
        case ErrorKind::UnknownTarget: return "unknown-target";
        case ErrorKind::Io: return "io-error";
        case ErrorKind::Timeout: return "timeout";
        case ErrorKind::Protocol: return "protocol-error";
        case ErrorKind::ConnectionLost: return "connection-lost";
    }
    return "unknown";
}

std::vector<uint8_t> encode_text(const KeyValues& pairs) {
    std::vector<uint8_t> out;
    for (const auto& [k, v] : pairs) {
        out.insert(out.end(), k.begin(), k.end());
        out.push_back('=');
        out.insert(out.end(), v.begin(), v.end());
        out.push_back(0);
    }
    return out;
}

KeyValues parse_text(std::span<const uint8_t> data) {
    constexpr size_t kMaxKey = 63;
    constexpr size_t kMaxValue = 8192;
    KeyValues pairs;
    size_t i = 0;
    while (i < data.size()) {
        if (data[i] == 0) {  // padding or an empty string between pairs
            ++i;
            continue;
        }
        size_t end = i;
        while (end < data.size() && data[end] != 0) ++end;
        if (end == data.size())
            fail(ErrorKind::Protocol, "text data: last key=value pair is not NUL-terminated");
        std::string_view pair(reinterpret_cast<const char*>(data.data() + i), end - i);
        size_t eq = pair.find('=');
        if (eq == std::string_view::npos)
            fail(ErrorKind::Protocol, "text data: pair without '=' at byte " + std::to_string(i));
        std::string_view key = pair.substr(0, eq);
        std::string_view value = pair.substr(eq + 1);
        if (key.empty() || key.size() > kMaxKey)
            fail(ErrorKind::Protocol,
                 "text data: key of " + std::to_string(key.size()) + " bytes at byte " + std::to_string(i));
        for (char c : key)
            if (c <= ' ' || c > '~')
                fail(ErrorKind::Protocol, "text data: invalid byte in key at byte " + std::to_string(i));
        if (value.size() > kMaxValue)
            fail(ErrorKind::Protocol, "text data: value of key " + std::string(key) + " is " +
                                          std::to_string(value.size()) + " bytes");
        pairs.emplace_back(std::string(key), std::string(value));
        i = end + 1;
    }
    return pairs;
}

std::optional<std::string> find_key(const KeyValues& pairs, std::string_view key) {
    for (const auto& [k, v] : pairs)
        if (k == key) return v;
    return std::nullopt;
}

std::string printable(std::string_view value, size_t max) {
    std::string out(value.substr(0, max));
    for (char& ch : out)
        if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ch = '?';
    if (value.size() > max) out += "...";
    return out;
}

}  // namespace rbio::initiator
