// The FUSE mounts read from a mountinfo table: the points the session
// process matches its mount by (escaped by the kernel), and the connection
// number its abort file is found by.
#include "fuse/fuse_mounts.hpp"

#include <gtest/gtest.h>

#include <sstream>

namespace {

using rbio::fuse::parse_fuse_mounts;

TEST(FuseMounts, KeepsFuseMountsOnlyWithTheirConnection) {
    std::istringstream in(
        "22 1 0:21 / /proc rw,nosuid shared:12 - proc proc rw\n"
        "98 26 0:53 / /mnt/rbio rw,nosuid,nodev,relatime shared:51 - fuse.rbio rbio:iqn.2026-12.io.rbio:t1 "
        "rw,user_id=0\n"
        "99 26 0:54 / /mnt/plain rw - fuse /dev/fuse rw\n"
        "100 26 0:55 / /mnt/other rw - fuseblk /dev/sdb1 rw\n");
    auto m = parse_fuse_mounts(in);
    ASSERT_EQ(m.size(), 2u);
    EXPECT_EQ(m[0].point, "/mnt/rbio");
    EXPECT_EQ(m[0].source, "rbio:iqn.2026-12.io.rbio:t1");
    EXPECT_EQ(m[0].type, "fuse.rbio");
    EXPECT_EQ(m[0].connection, 53u);
    EXPECT_EQ(m[1].point, "/mnt/plain");
    EXPECT_EQ(m[1].connection, 54u);
}

TEST(FuseMounts, UndoesTheKernelsEscapes) {
    std::istringstream in("98 26 0:53 / /mnt/my\\040lu\\134x rw shared:51 - fuse.rbio rbio:a\\011b rw\n");
    auto m = parse_fuse_mounts(in);
    ASSERT_EQ(m.size(), 1u);
    EXPECT_EQ(m[0].point, "/mnt/my lu\\x");
    EXPECT_EQ(m[0].source, "rbio:a\tb");
}

TEST(FuseMounts, ConnectionIsTheKernelsDeviceNumber) {
    // MKDEV(major, minor) = major << 20 | minor, the folder's name in fusectl.
    std::istringstream in("98 26 1:2 / /a rw - fuse x rw\n");
    auto m = parse_fuse_mounts(in);
    ASSERT_EQ(m.size(), 1u);
    EXPECT_EQ(m[0].connection, (1u << 20) | 2u);
}

TEST(FuseMounts, SkipsLinesThatDoNotParse) {
    std::istringstream in(
        "98 26 0:53 / /a rw shared:51 fuse.rbio x rw\n"  // no separator
        "98 26 0:x / /b rw - fuse x rw\n"                // bad device number
        "98 26 053 / /c rw - fuse x rw\n"                // no colon
        "98 26 0:53 / /d rw -\n"                         // no type
        "98 26 0:99999999 / /e rw - fuse x rw\n"         // minor out of range
        "98 26\n");
    EXPECT_TRUE(parse_fuse_mounts(in).empty());
}

TEST(FuseMounts, ABackslashWithoutThreeDigitsStays) {
    std::istringstream in("98 26 0:53 / /a\\04 rw - fuse x\\9 rw\n");
    auto m = parse_fuse_mounts(in);
    ASSERT_EQ(m.size(), 1u);
    EXPECT_EQ(m[0].point, "/a\\04");
    EXPECT_EQ(m[0].source, "x\\9");
}

}  // namespace
