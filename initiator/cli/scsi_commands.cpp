// rbio inquiry / rbio discard: what an administrator asks of one LU --
// identity, VPD pages (serial, designators, block limits, provisioning) --
// and deallocating a byte range (UNMAP, or WRITE SAME(16) with UNMAP).
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "commands.hpp"
#include "options.hpp"
#include "rbio/initiator/error.hpp"
#include "rbio/initiator/log.hpp"
#include "rbio/initiator/scsi.hpp"

namespace rbio::cli {

namespace {

using namespace rbio::initiator;

std::string hex2(unsigned v) {
    char b[8];
    std::snprintf(b, sizeof b, "0x%02x", v);
    return b;
}

// "0x80", "80", "b0", or a name; -1 for "all".
int parse_vpd_page(const std::string& text) {
    if (text == "all") return -1;
    if (text == "supported") return 0x00;
    if (text == "serial") return 0x80;
    if (text == "devid" || text == "device-id") return 0x83;
    if (text == "limits" || text == "block-limits") return 0xb0;
    if (text == "lbp" || text == "provisioning") return 0xb2;
    std::string digits = text.rfind("0x", 0) == 0 || text.rfind("0X", 0) == 0 ? text.substr(2) : text;
    unsigned v = 0;
    auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v, 16);
    if (ec != std::errc() || p != digits.data() + digits.size() || v > 0xff)
        throw UsageError("--vpd " + text +
                         ": a page code (hex, e.g. 0xb0) or all, supported, serial, "
                         "devid, limits, lbp");
    return int(v);
}

std::string limit(uint64_t v) {
    return v == 0 ? "not reported" : v == 0xffffffffu ? "no limit" : std::to_string(v);
}

void print_page(Session& s, uint64_t lun, uint8_t page, std::ostream& out) {
    switch (page) {
        case 0x00: {
            out << "VPD 0x00 supported pages:";
            for (uint8_t p : supported_vpd_pages(s, lun)) out << " " << hex2(p);
            out << "\n";
            break;
        }
        case 0x80: out << "VPD 0x80 unit serial number: " << unit_serial_number(s, lun) << "\n"; break;
        case 0x83:
            out << "VPD 0x83 device identification:\n";
            for (const Designator& d : device_identification(s, lun)) out << "  " << d.to_string() << "\n";
            break;
        case 0xb0: {
            BlockLimits l = block_limits(s, lun);
            out << "VPD 0xb0 block limits (in logical blocks):\n"
                << "  maximum transfer length: " << limit(l.max_transfer_length) << "\n"
                << "  optimal transfer length: " << limit(l.optimal_transfer_length) << "\n"
                << "  optimal transfer length granularity: " << limit(l.optimal_transfer_granularity) << "\n"
                << "  maximum unmap LBA count: " << limit(l.max_unmap_lba_count) << "\n"
                << "  maximum unmap block descriptor count: " << limit(l.max_unmap_descriptor_count) << "\n"
                << "  optimal unmap granularity: " << limit(l.optimal_unmap_granularity) << "\n"
                << "  unmap granularity alignment: "
                << (l.unmap_granularity_alignment_valid ? std::to_string(l.unmap_granularity_alignment)
                                                        : "not reported")
                << "\n"
                << "  maximum write same length: " << limit(l.max_write_same_length) << "\n"
                << "  maximum compare and write length: " << unsigned(l.max_compare_and_write_length)
                << (l.max_compare_and_write_length ? "" : " (COMPARE AND WRITE not supported)") << "\n"
                << "  UNMAP: " << (l.unmap_supported() ? "supported" : "not supported") << "\n";
            break;
        }
        case 0xb2: {
            LogicalBlockProvisioning p = logical_block_provisioning(s, lun);
            static constexpr const char* kTypes[8] = {"full", "resource", "thin", "3", "4", "5", "6", "7"};
            out << "VPD 0xb2 logical block provisioning:\n"
                << "  LBPU (UNMAP): " << p.lbpu << "\n"
                << "  LBPWS (WRITE SAME(16) with UNMAP): " << p.lbpws << "\n"
                << "  LBPWS10 (WRITE SAME(10) with UNMAP): " << p.lbpws10 << "\n"
                << "  LBPRZ (unmapped blocks read as zeros): " << unsigned(p.lbprz) << "\n"
                << "  provisioning type: " << kTypes[p.provisioning_type & 7] << "\n";
            break;
        }
        default: {
            // A page without a decoder: its payload in hex.
            std::vector<uint8_t> raw = inquiry_vpd(s, lun, page);
            out << "VPD " << hex2(page) << " (" << raw.size() - 4 << " bytes):";
            for (size_t i = 4; i < raw.size(); ++i)
                out << (i % 16 == 4 ? "\n  " : " ") << hex2(raw[i]).substr(2);
            out << "\n";
        }
    }
}

std::unique_ptr<Session> login_for(const Args& args, const char* what) {
    if (!args.has("--portal") || !args.has("--target"))
        throw UsageError(std::string(what) + " needs -T IQN and -p HOST[:PORT]");
    initiator::Portal portal = portal_option(args, what);
    initiator::SessionOptions opts = session_options(args);
    opts.target_name = args.get("--target");
    return initiator::Session::login(portal, opts);
}

}  // namespace

