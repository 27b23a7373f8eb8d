// SCSI CDB encoding (SBC-3 5.x, SPC-4 6.6) and VPD page decoding (SPC-4
// 7.8, SBC-3 6.6) of the initiator library. Expected bytes are written out
// from the standards' tables, not computed with the code under test.
#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "rbio/initiator/error.hpp"
#include "rbio/initiator/scsi.hpp"
#include "session_impl.hpp"

using namespace rbio::initiator;

namespace {

std::vector<uint8_t> cdb_of(const ScsiCommand& c) { return {c.cdb.begin(), c.cdb.begin() + c.cdb_length}; }

ErrorKind kind_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const InitiatorError& e) {
        return e.kind();
    }
    ADD_FAILURE() << "no InitiatorError";
    return ErrorKind::Io;
}

}  // namespace

// Single-level LUNs: peripheral addressing below 256, flat space up to
// 16383. Beyond, the 14 bits would wrap onto another LU (16384 -> 0), so
// commands and resets for such a LUN are refused before they are sent.
TEST(InitiatorScsiLun, EncodingAndItsLimit) {
    using rbio::initiator::check_lun;
    using rbio::initiator::encode_lun;
    EXPECT_EQ(encode_lun(5), uint64_t(5) << 48);
    EXPECT_EQ(encode_lun(256), uint64_t(0x4100) << 48);
    EXPECT_EQ(encode_lun(16383), uint64_t(0x7fff) << 48);
    EXPECT_NO_THROW(check_lun(16383, "t"));
    EXPECT_THROW(check_lun(16384, "t"), std::invalid_argument);
    EXPECT_THROW(check_lun(UINT64_MAX, "t"), std::invalid_argument);
}

TEST(InitiatorScsiCdb, Read10Write10) {
    std::vector<uint8_t> buf(8 * 512);
    ScsiCommand r = make_read10(3, 0x12345678, 8, buf);
    EXPECT_EQ(cdb_of(r), (std::vector<uint8_t>{0x28, 0, 0x12, 0x34, 0x56, 0x78, 0, 0x00, 0x08, 0}));
    EXPECT_EQ(r.lun, 3u);
    EXPECT_EQ(r.direction, DataDirection::Read);
    EXPECT_EQ(r.buffer.size(), buf.size());
    ScsiCommand w = make_write10(0, 0xffffffffu, 0xffff, buf);
    EXPECT_EQ(cdb_of(w), (std::vector<uint8_t>{0x2a, 0, 0xff, 0xff, 0xff, 0xff, 0, 0xff, 0xff, 0}));
    EXPECT_EQ(w.direction, DataDirection::Write);
    EXPECT_THROW(make_read10(0, 0x100000000ull, 1, buf), std::invalid_argument);
    EXPECT_THROW(make_write10(0, 0, 0x10000, buf), std::invalid_argument);
}

TEST(InitiatorScsiCdb, InquiryVpd) {
    std::vector<uint8_t> buf(600);
    ScsiCommand c = make_inquiry_vpd(1, 0xb0, buf);
    EXPECT_EQ(cdb_of(c), (std::vector<uint8_t>{0x12, 0x01, 0xb0, 0x02, 0x58, 0}));
    EXPECT_EQ(c.direction, DataDirection::Read);
    std::vector<uint8_t> big(70000);
    ScsiCommand b = make_inquiry_vpd(1, 0x83, big);
    EXPECT_EQ(cdb_of(b), (std::vector<uint8_t>{0x12, 0x01, 0x83, 0xff, 0xff, 0}));
    EXPECT_EQ(b.buffer.size(), 0xffffu);  // the expected length matches the allocation length
}

