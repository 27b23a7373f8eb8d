// The RBD side of an LU's configuration: "rbd:POOL/IMAGE" paths and the
// rbd_* bsopts. (Requests to a real cluster are tested in integration.rbd.)
#include <gtest/gtest.h>

#include <string>

#include "rbio/bs/error.hpp"
#include "rbio/bs/options.hpp"
#include "rbio/bs/rbd_image.hpp"

using rbio::bs::Error;
using rbio::bs::is_rbd_path;
using rbio::bs::parse_options;
using rbio::bs::parse_rbd_path;

namespace {

std::string error_of(const std::string& path) {
    try {
        parse_rbd_path(path);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST(RbdPath, PoolAndImage) {
    auto loc = parse_rbd_path("rbd:rbd/lun1");
    EXPECT_EQ(loc.pool, "rbd");
    EXPECT_EQ(loc.ns, "");
    EXPECT_EQ(loc.image, "lun1");
    EXPECT_EQ(loc.describe(), "rbd/lun1");
}

TEST(RbdPath, Namespace) {
    auto loc = parse_rbd_path("rbd:san/tenant-a/vol.7");
    EXPECT_EQ(loc.pool, "san");
    EXPECT_EQ(loc.ns, "tenant-a");
    EXPECT_EQ(loc.image, "vol.7");
    EXPECT_EQ(loc.describe(), "san/tenant-a/vol.7");
}

TEST(RbdPath, FilesAreNotRbd) {
    EXPECT_TRUE(is_rbd_path("rbd:p/i"));
    EXPECT_FALSE(is_rbd_path("/srv/rbd:p/i"));
    EXPECT_FALSE(is_rbd_path("rbd"));
    EXPECT_NE(error_of("/srv/lun.img").find("not an RBD path"), std::string::npos);
}

TEST(RbdPath, BadPathsSayWhy) {
    EXPECT_NE(error_of("rbd:justapool").find("expected rbd:POOL/IMAGE"), std::string::npos);
    EXPECT_NE(error_of("rbd:/img").find("bad pool name"), std::string::npos);
    EXPECT_NE(error_of("rbd:pool/").find("bad image name"), std::string::npos);
    EXPECT_NE(error_of("rbd:pool/img@snap").find("snapshots are not served"), std::string::npos);
    EXPECT_NE(error_of("rbd:pool//img").find("bad namespace name"), std::string::npos);
    EXPECT_NE(error_of("rbd:pool/ns/img/x").find("bad image name"), std::string::npos);
    EXPECT_NE(error_of("rbd:po ol/img").find("bad pool name"), std::string::npos);
    EXPECT_NE(error_of("rbd:pool/" + std::string(300, 'a')).find("bad image name"), std::string::npos);
}

TEST(RbdOptions, Defaults) {
    auto o = parse_options("");
    EXPECT_EQ(o.rbd.conf, "");
    EXPECT_EQ(o.rbd.id, "admin");
    EXPECT_EQ(o.rbd.cluster, "ceph");
    EXPECT_EQ(o.rbd.keyring, "");
    EXPECT_EQ(o.rbd.timeout_s, 10u);
    EXPECT_EQ(o.rbd.lock, rbio::bs::RbdSettings::Lock::Cooperative);
    // rbd_quiet_s follows the lock unless set: off for cooperative LUs.
    EXPECT_FALSE(o.rbd.quiet_s.has_value());
    EXPECT_EQ(o.rbd.quiet_limit_s(), 0u);
    EXPECT_EQ(parse_options("rbd_lock=takeover").rbd.quiet_limit_s(), 10u);
    EXPECT_EQ(parse_options("rbd_quiet_s=7").rbd.quiet_limit_s(), 7u);
    EXPECT_EQ(parse_options("rbd_lock=takeover:rbd_quiet_s=0").rbd.quiet_limit_s(), 0u);
    EXPECT_EQ(o.rbd.reopen, rbio::bs::RbdSettings::Reopen::Auto);
    // File LUs show no Ceph settings in their canonical options.
    EXPECT_EQ(rbio::bs::to_string(o).find("rbd_"), std::string::npos);
}

TEST(RbdOptions, AllKeys) {
    auto o = parse_options(
        "rbd_conf=/etc/ceph/b.conf:rbd_id=iscsi-gw1:rbd_keyring=/etc/ceph/gw.keyring:"
        "rbd_cluster=b:rbd_timeout=30:rbd_lock=takeover:rbd_quiet_s=0:queue_depth=64");
    EXPECT_EQ(o.rbd.conf, "/etc/ceph/b.conf");
    EXPECT_EQ(o.rbd.id, "iscsi-gw1");
    EXPECT_EQ(o.rbd.keyring, "/etc/ceph/gw.keyring");
    EXPECT_EQ(o.rbd.cluster, "b");
    EXPECT_EQ(o.rbd.timeout_s, 30u);
    EXPECT_EQ(o.rbd.lock, rbio::bs::RbdSettings::Lock::Takeover);
    EXPECT_EQ(o.rbd.quiet_s, 0u);
    EXPECT_EQ(o.rbd.quiet_limit_s(), 0u);
    EXPECT_EQ(o.queue_depth, 64u);
    EXPECT_EQ(parse_options("rbd_lock=cooperative").rbd.lock, rbio::bs::RbdSettings::Lock::Cooperative);
    EXPECT_EQ(parse_options(rbio::bs::to_string(o)).rbd, o.rbd);
    auto m = parse_options("rbd_lock=cooperative:rbd_reopen=manual");
    EXPECT_EQ(m.rbd.reopen, rbio::bs::RbdSettings::Reopen::Manual);
    EXPECT_NE(rbio::bs::to_string(m).find(":rbd_reopen=manual"), std::string::npos);
    EXPECT_EQ(parse_options(rbio::bs::to_string(m)).rbd, m.rbd);
    EXPECT_EQ(parse_options("rbd_lock=takeover:rbd_reopen=auto").rbd.reopen,
              rbio::bs::RbdSettings::Reopen::Auto);
}

TEST(RbdOptions, BadValuesSayWhy) {
    auto msg = [](const char* s) {
        try {
            parse_options(s);
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    EXPECT_NE(msg("rbd_conf=ceph.conf").find("absolute path"), std::string::npos);
    EXPECT_NE(msg("rbd_keyring=").find("absolute path"), std::string::npos);
    EXPECT_NE(msg("rbd_id=client.admin/x").find("letters, digits"), std::string::npos);
    EXPECT_NE(msg("rbd_cluster=").find("letters, digits"), std::string::npos);
    EXPECT_NE(msg("rbd_timeout=0").find("1 to 300"), std::string::npos);
    EXPECT_NE(msg("rbd_timeout=301").find("1 to 300"), std::string::npos);
    EXPECT_NE(msg("rbd_quiet_s=3601").find("0 to 3600"), std::string::npos);
    EXPECT_NE(msg("rbd_quiet_s=ten").find("rbd_quiet_s"), std::string::npos);
    EXPECT_NE(msg("rbd_lock=managed").find("expected cooperative or takeover"), std::string::npos);
    EXPECT_NE(msg("rbd_reopen=never").find("expected auto or manual"), std::string::npos);
    // A takeover fences the old owner at every change of the writing
    // gateway: without a reopen, failback would leave it fenced for good.
    EXPECT_NE(msg("rbd_lock=takeover:rbd_reopen=manual").find("use rbd_reopen=auto"), std::string::npos);
    EXPECT_NE(msg("rbd_reopen=manual:rbd_lock=takeover").find("use rbd_reopen=auto"), std::string::npos);
}
