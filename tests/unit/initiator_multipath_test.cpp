// ALUA pieces of the initiator: REPORT TARGET PORT GROUPS (SPC-4 6.36) CDB
// and parameter data, the port group designator of VPD 83h, and the pure
// parts of the multipath layer (what an answer means, which path is next).
// Expected bytes are written out from SPC-4's tables.
#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include "rbio/initiator/error.hpp"
#include "rbio/initiator/multipath.hpp"
#include "rbio/initiator/scsi.hpp"

using namespace rbio::initiator;

namespace {

std::vector<uint8_t> cdb_of(const ScsiCommand& c) { return {c.cdb.begin(), c.cdb.begin() + c.cdb_length}; }

// CHECK CONDITION with fixed-format sense KEY/ASC/ASCQ.
ScsiOutcome check(uint8_t key, uint8_t asc, uint8_t ascq) {
    ScsiOutcome o;
    o.status = kStatusCheckCondition;
    o.sense.assign(18, 0);
    o.sense[0] = 0x70;
    o.sense[2] = key;
    o.sense[7] = 10;
    o.sense[12] = asc;
    o.sense[13] = ascq;
    return o;
}

// Two groups: 1 active/optimized (port 1, preferred), 2 standby (ports 2, 3).
const std::vector<uint8_t> kTwoGroups = {
    0x00, 0x00, 0x00, 0x1c,  // return data length 28
    0x80, 0x8f, 0x00, 0x01,
    0x00, 0x02, 0x00, 0x01,  // PREF, A/O; T/O/U/S/AN/AO sup; group 1; status 2; 1 port
    0x00, 0x00, 0x00, 0x01,  // relative target port 1
    0x02, 0x8f, 0x00, 0x02,
    0x00, 0x00, 0x00, 0x02,  // standby; group 2; 2 ports
    0x00, 0x00, 0x00, 0x02,
    0x00, 0x00, 0x00, 0x03,
};

}  // namespace

TEST(InitiatorAlua, RtpgCdb) {
    std::vector<uint8_t> buf(0x1234);
    ScsiCommand c = make_report_target_port_groups(5, buf);
    EXPECT_EQ(cdb_of(c), (std::vector<uint8_t>{0xa3, 0x0a, 0, 0, 0, 0, 0x00, 0x00, 0x12, 0x34, 0, 0}));
    EXPECT_EQ(c.lun, 5u);
    EXPECT_EQ(c.direction, DataDirection::Read);
    EXPECT_EQ(c.buffer.size(), buf.size());
    ScsiCommand x = make_report_target_port_groups(0, buf, true);
    EXPECT_EQ(x.cdb[1], 0x2a);  // PARAMETER DATA FORMAT 001b, service action 0Ah
}

TEST(InitiatorAlua, RtpgDecodeLengthOnly) {
    TargetPortGroups t = decode_report_target_port_groups(kTwoGroups);
    ASSERT_EQ(t.groups.size(), 2u);
    EXPECT_EQ(t.groups[0].id, 1);
    EXPECT_EQ(t.groups[0].state, AluaState::ActiveOptimized);
    EXPECT_TRUE(t.groups[0].preferred);
    EXPECT_EQ(t.groups[0].supported, 0x8f);
    EXPECT_EQ(t.groups[0].status, 2);
    EXPECT_EQ(t.groups[0].ports, (std::vector<uint16_t>{1}));
    EXPECT_EQ(t.groups[1].id, 2);
    EXPECT_EQ(t.groups[1].state, AluaState::Standby);
    EXPECT_FALSE(t.groups[1].preferred);
    EXPECT_EQ(t.groups[1].ports, (std::vector<uint16_t>{2, 3}));
    ASSERT_NE(t.find(2), nullptr);
    EXPECT_EQ(t.find(2)->state, AluaState::Standby);
    EXPECT_EQ(t.find(3), nullptr);
    EXPECT_EQ(t.implicit_transition_time, 0);
}

TEST(InitiatorAlua, RtpgDecodeExtended) {
    std::vector<uint8_t> d = {0x00, 0x00, 0x00, 0x0c + 4, 0x10, 10,   0,    0,    0x0f, 0x8f,
                              0x00, 0x07, 0x00, 0x00,     0x00, 0x01, 0x00, 0x00, 0x00, 0x07};
    TargetPortGroups t = decode_report_target_port_groups(d, true);
    EXPECT_EQ(t.implicit_transition_time, 10);
    ASSERT_EQ(t.groups.size(), 1u);
    EXPECT_EQ(t.groups[0].id, 7);
    EXPECT_EQ(t.groups[0].state, AluaState::Transitioning);
    EXPECT_EQ(t.groups[0].ports, (std::vector<uint16_t>{7}));
    d[4] = 0x00;  // a length-only header where extended was asked for
    EXPECT_THROW(decode_report_target_port_groups(d, true), InitiatorError);
}

