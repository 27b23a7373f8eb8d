#pragma once
// iSCSI PDU framing (RFC 7143 §11): the 48-byte Basic Header Segment with
// typed field accessors, Additional Header Segments, digests and padding.
//
// On the wire a PDU is
//   BHS (48) | AHS (TotalAHSLength * 4) | HeaderDigest (4, if negotiated)
//   | data (DataSegmentLength) | padding to 4 | DataDigest (4, if negotiated
//   and DataSegmentLength > 0)
// Every length read from the wire is checked by validate_bhs() before it is
// used to size anything.
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "rbio/iser/error.hpp"

namespace rbio::iser {

inline constexpr size_t kBhsLength = 48;
inline constexpr size_t kDigestLength = 4;
// TotalAHSLength is one byte counting 4-byte words.
inline constexpr size_t kMaxAhsLength = 255 * 4;
// DataSegmentLength is 24 bits.
inline constexpr uint32_t kMaxDataSegmentLength = 0xffffff;

constexpr size_t pad4(size_t n) { return (n + 3) & ~size_t{3}; }

// RFC 7143 §11.1.1. Initiator opcodes are below 0x20, target ones above.
enum class Opcode : uint8_t {
    NopOut = 0x00,
    ScsiCommand = 0x01,
    TaskMgmtRequest = 0x02,
    LoginRequest = 0x03,
    TextRequest = 0x04,
    DataOut = 0x05,
    LogoutRequest = 0x06,
    SnackRequest = 0x10,
    NopIn = 0x20,
    ScsiResponse = 0x21,
    TaskMgmtResponse = 0x22,
    LoginResponse = 0x23,
    TextResponse = 0x24,
    DataIn = 0x25,
    LogoutResponse = 0x26,
    R2t = 0x31,
    AsyncMessage = 0x32,
    Reject = 0x3f,
};

// Which end sent a PDU; the opcodes each may send differ.
enum class PduSender : uint8_t { Initiator, Target };

const char* to_string(PduSender s);
// Name for logs, e.g. "SCSI-Command"; "unknown" for undefined codes.
const char* opcode_name(uint8_t opcode);
// Defined by RFC 7143 for PDUs from `from` (vendor-specific codes included:
// they are framed like any other PDU and the iSCSI core rejects them).
bool is_known_opcode(uint8_t opcode, PduSender from);

// Read-only typed access to a BHS. Which fields mean what depends on the
// opcode; the accessor names say for which PDUs a field is defined.
class BhsView {
public:
    explicit BhsView(std::span<const uint8_t, kBhsLength> bytes) : b_(bytes.data()) {}
    explicit BhsView(const uint8_t* bytes) : b_(bytes) {}

    std::span<const uint8_t, kBhsLength> bytes() const {
        return std::span<const uint8_t, kBhsLength>(b_, kBhsLength);
    }
    // Low six bits of byte 0; may be a code that Opcode does not name.
    uint8_t opcode_byte() const { return b_[0] & 0x3f; }
    Opcode opcode() const { return Opcode(opcode_byte()); }
    bool immediate() const { return (b_[0] & 0x40) != 0; }
    bool final_bit() const { return (b_[1] & 0x80) != 0; }
    // Byte 1 whole: F plus the opcode-specific flags (R/W/ATTR, C, S, ...).
    uint8_t flags() const { return b_[1]; }
    uint8_t total_ahs_words() const { return b_[4]; }
    size_t ahs_length() const { return size_t(b_[4]) * 4; }
    uint32_t data_segment_length() const {
        return uint32_t(b_[5]) << 16 | uint32_t(b_[6]) << 8 | uint32_t(b_[7]);
    }
    uint64_t lun() const { return be64(8); }
    uint32_t itt() const { return be32(16); }
    // Target Transfer Tag: NOP, Data-Out/In, R2T, Text, Login (continuation).
    uint32_t ttt() const { return be32(20); }
    // SCSI Command only.
    uint32_t expected_data_transfer_length() const { return be32(20); }
    uint32_t cmd_sn() const { return be32(24); }          // initiator PDUs
    uint32_t stat_sn() const { return be32(24); }         // target PDUs
    uint32_t exp_stat_sn() const { return be32(28); }     // initiator PDUs
    uint32_t exp_cmd_sn() const { return be32(28); }      // target PDUs
    uint32_t max_cmd_sn() const { return be32(32); }      // target PDUs
    uint32_t data_sn() const { return be32(36); }         // Data-In/Out; R2TSN in R2T
    uint32_t buffer_offset() const { return be32(40); }   // Data-In/Out, R2T
    uint32_t residual_count() const { return be32(44); }  // SCSI Response, Data-In
    // SCSI Command: the first 16 CDB bytes (longer CDBs continue in an AHS).
    std::span<const uint8_t, 16> cdb() const { return std::span<const uint8_t, 16>(b_ + 32, 16); }

private:
    uint32_t be32(size_t o) const {
        return uint32_t(b_[o]) << 24 | uint32_t(b_[o + 1]) << 16 | uint32_t(b_[o + 2]) << 8 |
               uint32_t(b_[o + 3]);
    }
    uint64_t be64(size_t o) const { return uint64_t(be32(o)) << 32 | be32(o + 4); }
    const uint8_t* b_;
};

// An owned BHS under construction; setters mirror BhsView and chain.
class Bhs {
public:
    Bhs() = default;
    explicit Bhs(Opcode op) { set_opcode(op); }

