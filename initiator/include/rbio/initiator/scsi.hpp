#pragma once
// SCSI commands over a Session (SPC-4, SBC-3): CDB builders for
// asynchronous use, and synchronous helpers that retry UNIT ATTENTION and
// turn any other failure into InitiatorError(Io) with the decoded sense.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

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

inline constexpr uint8_t kStatusGood = 0x00;
inline constexpr uint8_t kStatusCheckCondition = 0x02;
inline constexpr uint8_t kSenseUnitAttention = 0x06;

// "GOOD", "CHECK CONDITION: MEDIUM ERROR (asc ...)", "iSCSI response 0x01", ...
std::string describe(const ScsiOutcome& o);

// ---- CDB builders (the caller sets buffer/done/timeout as needed)
ScsiCommand make_test_unit_ready(uint64_t lun);
ScsiCommand make_inquiry(uint64_t lun, std::span<uint8_t> buffer);  // standard page
ScsiCommand make_read_capacity16(uint64_t lun, std::span<uint8_t> buffer);  // >= 32 bytes
ScsiCommand make_report_luns(std::span<uint8_t> buffer);
ScsiCommand make_read16(uint64_t lun, uint64_t lba, uint32_t blocks, std::span<uint8_t> buffer);
ScsiCommand make_write16(uint64_t lun, uint64_t lba, uint32_t blocks, std::span<uint8_t> buffer);
ScsiCommand make_synchronize_cache10(uint64_t lun);

// ---- synchronous helpers

// Executes the command; UNIT ATTENTION is retried (up to `retries` times),
// any other failure throws InitiatorError(Io) naming `what` and the sense.
ScsiOutcome execute_checked(Session& s, const ScsiCommand& command, const char* what,
                            int retries = 5);

struct InquiryData {
    uint8_t peripheral_type = 0;
    std::string vendor, product, revision;
};
struct Capacity {
    uint64_t blocks = 0;  // number of logical blocks
    uint32_t block_size = 0;
    uint64_t bytes() const { return blocks * block_size; }
};

void test_unit_ready(Session& s, uint64_t lun);
InquiryData inquiry(Session& s, uint64_t lun);
Capacity read_capacity16(Session& s, uint64_t lun);
std::vector<uint64_t> report_luns(Session& s);
void read16(Session& s, uint64_t lun, uint64_t lba, uint32_t block_size, std::span<uint8_t> buffer);
void write16(Session& s, uint64_t lun, uint64_t lba, uint32_t block_size, std::span<uint8_t> buffer);
void synchronize_cache10(Session& s, uint64_t lun);

}  // namespace rbio::initiator
