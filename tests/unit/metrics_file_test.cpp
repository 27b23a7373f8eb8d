// The metrics file on disk: the atomic write and the metrics_file setting.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "metrics_test_files.hpp"
#include "rbio/bs/atomic_file.hpp"
#include "rbio/bs/config_file.hpp"
#include "rbio/bs/error.hpp"
#include "rbio/bs/metrics.h"
#include "rbio/bs/metrics_settings.hpp"

namespace fs = std::filesystem;
using namespace rbio::bs::metrics;
using rbio::test::slurp;
using rbio::test::TempDir;

namespace {

struct Env {
    Env() { clear(); }
    ~Env() { clear(); }
    static void clear() {
        for (const char* v : {"RBIO_CONFIG", "RBIO_METRICS_FILE"}) ::unsetenv(v);
    }
};

}  // namespace

TEST(AtomicFile, ReplacesTheFileWholeAndReadableByAll) {
    TempDir dir;
    const std::string path = dir.path() + "/rbio.prom";
    const mode_t old = ::umask(077);
    rbio::bs::write_file_atomically(path, "first\n");
    rbio::bs::write_file_atomically(path, "second\n");
    ::umask(old);
    EXPECT_EQ(slurp(path), "second\n");
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0644u);
    EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(AtomicFile, CreatesOneMissingFolder) {
    TempDir dir;
    const std::string path = dir.path() + "/run-rbio/rbio.prom";
    rbio::bs::write_file_atomically(path, "x\n");
    EXPECT_EQ(slurp(path), "x\n");
}

TEST(AtomicFile, FailureNamesTheFile) {
    TempDir dir;
    const std::string path = dir.path() + "/no/such/folder/rbio.prom";
    try {
        rbio::bs::write_file_atomically(path, "x\n");
        FAIL() << "no error";
    } catch (const rbio::bs::Error& e) {
        EXPECT_NE(std::string(e.what()).find(path + ".tmp: No such file or directory"), std::string::npos)
            << e.what();
    }
    // A folder where the file should be: the rename fails, nothing is left behind.
    fs::create_directory(dir.path() + "/dir.prom");
    fs::create_directory(dir.path() + "/dir.prom/x");
    EXPECT_THROW(rbio::bs::write_file_atomically(dir.path() + "/dir.prom", "x\n"), rbio::bs::Error);
    EXPECT_FALSE(fs::exists(dir.path() + "/dir.prom.tmp"));
}

TEST(MetricsSettings, FileThenEnvironment) {
    Env env;
    TempDir dir;
    const std::string conf = dir.path() + "/tgtd.conf";
    std::ofstream(conf) << "transport = on\nmetrics_file = /var/lib/prometheus/node-exporter/rbio.prom\n";
    ::setenv("RBIO_CONFIG", conf.c_str(), 1);
    Settings s = load_settings();
    EXPECT_EQ(s.file, "/var/lib/prometheus/node-exporter/rbio.prom");
    EXPECT_EQ(s.source, conf);
    ::setenv("RBIO_METRICS_FILE", "none", 1);
    s = load_settings();
    EXPECT_EQ(s.file, "");
    EXPECT_EQ(s.source, conf + " + RBIO_METRICS_FILE");
    ::setenv("RBIO_METRICS_FILE", "/run/x.prom", 1);
    EXPECT_EQ(load_settings().file, "/run/x.prom");
    EXPECT_TRUE(is_setting("metrics_file"));
    EXPECT_FALSE(is_setting("stats_file"));
}

TEST(MetricsSettings, BadPathsNameWhereTheyCameFrom) {
    Env env;
    TempDir dir;
    const std::string conf = dir.path() + "/tgtd.conf";
    std::ofstream(conf) << "\nmetrics_file = rbio.prom\n";
    ::setenv("RBIO_CONFIG", conf.c_str(), 1);
    try {
        load_settings();
        FAIL() << "no error";
    } catch (const rbio::bs::ConfigError& e) {
        EXPECT_EQ(std::string(e.what()),
                  conf + ":2: metrics_file: 'rbio.prom' is not an absolute path (or none)");
    }
    std::ofstream(conf) << "";
    ::setenv("RBIO_METRICS_FILE", "/var/lib/", 1);
    try {
        load_settings();
        FAIL() << "no error";
    } catch (const rbio::bs::ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("environment RBIO_METRICS_FILE"), std::string::npos) << e.what();
    }
    char path[64], err[256];
    EXPECT_EQ(rbio_metrics_load_path(path, sizeof path, err, sizeof err), -1);
    EXPECT_NE(std::string(err).find("names a folder"), std::string::npos) << err;
}
