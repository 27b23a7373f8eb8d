// The metrics file on disk: the atomic write and the metrics_file setting.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

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
    Settings s = load_settings(0);
    EXPECT_EQ(s.file, "/var/lib/prometheus/node-exporter/rbio.prom");
    EXPECT_EQ(s.source, conf);
    ::setenv("RBIO_METRICS_FILE", "none", 1);
    s = load_settings(0);
    EXPECT_EQ(s.file, "");
    EXPECT_EQ(s.source, conf + " + RBIO_METRICS_FILE");
    ::setenv("RBIO_METRICS_FILE", "/run/x.prom", 1);
    EXPECT_EQ(load_settings(0).file, "/run/x.prom");
    EXPECT_TRUE(is_setting("metrics_file"));
    EXPECT_FALSE(is_setting("stats_file"));
}

TEST(MetricsSettings, PercentCIsTheControlPort) {
    Env env;
    ::setenv("RBIO_CONFIG", "/dev/null", 1);
    ::setenv("RBIO_METRICS_FILE", "/var/lib/prometheus/node-exporter/rbio-%c.prom", 1);
    EXPECT_EQ(load_settings(0).file, "/var/lib/prometheus/node-exporter/rbio-0.prom");
    EXPECT_EQ(load_settings(12).file, "/var/lib/prometheus/node-exporter/rbio-12.prom");
    ::setenv("RBIO_METRICS_FILE", "/run/%p-%c%", 1);  // only %c is special
    EXPECT_EQ(load_settings(1).file, "/run/%p-1%");
}

TEST(MetricsCAbi, OneWriterPerFile) {
    TempDir dir;
    const std::string path = dir.path() + "/new/rbio.prom";  // the folder is made
    char err[512] = "";
    ASSERT_EQ(rbio_metrics_claim(path.c_str(), err, sizeof err), 0) << err;
    EXPECT_TRUE(fs::exists(path + ".lock"));
    // Another process (a second tgtd on the same file) is refused.
    const std::string probe = "flock -n " + path + ".lock true";
    EXPECT_NE(std::system(probe.c_str()), 0) << "the lock is not held";
    // Claiming again (here: the same path) keeps one lock, not two.
    ASSERT_EQ(rbio_metrics_claim(path.c_str(), err, sizeof err), 0) << err;
    EXPECT_NE(std::system(probe.c_str()), 0);
    const std::string other = dir.path() + "/other.prom";
    ASSERT_EQ(rbio_metrics_claim(other.c_str(), err, sizeof err), 0) << err;
    EXPECT_EQ(std::system(probe.c_str()), 0) << "the first file's lock is let go";

    // The other way round: a file another process writes is refused, naming it.
    int ready[2], done[2];
    ASSERT_EQ(::pipe(ready), 0);
    ASSERT_EQ(::pipe(done), 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        char e[256], b = 0;
        ::close(done[1]);  // else the read below never sees the parent's close
        const int rc = rbio_metrics_claim(path.c_str(), e, sizeof e);
        (void)!::write(ready[1], rc == 0 ? "y" : "n", 1);
        (void)!::read(done[0], &b, 1);  // until the parent is done
        ::_exit(0);
    }
    char got = 0;
    ASSERT_EQ(::read(ready[0], &got, 1), 1);
    EXPECT_EQ(got, 'y');
    EXPECT_EQ(rbio_metrics_claim(path.c_str(), err, sizeof err), -1);
    EXPECT_NE(std::string(err).find(path + ": another process writes this file"), std::string::npos) << err;
    ::close(done[1]);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    for (int fd : {ready[0], ready[1], done[0]}) ::close(fd);
    // It exited: the file is free again.
    EXPECT_EQ(rbio_metrics_claim(path.c_str(), err, sizeof err), 0) << err;
}

TEST(MetricsSettings, BadPathsNameWhereTheyCameFrom) {
    Env env;
    TempDir dir;
    const std::string conf = dir.path() + "/tgtd.conf";
    std::ofstream(conf) << "\nmetrics_file = rbio.prom\n";
    ::setenv("RBIO_CONFIG", conf.c_str(), 1);
    try {
        load_settings(0);
        FAIL() << "no error";
    } catch (const rbio::bs::ConfigError& e) {
        EXPECT_EQ(std::string(e.what()),
                  conf + ":2: metrics_file: 'rbio.prom' is not an absolute path (or none)");
    }
    std::ofstream(conf) << "";
    ::setenv("RBIO_METRICS_FILE", "/var/lib/", 1);
    try {
        load_settings(0);
        FAIL() << "no error";
    } catch (const rbio::bs::ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("environment RBIO_METRICS_FILE"), std::string::npos) << e.what();
    }
    char path[64], err[256];
    EXPECT_EQ(rbio_metrics_load_path(path, sizeof path, 0, err, sizeof err), -1);
    EXPECT_NE(std::string(err).find("names a folder"), std::string::npos) << err;
}