TEST(InitiatorAlua, RtpgDecodeMalformedAndCut) {
    EXPECT_THROW(decode_report_target_port_groups(std::vector<uint8_t>{0, 0}), InitiatorError);
    // A descriptor claiming 3 ports where the data holds 2.
    std::vector<uint8_t> bad = kTwoGroups;
    bad[23] = 3;
    try {
        decode_report_target_port_groups(bad);
        ADD_FAILURE() << "no error";
    } catch (const InitiatorError& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Protocol);
        EXPECT_NE(std::string(e.what()).find("byte 16"), std::string::npos) << e.what();
    }
    // Cut by the allocation length (the return data length says more): the
    // whole descriptors received are kept.
    std::vector<uint8_t> cut(kTwoGroups.begin(), kTwoGroups.begin() + 20);
    TargetPortGroups t = decode_report_target_port_groups(cut);
    ASSERT_EQ(t.groups.size(), 1u);
    EXPECT_EQ(t.groups[0].id, 1);
    // Empty list.
    EXPECT_TRUE(decode_report_target_port_groups(std::vector<uint8_t>{0, 0, 0, 0}).groups.empty());
}

TEST(InitiatorAlua, StateNames) {
    EXPECT_EQ(to_string(AluaState::ActiveOptimized), "active/optimized");
    EXPECT_EQ(to_string(AluaState::ActiveNonOptimized), "active/non-optimized");
    EXPECT_EQ(to_string(AluaState::Standby), "standby");
    EXPECT_EQ(to_string(AluaState::Unavailable), "unavailable");
    EXPECT_EQ(to_string(AluaState::Transitioning), "transitioning");
    EXPECT_EQ(to_string(AluaState(0x5)), "state 0x5");
    EXPECT_TRUE(serves_io(AluaState::ActiveNonOptimized));
    EXPECT_FALSE(serves_io(AluaState::Standby));
}

TEST(InitiatorAlua, PortGroupDesignator) {
    // VPD 83h as an rbio gateway of group 2 sends it: NAA (LU), relative
    // target port 2 and target port group 2 (association target port).
    std::vector<uint8_t> page = {0x00, 0x83, 0x00, 0x1c, 0x01, 0x03, 0x00, 0x08, 0x60, 0x01, 0x40,
                                 0x5a, 0xbc, 0xde, 0xf0, 0x12, 0x61, 0x94, 0x00, 0x04, 0x00, 0x00,
                                 0x00, 0x02, 0x61, 0x95, 0x00, 0x04, 0x00, 0x00, 0x00, 0x02};
    std::vector<Designator> d = decode_device_identification(page);
    ASSERT_EQ(d.size(), 3u);
    EXPECT_EQ(target_port_group(d), std::optional<uint16_t>(2));
    std::vector<Designator> lu = lu_designators(d);
    ASSERT_EQ(lu.size(), 1u);
    EXPECT_EQ(lu[0].type, 3);
    EXPECT_TRUE(lu[0] == d[0]);
    EXPECT_FALSE(lu[0] == d[1]);
    // No port group designator: a target without ALUA.
    EXPECT_EQ(target_port_group(lu), std::nullopt);
}

TEST(InitiatorMultipath, Classify) {
    EXPECT_EQ(classify(ScsiOutcome{}), PathVerdict::Complete);
    EXPECT_EQ(classify(check(0x06, 0x2a, 0x06)), PathVerdict::StateChanged);
    EXPECT_EQ(classify(check(0x06, 0x29, 0x00)), PathVerdict::Retry);
    EXPECT_EQ(classify(check(0x02, 0x04, 0x0a)), PathVerdict::PortRefused);
    EXPECT_EQ(classify(check(0x02, 0x04, 0x0b)), PathVerdict::PortRefused);
    EXPECT_EQ(classify(check(0x02, 0x04, 0x0c)), PathVerdict::PortRefused);
    EXPECT_EQ(refused_state(check(0x02, 0x04, 0x0a)), AluaState::Transitioning);
    EXPECT_EQ(refused_state(check(0x02, 0x04, 0x0b)), AluaState::Standby);
    EXPECT_EQ(refused_state(check(0x02, 0x04, 0x0c)), AluaState::Unavailable);
    // Other NOT READY reasons, medium errors, iSCSI failures: reported as they are.
    EXPECT_EQ(classify(check(0x02, 0x04, 0x02)), PathVerdict::Complete);
    EXPECT_EQ(classify(check(0x03, 0x11, 0x00)), PathVerdict::Complete);
    ScsiOutcome failed;
    failed.response = 1;
    EXPECT_EQ(classify(failed), PathVerdict::Complete);
    ScsiOutcome no_sense;
    no_sense.status = kStatusCheckCondition;
    EXPECT_EQ(classify(no_sense), PathVerdict::Complete);
}

