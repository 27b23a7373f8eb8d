// The metrics file on disk: the atomic write.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <string>

#include "metrics_test_files.hpp"
#include "rbio/bs/atomic_file.hpp"
#include "rbio/bs/error.hpp"

namespace fs = std::filesystem;
using rbio::test::slurp;
using rbio::test::TempDir;

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
