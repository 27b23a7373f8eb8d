#pragma once
// SCSI commands over a Session (SPC-4, SBC-3): CDB builders for
// asynchronous use, and synchronous helpers that retry UNIT ATTENTION and
// turn any other failure into ScsiError (InitiatorError(Io)) with the decoded
// sense; VPD page decoders that validate every length from the wire.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "rbio/initiator/error.hpp"
#include "rbio/initiator/session.hpp"

namespace rbio::initiator {

// Fixed (0x70/0x71) and descriptor (0x72/0x73) format sense data.
struct SenseInfo {
    bool valid = false;
    uint8_t key = 0;
    uint8_t asc = 0;
    uint8_t ascq = 0;
    // e.g. "UNIT ATTENTION (asc 0x29 ascq 0x00)"
    std::string describe() const;
};
SenseInfo decode_sense(std::span<const uint8_t> sense);

// Whether a command may change the LU (its data, or its state: reservations,
// mode pages), by its operation code; false only for those known to change
// nothing (reads, VERIFY, SYNCHRONIZE CACHE, PRE-FETCH, inquiries and
// reports). Those a failed multipath path had move to another path at
// once; the others wait for the fence (SessionOptions::fence).
bool may_change_lu(uint8_t opcode);

inline constexpr uint8_t kStatusGood = 0x00;
inline constexpr uint8_t kStatusCheckCondition = 0x02;
inline constexpr uint8_t kSenseUnitAttention = 0x06;

// "GOOD", "GOOD, but with a residual of 2048 of 4096 bytes (underflow)",
// "CHECK CONDITION: MEDIUM ERROR (asc ...)", "iSCSI response 0x01", ...
// buffer_bytes: the command's buffer (0: the residual is not described).
std::string describe(const ScsiOutcome& o, size_t buffer_bytes = 0);

// GOOD, and every byte of a buffer of buffer_bytes moved: what a READ or
// WRITE needs to be a success. A target may answer GOOD with a residual
// (underflow): the rest of a read buffer then holds no data, and the rest
// of a write was never taken.
bool good_and_whole(const ScsiOutcome& o, size_t buffer_bytes);

// A SCSI command that the target completed with a status other than GOOD
// (or did not complete): InitiatorError(Io) with the status and the decoded
// sense, so callers can tell e.g. ILLEGAL REQUEST from MEDIUM ERROR.
class ScsiError : public InitiatorError {
public:
    ScsiError(const std::string& message, const ScsiOutcome& outcome)
        : InitiatorError(ErrorKind::Io, message),
          response_(outcome.response),
          status_(outcome.status),
          sense_(decode_sense(outcome.sense)) {}
    uint8_t response() const { return response_; }
    uint8_t status() const { return status_; }
    const SenseInfo& sense() const { return sense_; }

private:
    uint8_t response_;
    uint8_t status_;
    SenseInfo sense_;
};

inline constexpr uint8_t kSenseIllegalRequest = 0x05;

// ---- CDB builders (the caller sets buffer/done/timeout as needed)
ScsiCommand make_test_unit_ready(uint64_t lun);
ScsiCommand make_inquiry(uint64_t lun, std::span<uint8_t> buffer);          // standard page
ScsiCommand make_read_capacity16(uint64_t lun, std::span<uint8_t> buffer);  // >= 32 bytes
ScsiCommand make_report_luns(std::span<uint8_t> buffer);
ScsiCommand make_read16(uint64_t lun, uint64_t lba, uint32_t blocks, std::span<uint8_t> buffer);
// fua: the target answers only once the data is on stable storage.
ScsiCommand make_write16(uint64_t lun, uint64_t lba, uint32_t blocks, std::span<uint8_t> buffer,
                         bool fua = false);
ScsiCommand make_synchronize_cache10(uint64_t lun);
// INQUIRY with EVPD=1 for `page`; the allocation length is the buffer's size
// (at most 65535 bytes are used).
ScsiCommand make_inquiry_vpd(uint64_t lun, uint8_t page, std::span<uint8_t> buffer);
// READ(10)/WRITE(10): throw std::invalid_argument when lba does not fit 32
// bits or blocks 16 bits.
ScsiCommand make_read10(uint64_t lun, uint64_t lba, uint32_t blocks, std::span<uint8_t> buffer);
ScsiCommand make_write10(uint64_t lun, uint64_t lba, uint32_t blocks, std::span<uint8_t> buffer);
// WRITE SAME(16): `block` (one logical block) is written to `blocks` blocks
// from `lba`; with `unmap` the target may deallocate them instead (SBC-3
// 5.42). blocks == 0 means "to the end of the LU" for the target: refused
// here (std::invalid_argument), as is an empty block.
ScsiCommand make_write_same16(uint64_t lun, uint64_t lba, uint32_t blocks, bool unmap,
                              std::span<uint8_t> block);

// One UNMAP block descriptor (SBC-3 5.28.2).
struct LbaRange {
    uint64_t lba = 0;
    uint32_t blocks = 0;
    bool operator==(const LbaRange&) const = default;
};
// The UNMAP parameter list for `ranges` (8-byte header, 16 bytes per
// descriptor); std::invalid_argument beyond 4095 descriptors (the 16-bit
// parameter list length).
std::vector<uint8_t> unmap_parameter_list(std::span<const LbaRange> ranges);
// UNMAP with `parameters` (from unmap_parameter_list) as its Data-Out.
ScsiCommand make_unmap(uint64_t lun, std::span<uint8_t> parameters);

// ---- VPD pages (SPC-4 7.8, SBC-3 6.6). Each decoder checks the page code
// and that the page length fits in `page` (the bytes received), and throws
// InitiatorError(Protocol) naming the page and the lengths otherwise.

// The page's payload (after the 4-byte header), validated as above.
std::span<const uint8_t> vpd_payload(uint8_t page_code, std::span<const uint8_t> page);

// 00h: the page codes the LU supports.
std::vector<uint8_t> decode_supported_vpd_pages(std::span<const uint8_t> page);
// 80h: the product serial number (trailing blanks removed).
std::string decode_unit_serial_number(std::span<const uint8_t> page);

// 83h: one designation descriptor.
struct Designator {
    uint8_t protocol_id = 0;  // valid when piv
    uint8_t code_set = 0;     // 1 binary, 2 ASCII, 3 UTF-8
    bool piv = false;
    uint8_t association = 0;  // 0 LU, 1 target port, 2 target device
    uint8_t type = 0;         // 1 T10 vendor ID, 2 EUI-64, 3 NAA, 8 SCSI name string, ...
    std::vector<uint8_t> value;
    // "NAA (logical unit): 0x60000000...", "T10 vendor ID (logical unit): IET ..."
    std::string to_string() const;
};
std::vector<Designator> decode_device_identification(std::span<const uint8_t> page);

// The target port group of the port a 83h page came through: its target
// port group designator (association target port, type 5), if any.
std::optional<uint16_t> target_port_group(std::span<const Designator> designators);
// The logical unit's own designators (association 0), to tell whether two
// paths reach the same LU.
std::vector<Designator> lu_designators(std::span<const Designator> designators);
bool operator==(const Designator& a, const Designator& b);

// ---- ALUA (SPC-4 5.16, 6.36): REPORT TARGET PORT GROUPS

enum class AluaState : uint8_t {
    ActiveOptimized = 0x0,
    ActiveNonOptimized = 0x1,
    Standby = 0x2,
    Unavailable = 0x3,
    LbaDependent = 0x4,
    Offline = 0xe,
    Transitioning = 0xf,
};
// "active/optimized", "standby", ...; "state 0x5" for reserved values.
std::string to_string(AluaState s);
// Whether a port in this state serves READ and WRITE.
inline bool serves_io(AluaState s) {
    return s == AluaState::ActiveOptimized || s == AluaState::ActiveNonOptimized;
}

struct TargetPortGroup {
    uint16_t id = 0;
    AluaState state = AluaState::Unavailable;
    bool preferred = false;       // PREF
    uint8_t supported = 0;        // T_SUP..AO_SUP bits (byte 1)
    uint8_t status = 0;           // STATUS CODE: 0 none, 1 set by SET TPG, 2 implicit change
    std::vector<uint16_t> ports;  // relative target port identifiers
};
struct TargetPortGroups {
    std::vector<TargetPortGroup> groups;
    // Extended header only (0 otherwise): seconds an implicit transition may take.
    uint8_t implicit_transition_time = 0;
    const TargetPortGroup* find(uint16_t id) const;
};
// MAINTENANCE IN / REPORT TARGET PORT GROUPS (A3h/0Ah), 12-byte CDB; the
// allocation length is the buffer's size. `extended`: PARAMETER DATA FORMAT
// 001b (the 8-byte extended header), else 000b (length only).
ScsiCommand make_report_target_port_groups(uint64_t lun, std::span<uint8_t> buffer, bool extended = false);
// Decodes `data` (the bytes received) in the format asked for. Throws
// InitiatorError(Protocol) naming the offset when a descriptor does not fit
// the returned length or the bytes received; descriptors the allocation
// length cut off (return data length beyond `data`) are left out.
TargetPortGroups decode_report_target_port_groups(std::span<const uint8_t> data, bool extended = false);

// B0h (SBC-3 6.6.4). Zero means "not reported" for the lengths; a page too
// short to hold a field (older targets send 0Ch bytes) leaves it zero.
struct BlockLimits {
    bool wsnz = false;                          // WRITE SAME with 0 blocks not supported
    uint8_t max_compare_and_write_length = 0;   // blocks
    uint16_t optimal_transfer_granularity = 0;  // blocks
    uint32_t max_transfer_length = 0;           // blocks per READ/WRITE
    uint32_t optimal_transfer_length = 0;
    uint32_t max_prefetch_length = 0;
    uint32_t max_unmap_lba_count = 0;         // per UNMAP command; 0: UNMAP not supported
    uint32_t max_unmap_descriptor_count = 0;  // per UNMAP command; 0: UNMAP not supported
    uint32_t optimal_unmap_granularity = 0;   // blocks
    bool unmap_granularity_alignment_valid = false;
    uint32_t unmap_granularity_alignment = 0;  // first LBA of an optimal unmap unit
    uint64_t max_write_same_length = 0;        // blocks per WRITE SAME; 0: not reported
    bool unmap_supported() const { return max_unmap_lba_count != 0 && max_unmap_descriptor_count != 0; }
};
BlockLimits decode_block_limits(std::span<const uint8_t> page);

// B2h (SBC-3 6.6.5).
struct LogicalBlockProvisioning {
    uint8_t threshold_exponent = 0;
    bool lbpu = false;              // UNMAP supported
    bool lbpws = false;             // WRITE SAME(16) with UNMAP supported
    bool lbpws10 = false;           // WRITE SAME(10) with UNMAP supported
    uint8_t lbprz = 0;              // nonzero: unmapped blocks read as zeros
    bool anc_sup = false;           // ANCHOR supported
    bool dp = false;                // a provisioning group descriptor follows
    uint8_t provisioning_type = 0;  // 0 full, 1 resource, 2 thin
};
LogicalBlockProvisioning decode_logical_block_provisioning(std::span<const uint8_t> page);

// UNMAP commands for [lba, lba + blocks): each at most
// max_unmap_descriptor_count descriptors (and 4095) and
// max_unmap_lba_count blocks (0xffffffff: no limit). Throws
// std::invalid_argument when the limits say UNMAP is not supported.
std::vector<std::vector<LbaRange>> plan_unmap(uint64_t lba, uint64_t blocks, const BlockLimits& limits);

// ---- synchronous helpers

// Executes the command; UNIT ATTENTION is retried (up to `retries` times),
// any other failure throws InitiatorError(Io) naming `what` and the sense.
ScsiOutcome execute_checked(IoSession& s, const ScsiCommand& command, const char* what, int retries = 5);

struct InquiryData {
    uint8_t peripheral_type = 0;
    std::string vendor, product, revision;
};
struct Capacity {
    uint64_t blocks = 0;  // number of logical blocks
    uint32_t block_size = 0;
    uint64_t bytes() const { return blocks * block_size; }
};

void test_unit_ready(IoSession& s, uint64_t lun);
InquiryData inquiry(IoSession& s, uint64_t lun);
Capacity read_capacity16(IoSession& s, uint64_t lun);
std::vector<uint64_t> report_luns(IoSession& s);
void read16(IoSession& s, uint64_t lun, uint64_t lba, uint32_t block_size, std::span<uint8_t> buffer);
void write16(IoSession& s, uint64_t lun, uint64_t lba, uint32_t block_size, std::span<uint8_t> buffer);
void synchronize_cache10(IoSession& s, uint64_t lun);
void read10(IoSession& s, uint64_t lun, uint64_t lba, uint32_t block_size, std::span<uint8_t> buffer);
void write10(IoSession& s, uint64_t lun, uint64_t lba, uint32_t block_size, std::span<uint8_t> buffer);

// The VPD page (header included), fetched whole (re-asked with a larger
// allocation length when longer than the first answer), validated as by
// vpd_payload.
std::vector<uint8_t> inquiry_vpd(IoSession& s, uint64_t lun, uint8_t page);
std::vector<uint8_t> supported_vpd_pages(IoSession& s, uint64_t lun);
std::string unit_serial_number(IoSession& s, uint64_t lun);
std::vector<Designator> device_identification(IoSession& s, uint64_t lun);
BlockLimits block_limits(IoSession& s, uint64_t lun);
LogicalBlockProvisioning logical_block_provisioning(IoSession& s, uint64_t lun);
// REPORT TARGET PORT GROUPS (length-only format), fetched whole.
TargetPortGroups report_target_port_groups(IoSession& s, uint64_t lun);

// Deallocates [lba, lba + blocks) with as many UNMAP commands as `limits`
// (from block_limits) require; returns how many were sent. Throws
// InitiatorError(Io) when the limits say UNMAP is not supported, ScsiError
// when the target refuses a command.
size_t unmap(IoSession& s, uint64_t lun, uint64_t lba, uint64_t blocks, const BlockLimits& limits);
// WRITE SAME(16) of `block` (exactly one logical block) over [lba, lba +
// blocks), split at limits.max_write_same_length (when reported) and at
// 2^32-1 blocks; with `unmap` the target may deallocate instead. Returns the
// number of commands.
size_t write_same16(IoSession& s, uint64_t lun, uint64_t lba, uint64_t blocks, std::span<uint8_t> block,
                    bool unmap, const BlockLimits& limits);

}  // namespace rbio::initiator
