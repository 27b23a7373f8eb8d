// Every SCSI command of the initiator library against a real tgtd, for
// initiator-scsi.sh:
//   initiator_scsi_check HOST:PORT IQN LUN BACKING_FILE MODE
// MODE: "rbio"      bs_rbio.so LU with thin provisioning (256 UNMAP descriptors),
//       "rdwr-thin" stock rdwr LU with tgtadm thin_provisioning=1,
//       "rdwr"      stock rdwr LU, fully provisioned (UNMAP refused).
// The LU must be at least 32 MiB with 512-byte blocks, and BACKING_FILE its
// file on this host: data is compared through the initiator and in the
// file, deallocation by the file's allocated blocks (st_blocks).
// Prints one "ok:"/"FAIL:" line per check and "N passed, M failed"; exit 0
// when all hold.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "rbio/initiator/error.hpp"
#include "rbio/initiator/scsi.hpp"
#include "rbio/initiator/session.hpp"

using namespace rbio::initiator;

namespace {

int passed = 0, failed = 0;

void check(const std::string& what, bool ok, const std::string& detail = "") {
    (ok ? passed : failed)++;
    std::printf("%s: %s%s%s\n", ok ? "ok" : "FAIL", what.c_str(), detail.empty() ? "" : " -- ",
                detail.c_str());
    std::fflush(stdout);
}

// Runs f; what the ScsiError it throws says (thrown false when f succeeds).
struct Refusal {
    bool thrown = false;
    SenseInfo sense;
    std::string message;
};
Refusal refusal_of(const std::function<void()>& f) {
    Refusal r;
    try {
        f();
    } catch (const ScsiError& e) {
        r.thrown = true;
        r.sense = e.sense();
        r.message = e.what();
    }
    return r;
}

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
    std::vector<uint8_t> v(n);
    std::mt19937 g(seed);
    for (auto& b : v) b = uint8_t(g());
    return v;
}

std::vector<uint8_t> file_bytes(const std::string& path, uint64_t off, size_t n) {
    std::vector<uint8_t> v(n);
    int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) fail(ErrorKind::Io, "open " + path + ": " + std::strerror(errno));
    ssize_t got = ::pread(fd, v.data(), n, off_t(off));
    ::close(fd);
    if (got != ssize_t(n)) fail(ErrorKind::Io, "pread " + path + " short");
    return v;
}

struct stat file_stat(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) fail(ErrorKind::Io, "stat " + path + ": " + std::strerror(errno));
    return st;
}
uint64_t allocated_bytes(const std::string& path) { return uint64_t(file_stat(path).st_blocks) * 512; }

bool all_zero(const std::vector<uint8_t>& v) {
    return std::all_of(v.begin(), v.end(), [](uint8_t b) { return b == 0; });
}

