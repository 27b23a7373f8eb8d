// PDU framing: BHS fields (RFC 7143 §11.2.1), AHS (§11.2.2), padding and
// digests (§11.1, §13.1), and the checks on what the wire says.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "iser_opt_test_pdus.hpp"
#include "rbio/iser/crc32c.hpp"
#include "rbio/iser/pdu.hpp"

namespace {

using namespace rbio::iser;
using namespace rbio::iser::test;
using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(IserBhs, FieldsRoundTripThroughTheirBytes) {
    Bhs b(Opcode::ScsiCommand);
    b.set_opcode(Opcode::ScsiCommand, true)
        .set_flags(0x21)
        .set_final(true)
        .set_total_ahs_words(3)
        .set_data_segment_length(0x0a0b0c)
        .set_lun(0x0001000000000000ull)
        .set_itt(0x11223344)
        .set_expected_data_transfer_length(65536)
        .set_cmd_sn(7)
        .set_exp_stat_sn(9);
    const auto& raw = b.raw();
    EXPECT_EQ(raw[0], 0x41);  // I bit + opcode 0x01
    EXPECT_EQ(raw[1], 0xa1);  // F + the flags
    EXPECT_EQ(raw[4], 3);
    EXPECT_EQ(raw[5], 0x0a);  // DataSegmentLength is 24-bit big-endian
    EXPECT_EQ(raw[6], 0x0b);
    EXPECT_EQ(raw[7], 0x0c);
    EXPECT_EQ(raw[8], 0x00);
    EXPECT_EQ(raw[9], 0x01);
    EXPECT_EQ(raw[16], 0x11);
    EXPECT_EQ(raw[19], 0x44);
    BhsView v = b.view();
    EXPECT_EQ(v.opcode(), Opcode::ScsiCommand);
    EXPECT_TRUE(v.immediate());
    EXPECT_TRUE(v.final_bit());
    EXPECT_EQ(v.flags(), 0xa1);
    EXPECT_EQ(v.total_ahs_words(), 3);
    EXPECT_EQ(v.ahs_length(), 12u);
    EXPECT_EQ(v.data_segment_length(), 0x0a0b0cu);
    EXPECT_EQ(v.lun(), 0x0001000000000000ull);
    EXPECT_EQ(v.itt(), 0x11223344u);
    EXPECT_EQ(v.expected_data_transfer_length(), 65536u);
    EXPECT_EQ(v.cmd_sn(), 7u);
    EXPECT_EQ(v.exp_stat_sn(), 9u);
    b.set_final(false);
    EXPECT_FALSE(b.view().final_bit());
    EXPECT_EQ(b.view().flags(), 0x21);
}

TEST(IserBhs, TargetFieldsAndCdb) {
    Bhs b(Opcode::DataIn);
    b.set_ttt(0xffffffff)
        .set_stat_sn(1)
        .set_exp_cmd_sn(2)
        .set_max_cmd_sn(3)
        .set_data_sn(4)
        .set_buffer_offset(8192)
        .set_residual_count(5);
    BhsView v = b.view();
    EXPECT_FALSE(v.immediate());
    EXPECT_EQ(v.ttt(), 0xffffffffu);
    EXPECT_EQ(v.stat_sn(), 1u);
    EXPECT_EQ(v.exp_cmd_sn(), 2u);
    EXPECT_EQ(v.max_cmd_sn(), 3u);
    EXPECT_EQ(v.data_sn(), 4u);
    EXPECT_EQ(v.buffer_offset(), 8192u);
    EXPECT_EQ(v.residual_count(), 5u);
    const uint8_t read10[] = {0x28, 0, 0, 0, 0x10, 0, 0, 0, 8, 0};
    Bhs c(Opcode::ScsiCommand);
    c.set_cdb(read10);
    EXPECT_EQ(c.view().cdb()[0], 0x28);
    EXPECT_EQ(c.view().cdb()[8], 8);
    EXPECT_EQ(c.view().cdb()[15], 0);
}

TEST(IserPduLayout, PaddingAndDigestsFollowSection11_1) {
    for (uint32_t len = 0; len < 12; ++len) {
        PduLayout l{8, len, true, true};
        EXPECT_EQ(l.header_bytes(), 48u + 8 + 4);
        EXPECT_EQ((len + l.padding()) % 4, 0u);
        EXPECT_LT(l.padding(), 4u);
        // No DataDigest after an empty data segment.
        EXPECT_EQ(l.data_digest_bytes(), len == 0 ? 0u : 4u);
        EXPECT_EQ(l.total_bytes(), 60u + pad4(len) + (len ? 4 : 0));
    }
    PduLayout plain{0, 5, false, false};
    EXPECT_EQ(plain.total_bytes(), 48u + 8);
}

TEST(IserPduValidate, UnknownOpcodeNamesValueAndSender) {
    Bhs b;
    b.raw()[0] = 0x3f;  // Reject: a target opcode
    auto e = validate_bhs(b.view(), PduLimits{}, PduSender::Initiator);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->code, PduErrc::UnknownOpcode);
    EXPECT_EQ(e->message, "unknown opcode 0x3f from initiator");
    b.raw()[0] = 0x01;
    e = validate_bhs(b.view(), PduLimits{}, PduSender::Target);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->message, "unknown opcode 0x01 from target");
    b.raw()[0] = 0x07;  // undefined for anyone
    EXPECT_TRUE(validate_bhs(b.view(), PduLimits{}, PduSender::Initiator));
    b.raw()[0] = 0x1d;  // vendor-specific: framed, rejected above us
    EXPECT_FALSE(validate_bhs(b.view(), PduLimits{}, PduSender::Initiator));
    b.raw()[0] = 0x80 | 0x40 | 0x05;  // reserved and I bits do not change the opcode
    EXPECT_FALSE(validate_bhs(b.view(), PduLimits{}, PduSender::Initiator));
}

