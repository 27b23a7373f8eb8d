#include "rbio/initiator/scsi.hpp"

#include <cstdio>

#include "rbio/initiator/error.hpp"
#include "rbio/initiator/log.hpp"

namespace rbio::initiator {
namespace {

const char* sense_key_name(uint8_t key) {
    static constexpr const char* kNames[16] = {
        "NO SENSE", "RECOVERED ERROR", "NOT READY", "MEDIUM ERROR", "HARDWARE ERROR",
        "ILLEGAL REQUEST", "UNIT ATTENTION", "DATA PROTECT", "BLANK CHECK", "VENDOR SPECIFIC",
        "COPY ABORTED", "ABORTED COMMAND", "RESERVED", "VOLUME OVERFLOW", "MISCOMPARE",
        "COMPLETED"};
    return kNames[key & 15];
}

void put_be(uint8_t* p, uint64_t v, int bytes) {
    for (int i = bytes - 1; i >= 0; --i, v >>= 8) p[i] = uint8_t(v);
}

uint64_t get_be(const uint8_t* p, int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v = v << 8 | p[i];
    return v;
}

ScsiCommand command(uint64_t lun, std::initializer_list<uint8_t> head, uint8_t length,
                    DataDirection dir, std::span<uint8_t> buffer) {
    ScsiCommand c;
    c.lun = lun;
    std::copy(head.begin(), head.end(), c.cdb.begin());
    c.cdb_length = length;
    c.direction = buffer.empty() ? DataDirection::None : dir;
    c.buffer = buffer;
    return c;
}

std::string trimmed(const uint8_t* p, size_t n) {
    std::string s(reinterpret_cast<const char*>(p), n);
    while (!s.empty() && (s.back() == ' ' || s.back() == 0)) s.pop_back();
    return s;
}

}  // namespace

std::string SenseInfo::describe() const {
    if (!valid) return "no valid sense data";
    char b[96];
    std::snprintf(b, sizeof b, "%s (asc 0x%02x ascq 0x%02x)", sense_key_name(key), asc, ascq);
    return b;
}

SenseInfo decode_sense(std::span<const uint8_t> s) {
    SenseInfo info;
    if (s.empty()) return info;
    uint8_t code = s[0] & 0x7f;
    if ((code == 0x70 || code == 0x71) && s.size() >= 3) {
        info.valid = true;
        info.key = s[2] & 0x0f;
        if (s.size() >= 14) {
            info.asc = s[12];
            info.ascq = s[13];
        }
    } else if ((code == 0x72 || code == 0x73) && s.size() >= 4) {
        info.valid = true;
        info.key = s[1] & 0x0f;
        info.asc = s[2];
        info.ascq = s[3];
    }
    return info;
}

std::string describe(const ScsiOutcome& o) {
    char b[64];
    if (o.response != 0) {
        std::snprintf(b, sizeof b, "iSCSI response 0x%02x (not completed at the target)", o.response);
        return b;
    }
    if (o.status == kStatusGood) return "GOOD";
    if (o.status == kStatusCheckCondition)
        return "CHECK CONDITION: " + decode_sense(o.sense).describe();
    std::snprintf(b, sizeof b, "SCSI status 0x%02x", o.status);
    return b;
}

ScsiCommand make_test_unit_ready(uint64_t lun) { return command(lun, {0x00}, 6, DataDirection::None, {}); }

ScsiCommand make_inquiry(uint64_t lun, std::span<uint8_t> buffer) {
    size_t n = std::min<size_t>(buffer.size(), 0xffff);
    return command(lun, {0x12, 0, 0, uint8_t(n >> 8), uint8_t(n)}, 6, DataDirection::Read,
                   buffer.first(n));
}

ScsiCommand make_read_capacity16(uint64_t lun, std::span<uint8_t> buffer) {
    ScsiCommand c = command(lun, {0x9e, 0x10}, 16, DataDirection::Read, buffer);
    put_be(c.cdb.data() + 10, buffer.size(), 4);
    return c;
}

ScsiCommand make_report_luns(std::span<uint8_t> buffer) {
    ScsiCommand c = command(0, {0xa0}, 12, DataDirection::Read, buffer);
    put_be(c.cdb.data() + 6, buffer.size(), 4);
    return c;
}

ScsiCommand make_read16(uint64_t lun, uint64_t lba, uint32_t blocks, std::span<uint8_t> buffer) {
    ScsiCommand c = command(lun, {0x88}, 16, DataDirection::Read, buffer);
    put_be(c.cdb.data() + 2, lba, 8);
    put_be(c.cdb.data() + 10, blocks, 4);
    return c;
}

ScsiCommand make_write16(uint64_t lun, uint64_t lba, uint32_t blocks, std::span<uint8_t> buffer) {
    ScsiCommand c = command(lun, {0x8a}, 16, DataDirection::Write, buffer);
    put_be(c.cdb.data() + 2, lba, 8);
    put_be(c.cdb.data() + 10, blocks, 4);
    return c;
}

ScsiCommand make_synchronize_cache10(uint64_t lun) {
    return command(lun, {0x35}, 10, DataDirection::None, {});
}

ScsiOutcome execute_checked(Session& s, const ScsiCommand& cmd, const char* what, int retries) {
    for (int attempt = 0;; ++attempt) {
        ScsiOutcome o = s.execute(cmd);
        if (o.good()) return o;
        SenseInfo sense = decode_sense(o.sense);
        if (o.response == 0 && o.status == kStatusCheckCondition && sense.valid &&
            sense.key == kSenseUnitAttention && attempt < retries) {
            RBIO_LOG(Info, what << ": " << sense.describe() << "; retrying");
            continue;
        }
        fail(ErrorKind::Io, std::string(what) + " (LUN " + std::to_string(cmd.lun) + ") failed: " +
                                describe(o));
    }
}

void test_unit_ready(Session& s, uint64_t lun) {
    execute_checked(s, make_test_unit_ready(lun), "TEST UNIT READY");
}

InquiryData inquiry(Session& s, uint64_t lun) {
    std::vector<uint8_t> buf(96);
    ScsiOutcome o = execute_checked(s, make_inquiry(lun, buf), "INQUIRY");
    if (o.bytes_transferred < 36)
        fail(ErrorKind::Io, "INQUIRY returned " + std::to_string(o.bytes_transferred) + " bytes");
    InquiryData d;
    d.peripheral_type = buf[0] & 0x1f;
    d.vendor = trimmed(&buf[8], 8);
    d.product = trimmed(&buf[16], 16);
    d.revision = trimmed(&buf[32], 4);
    return d;
}

Capacity read_capacity16(Session& s, uint64_t lun) {
    std::vector<uint8_t> buf(32);
    ScsiOutcome o = execute_checked(s, make_read_capacity16(lun, buf), "READ CAPACITY(16)");
    if (o.bytes_transferred < 12)
        fail(ErrorKind::Io, "READ CAPACITY(16) returned " + std::to_string(o.bytes_transferred) + " bytes");
    Capacity c;
    c.blocks = get_be(buf.data(), 8) + 1;
    c.block_size = uint32_t(get_be(buf.data() + 8, 4));
    if (c.block_size == 0 || c.block_size > (1u << 20))
        fail(ErrorKind::Io, "READ CAPACITY(16): block size " + std::to_string(c.block_size));
    return c;
}

std::vector<uint64_t> report_luns(Session& s) {
    std::vector<uint8_t> buf(16 + 8 * 256);
    ScsiOutcome o = execute_checked(s, make_report_luns(buf), "REPORT LUNS");
    uint64_t list_len = std::min<uint64_t>(get_be(buf.data(), 4), o.bytes_transferred - std::min<uint32_t>(8, o.bytes_transferred));
    std::vector<uint64_t> luns;
    for (size_t off = 8; off + 8 <= 8 + list_len; off += 8) {
        uint8_t method = buf[off] >> 6;
        if (method == 0) luns.push_back(buf[off + 1]);
        else if (method == 1) luns.push_back(uint64_t(buf[off] & 0x3f) << 8 | buf[off + 1]);
    }
    return luns;
}

void read16(Session& s, uint64_t lun, uint64_t lba, uint32_t block_size, std::span<uint8_t> buffer) {
    execute_checked(s, make_read16(lun, lba, uint32_t(buffer.size() / block_size), buffer), "READ(16)");
}

void write16(Session& s, uint64_t lun, uint64_t lba, uint32_t block_size, std::span<uint8_t> buffer) {
    execute_checked(s, make_write16(lun, lba, uint32_t(buffer.size() / block_size), buffer), "WRITE(16)");
}

void synchronize_cache10(Session& s, uint64_t lun) {
    execute_checked(s, make_synchronize_cache10(lun), "SYNCHRONIZE CACHE(10)");
}

}  // namespace rbio::initiator