TEST(InitiatorMultipath, ChoosesBestStateRoundRobin) {
    const auto AO = AluaState::ActiveOptimized, ANO = AluaState::ActiveNonOptimized, SB = AluaState::Standby;
    uint32_t cursor = 0;
    // Only the optimized path, however many times.
    std::vector<PathChoice> p = {{true, AO}, {true, SB}};
    for (int i = 0; i < 4; ++i) EXPECT_EQ(choose_path(p, cursor), 0);
    // Both optimized: alternate.
    p = {{true, AO}, {true, AO}};
    std::vector<int> got;
    got.reserve(4);
    for (int i = 0; i < 4; ++i) got.push_back(choose_path(p, cursor));
    EXPECT_EQ(std::count(got.begin(), got.end(), 0), 2);
    EXPECT_EQ(std::count(got.begin(), got.end(), 1), 2);
    EXPECT_NE(got[0], got[1]);
    // Non-optimized only when no optimized one is usable.
    p = {{true, ANO}, {false, AO}, {true, AO}};
    for (int i = 0; i < 3; ++i) EXPECT_EQ(choose_path(p, cursor), 2);
    p = {{true, ANO}, {false, AO}, {true, SB}};
    for (int i = 0; i < 3; ++i) EXPECT_EQ(choose_path(p, cursor), 0);
    // Nothing serves I/O.
    p = {{true, SB}, {false, AO}, {true, AluaState::Transitioning}, {true, AluaState::Unavailable}};
    EXPECT_EQ(choose_path(p, cursor), -1);
    EXPECT_EQ(choose_path(std::vector<PathChoice>{}, cursor), -1);
}

TEST(InitiatorMultipath, ShortState) {
    PathStats s;
    EXPECT_EQ(short_state(s), "down");
    s.up = true;
    EXPECT_EQ(short_state(s), "unknown");
    s.state_known = true;
    s.state = AluaState::ActiveOptimized;
    EXPECT_EQ(short_state(s), "ao");
    s.state = AluaState::Standby;
    EXPECT_EQ(short_state(s), "standby");
}

// 0 would end the session at the first command that waits for ALUA to
// name the next active path. Refused before any login (nothing listens on
// these portals).
TEST(InitiatorMultipath, RefusesNoWaitForAPath) {
    MultipathOptions mo;
    mo.session.target_name = "iqn.2026-01.org.rbio:t";
    mo.no_path_timeout = std::chrono::milliseconds(0);
    const std::vector<Portal> portals{Portal::parse("127.0.0.1:1"), Portal::parse("127.0.0.1:2")};
    try {
        (void)MultipathSession::open(portals, mo);
        FAIL() << "opened";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("must not be 0"), std::string::npos) << e.what();
    }
}

// What a failed path's commands do under Fence::LuReset: those that change
// nothing move at once, the rest wait for the fence. Unknown codes wait.
TEST(InitiatorMultipath, MayChangeLu) {
    for (uint8_t op : {0x00, 0x03, 0x08, 0x12, 0x1a, 0x25, 0x28, 0x2f, 0x35, 0x5a, 0x5e, 0x88, 0x8f, 0x91,
                       0x9e, 0xa0, 0xa3, 0xa8})
        EXPECT_FALSE(may_change_lu(op)) << std::hex << int(op);
    // WRITE(6/10/12/16), WRITE AND VERIFY, WRITE SAME(10/16), UNMAP,
    // COMPARE AND WRITE, EXTENDED COPY, PERSISTENT RESERVE OUT, MODE
    // SELECT(6/10), START STOP UNIT, MAINTENANCE OUT, FORMAT UNIT, and
    // codes nobody defined.
    for (uint8_t op : {0x0a, 0x2a, 0xaa, 0x8a, 0x2e, 0x41, 0x93, 0x42, 0x89, 0x83, 0x5f, 0x15, 0x55, 0x1b,
                       0xa4, 0x04, 0xff, 0xc0})
        EXPECT_TRUE(may_change_lu(op)) << std::hex << int(op);
}
