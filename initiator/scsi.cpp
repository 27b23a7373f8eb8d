#include "rbio/initiator/scsi.hpp"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "rbio/initiator/error.hpp"
#include "rbio/initiator/log.hpp"

namespace rbio::initiator {
namespace {

const char* sense_key_name(uint8_t key) {
    static constexpr const char* kNames[16] = {
        "NO SENSE",       "RECOVERED ERROR", "NOT READY",      "MEDIUM ERROR",
        "HARDWARE ERROR", "ILLEGAL REQUEST", "UNIT ATTENTION", "DATA PROTECT",
        "BLANK CHECK",    "VENDOR SPECIFIC", "COPY ABORTED",   "ABORTED COMMAND",
        "RESERVED",       "VOLUME OVERFLOW", "MISCOMPARE",     "COMPLETED"};
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

ScsiCommand command(uint64_t lun, std::initializer_list<uint8_t> head, uint8_t length, DataDirection dir,
                    std::span<uint8_t> buffer) {
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

bool may_change_lu(uint8_t opcode) {
    switch (opcode) {
        case 0x00:  // TEST UNIT READY
        case 0x03:  // REQUEST SENSE
        case 0x08:  // READ(6)
        case 0x12:  // INQUIRY
        case 0x1a:  // MODE SENSE(6)
        case 0x1c:  // RECEIVE DIAGNOSTIC RESULTS
        case 0x25:  // READ CAPACITY(10)
        case 0x28:  // READ(10)
        case 0x2f:  // VERIFY(10)
        case 0x34:  // PRE-FETCH(10)
        case 0x35:  // SYNCHRONIZE CACHE(10)
        case 0x37:  // READ DEFECT DATA(10)
        case 0x3c:  // READ BUFFER
        case 0x4d:  // LOG SENSE
        case 0x5a:  // MODE SENSE(10)
        case 0x5e:  // PERSISTENT RESERVE IN
        case 0x84:  // RECEIVE COPY RESULTS
        case 0x88:  // READ(16)
        case 0x8f:  // VERIFY(16)
        case 0x90:  // PRE-FETCH(16)
        case 0x91:  // SYNCHRONIZE CACHE(16)
        case 0x9e:  // SERVICE ACTION IN(16): READ CAPACITY(16), GET LBA STATUS
        case 0xa0:  // REPORT LUNS
        case 0xa3:  // MAINTENANCE IN: REPORT TARGET PORT GROUPS, ...
        case 0xa8:  // READ(12)
        case 0xaf:  // VERIFY(12)
            return false;
        default: return true;
    }
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

bool good_and_whole(const ScsiOutcome& o, size_t buffer_bytes) {
    return o.good() && !o.underflow && !o.overflow && o.bytes_transferred == buffer_bytes;
}

std::string describe(const ScsiOutcome& o, size_t buffer_bytes) {
    char b[96];
    if (o.response != 0) {
        std::snprintf(b, sizeof b, "iSCSI response 0x%02x (not completed at the target)", o.response);
        return b;
    }
    if (o.status == kStatusGood) {
        if (buffer_bytes == 0 || good_and_whole(o, buffer_bytes)) return "GOOD";
        if (o.underflow || o.overflow)
            std::snprintf(b, sizeof b, "GOOD, but with a residual of %u of %zu bytes (%s)", o.residual,
                          buffer_bytes, o.overflow ? "overflow" : "underflow");
        else std::snprintf(b, sizeof b, "GOOD, but %u of %zu bytes moved", o.bytes_transferred, buffer_bytes);
        return b;
    }
    if (o.status == kStatusCheckCondition) return "CHECK CONDITION: " + decode_sense(o.sense).describe();
    std::snprintf(b, sizeof b, "SCSI status 0x%02x", o.status);
    return b;
}

ScsiCommand make_test_unit_ready(uint64_t lun) { return command(lun, {0x00}, 6, DataDirection::None, {}); }

ScsiCommand make_inquiry(uint64_t lun, std::span<uint8_t> buffer) {
    size_t n = std::min<size_t>(buffer.size(), 0xffff);
    return command(lun, {0x12, 0, 0, uint8_t(n >> 8), uint8_t(n)}, 6, DataDirection::Read, buffer.first(n));
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

ScsiCommand make_write16(uint64_t lun, uint64_t lba, uint32_t blocks, std::span<uint8_t> buffer, bool fua) {
    ScsiCommand c = command(lun, {0x8a, uint8_t(fua ? 0x08 : 0)}, 16, DataDirection::Write, buffer);
    put_be(c.cdb.data() + 2, lba, 8);
    put_be(c.cdb.data() + 10, blocks, 4);
    return c;
}

ScsiCommand make_synchronize_cache10(uint64_t lun) {
    return command(lun, {0x35}, 10, DataDirection::None, {});
}

ScsiCommand make_inquiry_vpd(uint64_t lun, uint8_t page, std::span<uint8_t> buffer) {
    size_t n = std::min<size_t>(buffer.size(), 0xffff);
    return command(lun, {0x12, 0x01, page, uint8_t(n >> 8), uint8_t(n)}, 6, DataDirection::Read,
                   buffer.first(n));
}

namespace {
ScsiCommand rw10(uint8_t opcode, DataDirection dir, uint64_t lun, uint64_t lba, uint32_t blocks,
                 std::span<uint8_t> buffer) {
    if (lba > 0xffffffffu || blocks > 0xffff)
        throw std::invalid_argument("READ/WRITE(10): LBA " + std::to_string(lba) + " or " +
                                    std::to_string(blocks) + " blocks out of range");
    ScsiCommand c = command(lun, {opcode}, 10, dir, buffer);
    put_be(c.cdb.data() + 2, lba, 4);
    put_be(c.cdb.data() + 7, blocks, 2);
    return c;
}
}  // namespace

ScsiCommand make_read10(uint64_t lun, uint64_t lba, uint32_t blocks, std::span<uint8_t> buffer) {
    return rw10(0x28, DataDirection::Read, lun, lba, blocks, buffer);
}

ScsiCommand make_write10(uint64_t lun, uint64_t lba, uint32_t blocks, std::span<uint8_t> buffer) {
    return rw10(0x2a, DataDirection::Write, lun, lba, blocks, buffer);
}

ScsiCommand make_write_same16(uint64_t lun, uint64_t lba, uint32_t blocks, bool unmap,
                              std::span<uint8_t> block) {
    if (blocks == 0 || block.empty())
        throw std::invalid_argument("WRITE SAME(16): needs a block count and one block of data");
    ScsiCommand c = command(lun, {0x93, uint8_t(unmap ? 0x08 : 0)}, 16, DataDirection::Write, block);
    put_be(c.cdb.data() + 2, lba, 8);
    put_be(c.cdb.data() + 10, blocks, 4);
    return c;
}

std::vector<uint8_t> unmap_parameter_list(std::span<const LbaRange> ranges) {
    if (ranges.size() > 4095)
        throw std::invalid_argument("UNMAP: " + std::to_string(ranges.size()) +
                                    " block descriptors, at most 4095 fit");
    std::vector<uint8_t> p(8 + 16 * ranges.size());
    put_be(p.data(), p.size() - 2, 2);      // UNMAP DATA LENGTH: what follows it
    put_be(p.data() + 2, p.size() - 8, 2);  // UNMAP BLOCK DESCRIPTOR DATA LENGTH
    uint8_t* d = p.data() + 8;
    for (const LbaRange& r : ranges) {
        put_be(d, r.lba, 8);
        put_be(d + 8, r.blocks, 4);
        d += 16;  // bytes 12..15 reserved
    }
    return p;
}

ScsiCommand make_unmap(uint64_t lun, std::span<uint8_t> parameters) {
    if (parameters.size() > 0xffff)
        throw std::invalid_argument("UNMAP: parameter list of " + std::to_string(parameters.size()) +
                                    " bytes");
    ScsiCommand c = command(lun, {0x42}, 10, DataDirection::Write, parameters);
    put_be(c.cdb.data() + 7, parameters.size(), 2);
    return c;
}

// ---- VPD pages

namespace {
std::string page_name(uint8_t code) {
    char b[16];
    std::snprintf(b, sizeof b, "0x%02x", code);
    return std::string("VPD page ") + b;
}
}  // namespace

std::span<const uint8_t> vpd_payload(uint8_t code, std::span<const uint8_t> page) {
    if (page.size() < 4)
        fail(ErrorKind::Protocol,
             page_name(code) + ": " + std::to_string(page.size()) + " bytes, shorter than its 4-byte header");
    if (page[1] != code) {
        char b[64];
        std::snprintf(b, sizeof b, ": the target answered with page 0x%02x", page[1]);
        fail(ErrorKind::Protocol, page_name(code) + b);
    }
    size_t len = size_t(get_be(page.data() + 2, 2));
    if (4 + len > page.size())
        fail(ErrorKind::Protocol, page_name(code) + ": page length " + std::to_string(len) + " beyond the " +
                                      std::to_string(page.size() - 4) + " bytes received after the header");
    return page.subspan(4, len);
}

std::vector<uint8_t> decode_supported_vpd_pages(std::span<const uint8_t> page) {
    auto p = vpd_payload(0x00, page);
    return {p.begin(), p.end()};
}

std::string decode_unit_serial_number(std::span<const uint8_t> page) {
    auto p = vpd_payload(0x80, page);
    std::string s = trimmed(p.data(), p.size());
    size_t lead = s.find_first_not_of(' ');
    return lead == std::string::npos ? std::string() : s.substr(lead);
}

std::vector<Designator> decode_device_identification(std::span<const uint8_t> page) {
    auto p = vpd_payload(0x83, page);
    std::vector<Designator> out;
    for (size_t off = 0; off < p.size();) {
        if (p.size() - off < 4)
            fail(ErrorKind::Protocol, page_name(0x83) + ": a designation descriptor header cut at byte " +
                                          std::to_string(4 + off));
        size_t len = p[off + 3];
        if (p.size() - off - 4 < len)
            fail(ErrorKind::Protocol, page_name(0x83) + ": designator length " + std::to_string(len) +
                                          " at byte " + std::to_string(4 + off) + " beyond the page");
        Designator d;
        d.protocol_id = p[off] >> 4;
        d.code_set = p[off] & 0x0f;
        d.piv = p[off + 1] & 0x80;
        d.association = (p[off + 1] >> 4) & 0x03;
        d.type = p[off + 1] & 0x0f;
        const auto value = p.subspan(off + 4, len);
        d.value.assign(value.begin(), value.end());
        out.push_back(std::move(d));
        off += 4 + len;
    }
    return out;
}

std::optional<uint16_t> target_port_group(std::span<const Designator> designators) {
    for (const Designator& d : designators)
        if (d.association == 1 && d.type == 5 && d.value.size() >= 4)
            return uint16_t(get_be(d.value.data() + 2, 2));
    return std::nullopt;
}

std::vector<Designator> lu_designators(std::span<const Designator> designators) {
    std::vector<Designator> out;
    for (const Designator& d : designators)
        if (d.association == 0) out.push_back(d);
    return out;
}

bool operator==(const Designator& a, const Designator& b) {
    return a.protocol_id == b.protocol_id && a.code_set == b.code_set && a.piv == b.piv &&
           a.association == b.association && a.type == b.type && a.value == b.value;
}

std::string to_string(AluaState s) {
    switch (s) {
        case AluaState::ActiveOptimized: return "active/optimized";
        case AluaState::ActiveNonOptimized: return "active/non-optimized";
        case AluaState::Standby: return "standby";
        case AluaState::Unavailable: return "unavailable";
        case AluaState::LbaDependent: return "lba-dependent";
        case AluaState::Offline: return "offline";
        case AluaState::Transitioning: return "transitioning";
    }
    char b[16];
    std::snprintf(b, sizeof b, "state 0x%x", unsigned(s));
    return b;
}

const TargetPortGroup* TargetPortGroups::find(uint16_t id) const {
    for (const TargetPortGroup& g : groups)
        if (g.id == id) return &g;
    return nullptr;
}

ScsiCommand make_report_target_port_groups(uint64_t lun, std::span<uint8_t> buffer, bool extended) {
    size_t n = std::min<size_t>(buffer.size(), 0xffffffffu);
    ScsiCommand c = command(lun, {0xa3, uint8_t((extended ? 0x20 : 0x00) | 0x0a)}, 12, DataDirection::Read,
                            buffer.first(n));
    put_be(c.cdb.data() + 6, n, 4);
    return c;
}

TargetPortGroups decode_report_target_port_groups(std::span<const uint8_t> data, bool extended) {
    const char* what = "REPORT TARGET PORT GROUPS";
    const size_t header = extended ? 8 : 4;
    if (data.size() < header)
        fail(ErrorKind::Protocol, std::string(what) + ": " + std::to_string(data.size()) +
                                      " bytes, shorter than its " + std::to_string(header) + "-byte header");
    TargetPortGroups out;
    if (extended) {
        if (((data[4] >> 4) & 0x07) != 1)
            fail(ErrorKind::Protocol, std::string(what) + ": format type " +
                                          std::to_string((data[4] >> 4) & 0x07) +
                                          " where the extended header (1) was asked for");
        out.implicit_transition_time = data[5];
    }
    // RETURN DATA LENGTH counts the bytes after the first four.
    const uint64_t total = 4 + get_be(data.data(), 4);
    if (total < header)
        fail(ErrorKind::Protocol, std::string(what) + ": return data length " + std::to_string(total - 4) +
                                      " shorter than the extended header");
    const size_t end = size_t(std::min<uint64_t>(total, data.size()));
    for (size_t off = header; off < end;) {
        if (end - off < 8) {
            if (end < total) break;  // cut by the allocation length
            fail(ErrorKind::Protocol, std::string(what) + ": a target port group descriptor cut at byte " +
                                          std::to_string(off) + " of " + std::to_string(end));
        }
        const size_t len = 8 + 4 * size_t(data[off + 7]);
        if (end - off < len) {
            if (end < total) break;
            fail(ErrorKind::Protocol, std::string(what) + ": descriptor at byte " + std::to_string(off) +
                                          " with " + std::to_string(data[off + 7]) + " ports runs past the " +
                                          std::to_string(end) + " bytes returned");
        }
        TargetPortGroup g;
        g.preferred = data[off] & 0x80;
        g.state = AluaState(data[off] & 0x0f);
        g.supported = data[off + 1];
        g.id = uint16_t(get_be(data.data() + off + 2, 2));
        g.status = data[off + 5];
        for (size_t p = off + 8; p < off + len; p += 4)
            g.ports.push_back(uint16_t(get_be(data.data() + p + 2, 2)));
        out.groups.push_back(std::move(g));
        off += len;
    }
    return out;
}

std::string Designator::to_string() const {
    static constexpr const char* kTypes[16] = {"vendor specific",
                                               "T10 vendor ID",
                                               "EUI-64",
                                               "NAA",
                                               "relative target port",
                                               "target port group",
                                               "logical unit group",
                                               "MD5 logical unit identifier",
                                               "SCSI name string",
                                               "protocol specific port identifier",
                                               "UUID",
                                               "type 0xb",
                                               "type 0xc",
                                               "type 0xd",
                                               "type 0xe",
                                               "type 0xf"};
    static constexpr const char* kAssoc[4] = {"logical unit", "target port", "target device", "reserved"};
    std::string s = std::string(kTypes[type & 15]) + " (" + kAssoc[association & 3] + "): ";
    // ASCII (2) must be printable; UTF-8 (3) may have bytes >= 0x80.
    const bool text =
        (code_set == 2 || code_set == 3) && std::all_of(value.begin(), value.end(), [this](uint8_t c) {
            return c == 0 || (c >= 0x20 && c < 0x7f) || (code_set == 3 && c >= 0x80);
        });
    if (text) return s + trimmed(value.data(), value.size());
    s += "0x";
    char b[3];
    for (uint8_t c : value) {
        std::snprintf(b, sizeof b, "%02x", c);
        s += b;
    }
    return s;
}

BlockLimits decode_block_limits(std::span<const uint8_t> page) {
    auto p = vpd_payload(0xb0, page);
    // Offsets below are within the page (header included); `have(end)`: the
    // field ending before byte `end` was sent.
    auto have = [&](size_t end) { return 4 + p.size() >= end; };
    auto at = [&](size_t byte, int n) { return get_be(p.data() + byte - 4, n); };
    BlockLimits l;
    if (have(5)) l.wsnz = at(4, 1) & 0x01;
    if (have(6)) l.max_compare_and_write_length = uint8_t(at(5, 1));
    if (have(8)) l.optimal_transfer_granularity = uint16_t(at(6, 2));
    if (have(12)) l.max_transfer_length = uint32_t(at(8, 4));
    if (have(16)) l.optimal_transfer_length = uint32_t(at(12, 4));
    if (have(20)) l.max_prefetch_length = uint32_t(at(16, 4));
    if (have(24)) l.max_unmap_lba_count = uint32_t(at(20, 4));
    if (have(28)) l.max_unmap_descriptor_count = uint32_t(at(24, 4));
    if (have(32)) l.optimal_unmap_granularity = uint32_t(at(28, 4));
    if (have(36)) {
        uint32_t v = uint32_t(at(32, 4));
        l.unmap_granularity_alignment_valid = v & 0x80000000u;
        l.unmap_granularity_alignment = v & 0x7fffffffu;
    }
    if (have(44)) l.max_write_same_length = at(36, 8);
    return l;
}

LogicalBlockProvisioning decode_logical_block_provisioning(std::span<const uint8_t> page) {
    auto p = vpd_payload(0xb2, page);
    if (p.size() < 4)
        fail(ErrorKind::Protocol,
             page_name(0xb2) + ": page length " + std::to_string(p.size()) + ", at least 4 expected");
    LogicalBlockProvisioning b;
    b.threshold_exponent = p[0];
    b.lbpu = p[1] & 0x80;
    b.lbpws = p[1] & 0x40;
    b.lbpws10 = p[1] & 0x20;
    b.lbprz = (p[1] >> 2) & 0x07;
    b.anc_sup = p[1] & 0x02;
    b.dp = p[1] & 0x01;
    b.provisioning_type = p[2] & 0x07;
    return b;
}

std::vector<std::vector<LbaRange>> plan_unmap(uint64_t lba, uint64_t blocks, const BlockLimits& limits) {
    if (!limits.unmap_supported())
        throw std::invalid_argument("the LU does not support UNMAP (Block Limits: maximum unmap LBA count " +
                                    std::to_string(limits.max_unmap_lba_count) + ", descriptors " +
                                    std::to_string(limits.max_unmap_descriptor_count) + ")");
    if (blocks > ~uint64_t(0) - lba) throw std::invalid_argument("UNMAP: range beyond 2^64 blocks");
    const uint64_t per_command =
        limits.max_unmap_lba_count;  // 0xffffffff: no limit, still a u32 per descriptor
    const size_t descriptors = std::min<uint64_t>(limits.max_unmap_descriptor_count, 4095);
    std::vector<std::vector<LbaRange>> plan;
    while (blocks > 0) {
        std::vector<LbaRange> cmd;
        uint64_t budget = limits.max_unmap_lba_count == 0xffffffffu ? ~uint64_t(0) : per_command;
        while (blocks > 0 && budget > 0 && cmd.size() < descriptors) {
            uint32_t n = uint32_t(std::min<uint64_t>({blocks, budget, 0xffffffffu}));
            cmd.push_back({lba, n});
            lba += n;
            blocks -= n;
            budget -= n;
        }
        plan.push_back(std::move(cmd));
    }
    return plan;
}

ScsiOutcome execute_checked(IoSession& s, const ScsiCommand& cmd, const char* what, int retries) {
    for (int attempt = 0;; ++attempt) {
        ScsiOutcome o = s.execute(cmd);
        if (o.good()) return o;
        SenseInfo sense = decode_sense(o.sense);
        if (o.response == 0 && o.status == kStatusCheckCondition && sense.valid &&
            sense.key == kSenseUnitAttention && attempt < retries) {
            RBIO_LOG(Info, what << ": " << sense.describe() << "; retrying");
            continue;
        }
        throw ScsiError(std::string(what) + " (LUN " + std::to_string(cmd.lun) + ") failed: " + describe(o),
                        o);
    }
}

void test_unit_ready(IoSession& s, uint64_t lun) {
    execute_checked(s, make_test_unit_ready(lun), "TEST UNIT READY");
}

InquiryData inquiry(IoSession& s, uint64_t lun) {
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

Capacity read_capacity16(IoSession& s, uint64_t lun) {
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

std::vector<uint64_t> report_luns(IoSession& s) {
    std::vector<uint8_t> buf(16 + 8 * 256);
    ScsiOutcome o = execute_checked(s, make_report_luns(buf), "REPORT LUNS");
    uint64_t list_len = std::min<uint64_t>(get_be(buf.data(), 4),
                                           o.bytes_transferred - std::min<uint32_t>(8, o.bytes_transferred));
    std::vector<uint64_t> luns;
    for (size_t off = 8; off + 8 <= 8 + list_len; off += 8) {
        uint8_t method = buf[off] >> 6;
        if (method == 0) luns.push_back(buf[off + 1]);
        else if (method == 1) luns.push_back(uint64_t(buf[off] & 0x3f) << 8 | buf[off + 1]);
    }
    return luns;
}

void read16(IoSession& s, uint64_t lun, uint64_t lba, uint32_t block_size, std::span<uint8_t> buffer) {
    execute_checked(s, make_read16(lun, lba, uint32_t(buffer.size() / block_size), buffer), "READ(16)");
}

void write16(IoSession& s, uint64_t lun, uint64_t lba, uint32_t block_size, std::span<uint8_t> buffer) {
    execute_checked(s, make_write16(lun, lba, uint32_t(buffer.size() / block_size), buffer), "WRITE(16)");
}

void synchronize_cache10(IoSession& s, uint64_t lun) {
    execute_checked(s, make_synchronize_cache10(lun), "SYNCHRONIZE CACHE(10)");
}

void read10(IoSession& s, uint64_t lun, uint64_t lba, uint32_t block_size, std::span<uint8_t> buffer) {
    execute_checked(s, make_read10(lun, lba, uint32_t(buffer.size() / block_size), buffer), "READ(10)");
}

void write10(IoSession& s, uint64_t lun, uint64_t lba, uint32_t block_size, std::span<uint8_t> buffer) {
    execute_checked(s, make_write10(lun, lba, uint32_t(buffer.size() / block_size), buffer), "WRITE(10)");
}

std::vector<uint8_t> inquiry_vpd(IoSession& s, uint64_t lun, uint8_t page) {
    std::vector<uint8_t> buf(512);
    for (;;) {
        ScsiOutcome o = execute_checked(s, make_inquiry_vpd(lun, page, buf), "INQUIRY (VPD)");
        size_t got = std::min<size_t>(o.bytes_transferred, buf.size());
        if (got >= 4) {
            size_t want = 4 + size_t(get_be(buf.data() + 2, 2));
            if (want > got && got == buf.size() && buf.size() < 0xffff) {
                buf.assign(std::min<size_t>(want, 0xffff), 0);  // ask again for all of it
                continue;
            }
        }
        buf.resize(got);
        vpd_payload(page, buf);  // validates
        return buf;
    }
}

std::vector<uint8_t> supported_vpd_pages(IoSession& s, uint64_t lun) {
    return decode_supported_vpd_pages(inquiry_vpd(s, lun, 0x00));
}
std::string unit_serial_number(IoSession& s, uint64_t lun) {
    return decode_unit_serial_number(inquiry_vpd(s, lun, 0x80));
}
std::vector<Designator> device_identification(IoSession& s, uint64_t lun) {
    return decode_device_identification(inquiry_vpd(s, lun, 0x83));
}
BlockLimits block_limits(IoSession& s, uint64_t lun) {
    return decode_block_limits(inquiry_vpd(s, lun, 0xb0));
}
LogicalBlockProvisioning logical_block_provisioning(IoSession& s, uint64_t lun) {
    return decode_logical_block_provisioning(inquiry_vpd(s, lun, 0xb2));
}

TargetPortGroups report_target_port_groups(IoSession& s, uint64_t lun) {
    std::vector<uint8_t> buf(1024);
    for (;;) {
        ScsiOutcome o =
            execute_checked(s, make_report_target_port_groups(lun, buf), "REPORT TARGET PORT GROUPS");
        size_t got = std::min<size_t>(o.bytes_transferred, buf.size());
        if (got >= 4) {
            uint64_t want = 4 + get_be(buf.data(), 4);
            if (want > buf.size() && buf.size() < (1u << 20)) {
                buf.assign(size_t(std::min<uint64_t>(want, 1u << 20)), 0);  // ask again for all of it
                continue;
            }
        }
        return decode_report_target_port_groups(std::span<const uint8_t>(buf.data(), got));
    }
}

size_t unmap(IoSession& s, uint64_t lun, uint64_t lba, uint64_t blocks, const BlockLimits& limits) {
    std::vector<std::vector<LbaRange>> plan;
    try {
        plan = plan_unmap(lba, blocks, limits);
    } catch (const std::invalid_argument& e) {
        fail(ErrorKind::Io, "UNMAP (LUN " + std::to_string(lun) + "): " + e.what());
    }
    for (const auto& ranges : plan) {
        std::vector<uint8_t> params = unmap_parameter_list(ranges);
        execute_checked(s, make_unmap(lun, params), "UNMAP");
    }
    return plan.size();
}

size_t write_same16(IoSession& s, uint64_t lun, uint64_t lba, uint64_t blocks, std::span<uint8_t> block,
                    bool unmap, const BlockLimits& limits) {
    uint64_t chunk = 0xffffffffu;
    if (limits.max_write_same_length != 0) chunk = std::min<uint64_t>(chunk, limits.max_write_same_length);
    size_t commands = 0;
    while (blocks > 0) {
        uint32_t n = uint32_t(std::min(blocks, chunk));
        execute_checked(s, make_write_same16(lun, lba, n, unmap, block),
                        unmap ? "WRITE SAME(16) with UNMAP" : "WRITE SAME(16)");
        lba += n;
        blocks -= n;
        ++commands;
    }
    return commands;
}

}  // namespace rbio::initiator