TEST(IserPduValidate, DataSegmentBeyondMaxRecvDataSegmentLength) {
    Bhs b(Opcode::DataOut);
    b.set_data_segment_length(1048576).set_itt(0x10);
    PduLimits lim;
    lim.max_recv_data_segment_length = 262144;
    auto e = validate_bhs(b.view(), lim, PduSender::Initiator);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->code, PduErrc::DataSegmentTooLong);
    EXPECT_THAT(e->message,
                StartsWith("data segment length 1048576 exceeds MaxRecvDataSegmentLength 262144"));
    EXPECT_THAT(e->message, HasSubstr("Data-Out"));
    b.set_data_segment_length(262144);
    EXPECT_FALSE(validate_bhs(b.view(), lim, PduSender::Initiator));
}

TEST(IserPduValidate, AhsBeyondLimit) {
    Bhs b(Opcode::ScsiCommand);
    b.set_total_ahs_words(17);
    PduLimits lim;
    lim.max_ahs_length = 64;
    auto e = validate_bhs(b.view(), lim, PduSender::Initiator);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->code, PduErrc::AhsTooLong);
    EXPECT_THAT(e->message, StartsWith("total AHS length 68 exceeds limit 64"));
    b.set_total_ahs_words(16);
    EXPECT_FALSE(validate_bhs(b.view(), lim, PduSender::Initiator));
}

// The per-PDU check (bhs_error) refuses exactly what validate_bhs refuses,
// for the same reason: every opcode byte, from either side, with AHS and
// data segment lengths at, below and beyond the limits.
TEST(IserPduValidate, BhsErrorAgreesWithValidateBhs) {
    PduLimits lim;
    lim.max_recv_data_segment_length = 8192;
    lim.max_ahs_length = 64;
    size_t refused = 0, cases = 0;
    for (unsigned op = 0; op < 256; ++op) {
        for (PduSender from : {PduSender::Initiator, PduSender::Target}) {
            for (uint8_t ahs_words : {uint8_t(0), uint8_t(16), uint8_t(17), uint8_t(255)}) {
                for (uint32_t dsl : {0u, 8192u, 8193u, 0xffffffu}) {
                    Bhs b;
                    b.raw()[0] = uint8_t(op);
                    b.set_total_ahs_words(ahs_words).set_data_segment_length(dsl);
                    const auto code = bhs_error(b.view(), lim, from);
                    const auto e = validate_bhs(b.view(), lim, from);
                    ASSERT_EQ(code.has_value(), e.has_value())
                        << "opcode " << op << " ahs " << int(ahs_words);
                    if (e) {
                        EXPECT_EQ(*code, e->code) << "opcode " << op;
                    }
                    refused += e.has_value();
                    ++cases;
                }
            }
        }
    }
    EXPECT_GT(refused, 0u);
    EXPECT_LT(refused, cases);
}

