// rbio's metric families (per LU, per connection, the process) and the C
// ABI the glue hands the values over with.
#include <gtest/gtest.h>

#include <array>
#include <filesystem>
#include <set>
#include <string>

#include "metrics_test_files.hpp"
#include "rbio/bs/metrics.h"
#include "rbio/bs/target_metrics.hpp"
#include "rbio/iser/counters.hpp"
#include "rbio/version.h"

namespace fs = std::filesystem;
using namespace rbio::bs::metrics;
using rbio::test::count_of;
using rbio::test::slurp;
using rbio::test::TempDir;

TEST(TargetMetrics, EveryFamilyFollowsTheConventionsAndIsDocumented) {
    const std::string doc = slurp(RBIO_SOURCE_DIR "/docs/metrics.md");
    ASSERT_FALSE(doc.empty()) << "docs/metrics.md";
    std::set<std::string> names;
    for (const Family& f : TargetMetrics::families()) {
        const std::string name(f.name);
        EXPECT_TRUE(names.insert(name).second) << name << " twice";
        EXPECT_EQ(name.rfind("rbio_", 0), 0u) << name;
        EXPECT_TRUE(valid_metric_name(name)) << name;
        EXPECT_EQ(name.ends_with("_total"), f.type == MetricType::Counter) << name;
        EXPECT_NE(doc.find("`" + name + "`"), std::string::npos) << name << " is not in docs/metrics.md";
    }
    EXPECT_EQ(names.size(), 31 + rbio::iser::kCounterCount);
}

