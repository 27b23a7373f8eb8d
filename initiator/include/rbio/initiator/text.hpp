#pragma once
// iSCSI text key=value pairs (RFC 7143 §6.1): the data segment of Login and
// Text PDUs is a sequence of "key=value" strings, each ended by a NUL byte.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rbio::initiator {

using KeyValues = std::vector<std::pair<std::string, std::string>>;

// Encodes pairs as "k=v\0k=v\0".
std::vector<uint8_t> encode_text(const KeyValues& pairs);

// Parses a whole data segment. Throws InitiatorError(Protocol) on a pair
// without '=', an empty or over-long key (63 bytes, RFC 7143 §6.1), a value
// beyond 8192 bytes, a missing final NUL, or a byte outside printable ASCII
// in a key. Trailing NUL padding bytes are accepted.
KeyValues parse_text(std::span<const uint8_t> data);

// The value of `key`, if present (the first occurrence).
std::optional<std::string> find_key(const KeyValues& pairs, std::string_view key);

// A value the target sent, for a message: control bytes (a terminal's
// escape sequences) become '?', and past `max` bytes it is cut with "...".
std::string printable(std::string_view value, size_t max = 64);

}  // namespace rbio::initiator