TEST(InitiatorScsiCdb, WriteSame16) {
    std::vector<uint8_t> block(4096);
    ScsiCommand c = make_write_same16(2, 0x0102030405060708ull, 0x0a0b0c0d, false, block);
    EXPECT_EQ(cdb_of(c),
              (std::vector<uint8_t>{0x93, 0x00, 1, 2, 3, 4, 5, 6, 7, 8, 0x0a, 0x0b, 0x0c, 0x0d, 0, 0}));
    EXPECT_EQ(c.direction, DataDirection::Write);
    EXPECT_EQ(c.buffer.size(), 4096u);
    ScsiCommand u = make_write_same16(2, 16, 32, true, block);
    EXPECT_EQ(cdb_of(u), (std::vector<uint8_t>{0x93, 0x08, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0, 0, 32, 0, 0}));
    EXPECT_THROW(make_write_same16(0, 0, 0, false, block), std::invalid_argument);
    EXPECT_THROW(make_write_same16(0, 0, 1, false, {}), std::invalid_argument);
}

TEST(InitiatorScsiCdb, Unmap) {
    std::vector<LbaRange> ranges = {{0x1122334455667788ull, 0x99aabbcc}, {8, 16}};
    std::vector<uint8_t> p = unmap_parameter_list(ranges);
    std::vector<uint8_t> want = {0x00, 0x26, 0x00, 0x20, 0,    0,    0,    0,    0x11, 0x22,
                                 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc,
                                 0,    0,    0,    0,    0,    0,    0,    0,    0,    0,
                                 0,    8,    0,    0,    0,    16,   0,    0,    0,    0};
    EXPECT_EQ(p, want);
    ScsiCommand c = make_unmap(4, p);
    EXPECT_EQ(cdb_of(c), (std::vector<uint8_t>{0x42, 0, 0, 0, 0, 0, 0, 0x00, 0x28, 0}));
    EXPECT_EQ(c.direction, DataDirection::Write);
    EXPECT_EQ(c.buffer.size(), 40u);
    std::vector<LbaRange> too_many(4096);
    EXPECT_THROW(unmap_parameter_list(too_many), std::invalid_argument);
}

TEST(InitiatorScsiPlan, UnmapRespectsTheLimits) {
    BlockLimits l;
    EXPECT_THROW(plan_unmap(0, 8, l), std::invalid_argument);  // not advertised
    l.max_unmap_lba_count = 100;
    l.max_unmap_descriptor_count = 1;
    auto p = plan_unmap(10, 250, l);
    ASSERT_EQ(p.size(), 3u);
    EXPECT_EQ(p[0], (std::vector<LbaRange>{{10, 100}}));
    EXPECT_EQ(p[1], (std::vector<LbaRange>{{110, 100}}));
    EXPECT_EQ(p[2], (std::vector<LbaRange>{{210, 50}}));

    // No LBA limit: descriptors of at most 2^32-1 blocks, at most 2 per command.
    l.max_unmap_lba_count = 0xffffffffu;
    l.max_unmap_descriptor_count = 2;
    const uint64_t n = 3 * 0xffffffffull + 5;
    p = plan_unmap(0, n, l);
    ASSERT_EQ(p.size(), 2u);
    ASSERT_EQ(p[0].size(), 2u);
    EXPECT_EQ(p[0][1], (LbaRange{0xffffffffull, 0xffffffffu}));
    ASSERT_EQ(p[1].size(), 2u);
    EXPECT_EQ(p[1][1], (LbaRange{3 * 0xffffffffull, 5}));
    uint64_t total = 0;
    for (const auto& cmd : p)
        for (const auto& r : cmd) total += r.blocks;
    EXPECT_EQ(total, n);

    // "Unlimited" descriptors are capped at what a parameter list holds.
    l.max_unmap_lba_count = 0xffffffffu;
    l.max_unmap_descriptor_count = 0xffffffffu;
    p = plan_unmap(0, 5000 * 0xffffffffull, l);
    ASSERT_EQ(p.size(), 2u);
    EXPECT_EQ(p[0].size(), 4095u);
    EXPECT_EQ(p[1].size(), 905u);
    EXPECT_TRUE(plan_unmap(0, 0, l).empty());
}

