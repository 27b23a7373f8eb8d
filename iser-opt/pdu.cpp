#include "rbio/iser/pdu.hpp"

#include <array>
#include <cstdio>
#include <cstring>
#include <string>

#include "rbio/iser/crc32c.hpp"

namespace rbio::iser {
namespace {

template <class... Args>
PduError make_error(PduErrc code, const char* fmt, Args... args) {
    char text[192];
    std::snprintf(text, sizeof text, fmt, args...);
    return PduError{code, text};
}

}  // namespace

const char* to_string(PduErrc code) {
    switch (code) {
        case PduErrc::UnknownOpcode: return "unknown-opcode";
        case PduErrc::DataSegmentTooLong: return "data-segment-too-long";
        case PduErrc::AhsTooLong: return "ahs-too-long";
        case PduErrc::MalformedAhs: return "malformed-ahs";
        case PduErrc::HeaderDigestMismatch: return "header-digest-mismatch";
        case PduErrc::DataDigestMismatch: return "data-digest-mismatch";
    }
    return "unknown-error";
}

const char* to_string(PduSender s) { return s == PduSender::Initiator ? "initiator" : "target"; }

namespace {

// Names of the opcodes RFC 7143 §11.1.1 defines; nullptr for the rest.
constexpr std::array<const char*, 64> make_opcode_names() {
    std::array<const char*, 64> n{};
    n[0x00] = "NOP-Out";
    n[0x01] = "SCSI-Command";
    n[0x02] = "Task-Management-Request";
    n[0x03] = "Login-Request";
    n[0x04] = "Text-Request";
    n[0x05] = "Data-Out";
    n[0x06] = "Logout-Request";
    n[0x10] = "SNACK-Request";
    n[0x1c] = n[0x1d] = n[0x1e] = "vendor-specific-initiator";
    n[0x20] = "NOP-In";
    n[0x21] = "SCSI-Response";
    n[0x22] = "Task-Management-Response";
    n[0x23] = "Login-Response";
    n[0x24] = "Text-Response";
    n[0x25] = "Data-In";
    n[0x26] = "Logout-Response";
    n[0x31] = "R2T";
    n[0x32] = "Async-Message";
    n[0x3c] = n[0x3d] = n[0x3e] = "vendor-specific-target";
    n[0x3f] = "Reject";
    return n;
}

constexpr std::array<const char*, 64> kOpcodeNames = make_opcode_names();

}  // namespace

const char* opcode_name(uint8_t opcode) {
    const char* n = opcode < 64 ? kOpcodeNames[opcode] : nullptr;
    return n ? n : "unknown";
}

bool is_known_opcode(uint8_t opcode, PduSender from) {
    if (opcode >= 64 || kOpcodeNames[opcode] == nullptr) return false;
    return (opcode < 0x20) == (from == PduSender::Initiator);
}

Bhs& Bhs::set_cdb(std::span<const uint8_t> cdb) {
    std::memset(bytes_.data() + 32, 0, 16);
    std::memcpy(bytes_.data() + 32, cdb.data(), cdb.size() < 16 ? cdb.size() : 16);
    return *this;
}

PduLayout layout_of(BhsView bhs, bool header_digest, bool data_digest) {
    return PduLayout{uint32_t(bhs.ahs_length()), bhs.data_segment_length(), header_digest, data_digest};
}

namespace {

uint32_t max_ahs_of(const PduLimits& limits) {
    return limits.max_ahs_length < kMaxAhsLength ? limits.max_ahs_length : uint32_t(kMaxAhsLength);
}

}  // namespace

std::optional<PduErrc> bhs_error(BhsView bhs, const PduLimits& limits, PduSender from) noexcept {
    if (!is_known_opcode(bhs.opcode_byte(), from)) return PduErrc::UnknownOpcode;
    if (bhs.ahs_length() > max_ahs_of(limits)) return PduErrc::AhsTooLong;
    if (bhs.data_segment_length() > limits.max_recv_data_segment_length) return PduErrc::DataSegmentTooLong;
    return std::nullopt;
}

PduError bhs_refusal(BhsView bhs, const PduLimits& limits, PduSender from, PduErrc code) {
    switch (code) {
        case PduErrc::UnknownOpcode:
            return make_error(code, "unknown opcode 0x%02x from %s", unsigned(bhs.opcode_byte()),
                              to_string(from));
        case PduErrc::AhsTooLong:
            return make_error(code, "total AHS length %zu exceeds limit %u (%s, ITT 0x%08x)",
                              bhs.ahs_length(), max_ahs_of(limits), opcode_name(bhs.opcode_byte()),
                              bhs.itt());
        default:
            return make_error(code,
                              "data segment length %u exceeds MaxRecvDataSegmentLength %u "
                              "(%s, ITT 0x%08x)",
                              bhs.data_segment_length(), limits.max_recv_data_segment_length,
                              opcode_name(bhs.opcode_byte()), bhs.itt());
    }
}

std::optional<Ahs> AhsReader::next() {
    if (malformed_ || off_ >= all_.size()) return std::nullopt;
    size_t left = all_.size() - off_;
    // A 4-byte word is the least an AHS can take; TotalAHSLength counts words,
    // so a remainder below 4 cannot happen for a well-formed BHS.
    if (left < 4) {
        malformed_ = true;
        return std::nullopt;
    }
    const uint8_t* p = all_.data() + off_;
    size_t body = size_t(p[0]) << 8 | p[1];
    size_t occupied = pad4(3 + body);
    if (occupied > left) {
        malformed_ = true;
        return std::nullopt;
    }
    Ahs a{p[2], std::span<const uint8_t>(p + 3, body)};
    off_ += occupied;
    return a;
}

std::optional<PduError> validate_ahs(std::span<const uint8_t> ahs) {
    AhsReader r(ahs);
    while (r.next()) {
    }
    if (!r.malformed()) return std::nullopt;
    size_t claimed = ahs.size() - r.offset() >= 2 ? size_t(ahs[r.offset()]) << 8 | ahs[r.offset() + 1] : 0;
    return make_error(PduErrc::MalformedAhs, "AHS at offset %zu claims %zu bytes, beyond TotalAHSLength %zu",
                      r.offset(), claimed, ahs.size());
}

uint32_t load_digest(const uint8_t* p) {
    return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

void store_digest(uint8_t* p, uint32_t crc) {
    p[0] = uint8_t(crc);
    p[1] = uint8_t(crc >> 8);
    p[2] = uint8_t(crc >> 16);
    p[3] = uint8_t(crc >> 24);
}

uint32_t header_digest_of(std::span<const uint8_t> bhs_and_ahs) { return crc32c(bhs_and_ahs); }

uint32_t data_digest_of(std::span<const uint8_t> data, std::span<const uint8_t> padding) {
    return crc32c_extend(crc32c(data), padding.data(), padding.size());
}

size_t encoded_size(std::span<const uint8_t> header, size_t data_length, bool header_digest,
                    bool data_digest) {
    return header.size() + (header_digest ? kDigestLength : 0) + pad4(data_length) +
           (data_digest && data_length > 0 ? kDigestLength : 0);
}

size_t encode_pdu(std::span<uint8_t> out, std::span<const uint8_t> header, std::span<const uint8_t> data,
                  bool header_digest, bool data_digest) {
    size_t total = encoded_size(header, data.size(), header_digest, data_digest);
    if (out.size() < total) return 0;
    uint8_t* p = out.data();
    std::memcpy(p, header.data(), header.size());
    p += header.size();
    if (header_digest) {
        store_digest(p, header_digest_of(header));
        p += kDigestLength;
    }
    if (!data.empty()) {
        std::memcpy(p, data.data(), data.size());
        size_t pad = pad4(data.size()) - data.size();
        std::memset(p + data.size(), 0, pad);
        uint8_t* digest_at = p + data.size() + pad;
        if (data_digest)
            store_digest(digest_at, data_digest_of(data, std::span<const uint8_t>(kZeroPad).first(pad)));
    }
    return total;
}

}  // namespace rbio::iser