TEST(TargetMetrics, OneLuAndOneConnectionOfEachTransport) {
    TargetMetrics t("1.0.85-1", 0);
    rbio_bs_counters k{};
    k.commands = 10;
    k.reads = 4;
    k.read_bytes = 16384;
    k.writes = 6;
    k.written_bytes = 24576;
    k.reaped_inline = 3;
    k.reaped_event = 5;
    k.ios_in_flight = 2;
    k.rbd = 1;
    k.rbd_fenced = 1;
    k.rbd_lock_takeovers = 3;
    k.rbd_quiet_ends = 2;
    k.errors = 1;
    k.miscompares = 7;
    t.add_lu({"iqn.2026-11.io.rbio:disk", 1, "rbio_rbd", "rbd:pool/im\"age", 1 << 20, k});
    rbio_bs_counters file{};  // a file LU: no RBD series
    t.add_lu({"iqn.2026-11.io.rbio:disk", 2, "rbio", "/srv/lu2", 1 << 20, file});
    std::array<uint64_t, rbio::iser::kCounterCount> c{};
    c[size_t(rbio::iser::Counter::PdusIn)] = 12;
    c[size_t(rbio::iser::Counter::BytesOut)] = 4096;
    t.add_connection({Transport::Tcp, "iqn.t", "iqn.i", "127.0.0.1:3260", "127.0.0.1:50000", c, 1u << 20});
    t.add_connection({Transport::Iser, "iqn.t", "iqn.i", "10.0.0.1:3260", "10.0.0.2:40000",
                      std::span<const uint64_t>(c.data(), 2)});  // shorter: the rest are 0
    t.set_connections_accepted(5);
    t.set_connections_over_data_budget(2);
    t.set_data_buffers(3u << 20, 512u << 20);
    const std::string x = t.text();

    EXPECT_EQ(x.rfind("# HELP rbio_build_info ", 0), 0u) << "process families come first";
    EXPECT_NE(x.find("rbio_build_info{control_port=\"0\",version=\"" RBIO_VERSION
                     "\",tgt_version=\"1.0.85-1\"} 1\n"),
              std::string::npos);
    EXPECT_NE(x.find("rbio_open_connections{control_port=\"0\",transport=\"tcp\"} 1\n"), std::string::npos);
    EXPECT_NE(x.find("rbio_open_connections{control_port=\"0\",transport=\"iser\"} 1\n"), std::string::npos);
    EXPECT_NE(x.find("rbio_connections_accepted_total{control_port=\"0\"} 5\n"), std::string::npos);
    EXPECT_NE(x.find("rbio_connections_over_data_budget_total{control_port=\"0\"} 2\n"), std::string::npos);
    EXPECT_NE(x.find("rbio_data_buffer_bytes{control_port=\"0\"} 3145728\n"), std::string::npos);
    EXPECT_NE(x.find("rbio_data_buffer_limit_bytes{control_port=\"0\"} 536870912\n"), std::string::npos);

    const std::string lu = "{control_port=\"0\",target=\"iqn.2026-11.io.rbio:disk\",lun=\"1\"}";
    EXPECT_NE(x.find("rbio_lu_info{control_port=\"0\",target=\"iqn.2026-11.io.rbio:disk\",lun=\"1\",backing_"
                     "store=\"rbio_rbd\","
                     "path=\"rbd:pool/im\\\"age\"} 1\n"),
              std::string::npos)
        << x;
    EXPECT_NE(x.find("rbio_lu_size_bytes" + lu + " 1048576\n"), std::string::npos);
    EXPECT_NE(x.find("rbio_lu_commands_total" + lu + " 10\n"), std::string::npos);
    EXPECT_NE(x.find("rbio_lu_read_bytes_total" + lu + " 16384\n"), std::string::npos);
    EXPECT_NE(x.find("rbio_lu_written_bytes_total" + lu + " 24576\n"), std::string::npos);
    EXPECT_NE(x.find("rbio_lu_ios_in_flight" + lu + " 2\n"), std::string::npos);
    EXPECT_NE(x.find("rbio_lu_failed_commands_total" + lu + " 1\n"), std::string::npos);
    EXPECT_NE(x.find("rbio_lu_miscompares_total" + lu + " 7\n"), std::string::npos);
    EXPECT_NE(x.find("rbio_lu_rbd_fenced" + lu + " 1\n"), std::string::npos) << x;
    EXPECT_NE(x.find("rbio_lu_rbd_lock_takeovers_total" + lu + " 3\n"), std::string::npos);
    EXPECT_NE(x.find("rbio_lu_rbd_quiet_sessions_ended_total" + lu + " 2\n"), std::string::npos);
    EXPECT_EQ(x.find("rbio_lu_rbd_fenced{control_port=\"0\",target=\"iqn.2026-11.io.rbio:disk\",lun=\"2\"}"),
              std::string::npos);
    EXPECT_NE(x.find("rbio_lu_reaped_completions_total{control_port=\"0\",target=\"iqn.2026-11.io.rbio:"
                     "disk\",lun=\"1\","
                     "reaped=\"event\"} 5\n"),
              std::string::npos);

    const std::string tcp =
        "{control_port=\"0\",transport=\"tcp\",target=\"iqn.t\",initiator=\"iqn.i\",portal=\"127.0.0.1:"
        "3260\","
        "peer=\"127.0.0.1:50000\"}";
    EXPECT_NE(x.find("rbio_connection_received_pdus_total" + tcp + " 12\n"), std::string::npos);
    EXPECT_NE(x.find("rbio_connection_sent_bytes_total" + tcp + " 4096\n"), std::string::npos);
    EXPECT_NE(x.find("rbio_connection_epoll_ctl_calls_total" + tcp), std::string::npos);
    EXPECT_NE(x.find("rbio_connection_direct_commands_total" + tcp), std::string::npos);
    const std::string iser =
        "{control_port=\"0\",transport=\"iser\",target=\"iqn.t\",initiator=\"iqn.i\",portal=\"10.0.0.1:"
        "3260\","
        "peer=\"10.0.0.2:40000\"}";
    EXPECT_NE(x.find("rbio_connection_received_pdus_total" + iser + " 12\n"), std::string::npos);
    EXPECT_NE(x.find("rbio_connection_sent_bytes_total" + iser + " 0\n"), std::string::npos);
    EXPECT_NE(x.find("rbio_connection_rdma_completions_total" + iser + " 0\n"), std::string::npos);
    EXPECT_NE(x.find("rbio_connection_direct_commands_total" + iser), std::string::npos);
    EXPECT_NE(x.find("rbio_connection_lend_refused_total" + iser), std::string::npos);
    EXPECT_NE(x.find("rbio_connection_lend_refused_total" + tcp), std::string::npos);
    EXPECT_NE(x.find("rbio_connection_data_buffer_bytes" + tcp + " 1048576\n"), std::string::npos);
    EXPECT_NE(x.find("rbio_connection_data_buffer_bytes" + iser + " 0\n"), std::string::npos);
    // Each transport only with the counters it has.
    EXPECT_EQ(x.find("rbio_connection_epoll_ctl_calls_total" + iser), std::string::npos);
    EXPECT_EQ(x.find("rbio_connection_rdma_completions_total" + tcp), std::string::npos);
    EXPECT_EQ(count_of(x, "# TYPE rbio_connection_received_pdus_total counter\n"), 1u);
}

TEST(TargetMetrics, EverySampleNamesTheTgtdByItsControlPort) {
    TargetMetrics t("v", 1);
    t.add_lu({"iqn.t", 1, "rbio", "/srv/a.img", 512, {}});
    t.add_connection({Transport::Tcp, "iqn.t", "iqn.i", "127.0.0.1:3261", "127.0.0.1:5", {}});
    const std::array<AluaGroupValues, 1> groups{{{1, "active/optimized"}}};
    t.set_alua({1, "active/optimized", "/etc/rbio/alua-groups", true, groups});
    const std::string x = t.text();
    size_t samples = 0, port1 = 0;
    for (size_t at = 0; at < x.size();) {
        const size_t end = x.find('\n', at);
        const std::string line = x.substr(at, end - at);
        at = end + 1;
        if (line.empty() || line[0] == '#') continue;
        ++samples;
        if (line.find("{control_port=\"1\"") != std::string::npos) ++port1;
    }
    EXPECT_GT(samples, 30u);
    EXPECT_EQ(port1, samples) << x;
}

