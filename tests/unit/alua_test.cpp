// ALUA: the groups file, which commands each state lets through (SPC-4
// 5.16.2.4), REPORT TARGET PORT GROUPS and VPD 0x83 bytes (SPC-4 6.37,
// 7.8.6), the settings, and a gateway re-reading its groups file.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <sys/stat.h>
#include <array>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "rbio/bs/alua.h"
#include "rbio/bs/alua.hpp"
#include "rbio/bs/alua_gateway.hpp"
#include "rbio/bs/alua_groups_reader.hpp"
#include "rbio/bs/alua_settings.hpp"
#include "rbio/bs/config_file.hpp"
#include "rbio/bs/tcp_transport.h"

namespace {

using namespace rbio::bs::alua;
using rbio::bs::ConfigError;
using namespace std::chrono_literals;

// Long enough for a read of a local file on a loaded machine: a poll
// returns as soon as the read does.
constexpr std::chrono::milliseconds kWait = 10s;

// After a read that did not return is let go: polls (which no longer wait
// for that read) until one has news, for up to kWait.
Gateway::Poll poll_until_news(Gateway& g) {
    const auto end = std::chrono::steady_clock::now() + kWait;
    for (;;) {
        auto r = g.poll(50ms);
        if (r != Gateway::Poll::unchanged || std::chrono::steady_clock::now() >= end) return r;
        std::this_thread::sleep_for(10ms);
    }
}

struct Env {
    Env() { clear(); }
    ~Env() { clear(); }
    static void clear() {
        for (const char* v : {"RBIO_CONFIG", "RBIO_PORT_GROUP", "RBIO_ALUA_GROUPS"}) ::unsetenv(v);
    }
};

struct TempDir {
    TempDir() {
        char tmpl[] = "/tmp/rbio-alua-XXXXXX";
        path = ::mkdtemp(tmpl);
    }
    ~TempDir() { std::filesystem::remove_all(path); }
    std::string file(const std::string& name, const std::string& text) const {
        std::string p = path + "/" + name;
        std::ofstream(p) << text;
        return p;
    }
    // Replaces `name` atomically, as an admin's tooling should.
    void replace(const std::string& name, const std::string& text) const {
        std::string tmp = file(name + ".new", text);
        std::filesystem::rename(tmp, path + "/" + name);
    }
    std::string path;
};

std::array<uint8_t, 12> rtpg_cdb(uint8_t format, uint32_t alloc) {
    return {0xa3,
            uint8_t(0x0a | format << 5),
            0,
            0,
            0,
            0,
            uint8_t(alloc >> 24),
            uint8_t(alloc >> 16),
            uint8_t(alloc >> 8),
            uint8_t(alloc),
            0,
            0};
}

TEST(AluaGroups, ParsesEveryStateSortedById) {
    auto t = parse_groups(
        "# two gateways\n2 standby\n1   active/optimized  # the first\n\n"
        "7\tactive/non-optimized\n9 unavailable\n3 transitioning\n",
        "groups");
    ASSERT_EQ(t.size(), 5u);
    EXPECT_EQ(t[0], (Group{1, State::active_optimized}));
    EXPECT_EQ(t[1], (Group{2, State::standby}));
    EXPECT_EQ(t[2], (Group{3, State::transitioning}));
    EXPECT_EQ(t[3], (Group{7, State::active_non_optimized}));
    EXPECT_EQ(t[4], (Group{9, State::unavailable}));
    EXPECT_EQ(state_of(t, 7), State::active_non_optimized);
    EXPECT_FALSE(state_of(t, 4));
}

TEST(AluaGroups, RejectsBadLinesNamingThem) {
    auto error_of = [](const std::string& text) {
        try {
            parse_groups(text, "g");
        } catch (const ConfigError& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    EXPECT_EQ(error_of("1 active/optimized\n2 sleeping\n"),
              "g:2: unknown state 'sleeping' (known: active/optimized, active/non-optimized, "
              "standby, unavailable, transitioning)");
    EXPECT_EQ(error_of("0 standby"), "g:1: port group '0' is not a number from 1 to 65535");
    EXPECT_EQ(error_of("65536 standby"), "g:1: port group '65536' is not a number from 1 to 65535");
    EXPECT_EQ(error_of("x1 standby"), "g:1: port group 'x1' is not a number from 1 to 65535");
    EXPECT_EQ(error_of("standby"), "g:1: expected 'ID STATE', got 'standby'");
    EXPECT_EQ(error_of("1 standby\n1 active/optimized"), "g:2: port group 1 is listed twice");
    std::string many;
    for (int i = 1; i <= 257; ++i) many += std::to_string(i) + " standby\n";
    EXPECT_EQ(error_of(many), "g:257: more than 256 port groups");
}

TEST(AluaAccess, ActiveStatesRunEverythingButGatewayLocalCommands) {
    for (State s : {State::active_optimized, State::active_non_optimized}) {
        for (uint8_t op : {0x00, 0x28, 0x2a, 0x88, 0x8a, 0x35, 0x42, 0x93, 0x9e})
            EXPECT_FALSE(check_access(s, std::array<uint8_t, 1>{op})) << int(op);
    }
}

TEST(AluaAccess, ReservationsModeSelectAndCompareAndWriteAreRefusedInEveryState) {
    for (State s : {State::active_optimized, State::standby, State::transitioning}) {
        for (uint8_t op : {0x15, 0x55, 0x16, 0x17, 0x56, 0x57, 0x5e, 0x5f, 0x89, 0x8b}) {
            auto r = check_access(s, std::array<uint8_t, 1>{op});
            ASSERT_TRUE(r) << int(op);
            EXPECT_EQ(r->key, 0x05);
            EXPECT_EQ(r->asc, 0x2000);
        }
    }
}

TEST(AluaAccess, WhatIsRefusedEverywhereIsNotOffered) {
    for (uint8_t op : {0x15, 0x55, 0x16, 0x17, 0x56, 0x57, 0x5e, 0x5f, 0x8b})
        EXPECT_TRUE(refused_everywhere(op)) << int(op);
    // COMPARE AND WRITE runs on RBD; I/O and ALUA's own commands run.
    for (uint8_t op : {0x89, 0x28, 0x2a, 0x12, 0xa3, 0x25}) EXPECT_FALSE(refused_everywhere(op)) << int(op);
}

TEST(AluaAccess, CompareAndWriteRunsWhereTheStoreMakesItAtomic) {
    // An RBD image: the OSD compares and writes, whatever gateway asks.
    EXPECT_FALSE(check_access(State::active_optimized, std::array<uint8_t, 1>{0x89}, true));
    EXPECT_FALSE(check_access(State::active_non_optimized, std::array<uint8_t, 1>{0x89}, true));
    // Still gated by the state, and the rest stays refused.
    auto standby = check_access(State::standby, std::array<uint8_t, 1>{0x89}, true);
    ASSERT_TRUE(standby);
    EXPECT_EQ(standby->asc, 0x040b);
    for (uint8_t op : {0x16, 0x5e, 0x5f, 0x8b}) {
        auto r = check_access(State::active_optimized, std::array<uint8_t, 1>{op}, true);
        ASSERT_TRUE(r) << int(op);
        EXPECT_EQ(r->asc, 0x2000);
    }
}

TEST(AluaAccess, StandbyRefusesIoWithNotReady040B) {
    for (uint8_t op : {0x00, 0x08, 0x28, 0x88, 0x0a, 0x2a, 0x8a, 0x35, 0x42, 0x9e}) {
        auto r = check_access(State::standby, std::array<uint8_t, 1>{op});
        ASSERT_TRUE(r) << int(op);
        EXPECT_EQ(r->key, 0x02);
        EXPECT_EQ(r->asc, 0x040b);
    }
    // SPC-4's list (MODE SELECT is on it too, but refused on every gateway).
    for (uint8_t op : {0x12, 0xa0, 0x03, 0xa3, 0xa4, 0x1a, 0x5a, 0x4d, 0x4c, 0x1c, 0x1d})
        EXPECT_FALSE(check_access(State::standby, std::array<uint8_t, 1>{op})) << int(op);
}

TEST(AluaAccess, StandbyAnswersReadCapacityButNoOtherServiceActionIn) {
    // A host probing the LU through a standby port must learn its size.
    EXPECT_FALSE(check_access(State::standby, std::array<uint8_t, 10>{0x25}));
    EXPECT_FALSE(check_access(State::standby, std::array<uint8_t, 16>{0x9e, 0x10}));
    // The service action is the low five bits.
    EXPECT_FALSE(check_access(State::standby, std::array<uint8_t, 16>{0x9e, 0xf0}));
    // GET LBA STATUS and the rest are I/O.
    for (uint8_t action : {0x12, 0x11, 0x00}) {
        auto r = check_access(State::standby, std::array<uint8_t, 16>{0x9e, action});
        ASSERT_TRUE(r) << int(action);
        EXPECT_EQ(r->asc, 0x040b);
    }
    // Only standby: unavailable and transitioning still refuse it.
    EXPECT_TRUE(check_access(State::unavailable, std::array<uint8_t, 10>{0x25}));
    EXPECT_TRUE(check_access(State::transitioning, std::array<uint8_t, 16>{0x9e, 0x10}));
}

TEST(AluaAccess, UnavailableAndTransitioningAnswerOnlyWhereTheHostIs) {
    for (auto [state, asc] :
         {std::pair{State::unavailable, 0x040c}, std::pair{State::transitioning, 0x040a}}) {
        for (uint8_t op : {0x00, 0x28, 0x2a, 0x1a, 0x35}) {
            auto r = check_access(state, std::array<uint8_t, 1>{op});
            ASSERT_TRUE(r) << int(op);
            EXPECT_EQ(r->key, 0x02);
            EXPECT_EQ(r->asc, asc);
        }
        for (uint8_t op : {0x12, 0xa0, 0x03, 0xa3})
            EXPECT_FALSE(check_access(state, std::array<uint8_t, 1>{op})) << int(op);
    }
}

TEST(AluaRtpg, LengthOnlyFormatListsEachGroupWithItsPort) {
    GroupTable t{{1, State::active_optimized}, {2, State::standby}};
    auto cdb = rtpg_cdb(0, 1024);
    ASSERT_TRUE(is_report_target_port_groups(cdb));
    std::vector<uint8_t> out(64, 0xee);
    auto n = report_target_port_groups(t, cdb, false, out);
    ASSERT_TRUE(n);
    ASSERT_EQ(*n, 4u + 2 * 12);
    const std::vector<uint8_t> want = {
        0,    0,    0, 24,                             // RETURN DATA LENGTH
        0x00, 0x8f, 0, 1,  0, 0x00, 0, 1, 0, 0, 0, 1,  // group 1 active/optimized, port 1
        0x02, 0x8f, 0, 2,  0, 0x00, 0, 1, 0, 0, 0, 2,  // group 2 standby, port 2
    };
    EXPECT_EQ(std::vector<uint8_t>(out.begin(), out.begin() + long(*n)), want);
}

TEST(AluaRtpg, ExtendedHeaderAndImplicitChangeStatus) {
    GroupTable t{{0x1234, State::transitioning}};
    auto cdb = rtpg_cdb(1, 1024);
    std::vector<uint8_t> out(64);
    auto n = report_target_port_groups(t, cdb, true, out);
    ASSERT_TRUE(n);
    ASSERT_EQ(*n, 8u + 12);
    const std::vector<uint8_t> want = {
        0, 0, 0, 16,   0x10, implicit_transition_seconds, 0, 0, 0x0f, 0x8f, 0x12, 0x34, 0, 0x02, 0,
        1, 0, 0, 0x12, 0x34};
    EXPECT_EQ(std::vector<uint8_t>(out.begin(), out.begin() + long(*n)), want);
}

TEST(AluaRtpg, TruncatesToTheBufferAndRejectsUnknownFormats) {
    GroupTable t{{1, State::active_optimized}, {2, State::standby}};
    std::vector<uint8_t> small(6, 0xee);
    auto n = report_target_port_groups(t, rtpg_cdb(0, 6), false, small);
    ASSERT_TRUE(n);
    EXPECT_EQ(*n, 28u);  // the full length: the caller reports the residual
    EXPECT_EQ(small, (std::vector<uint8_t>{0, 0, 0, 24, 0x00, 0x8f}));
    EXPECT_FALSE(report_target_port_groups(t, rtpg_cdb(2, 64), false, small));
    auto other_sa = rtpg_cdb(0, 64);
    other_sa[1] = 0x0c;  // REPORT SUPPORTED OPERATION CODES
    EXPECT_FALSE(is_report_target_port_groups(other_sa));
    EXPECT_FALSE(is_report_target_port_groups(std::array<uint8_t, 6>{0xa3, 0x0a, 0, 0, 0, 0}));
}

TEST(AluaVpd, PortDesignatorsNameTheGroupAndItsPort) {
    std::array<uint8_t, 16> out{};
    ASSERT_EQ(port_designators(0x0102, out), 16u);
    EXPECT_EQ(out, (std::array<uint8_t, 16>{0x01, 0x14, 0, 4, 0, 0, 1, 2, 0x01, 0x15, 0, 4, 0, 0, 1, 2}));
    std::array<uint8_t, 15> small{};
    EXPECT_EQ(port_designators(1, small), 0u);
}

TEST(AluaSettings, OffByDefaultThenFileThenEnvironment) {
    Env env;
    TempDir d;
    ::setenv("RBIO_CONFIG", d.file("empty.conf", "").c_str(), 1);
    EXPECT_FALSE(load_settings().enabled());

    auto conf = d.file("tgtd.conf", "transport = on\nport_group = 3\nalua_groups_file = /etc/rbio/groups\n");
    ::setenv("RBIO_CONFIG", conf.c_str(), 1);
    auto s = load_settings();
    EXPECT_EQ(s.port_group, 3);
    EXPECT_EQ(s.groups_file, "/etc/rbio/groups");
    EXPECT_EQ(s.source, conf);

    ::setenv("RBIO_PORT_GROUP", "4", 1);
    ::setenv("RBIO_ALUA_GROUPS", "none", 1);
    s = load_settings();
    EXPECT_EQ(s.port_group, 4);
    EXPECT_EQ(s.groups_file, "");
    EXPECT_EQ(s.source, conf + " + RBIO_PORT_GROUP,RBIO_ALUA_GROUPS");
}

TEST(AluaSettings, BadValuesNameTheirSource) {
    Env env;
    TempDir d;
    auto error_of = [] {
        try {
            load_settings();
        } catch (const ConfigError& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    auto conf = d.file("bad.conf", "port_group = 70000\n");
    ::setenv("RBIO_CONFIG", conf.c_str(), 1);
    EXPECT_EQ(error_of(), conf + ":1: port_group: '70000' is not a port group from 1 to 65535 (0: no ALUA)");
    ::setenv("RBIO_CONFIG", d.file("ok.conf", "").c_str(), 1);
    ::setenv("RBIO_PORT_GROUP", "two", 1);
    EXPECT_EQ(
        error_of(),
        "environment RBIO_PORT_GROUP: port_group: 'two' is not a port group from 1 to 65535 (0: no ALUA)");
    ::unsetenv("RBIO_PORT_GROUP");
    ::setenv("RBIO_ALUA_GROUPS", "/etc/rbio/groups", 1);
    EXPECT_NE(error_of().find("alua_groups_file is set but port_group is not"), std::string::npos);
    ::setenv("RBIO_PORT_GROUP", "1", 1);
    ::setenv("RBIO_ALUA_GROUPS", "groups", 1);
    EXPECT_EQ(error_of(),
              "environment RBIO_ALUA_GROUPS: alua_groups_file: 'groups' is not an absolute path (or none)");
    ::unsetenv("RBIO_ALUA_GROUPS");
    conf = d.file("rel.conf", "port_group = 1\nalua_groups_file = groups\n");
    ::setenv("RBIO_CONFIG", conf.c_str(), 1);
    EXPECT_EQ(error_of(), conf + ":2: alua_groups_file: 'groups' is not an absolute path (or none)");
    // Empty (an unfilled variable) would make the gateway active/optimized
    // alone, whatever the other gateways' file says.
    conf = d.file("empty.conf", "port_group = 1\nalua_groups_file =\n");
    ::setenv("RBIO_CONFIG", conf.c_str(), 1);
    EXPECT_EQ(
        error_of(),
        conf +
            ":2: alua_groups_file: empty: give the groups file's absolute path, or none for a gateway alone");
    ::setenv("RBIO_CONFIG",
             d.file("ok2.conf", "port_group = 1\nalua_groups_file = /etc/rbio/groups\n").c_str(), 1);
    ::setenv("RBIO_ALUA_GROUPS", "", 1);
    EXPECT_EQ(
        error_of(),
        "environment RBIO_ALUA_GROUPS: alua_groups_file: empty: give the groups file's absolute path, or "
        "none for a gateway alone");
}

TEST(AluaSettings, TheTransportSettingsAcceptAluaKeys) {
    Env env;
    TempDir d;
    ::setenv("RBIO_CONFIG",
             d.file("t.conf", "port_group = 2\nalua_groups_file = /x\ncoalesce = off\n").c_str(), 1);
    rbio_tp_settings s;
    char err[256] = "";
    ASSERT_EQ(rbio_tp_load_settings(&s, err, sizeof err), 0) << err;
    EXPECT_EQ(s.coalesce, 0);
}

TEST(AluaGateway, AloneWithoutAGroupsFile) {
    Settings s;
    s.port_group = 5;
    Gateway g(s);
    EXPECT_EQ(g.own_state(), State::active_optimized);
    EXPECT_EQ(g.poll(kWait), Gateway::Poll::unchanged);
    EXPECT_EQ(g.groups(), (GroupTable{{5, State::active_optimized}}));
    EXPECT_TRUE(g.file_ok());  // no file to be wrong
}

TEST(AluaGateway, FollowsTheGroupsFileAndKeepsStateOnABadOne) {
    TempDir d;
    Settings s;
    s.port_group = 2;
    s.groups_file = d.path + "/groups";
    Gateway g(s);
    EXPECT_EQ(g.own_state(), State::transitioning);  // not read yet: serve nothing
    EXPECT_FALSE(g.file_ok());

    EXPECT_EQ(g.poll(kWait), Gateway::Poll::bad);  // missing
    EXPECT_NE(g.message().find("No such file"), std::string::npos) << g.message();
    EXPECT_EQ(g.poll(kWait), Gateway::Poll::unchanged);  // reported once
    EXPECT_EQ(g.own_state(), State::transitioning);
    EXPECT_FALSE(g.file_ok());

    d.replace("groups", "1 active/optimized\n2 standby\n");
    EXPECT_EQ(g.poll(kWait), Gateway::Poll::changed);
    EXPECT_EQ(g.own_state(), State::standby);
    EXPECT_TRUE(g.file_ok());
    EXPECT_TRUE(g.changed_implicitly());
    EXPECT_EQ(g.poll(kWait), Gateway::Poll::unchanged);

    d.replace("groups", "1 standby\n2 active/optimized\n");
    EXPECT_EQ(g.poll(kWait), Gateway::Poll::changed);
    EXPECT_EQ(g.own_state(), State::active_optimized);
    EXPECT_EQ(g.groups(), (GroupTable{{1, State::standby}, {2, State::active_optimized}}));

    d.replace("groups", "1 active/optimized\n2 sleeping\n");
    EXPECT_EQ(g.poll(kWait), Gateway::Poll::bad);
    EXPECT_NE(g.message().find("unknown state 'sleeping'"), std::string::npos) << g.message();
    EXPECT_NE(g.message().find("port group 2 stays active/optimized"), std::string::npos) << g.message();
    EXPECT_EQ(g.poll(kWait), Gateway::Poll::unchanged);  // the same bad version: once
    EXPECT_EQ(g.own_state(), State::active_optimized);
    EXPECT_FALSE(g.file_ok());  // and still not in use

    // The good version back, states as they were: in use again.
    d.replace("groups", "1 standby\n2 active/optimized\n");
    EXPECT_EQ(g.poll(kWait), Gateway::Poll::unchanged);
    EXPECT_TRUE(g.file_ok());

    d.replace("groups", "1 active/optimized\n");
    EXPECT_EQ(g.poll(kWait), Gateway::Poll::bad);
    EXPECT_NE(g.message().find("does not list this gateway's port group 2"), std::string::npos);
    EXPECT_EQ(g.own_state(), State::active_optimized);

    EXPECT_FALSE(g.file_ok());

    d.replace("groups", "1 active/optimized\n2 active/non-optimized\n");
    EXPECT_EQ(g.poll(kWait), Gateway::Poll::changed);
    EXPECT_EQ(g.own_state(), State::active_non_optimized);
    EXPECT_TRUE(g.file_ok());
}

TEST(AluaGateway, SeesAnEditInPlaceThatKeepsSizeAndTimes) {
    // What stat() cannot tell apart -- an edit in place within one
    // timestamp tick, or a network file system answering stat() from its
    // cache -- the text does.
    TempDir d;
    Settings s;
    s.port_group = 2;
    s.groups_file = d.file("groups", "1 active/optimized\n2 standby\n");
    struct stat before {};
    ASSERT_EQ(::stat(s.groups_file.c_str(), &before), 0);
    Gateway g(s);
    EXPECT_EQ(g.poll(kWait), Gateway::Poll::changed);
    EXPECT_EQ(g.own_state(), State::standby);

    std::ofstream(s.groups_file, std::ios::in | std::ios::out) << "1 standby\n2 active/optimized\n";
    const timespec times[2] = {before.st_atim, before.st_mtim};
    ASSERT_EQ(::utimensat(AT_FDCWD, s.groups_file.c_str(), times, 0), 0);
    struct stat after {};
    ASSERT_EQ(::stat(s.groups_file.c_str(), &after), 0);
    EXPECT_EQ(after.st_size, before.st_size);
    EXPECT_EQ(g.poll(kWait), Gateway::Poll::changed);
    EXPECT_EQ(g.own_state(), State::active_optimized);
    EXPECT_EQ(g.poll(kWait), Gateway::Poll::unchanged);
}

TEST(AluaGateway, RefusesAFileTooLargeToBeAGroupsFile) {
    TempDir d;
    Settings s;
    s.port_group = 1;
    s.groups_file = d.file("groups", "1 active/optimized\n" + std::string(70000, '#'));
    Gateway g(s);
    EXPECT_EQ(g.poll(kWait), Gateway::Poll::bad);
    EXPECT_NE(g.message().find("larger than 64 KiB, not a groups file"), std::string::npos) << g.message();
    EXPECT_EQ(g.poll(kWait), Gateway::Poll::unchanged);  // once
    EXPECT_EQ(g.own_state(), State::transitioning);
}

// A groups file on a file system that stops answering: a FIFO without a
// writer blocks open() as a hard NFS mount whose server is gone does.
TEST(AluaGateway, ReportsAGroupsFileThatDoesNotAnswerAndGoesOnWhenItDoes) {
    TempDir d;
    Settings s;
    s.port_group = 2;
    s.groups_file = d.file("groups", "1 active/optimized\n2 standby\n");
    Gateway g(s, 300ms);
    ASSERT_EQ(g.poll(kWait), Gateway::Poll::changed);
    ASSERT_EQ(g.own_state(), State::standby);

    const std::string fifo = d.path + "/fifo";
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    ASSERT_EQ(::link(fifo.c_str(), (d.path + "/groups.new").c_str()), 0);
    std::filesystem::rename(d.path + "/groups.new", s.groups_file);

    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(g.poll(50ms), Gateway::Poll::unchanged);  // the read waits, the poll does not
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
    EXPECT_TRUE(g.file_ok());
    std::this_thread::sleep_for(350ms);
    EXPECT_EQ(g.poll(50ms), Gateway::Poll::bad);
    EXPECT_NE(g.message().find("a read has not returned for"), std::string::npos) << g.message();
    EXPECT_NE(g.message().find("port group 2 stays standby"), std::string::npos) << g.message();
    EXPECT_FALSE(g.file_ok());
    // Said once, and a poll while that read is out does not wait again.
    const auto t1 = std::chrono::steady_clock::now();
    EXPECT_EQ(g.poll(2s), Gateway::Poll::unchanged);
    EXPECT_LT(std::chrono::steady_clock::now() - t1, 500ms);
    EXPECT_EQ(g.own_state(), State::standby);

    // The file system answers again, with the same version.
    d.replace("groups", "1 active/optimized\n2 standby\n");
    {
        std::ofstream w(fifo);
        w << "1 active/optimized\n2 standby\n";
    }
    EXPECT_EQ(poll_until_news(g), Gateway::Poll::answering);
    EXPECT_NE(g.message().find("answers again; port group 2 stays standby"), std::string::npos)
        << g.message();
    EXPECT_TRUE(g.file_ok());
    EXPECT_EQ(g.poll(kWait), Gateway::Poll::unchanged);  // the regular file, same version

    // ... and the next version is acted on as usual.
    d.replace("groups", "1 standby\n2 active/optimized\n");
    EXPECT_EQ(g.poll(kWait), Gateway::Poll::changed);
    EXPECT_EQ(g.own_state(), State::active_optimized);
}

TEST(AluaGateway, AnErrorSeenBeforeAStallIsReportedAgainAfterIt) {
    // Otherwise the last word in the log would stay "not returned" while
    // the file system answers again, with the same error as before.
    TempDir d;
    Settings s;
    s.port_group = 2;
    const std::string big((GroupsFileReader::kMaxBytes) + 4096, '#');
    s.groups_file = d.file("groups", big);
    Gateway g(s, 300ms);
    ASSERT_EQ(g.poll(kWait), Gateway::Poll::bad);
    EXPECT_NE(g.message().find("larger than 64 KiB"), std::string::npos) << g.message();
    EXPECT_EQ(g.poll(kWait), Gateway::Poll::unchanged);  // said once

    const std::string fifo = d.path + "/fifo";
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    ASSERT_EQ(::link(fifo.c_str(), (d.path + "/groups.new").c_str()), 0);
    std::filesystem::rename(d.path + "/groups.new", s.groups_file);
    EXPECT_EQ(g.poll(50ms), Gateway::Poll::unchanged);
    std::this_thread::sleep_for(350ms);
    EXPECT_EQ(g.poll(50ms), Gateway::Poll::bad);
    EXPECT_NE(g.message().find("a read has not returned"), std::string::npos) << g.message();

    // The same error comes back: the reader stops at 64 KiB and closes, so
    // the writer's rest fails (EPIPE, its SIGPIPE ignored).
    struct sigaction ignore {
    }, old{};
    ignore.sa_handler = SIG_IGN;
    ::sigaction(SIGPIPE, &ignore, &old);
    std::thread writer([&] {
        int fd = ::open(fifo.c_str(), O_WRONLY);
        if (fd < 0) return;
        for (size_t done = 0; done < big.size();) {
            ssize_t n = ::write(fd, big.data() + done, big.size() - done);
            if (n <= 0) break;
            done += size_t(n);
        }
        ::close(fd);
    });
    EXPECT_EQ(poll_until_news(g), Gateway::Poll::bad);
    EXPECT_NE(g.message().find("larger than 64 KiB"), std::string::npos) << g.message();
    writer.join();
    ::sigaction(SIGPIPE, &old, nullptr);
}

TEST(AluaGateway, IsDestroyedWhileItsReadDoesNotReturn) {
    TempDir d;
    Settings s;
    s.port_group = 2;
    s.groups_file = d.path + "/groups";
    ASSERT_EQ(::mkfifo(s.groups_file.c_str(), 0600), 0);
    const auto t0 = std::chrono::steady_clock::now();
    {
        Gateway g(s);
        EXPECT_EQ(g.poll(200ms), Gateway::Poll::unchanged);  // its reader is in open()
        EXPECT_EQ(g.own_state(), State::transitioning);
    }
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
    // Let the reader left behind finish: a writer's open lets its open()
    // return, and it reads an empty file.
    if (int fd = ::open(s.groups_file.c_str(), O_WRONLY | O_NONBLOCK); fd >= 0) ::close(fd);
}

TEST(AluaSharedBacking, LocalFilesAreSharedThroughThePageCacheDevicesNeedDirect) {
    TempDir d;
    auto path = d.file("lu.img", std::string(4096, 'x'));
    int fd = ::open(path.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    EXPECT_FALSE(shared_backing_problem(fd, 0));
    EXPECT_FALSE(shared_backing_problem(fd, O_DIRECT));
    ::close(fd);
    auto closed = shared_backing_problem(fd, 0);
    ASSERT_TRUE(closed);
    EXPECT_NE(closed->find("cannot stat"), std::string::npos) << *closed;
}

TEST(AluaSharedBacking, AFileSystemNotKnownAsLocalNeedsDirect) {
    // procfs stands for any file system not on the list of local ones (a
    // cluster file system with its own cache): buffered, it is refused.
    int fd = ::open("/proc/self/stat", O_RDONLY);
    ASSERT_GE(fd, 0);
    auto problem = shared_backing_problem(fd, 0);
    ASSERT_TRUE(problem);
    EXPECT_NE(problem->find("does not know as local (statfs type 0x9fa0)"), std::string::npos) << *problem;
    EXPECT_FALSE(shared_backing_problem(fd, O_DIRECT));
    ::close(fd);
}

TEST(AluaCApi, OffWithoutPortGroupAndRefusesBadSettings) {
    Env env;
    TempDir d;
    ::setenv("RBIO_CONFIG", d.file("e.conf", "").c_str(), 1);
    rbio_alua* a = reinterpret_cast<rbio_alua*>(1);
    char err[256] = "";
    ASSERT_EQ(rbio_alua_create(&a, err, sizeof err), 0) << err;
    EXPECT_EQ(a, nullptr);

    ::setenv("RBIO_PORT_GROUP", "x", 1);
    EXPECT_EQ(rbio_alua_create(&a, err, sizeof err), -1);
    EXPECT_NE(std::string(err).find("RBIO_PORT_GROUP"), std::string::npos) << err;

    ::setenv("RBIO_PORT_GROUP", "2", 1);
    ::setenv("RBIO_ALUA_GROUPS", d.file("groups", "1 active/optimized\n2 standby\n").c_str(), 1);
    ASSERT_EQ(rbio_alua_create(&a, err, sizeof err), 0) << err;
    ASSERT_NE(a, nullptr);
    // The file is read by the first poll, which the glue makes at start.
    char msg[256] = "";
    EXPECT_EQ(rbio_alua_poll(a, 10000, msg, sizeof msg), RBIO_ALUA_CHANGED) << msg;
    const uint8_t read10[10] = {0x28};
    uint8_t key = 0;
    uint16_t asc = 0;
    EXPECT_EQ(rbio_alua_check(a, read10, sizeof read10, 0, 0, &key, &asc), 1);
    EXPECT_EQ(key, 0x02);
    EXPECT_EQ(asc, 0x040b);
    auto cdb = rtpg_cdb(0, 64);
    uint8_t buf[64];
    EXPECT_EQ(rbio_alua_rtpg(a, cdb.data(), 12, 0, buf, sizeof buf), 28);
    EXPECT_EQ(buf[4] & 0x0f, 0x00);   // group 1: active/optimized
    EXPECT_EQ(buf[16] & 0x0f, 0x02);  // group 2 (this gateway): standby
    // An LU whose RBD client was fenced: this gateway's port is unavailable
    // for it, whatever the file says; the other groups are as they were.
    EXPECT_EQ(rbio_alua_check(a, read10, sizeof read10, 0, 1, &key, &asc), 1);
    EXPECT_EQ(key, 0x02);
    EXPECT_EQ(asc, 0x040c);
    const uint8_t inquiry[6] = {0x12, 0, 0, 0, 96, 0};
    EXPECT_EQ(rbio_alua_check(a, inquiry, sizeof inquiry, 0, 1, &key, &asc), 0);
    EXPECT_EQ(rbio_alua_rtpg(a, cdb.data(), 12, 1, buf, sizeof buf), 28);
    EXPECT_EQ(buf[4] & 0x0f, 0x00);
    EXPECT_EQ(buf[16] & 0x0f, 0x03);
    char desc[512];
    rbio_alua_describe(a, desc, sizeof desc);
    EXPECT_NE(std::string(desc).find("port group 2: standby (groups 1 active/optimized, 2 standby"),
              std::string::npos)
        << desc;
    rbio_alua_destroy(a);
}

TEST(AluaCApi, TheFirstPollReportsABadFile) {
    // Said at start, so that the log tells why the port stays transitioning.
    Env env;
    TempDir d;
    ::setenv("RBIO_CONFIG", d.file("e.conf", "").c_str(), 1);
    ::setenv("RBIO_PORT_GROUP", "2", 1);
    ::setenv("RBIO_ALUA_GROUPS", d.file("groups", "2 sleeping\n").c_str(), 1);
    rbio_alua* a = nullptr;
    char err[256] = "";
    ASSERT_EQ(rbio_alua_create(&a, err, sizeof err), 0) << err;
    ASSERT_NE(a, nullptr);
    char msg[256] = "";
    EXPECT_EQ(rbio_alua_poll(a, 10000, msg, sizeof msg), RBIO_ALUA_BAD);
    EXPECT_NE(std::string(msg).find("unknown state 'sleeping'"), std::string::npos) << msg;
    EXPECT_NE(std::string(msg).find("port group 2 stays transitioning"), std::string::npos) << msg;
    // Once per version of the file.
    EXPECT_EQ(rbio_alua_poll(a, 10000, msg, sizeof msg), RBIO_ALUA_UNCHANGED);
    rbio_alua_destroy(a);
}

}  // namespace