TEST(IserAhs, ReaderWalksEntriesAndCatchesOverruns) {
    // Extended CDB of 20 bytes (AHSLength 5: reserved byte + CDB bytes 16..19)
    // then a Bidirectional Read Expected Data Transfer Length (AHSLength 5).
    Bytes ahs = {0, 5, 1, 0, 0xaa, 0xbb, 0xcc, 0xdd, 0, 5, 2, 0, 0, 0, 0x10, 0};
    AhsReader r(ahs);
    auto a = r.next();
    ASSERT_TRUE(a);
    EXPECT_EQ(a->type, uint8_t(AhsType::ExtendedCdb));
    EXPECT_EQ(a->body.size(), 5u);
    EXPECT_EQ(a->body[1], 0xaa);
    auto b = r.next();
    ASSERT_TRUE(b);
    EXPECT_EQ(b->type, uint8_t(AhsType::BidirectionalReadLength));
    EXPECT_EQ(b->body[3], 0x10);
    EXPECT_FALSE(r.next());
    EXPECT_FALSE(r.malformed());
    EXPECT_FALSE(validate_ahs(ahs));

    ahs[8] = 0x01;  // second AHS now claims 261 bytes
    auto e = validate_ahs(ahs);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->code, PduErrc::MalformedAhs);
    EXPECT_EQ(e->message, "AHS at offset 8 claims 261 bytes, beyond TotalAHSLength 16");
}

TEST(IserPduEncode, DigestsAreCrc32cLittleEndianAndPaddingIsZero) {
    Parts p = make_pdu(Opcode::DataOut, 0x42, 1, 5);
    Bytes wire = encode(p, true, true);
    ASSERT_EQ(wire.size(), 48u + 4 + 4 + 8 + 4);
    uint32_t hd = crc32c({wire.data(), 52});
    EXPECT_EQ(wire[52], uint8_t(hd));
    EXPECT_EQ(wire[55], uint8_t(hd >> 24));
    EXPECT_EQ(load_digest(wire.data() + 52), hd);
    EXPECT_EQ(0, std::memcmp(wire.data() + 56, p.data.data(), 5));
    EXPECT_EQ(wire[61], 0);
    EXPECT_EQ(wire[62], 0);
    EXPECT_EQ(wire[63], 0);
    EXPECT_EQ(load_digest(wire.data() + 64), crc32c({wire.data() + 56, 8}));
    // Too small an output buffer writes nothing.
    Bytes small(wire.size() - 1);
    EXPECT_EQ(encode_pdu(small, p.header, p.data, true, true), 0u);
    // An empty data segment has neither padding nor data digest.
    EXPECT_EQ(encode(make_pdu(Opcode::NopOut, 1, 0, 0), true, true).size(), 52u);
}

TEST(IserPduNames, OpcodesAndErrors) {
    EXPECT_STREQ(opcode_name(0x01), "SCSI-Command");
    EXPECT_STREQ(opcode_name(0x31), "R2T");
    EXPECT_STREQ(opcode_name(0x0f), "unknown");
    EXPECT_STREQ(opcode_name(0xff), "unknown");
    EXPECT_TRUE(is_known_opcode(0x3f, PduSender::Target));
    EXPECT_FALSE(is_known_opcode(0x3f, PduSender::Initiator));
    EXPECT_STREQ(to_string(PduErrc::HeaderDigestMismatch), "header-digest-mismatch");
}

}  // namespace