TEST(InitiatorScsiVpd, SupportedPagesAndSerial) {
    std::vector<uint8_t> page = {0x00, 0x00, 0x00, 0x05, 0x00, 0x80, 0x83, 0xb0, 0xb2, 0xee};
    EXPECT_EQ(decode_supported_vpd_pages(page), (std::vector<uint8_t>{0x00, 0x80, 0x83, 0xb0, 0xb2}));
    std::vector<uint8_t> serial = {0x00, 0x80, 0x00, 0x08, ' ', 'b', 'e', 'a', 'f', '1', ' ', ' '};
    EXPECT_EQ(decode_unit_serial_number(serial), "beaf1");
    // Errors: page length beyond the data, another page, a short header.
    std::vector<uint8_t> cut = {0x00, 0x00, 0x00, 0x09, 0x00, 0x80};
    EXPECT_EQ(kind_of([&] { decode_supported_vpd_pages(cut); }), ErrorKind::Protocol);
    EXPECT_EQ(kind_of([&] { decode_unit_serial_number(page); }), ErrorKind::Protocol);
    std::vector<uint8_t> three = {0x00, 0x80, 0x00};
    EXPECT_EQ(kind_of([&] { decode_unit_serial_number(three); }), ErrorKind::Protocol);
}

TEST(InitiatorScsiVpd, DeviceIdentification) {
    std::vector<uint8_t> page = {0x00, 0x83, 0x00, 0x00,
                                 // NAA, binary, LU: 60 00 00 00 00 00 00 01
                                 0x01, 0x03, 0x00, 0x08, 0x60, 0, 0, 0, 0, 0, 0, 0x01,
                                 // T10 vendor ID, ASCII, LU
                                 0x02, 0x01, 0x00, 0x08, 'I', 'E', 'T', ' ', 'a', 'b', ' ', ' ',
                                 // iSCSI (5) SCSI name string, UTF-8, PIV, target port
                                 0x53, 0x98, 0x00, 0x04, 'i', 'q', 'n', 0};
    page[3] = uint8_t(page.size() - 4);
    auto d = decode_device_identification(page);
    ASSERT_EQ(d.size(), 3u);
    EXPECT_EQ(d[0].type, 3);
    EXPECT_EQ(d[0].code_set, 1);
    EXPECT_EQ(d[0].association, 0);
    EXPECT_EQ(d[0].to_string(), "NAA (logical unit): 0x6000000000000001");
    EXPECT_EQ(d[1].to_string(), "T10 vendor ID (logical unit): IET ab");
    EXPECT_TRUE(d[2].piv);
    EXPECT_EQ(d[2].protocol_id, 5);
    EXPECT_EQ(d[2].association, 1);
    EXPECT_EQ(d[2].to_string(), "SCSI name string (target port): iqn");

    // A designator length reaching past the page.
    std::vector<uint8_t> bad = {0x00, 0x83, 0x00, 0x06, 0x01, 0x03, 0x00, 0x08, 0x60, 0x00};
    EXPECT_EQ(kind_of([&] { decode_device_identification(bad); }), ErrorKind::Protocol);
    // A descriptor header cut short.
    std::vector<uint8_t> cut = {0x00, 0x83, 0x00, 0x02, 0x01, 0x03};
    EXPECT_EQ(kind_of([&] { decode_device_identification(cut); }), ErrorKind::Protocol);
}