    BhsView view() const { return BhsView(std::span<const uint8_t, kBhsLength>(bytes_)); }
    std::span<const uint8_t> bytes() const { return bytes_; }
    std::array<uint8_t, kBhsLength>& raw() { return bytes_; }

    Bhs& set_opcode(Opcode op, bool immediate = false) {
        bytes_[0] = uint8_t((uint8_t(op) & 0x3f) | (immediate ? 0x40 : 0));
        return *this;
    }
    Bhs& set_flags(uint8_t flags) {
        bytes_[1] = flags;
        return *this;
    }
    Bhs& set_final(bool f) {
        bytes_[1] = uint8_t(f ? (bytes_[1] | 0x80) : (bytes_[1] & 0x7f));
        return *this;
    }
    Bhs& set_total_ahs_words(uint8_t words) {
        bytes_[4] = words;
        return *this;
    }
    // Only the low 24 bits fit; callers keep lengths within
    // kMaxDataSegmentLength.
    Bhs& set_data_segment_length(uint32_t n) {
        bytes_[5] = uint8_t(n >> 16);
        bytes_[6] = uint8_t(n >> 8);
        bytes_[7] = uint8_t(n);
        return *this;
    }
    Bhs& set_lun(uint64_t lun) {
        put32(8, uint32_t(lun >> 32));
        put32(12, uint32_t(lun));
        return *this;
    }
    Bhs& set_itt(uint32_t v) {
        put32(16, v);
        return *this;
    }
    Bhs& set_ttt(uint32_t v) {
        put32(20, v);
        return *this;
    }
    Bhs& set_expected_data_transfer_length(uint32_t v) {
        put32(20, v);
        return *this;
    }
    Bhs& set_cmd_sn(uint32_t v) {
        put32(24, v);
        return *this;
    }
    Bhs& set_stat_sn(uint32_t v) {
        put32(24, v);
        return *this;
    }
    Bhs& set_exp_stat_sn(uint32_t v) {
        put32(28, v);
        return *this;
    }
    Bhs& set_exp_cmd_sn(uint32_t v) {
        put32(28, v);
        return *this;
    }
    Bhs& set_max_cmd_sn(uint32_t v) {
        put32(32, v);
        return *this;
    }
    Bhs& set_data_sn(uint32_t v) {
        put32(36, v);
        return *this;
    }
    Bhs& set_buffer_offset(uint32_t v) {
        put32(40, v);
        return *this;
    }
    Bhs& set_residual_count(uint32_t v) {
        put32(44, v);
        return *this;
    }
    Bhs& set_cdb(std::span<const uint8_t> cdb);  // at most 16 bytes

private:
    void put32(size_t o, uint32_t v) {
        bytes_[o] = uint8_t(v >> 24);
        bytes_[o + 1] = uint8_t(v >> 16);
        bytes_[o + 2] = uint8_t(v >> 8);
        bytes_[o + 3] = uint8_t(v);
    }
    std::array<uint8_t, kBhsLength> bytes_{};
};

// What the receiving end accepts (negotiated at login, RFC 7143 §13).
struct PduLimits {
    // Our declared MaxRecvDataSegmentLength.
    uint32_t max_recv_data_segment_length = 8192;
    bool header_digest = false;  // HeaderDigest=CRC32C
    bool data_digest = false;    // DataDigest=CRC32C
    // Largest TotalAHSLength in bytes we take (kMaxAhsLength at most).
    uint32_t max_ahs_length = kMaxAhsLength;
};

// Where the parts of one PDU lie, relative to its first byte.
struct PduLayout {
    uint32_t ahs_length = 0;
    uint32_t data_length = 0;  // DataSegmentLength, without padding
    bool header_digest = false;
    bool data_digest = false;