std::string hex(unsigned v) {
    char b[16];
    std::snprintf(b, sizeof b, "0x%02x", v);
    return b;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 6) {
        std::fprintf(stderr, "usage: %s HOST:PORT IQN LUN BACKING_FILE rbio|rdwr-thin|rdwr\n", argv[0]);
        return 2;
    }
    const std::string file = argv[4], mode = argv[5];
    const bool thin = mode != "rdwr";
    const uint64_t lun = std::strtoull(argv[3], nullptr, 10);
    const uint32_t seed = uint32_t(::getpid());
    try {
        SessionOptions o;
        o.target_name = argv[2];
        auto s = Session::login(Portal::parse(argv[1]), o);

        // UNIT ATTENTION: the first command after login sees the power-on UA
        // and the helper retries it.
        ScsiOutcome first = s->execute(make_test_unit_ready(lun));
        check("first TEST UNIT READY reports the login's UNIT ATTENTION",
              !first.good() && decode_sense(first.sense).key == kSenseUnitAttention, describe(first));
        test_unit_ready(*s, lun);
        check("TEST UNIT READY", true);

        auto luns = report_luns(*s);
        check("REPORT LUNS lists LUN " + std::to_string(lun),
              std::find(luns.begin(), luns.end(), lun) != luns.end(), std::to_string(luns.size()) + " LUNs");

        InquiryData inq = inquiry(*s, lun);
        check("standard INQUIRY: a disk with a vendor", inq.peripheral_type == 0 && !inq.vendor.empty(),
              inq.vendor + " " + inq.product + " " + inq.revision);

        auto pages = supported_vpd_pages(*s, lun);
        auto has = [&](uint8_t p) { return std::find(pages.begin(), pages.end(), p) != pages.end(); };
        std::string list;
        for (uint8_t p : pages) list += hex(p) + " ";
        check("VPD 00h lists 00h 80h 83h B0h B2h", has(0) && has(0x80) && has(0x83) && has(0xb0) && has(0xb2),
              list);

        std::string serial = unit_serial_number(*s, lun);
        check("VPD 80h: a serial number", !serial.empty(), serial);

        auto ids = device_identification(*s, lun);
        bool lu_id = std::any_of(ids.begin(), ids.end(), [](const Designator& d) {
            return d.association == 0 && (d.type == 3 || d.type == 1 || d.type == 2) && !d.value.empty();
        });
        check("VPD 83h: a logical unit designator", lu_id, ids.empty() ? "none" : ids.front().to_string());

        BlockLimits limits = block_limits(*s, lun);
        check(std::string("VPD B0h: UNMAP limits ") + (thin ? "advertised" : "absent"),
              limits.unmap_supported() == thin,
              "max unmap LBAs " + std::to_string(limits.max_unmap_lba_count) + ", descriptors " +
                  std::to_string(limits.max_unmap_descriptor_count) + ", granularity " +
                  std::to_string(limits.optimal_unmap_granularity) + ", max transfer " +
                  std::to_string(limits.max_transfer_length));
        if (mode == "rbio")
            check("VPD B0h: bs_rbio's 256 UNMAP descriptors", limits.max_unmap_descriptor_count == 256);

        LogicalBlockProvisioning lbp = logical_block_provisioning(*s, lun);
        check(std::string("VPD B2h: LBPU and LBPWS ") + (thin ? "set" : "clear"),
              lbp.lbpu == thin && lbp.lbpws == thin,
              "LBPU " + std::to_string(lbp.lbpu) + " LBPWS " + std::to_string(lbp.lbpws) + " LBPRZ " +
                  std::to_string(lbp.lbprz));

        Capacity cap = read_capacity16(*s, lun);
        check("READ CAPACITY(16) matches the backing file",
              cap.block_size == 512 && cap.bytes() == uint64_t(file_stat(file).st_size),
              std::to_string(cap.blocks) + " x " + std::to_string(cap.block_size));
        const uint32_t bs = cap.block_size;

        // READ/WRITE(10) and (16), each read back both ways and in the file.
        auto a = pattern(64 * 1024, seed);
        write10(*s, lun, (1 << 20) / bs, bs, a);
        auto b = pattern(64 * 1024, seed + 1);
        write16(*s, lun, (2 << 20) / bs, bs, b);
        synchronize_cache10(*s, lun);
        check("SYNCHRONIZE CACHE(10)", true);
        std::vector<uint8_t> r(64 * 1024);
        read10(*s, lun, (1 << 20) / bs, bs, r);
        check("WRITE(10) then READ(10): same data", r == a);
        read16(*s, lun, (1 << 20) / bs, bs, r);
        check("WRITE(10) then READ(16): same data", r == a);
        read10(*s, lun, (2 << 20) / bs, bs, r);
        check("WRITE(16) then READ(10): same data", r == b);
        check("WRITE(10)/WRITE(16) data in the backing file",
              file_bytes(file, 1 << 20, a.size()) == a && file_bytes(file, 2 << 20, b.size()) == b);

        // Errors carry the sense: a READ past the end is ILLEGAL REQUEST, LBA
        // out of range (21h).
        Refusal past = refusal_of([&] { read16(*s, lun, cap.blocks, bs, std::span(r).first(bs)); });
        check("READ(16) past the end: ILLEGAL REQUEST asc 21h",
              past.thrown && past.sense.key == kSenseIllegalRequest && past.sense.asc == 0x21, past.message);

        // WRITE SAME(16) without UNMAP: every block is the one sent.
        auto one = pattern(bs, seed + 2);
        size_t n = write_same16(*s, lun, (3 << 20) / bs, 256, one, false, limits);
        synchronize_cache10(*s, lun);
        std::vector<uint8_t> ws(256 * bs);
        read16(*s, lun, (3 << 20) / bs, bs, ws);
        bool same = n == 1;
        for (size_t i = 0; i < 256; ++i)
            same = same && std::equal(one.begin(), one.end(), ws.begin() + std::ptrdiff_t(i * bs));
        check("WRITE SAME(16): 256 blocks read back as the block sent", same);
        check("WRITE SAME(16): the backing file holds it", file_bytes(file, 3 << 20, ws.size()) == ws);

        // Deallocation: fill a range, then UNMAP / WRITE SAME with UNMAP it.
        const uint64_t region = 2 << 20;
        auto fill = [&](uint64_t off) {
            auto d = pattern(region, seed + uint32_t(off >> 20));
            write16(*s, lun, off / bs, bs, d);
            synchronize_cache10(*s, lun);
        };
        auto deallocated = [&](const std::string& what, uint64_t off, uint64_t before) {
            uint64_t after = allocated_bytes(file);
            std::vector<uint8_t> back(region);
            read16(*s, lun, off / bs, bs, back);
            check(what + ": allocated blocks shrink by the range", before >= after + region,
                  std::to_string(before) + " -> " + std::to_string(after) + " bytes");
            check(what + ": the range reads back as zeros",
                  all_zero(back) && all_zero(file_bytes(file, off, region)));
        };
        if (thin) {
            fill(8 << 20);
            uint64_t before = allocated_bytes(file);
            size_t cmds = unmap(*s, lun, (8 << 20) / bs, region / bs, limits);
            check("UNMAP of 2 MiB: one command", cmds == 1);
            deallocated("UNMAP", 8 << 20, before);

            // Limits are respected: one descriptor of at most 256 blocks per command.
            fill(12 << 20);
            before = allocated_bytes(file);
            BlockLimits small = limits;
            small.max_unmap_descriptor_count = 1;
            small.max_unmap_lba_count = 256;
            cmds = unmap(*s, lun, (12 << 20) / bs, region / bs, small);
            check("UNMAP split by the limits: 16 commands", cmds == region / bs / 256, std::to_string(cmds));
            deallocated("split UNMAP", 12 << 20, before);

            fill(16 << 20);
            before = allocated_bytes(file);
            std::vector<uint8_t> zero(bs, 0);
            write_same16(*s, lun, (16 << 20) / bs, region / bs, zero, true, limits);
            deallocated("WRITE SAME(16) with UNMAP", 16 << 20, before);

            // Data written next to an unmapped range stays.
            read10(*s, lun, (3 << 20) / bs, bs, std::span(r).first(bs));
            check("blocks outside the unmapped ranges unchanged",
                  std::equal(one.begin(), one.end(), r.begin()));
            if (mode == "rbio") {
                // More descriptors than advertised: refused with a decoded sense.
                std::vector<LbaRange> many(limits.max_unmap_descriptor_count + 1);
                for (size_t i = 0; i < many.size(); ++i) many[i] = {i * 8, 1};
                auto params = unmap_parameter_list(many);
                Refusal over = refusal_of([&] { execute_checked(*s, make_unmap(lun, params), "UNMAP"); });
                check("UNMAP beyond the advertised descriptors: ILLEGAL REQUEST",
                      over.thrown && over.sense.key == kSenseIllegalRequest, over.message);
            }
        } else {
            // The LU does not advertise UNMAP: the library refuses without
            // sending, and the target refuses the command sent anyway.
            bool refused_here = false;
            try {
                unmap(*s, lun, 0, 8, limits);
            } catch (const ScsiError&) {
            } catch (const InitiatorError& e) {
                refused_here = e.kind() == ErrorKind::Io;
            }
            check("unmap() refused for an LU without UNMAP", refused_here);
            std::vector<LbaRange> one_range = {{(8 << 20) / bs, 8}};
            auto params = unmap_parameter_list(one_range);
            Refusal raw = refusal_of([&] { execute_checked(*s, make_unmap(lun, params), "UNMAP"); });
            check("UNMAP sent anyway: ILLEGAL REQUEST", raw.thrown && raw.sense.key == kSenseIllegalRequest,
                  raw.message);
        }

        // UNIT ATTENTION after a LUN reset: seen raw, retried by the helpers.
        s->lun_reset(lun);
        ScsiOutcome ua = s->execute(make_test_unit_ready(lun));
        check("after LOGICAL UNIT RESET: UNIT ATTENTION asc 29h",
              decode_sense(ua.sense).key == kSenseUnitAttention && decode_sense(ua.sense).asc == 0x29,
              describe(ua));
        s->lun_reset(lun);
        read10(*s, lun, (1 << 20) / bs, bs, r);
        check("READ(10) through a pending UNIT ATTENTION: retried, same data", r == a);

        s->logout();
    } catch (const std::exception& e) {
        check("no error", false, e.what());
    }
    std::printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