TEST(TargetMetrics, NothingServedStillSaysSo) {
    const std::string x = TargetMetrics("v", 0).text();
    EXPECT_NE(x.find("rbio_open_connections{control_port=\"0\",transport=\"tcp\"} 0\n"), std::string::npos);
    EXPECT_NE(x.find("rbio_connections_accepted_total{control_port=\"0\"} 0\n"), std::string::npos);
    EXPECT_NE(x.find("rbio_connections_over_data_budget_total{control_port=\"0\"} 0\n"), std::string::npos);
    EXPECT_EQ(x.find("rbio_lu_"), std::string::npos);
    EXPECT_EQ(x.find("rbio_alua_"), std::string::npos);  // ALUA off
}

TEST(TargetMetrics, AluaOwnStateEveryGroupAndWhetherTheFileIsInUse) {
    TargetMetrics t("v", 0);
    const AluaGroupValues groups[] = {{1, "active/optimized"}, {2, "standby"}};
    t.set_alua({2, "standby", "/etc/rbio/alua-groups", false, groups});
    const std::string x = t.text();
    EXPECT_NE(x.find("rbio_alua_port_state{control_port=\"0\",port_group=\"2\",state=\"standby\","
                     "groups_file=\"/etc/rbio/alua-groups\"} 1\n"),
              std::string::npos)
        << x;
    EXPECT_NE(x.find("rbio_alua_group_state{control_port=\"0\",group=\"1\",state=\"active/optimized\","
                     "groups_file=\"/etc/rbio/alua-groups\"} 1\n"),
              std::string::npos);
    EXPECT_NE(x.find("rbio_alua_group_state{control_port=\"0\",group=\"2\",state=\"standby\","
                     "groups_file=\"/etc/rbio/alua-groups\"} 1\n"),
              std::string::npos);
    EXPECT_NE(
        x.find("rbio_alua_groups_file_ok{control_port=\"0\",groups_file=\"/etc/rbio/alua-groups\"} 0\n"),
        std::string::npos);
}

// ---- the C ABI the glue uses

TEST(MetricsCAbi, GatherAndWrite) {
    TempDir dir;
    rbio_metrics* m = rbio_metrics_new("1.0.85", 0);
    ASSERT_NE(m, nullptr);
    rbio_bs_counters k{};
    k.commands = 3;
    rbio_metrics_lu lu{"iqn.t", 2, "rbio", nullptr, 512};
    rbio_metrics_add_lu(m, &lu, &k);
    uint64_t c[RBIO_METRICS_CONN_COUNTERS] = {5};
    rbio_metrics_conn conn{RBIO_METRICS_TCP, nullptr, "iqn.i", "127.0.0.1:3260", "127.0.0.1:1", 8192};
    rbio_metrics_add_connection(m, &conn, c, rbio::iser::kCounterCount);
    rbio_metrics_set_accepted(m, 1);
    const rbio_metrics_alua_group groups[] = {{1, "active/optimized"}, {3, nullptr}};
    const rbio_metrics_alua alua{1, "active/optimized", nullptr, 1, groups, 2};
    rbio_metrics_set_alua(m, &alua);
    char err[256] = "";
    const std::string path = dir.path() + "/rbio.prom";
    ASSERT_EQ(rbio_metrics_write(m, path.c_str(), err, sizeof err), 0) << err;
    EXPECT_EQ(rbio_metrics_write(m, (dir.path() + "/a/b/c").c_str(), err, sizeof err), -1);
    EXPECT_NE(std::string(err).find("/a/b/c.tmp"), std::string::npos) << err;
    rbio_metrics_free(m);
    const std::string x = slurp(path);
    EXPECT_NE(x.find("rbio_lu_commands_total{control_port=\"0\",target=\"iqn.t\",lun=\"2\"} 3\n"),
              std::string::npos)
        << x;
    EXPECT_NE(x.find("rbio_connection_data_buffer_bytes{control_port=\"0\",transport=\"tcp\",target=\"\","
                     "initiator=\"iqn.i\",portal=\"127.0.0.1:3260\",peer=\"127.0.0.1:1\"} 8192\n"),
              std::string::npos)
        << x;
    EXPECT_NE(x.find("rbio_connection_received_pdus_total{control_port=\"0\",transport=\"tcp\",target=\"\","
                     "initiator=\"iqn.i\","
                     "portal=\"127.0.0.1:3260\",peer=\"127.0.0.1:1\"} 5\n"),
              std::string::npos)
        << x;
    EXPECT_NE(x.find("rbio_alua_port_state{control_port=\"0\",port_group=\"1\",state=\"active/"
                     "optimized\",groups_file=\"\"} 1\n"),
              std::string::npos)
        << x;
    EXPECT_NE(x.find("rbio_alua_group_state{control_port=\"0\",group=\"3\",state=\"\",groups_file=\"\"} 1\n"),
              std::string::npos);
    EXPECT_NE(x.find("rbio_alua_groups_file_ok{control_port=\"0\",groups_file=\"\"} 1\n"), std::string::npos);
    rbio_metrics_remove(path.c_str());
    EXPECT_FALSE(fs::exists(path));
}