    size_t header_bytes() const { return kBhsLength + ahs_length + (header_digest ? kDigestLength : 0); }
    size_t padding() const { return pad4(data_length) - data_length; }
    // RFC 7143 §11.1: no DataDigest follows an empty data segment.
    size_t data_digest_bytes() const { return data_digest && data_length > 0 ? kDigestLength : 0; }
    // Padding and data digest: what follows the data segment.
    size_t trailer_bytes() const { return padding() + data_digest_bytes(); }
    size_t data_bytes() const { return data_length + trailer_bytes(); }
    size_t total_bytes() const { return header_bytes() + data_bytes(); }
};

PduLayout layout_of(BhsView bhs, bool header_digest, bool data_digest);

// What the BHS alone tells: opcode, AHS and data segment lengths. Nothing
// when the PDU may be read on, else which check failed.
std::optional<PduErrc> bhs_error(BhsView bhs, const PduLimits& limits, PduSender from) noexcept;
// The message for a header bhs_error() refused with `code`.
[[gnu::cold]] PduError bhs_refusal(BhsView bhs, const PduLimits& limits, PduSender from, PduErrc code);

// The same checks with a message. Inline, so that a per-PDU caller pays for
// bhs_error() alone and builds the message only for a header it refuses.
inline std::optional<PduError> validate_bhs(BhsView bhs, const PduLimits& limits, PduSender from) {
    if (const auto code = bhs_error(bhs, limits, from)) [[unlikely]]
        return bhs_refusal(bhs, limits, from, *code);
    return std::nullopt;
}

// RFC 7143 §11.2.2: AHSType values.
enum class AhsType : uint8_t { ExtendedCdb = 1, BidirectionalReadLength = 2 };

struct Ahs {
    uint8_t type = 0;
    // AHSLength bytes from byte 3 of the AHS on (the AHS-specific byte and
    // what follows), without padding.
    std::span<const uint8_t> body;
};

// Walks the AHSs of one PDU. Each occupies pad4(3 + AHSLength) bytes.
class AhsReader {
public:
    explicit AhsReader(std::span<const uint8_t> all) : all_(all) {}
    // The next AHS, or nothing at the end or when the next one does not fit
    // (then malformed() is true).
    std::optional<Ahs> next();
    bool malformed() const { return malformed_; }
    size_t offset() const { return off_; }

private:
    std::span<const uint8_t> all_;
    size_t off_ = 0;
    bool malformed_ = false;
};

// Every AHS in `ahs` ends inside it.
std::optional<PduError> validate_ahs(std::span<const uint8_t> ahs);

// Digests are sent least significant byte first (RFC 3720 B.4 lists the
// CRC of 32 zero bytes, 0x8a9136aa, as "aa 36 91 8a").
uint32_t load_digest(const uint8_t* p);
void store_digest(uint8_t* p, uint32_t crc);

// CRC32C over BHS and AHS.
uint32_t header_digest_of(std::span<const uint8_t> bhs_and_ahs);
// CRC32C over data and its padding bytes (as received: padding is zero only
// by convention).
uint32_t data_digest_of(std::span<const uint8_t> data, std::span<const uint8_t> padding);

// Zero bytes for padding on the send side.
inline constexpr std::array<uint8_t, 4> kZeroPad{};

// Bytes encode_pdu() writes for a header (BHS + AHS) and a data segment.
size_t encoded_size(std::span<const uint8_t> header, size_t data_length, bool header_digest,
                    bool data_digest);
// Writes one complete PDU (digests computed, padding zeroed) to the front of
// `out`; returns its length, or 0 when `out` is too small. The header's
// DataSegmentLength is taken as given: it must equal data.size(). For tests,
// tools and low-rate PDUs (login); the data path uses TxQueue's iovecs.
size_t encode_pdu(std::span<uint8_t> out, std::span<const uint8_t> header, std::span<const uint8_t> data,
                  bool header_digest, bool data_digest);

}  // namespace rbio::iser
