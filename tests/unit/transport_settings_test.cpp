// Settings of the TCP transport: file, environment overrides, errors that
// name the file, line and key, and portal selection.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "rbio/bs/tcp_transport.h"

namespace {

struct Env {
    Env() { clear(); }
    ~Env() { clear(); }
    static void clear() {
        for (const char* v : {"RBIO_CONFIG", "RBIO_TRANSPORT", "RBIO_PORTALS", "RBIO_STATS_FILE"})
            ::unsetenv(v);
    }
};

std::string write_config(const std::string& text) {
    char path[] = "/tmp/rbio-settings-XXXXXX";
    int fd = ::mkstemp(path);
    EXPECT_GE(fd, 0);
    ::close(fd);
    std::ofstream(path) << text;
    return path;
}

TEST(TransportSettings, DefaultsWhenThereIsNoFile) {
    Env env;
    ::setenv("RBIO_CONFIG", "", 1);  // empty: the default path, which may be absent
    rbio_tp_settings s;
    char err[256] = "";
    if (::access(RBIO_TP_DEFAULT_CONFIG, F_OK) == 0) GTEST_SKIP() << "this host has a config file";
    ASSERT_EQ(rbio_tp_load_settings(&s, err, sizeof err), 0) << err;
    EXPECT_EQ(s.enabled, 1);
    EXPECT_EQ(s.batch_reads, 1);
    EXPECT_EQ(s.coalesce, 1);
    EXPECT_EQ(s.write_in_place, 1);
    EXPECT_EQ(s.direct_commands, 1);
    EXPECT_STREQ(s.portals, "");
    EXPECT_STREQ(s.stats_file, "/run/rbio/tgtd-%p.stats");
    EXPECT_EQ(s.rx_wait_pdus, 16u);
    EXPECT_EQ(s.rx_wait_us, 300u);
    EXPECT_EQ(s.iser_receive_kib, 64u);
    EXPECT_EQ(s.iser_pass_completions, 1024u);
    EXPECT_EQ(s.data_budget_mib, 2048u);
    EXPECT_EQ(s.data_budget_total_auto, 1);
    EXPECT_GE(s.data_budget_total_mib, 64u);
    char line[8192];
    rbio_tp_describe_settings(&s, line, sizeof line);
    EXPECT_NE(std::string(line).find("data_budget_mib=2048 data_budget_total_mib=" +
                                     std::to_string(s.data_budget_total_mib) + " (auto) "),
              std::string::npos)
        << line;
}

// A cgroup tree of files under a temporary folder, as /sys/fs/cgroup.
struct CgroupTree {
    CgroupTree() {
        char tmpl[] = "/tmp/rbio-cgroup-XXXXXX";
        if (::mkdtemp(tmpl)) root = tmpl;
    }
    ~CgroupTree() {
        if (!root.empty()) std::filesystem::remove_all(root);
    }
    void put(const std::string& file, const std::string& text) const {
        const std::filesystem::path p = root + file;
        std::filesystem::create_directories(p.parent_path());
        std::ofstream(p) << text;
    }
    uint64_t limit(const std::string& proc_cgroup, uint64_t bytes) const {
        put("/proc-cgroup", proc_cgroup);
        return rbio_tp_cgroup_memory_limit((root + "/proc-cgroup").c_str(), root.c_str(), bytes);
    }
    std::string root;
};

TEST(TransportSettings, CgroupMemoryLimitIsTheLowestUpThePath) {
    constexpr uint64_t G = uint64_t(1) << 30;
    CgroupTree t;
    ASSERT_FALSE(t.root.empty());
    // v2: the slice limited, the service not, the root (a container's
    // namespace) limited higher.
    t.put("/system.slice/memory.max", "8589934592\n");
    t.put("/system.slice/tgt.service/memory.max", "max\n");
    t.put("/memory.max", "17179869184\n");
    EXPECT_EQ(t.limit("0::/system.slice/tgt.service\n", 64 * G), 8 * G);
    EXPECT_EQ(t.limit("0::/system.slice/tgt.service\n", 4 * G), 4 * G);  // the machine's is lower
    EXPECT_EQ(t.limit("0::/\n", 64 * G), 16 * G);
    EXPECT_EQ(t.limit("0::/elsewhere\n", 64 * G), 16 * G);  // no file of its own
    // The lowest, not the first found: a service limit above its slice's.
    t.put("/system.slice/big.service/memory.max", "12884901888\n");
    EXPECT_EQ(t.limit("0::/system.slice/big.service\n", 64 * G), 8 * G);
    // v1: the memory controller's own hierarchy, alone or with others.
    t.put("/memory/box/memory.limit_in_bytes", "1073741824\n");
    t.put("/memory/memory.limit_in_bytes", "9223372036854771712\n");  // unlimited
    EXPECT_EQ(t.limit("4:memory:/box\n1:cpu:/\n", 64 * G), 1 * G);
    EXPECT_EQ(t.limit("4:cpu,memory:/box\n", 64 * G), 1 * G);
    EXPECT_EQ(t.limit("4:cpu:/box\n", 64 * G), 64 * G);
    EXPECT_EQ(t.limit("garbage\n4:memory\n4:memory:relative\n", 64 * G), 64 * G);
    EXPECT_EQ(rbio_tp_cgroup_memory_limit("/nonexistent/cgroup", t.root.c_str(), 64 * G), 64 * G);
}

TEST(TransportSettings, AutoTotalIsHalfOfMemoryWithinBounds) {
    EXPECT_EQ(rbio_tp_auto_total_mib(uint64_t(24) << 30), 12288u);
    EXPECT_EQ(rbio_tp_auto_total_mib(uint64_t(1) << 30), 512u);
    EXPECT_EQ(rbio_tp_auto_total_mib(uint64_t(100) << 20), 64u);  // a tiny machine: the floor
    EXPECT_EQ(rbio_tp_auto_total_mib(0), 64u);                    // memory unknown
    EXPECT_EQ(rbio_tp_auto_total_mib(uint64_t(8) << 40), 1048576u);
}

// '#' starts a comment at a line's start or after a blank; inside a value
// it is kept (it was cut there, silently: /run/rbio#1.stats became /run/rbio).
TEST(TransportSettings, AHashInsideAValueIsTheValues) {
    Env env;
    auto path = write_config(
        "#first\n\t# indented\nstats_file = /run/rbio#1.stats   # a comment\n"
        "coalesce = off# not a comment: a bad value\n");
    ::setenv("RBIO_CONFIG", path.c_str(), 1);
    rbio_tp_settings s;
    char err[256] = "";
    EXPECT_NE(rbio_tp_load_settings(&s, err, sizeof err), 0);
    EXPECT_NE(std::string(err).find(":4: coalesce"), std::string::npos) << err;
    auto good = write_config("#first\n\t# indented\nstats_file = /run/rbio#1.stats   # a comment\n");
    ::setenv("RBIO_CONFIG", good.c_str(), 1);
    ASSERT_EQ(rbio_tp_load_settings(&s, err, sizeof err), 0) << err;
    EXPECT_STREQ(s.stats_file, "/run/rbio#1.stats");
    ::unlink(path.c_str());
    ::unlink(good.c_str());
}

TEST(TransportSettings, FileThenEnvironment) {
    Env env;
    auto path = write_config(
        "# rbio\ntransport = off\n portals = 127.0.0.1:3260 , *:3261 \ncoalesce=off\n"
        "direct_read_kib = 128   # comment\nstats_file = none\nwrite_in_place = off\n"
        "rx_wait_pdus = 0\nrx_wait_us = 2000\ndirect_commands = off\niser_receive_kib = 256\n"
        "data_budget_mib = 0\niser_pass_completions = 0\n");
    ::setenv("RBIO_CONFIG", path.c_str(), 1);
    rbio_tp_settings s;
    char err[256] = "";
    ASSERT_EQ(rbio_tp_load_settings(&s, err, sizeof err), 0) << err;
    EXPECT_EQ(s.enabled, 0);
    EXPECT_EQ(s.coalesce, 0);
    EXPECT_EQ(s.direct_read_kib, 128u);
    EXPECT_EQ(s.write_in_place, 0);
    EXPECT_EQ(s.direct_commands, 0);
    EXPECT_EQ(s.rx_wait_pdus, 0u);
    EXPECT_EQ(s.rx_wait_us, 2000u);
    EXPECT_EQ(s.iser_receive_kib, 256u);
    EXPECT_EQ(s.data_budget_mib, 0u);
    EXPECT_EQ(s.iser_pass_completions, 0u);
    EXPECT_STREQ(s.stats_file, "");
    EXPECT_TRUE(rbio_tp_portal_selected(&s, "127.0.0.1", 3260));
    EXPECT_TRUE(rbio_tp_portal_selected(&s, "::1", 3261));
    EXPECT_FALSE(rbio_tp_portal_selected(&s, "127.0.0.1", 3262));
    EXPECT_FALSE(rbio_tp_portal_selected(&s, "10.0.0.1", 3260));

    ::setenv("RBIO_TRANSPORT", "on", 1);
    ::setenv("RBIO_PORTALS", "all", 1);
    ASSERT_EQ(rbio_tp_load_settings(&s, err, sizeof err), 0) << err;
    EXPECT_EQ(s.enabled, 1);
    EXPECT_TRUE(rbio_tp_portal_selected(&s, "10.0.0.1", 3260));
    EXPECT_NE(std::string(s.source).find("RBIO_TRANSPORT"), std::string::npos) << s.source;
    ::unlink(path.c_str());
}

TEST(TransportSettings, ErrorsNameFileLineAndKey) {
    Env env;
    auto path = write_config("transport = on\nbatch_reads = maybe\n");
    ::setenv("RBIO_CONFIG", path.c_str(), 1);
    rbio_tp_settings s;
    char err[256] = "";
    EXPECT_EQ(rbio_tp_load_settings(&s, err, sizeof err), -1);
    EXPECT_NE(std::string(err).find(path + ":2: batch_reads"), std::string::npos) << err;

    std::ofstream(path) << "colour = blue\n";
    EXPECT_EQ(rbio_tp_load_settings(&s, err, sizeof err), -1);
    EXPECT_NE(std::string(err).find("unknown key 'colour'"), std::string::npos) << err;

    std::ofstream(path) << "rx_buffer_kib = 1\n";
    EXPECT_EQ(rbio_tp_load_settings(&s, err, sizeof err), -1);
    EXPECT_NE(std::string(err).find("rx_buffer_kib"), std::string::npos) << err;

    // 16 KiB is the pool block a receive's AHS and 8 KiB data take anyway;
    // pool blocks come in powers of two.
    for (const char* bad :
         {"iser_receive_kib = 15\n", "iser_receive_kib = 2048\n", "iser_receive_kib = 100\n"}) {
        std::ofstream(path) << bad;
        EXPECT_EQ(rbio_tp_load_settings(&s, err, sizeof err), -1) << bad;
        EXPECT_NE(std::string(err).find(path + ":1: iser_receive_kib"), std::string::npos) << err;
    }

    // 0 is no limit; below 8 a pass could not reap one command's work.
    for (const char* bad : {"iser_pass_completions = 7\n", "iser_pass_completions = 1048577\n",
                            "iser_pass_completions = -1\n"}) {
        std::ofstream(path) << bad;
        EXPECT_EQ(rbio_tp_load_settings(&s, err, sizeof err), -1) << bad;
        EXPECT_NE(std::string(err).find(path + ":1: iser_pass_completions: '"), std::string::npos) << err;
        EXPECT_NE(std::string(err).find("0 (no limit) or a number from 8 to 1048576"), std::string::npos)
            << err;
    }
    std::ofstream(path) << "iser_pass_completions = 8\n";
    EXPECT_EQ(rbio_tp_load_settings(&s, err, sizeof err), 0) << err;
    EXPECT_EQ(s.iser_pass_completions, 8u);

    // A leading minus sign would wrap in strtoul: -18446744073709551615 is 1.

    for (const char* bad : {"rx_wait_pdus = 257\n", "rx_wait_us = 9\n", "rx_wait_us = 100001\n",
                            "rx_wait_pdus = -18446744073709551615\n", "rx_wait_pdus = +1\n"}) {
        std::ofstream(path) << bad;
        EXPECT_EQ(rbio_tp_load_settings(&s, err, sizeof err), -1) << bad;
        EXPECT_NE(std::string(err).find(path + ":1: rx_wait_"), std::string::npos) << err;
    }

    // 0 is no budget; a small one would close connections of hosts at
    // their default I/O size.
    for (const char* bad : {"data_budget_mib = 1\n", "data_budget_mib = 63\n", "data_budget_mib = 1048577\n",
                            "data_budget_mib = -1\n", "data_budget_mib = off\n"}) {
        std::ofstream(path) << bad;
        EXPECT_EQ(rbio_tp_load_settings(&s, err, sizeof err), -1) << bad;
        EXPECT_NE(std::string(err).find(path + ":1: data_budget_mib: "), std::string::npos) << err;
        EXPECT_NE(std::string(err).find("not 0 (no budget) or a number from 64 to 1048576"),
                  std::string::npos)
            << err;
    }
    std::ofstream(path) << "data_budget_mib = 64\n";
    ASSERT_EQ(rbio_tp_load_settings(&s, err, sizeof err), 0) << err;
    EXPECT_EQ(s.data_budget_mib, 64u);

    for (const char* bad :
         {"data_budget_total_mib = 63\n", "data_budget_total_mib = off\n", "data_budget_total_mib = \n",
          "data_budget_total_mib = Auto\n", "data_budget_total_mib = 1048577\n"}) {
        std::ofstream(path) << bad;
        EXPECT_EQ(rbio_tp_load_settings(&s, err, sizeof err), -1) << bad;
        EXPECT_NE(std::string(err).find(path + ":1: data_budget_total_mib: "), std::string::npos) << err;
        EXPECT_NE(std::string(err).find("not auto (half of memory), 0 (no limit) or a number from 64 to "
                                        "1048576"),
                  std::string::npos)
            << err;
    }
    for (const auto& [text, mib] : {std::pair{"0", 0u}, std::pair{"64", 64u}, std::pair{"4096", 4096u}}) {
        std::ofstream(path) << "data_budget_total_mib = " << text << "\n";
        ASSERT_EQ(rbio_tp_load_settings(&s, err, sizeof err), 0) << err;
        EXPECT_EQ(s.data_budget_total_mib, mib);
        EXPECT_EQ(s.data_budget_total_auto, 0);
    }
    std::ofstream(path) << "data_budget_total_mib = auto\n";
    ASSERT_EQ(rbio_tp_load_settings(&s, err, sizeof err), 0) << err;
    EXPECT_EQ(s.data_budget_total_auto, 1);
    EXPECT_GE(s.data_budget_total_mib, 64u);

    std::ofstream(path) << "rx_wait_us = 500\n# again:\nrx_wait_us = 800\n";
    EXPECT_EQ(rbio_tp_load_settings(&s, err, sizeof err), -1);
    EXPECT_NE(std::string(err).find(path + ":3: rx_wait_us: set again (first on line 1)"), std::string::npos)
        << err;

    // Values that would take nothing over or write nowhere, silently: an
    // unfilled variable, a portal without a port, a space for a comma.
    for (const char* bad :
         {"portals =\n", "portals = 192.0.2.10\n", "portals = *\n",
          "portals = 192.0.2.10:3260 192.0.2.11:3260\n", "portals = 127.0.0.1:3260,\n",
          "portals = 127.0.0.1:0\n", "portals = [::1:3260\n", "portals = host:3260\n",
          "portals = 127.0.0.1:03260\n", "portals = [0:0:0:0:0:0:0:1]:3260\n", "portals = [FE80::1]:3260\n",
          "stats_file =\n", "stats_file = run/x.stats\n", "stats_file = /run/rbio/\n"}) {
        std::ofstream(path) << bad;
        EXPECT_EQ(rbio_tp_load_settings(&s, err, sizeof err), -1) << bad;
        EXPECT_NE(std::string(err).find(path + ":1: "), std::string::npos) << err;
    }
    std::ofstream(path)
        << "portals = [::1]:3260, *:3261,192.0.2.10:3260\nstats_file = /run/rbio/t-%p.stats\n";
    EXPECT_EQ(rbio_tp_load_settings(&s, err, sizeof err), 0) << err;
    ::setenv("RBIO_PORTALS", "", 1);
    EXPECT_EQ(rbio_tp_load_settings(&s, err, sizeof err), -1);
    EXPECT_NE(std::string(err).find("RBIO_PORTALS"), std::string::npos) << err;
    ::unsetenv("RBIO_PORTALS");
    ::unlink(path.c_str());

    // A folder opens, then reads as an empty file: it would mean all defaults.
    ::setenv("RBIO_CONFIG", "/tmp", 1);
    EXPECT_EQ(rbio_tp_load_settings(&s, err, sizeof err), -1);
    EXPECT_NE(std::string(err).find("/tmp: a folder, not a file"), std::string::npos) << err;

    ::setenv("RBIO_CONFIG", "/nonexistent/rbio.conf", 1);
    EXPECT_EQ(rbio_tp_load_settings(&s, err, sizeof err), -1) << "an explicit file must exist";
    ::unsetenv("RBIO_CONFIG");
    ::setenv("RBIO_TRANSPORT", "sometimes", 1);
    EXPECT_EQ(rbio_tp_load_settings(&s, err, sizeof err), -1);
    EXPECT_NE(std::string(err).find("RBIO_TRANSPORT"), std::string::npos) << err;
}

TEST(TransportSettings, MetricsFileIsTheMetricsOwnKey) {
    Env env;
    // Checked by the metrics alone: even a bad one leaves the transport on.
    auto path = write_config("metrics_file = not/absolute.prom\ntransport = on\n");
    ::setenv("RBIO_CONFIG", path.c_str(), 1);
    rbio_tp_settings s;
    char err[512] = "";
    EXPECT_EQ(rbio_tp_load_settings(&s, err, sizeof err), 0) << err;
    EXPECT_EQ(s.enabled, 1);
    std::ofstream(path) << "metric_file = /run/rbio.prom\n";
    EXPECT_EQ(rbio_tp_load_settings(&s, err, sizeof err), -1);
    EXPECT_NE(std::string(err).find("metrics_file)"), std::string::npos) << "listed as known: " << err;
    ::unlink(path.c_str());
}

TEST(TransportSettings, RunningBuildIdIsHex) {
    char id[128];
    ASSERT_EQ(rbio_tp_running_build_id(id, sizeof id), 0);
    EXPECT_GE(std::string(id).size(), 16u);
    EXPECT_EQ(std::string(id).find_first_not_of("0123456789abcdef"), std::string::npos) << id;
}

}  // namespace