int inquiry_main(int argc, char** argv) {
    Args args(argc, argv, 1, {});
    args.allow_only({"--portal", "--target", "--lun", "--vpd"});
    uint64_t lun = args.has("--lun") ? parse_uint("--lun", args.get("--lun"), 0, 16383) : 0;
    int page = args.has("--vpd") ? parse_vpd_page(args.get("--vpd")) : -2;
    auto session = login_for(args, "inquiry");
    std::ostringstream out;
    if (page == -2 || page == -1) {
        InquiryData d = inquiry(*session, lun);
        out << "LUN " << lun << ": vendor " << d.vendor << ", product " << d.product << ", revision "
            << d.revision << ", peripheral type " << hex2(d.peripheral_type) << "\n";
        if (d.peripheral_type == 0) {
            test_unit_ready(*session, lun);
            Capacity c = read_capacity16(*session, lun);
            out << "capacity: " << c.blocks << " blocks of " << c.block_size << " bytes (" << c.bytes()
                << " bytes)\n";
        }
    }
    if (page == -2) {
        print_page(*session, lun, 0x00, out);
    } else if (page == -1) {
        for (uint8_t p : supported_vpd_pages(*session, lun))
            if (p == 0x00 || p == 0x80 || p == 0x83 || p == 0xb0 || p == 0xb2)
                print_page(*session, lun, p, out);
    } else {
        print_page(*session, lun, uint8_t(page), out);
    }
    session->logout();
    std::cout << out.str() << std::flush;
    return kExitOk;
}

int discard_main(int argc, char** argv) {
    Args args(argc, argv, 1, {"--write-same"});
    args.allow_only({"--portal", "--target", "--lun", "--offset", "--length", "--write-same"});
    if (!args.has("--offset") || !args.has("--length"))
        throw UsageError("discard needs --offset BYTES and --length BYTES");
    uint64_t lun = args.has("--lun") ? parse_uint("--lun", args.get("--lun"), 0, 16383) : 0;
    uint64_t offset = parse_size("--offset", args.get("--offset"), 0);
    uint64_t length = parse_size("--length", args.get("--length"));
    const bool write_same = args.has("--write-same");
    auto session = login_for(args, "discard");
    test_unit_ready(*session, lun);
    Capacity cap = read_capacity16(*session, lun);
    if (offset % cap.block_size || length % cap.block_size)
        throw UsageError("--offset and --length must be multiples of the LU's block size " +
                         std::to_string(cap.block_size));
    if (offset > cap.bytes() || length > cap.bytes() - offset)
        throw UsageError("the range ends beyond the LU's " + std::to_string(cap.bytes()) + " bytes");
    BlockLimits limits = block_limits(*session, lun);
    size_t commands;
    if (write_same) {
        std::vector<uint8_t> zero(cap.block_size, 0);
        commands =
            write_same16(*session, lun, offset / cap.block_size, length / cap.block_size, zero, true, limits);
    } else {
        commands = unmap(*session, lun, offset / cap.block_size, length / cap.block_size, limits);
    }
    session->logout();
    std::cout << "discarded " << length << " bytes at " << offset << " of LUN " << lun << " with " << commands
              << (write_same ? " WRITE SAME(16) UNMAP" : " UNMAP")
              << (commands == 1 ? " command" : " commands") << "\n";
    return kExitOk;
}

}  // namespace rbio::cli