TEST(InitiatorScsiVpd, BlockLimits) {
    std::vector<uint8_t> page(64, 0);
    page[1] = 0xb0;
    page[3] = 0x3c;
    page[4] = 0x01;                                                      // WSNZ
    page[5] = 0x10;                                                      // max COMPARE AND WRITE
    page[6] = 0x00, page[7] = 0x08;                                      // optimal granularity
    page[8] = 0x00, page[9] = 0x00, page[10] = 0x40, page[11] = 0x00;    // max transfer 16384
    page[12] = 0x00, page[13] = 0x00, page[14] = 0x04, page[15] = 0x00;  // optimal 1024
    page[20] = 0x00, page[21] = 0x40, page[22] = 0x00, page[23] = 0x00;  // max unmap LBAs 0x400000
    page[24] = 0x00, page[25] = 0x00, page[26] = 0x01, page[27] = 0x00;  // 256 descriptors
    page[28] = 0x00, page[29] = 0x00, page[30] = 0x00, page[31] = 0x08;  // granularity 8
    page[32] = 0x80, page[33] = 0x00, page[34] = 0x00, page[35] = 0x02;  // UGAVALID, alignment 2
    page[42] = 0x12, page[43] = 0x34;                                    // max WRITE SAME 0x1234
    BlockLimits l = decode_block_limits(page);
    EXPECT_TRUE(l.wsnz);
    EXPECT_EQ(l.max_compare_and_write_length, 0x10);
    EXPECT_EQ(l.optimal_transfer_granularity, 8);
    EXPECT_EQ(l.max_transfer_length, 16384u);
    EXPECT_EQ(l.optimal_transfer_length, 1024u);
    EXPECT_EQ(l.max_unmap_lba_count, 0x400000u);
    EXPECT_EQ(l.max_unmap_descriptor_count, 256u);
    EXPECT_EQ(l.optimal_unmap_granularity, 8u);
    EXPECT_TRUE(l.unmap_granularity_alignment_valid);
    EXPECT_EQ(l.unmap_granularity_alignment, 2u);
    EXPECT_EQ(l.max_write_same_length, 0x1234u);
    EXPECT_TRUE(l.unmap_supported());

    // An SPC-3-era page of 0Ch bytes: the UNMAP fields stay 0 (not supported).
    std::vector<uint8_t> old(page.begin(), page.begin() + 16);
    old[3] = 0x0c;
    BlockLimits o = decode_block_limits(old);
    EXPECT_EQ(o.max_transfer_length, 16384u);
    EXPECT_EQ(o.max_unmap_lba_count, 0u);
    EXPECT_FALSE(o.unmap_supported());
    // Page length past the bytes received.
    std::vector<uint8_t> cut(page.begin(), page.begin() + 40);
    EXPECT_EQ(kind_of([&] { decode_block_limits(cut); }), ErrorKind::Protocol);
}

TEST(InitiatorScsiVpd, LogicalBlockProvisioning) {
    std::vector<uint8_t> page = {0x00, 0xb2, 0x00, 0x04, 0x00, 0xe4, 0x02, 0x00};
    LogicalBlockProvisioning p = decode_logical_block_provisioning(page);
    EXPECT_TRUE(p.lbpu);
    EXPECT_TRUE(p.lbpws);
    EXPECT_TRUE(p.lbpws10);
    EXPECT_EQ(p.lbprz, 1);
    EXPECT_FALSE(p.anc_sup);
    EXPECT_FALSE(p.dp);
    EXPECT_EQ(p.provisioning_type, 2);
    std::vector<uint8_t> none = {0x00, 0xb2, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00};
    LogicalBlockProvisioning n = decode_logical_block_provisioning(none);
    EXPECT_FALSE(n.lbpu || n.lbpws || n.lbpws10);
    std::vector<uint8_t> shortpage = {0x00, 0xb2, 0x00, 0x02, 0x00, 0xe4};
    EXPECT_EQ(kind_of([&] { decode_logical_block_provisioning(shortpage); }), ErrorKind::Protocol);
}

TEST(InitiatorScsiError, CarriesTheSense) {
    ScsiOutcome o;
    o.status = kStatusCheckCondition;
    o.sense = {0x70, 0, 0x05, 0, 0, 0, 0, 0x0a, 0, 0, 0, 0, 0x24, 0x00};
    ScsiError e("UNMAP (LUN 1) failed: " + describe(o), o);
    EXPECT_EQ(e.kind(), ErrorKind::Io);
    EXPECT_EQ(e.exit_code(), 7);
    EXPECT_EQ(e.status(), kStatusCheckCondition);
    EXPECT_TRUE(e.sense().valid);
    EXPECT_EQ(e.sense().key, kSenseIllegalRequest);
    EXPECT_EQ(e.sense().asc, 0x24);
    EXPECT_NE(std::string(e.what()).find("ILLEGAL REQUEST (asc 0x24 ascq 0x00)"), std::string::npos);
}
