// One LU per RBD image in a tgtd when either takes the lock over
// (rbio/bs/rbd_image_claim.hpp). integration.rbd has it through tgtadm.
#include <gtest/gtest.h>

#include "rbio/bs/error.hpp"
#include "rbio/bs/options.hpp"
#include "rbio/bs/rbd_image.hpp"
#include "rbio/bs/rbd_image_claim.hpp"

using rbio::bs::Error;
using rbio::bs::RbdImageClaim;
using rbio::bs::RbdLocation;
using rbio::bs::RbdSettings;

namespace {

RbdSettings with_lock(RbdSettings::Lock lock) {
    RbdSettings s;
    s.lock = lock;
    return s;
}

const RbdSettings kTakeover = with_lock(RbdSettings::Lock::Takeover);
const RbdSettings kCooperative = with_lock(RbdSettings::Lock::Cooperative);

}  // namespace

TEST(RbdImageClaim, TakeoverKeepsTheImageToOneLu) {
    const RbdLocation img{"rbd", "", "disk"};
    int lu1 = 0, lu2 = 0;
    RbdImageClaim first(img, kTakeover, &lu1);
    EXPECT_THROW(RbdImageClaim(img, kTakeover, &lu2), Error);
    EXPECT_THROW(RbdImageClaim(img, kCooperative, &lu2), Error);  // the other one would be fenced
    // The same LU again (a path update claims before it lets the old go).
    EXPECT_NO_THROW(RbdImageClaim(img, kTakeover, &lu1));
    // Other images, namespaces and clusters are others.
    EXPECT_NO_THROW(RbdImageClaim(RbdLocation{"rbd", "", "other"}, kTakeover, &lu2));
    EXPECT_NO_THROW(RbdImageClaim(RbdLocation{"rbd", "ns", "disk"}, kTakeover, &lu2));
    RbdSettings elsewhere = kTakeover;
    elsewhere.cluster = "backup";
    EXPECT_NO_THROW(RbdImageClaim(img, elsewhere, &lu2));
    // Released with its LU.
    first = RbdImageClaim();
    EXPECT_NO_THROW(RbdImageClaim(img, kTakeover, &lu2));
}

TEST(RbdImageClaim, CooperativeLusShareAnImage) {
    const RbdLocation img{"rbd", "", "shared"};
    int lu1 = 0, lu2 = 0, lu3 = 0;
    RbdImageClaim a(img, kCooperative, &lu1);
    RbdImageClaim b(img, kCooperative, &lu2);
    try {
        RbdImageClaim c(img, kTakeover, &lu3);
        ADD_FAILURE() << "a takeover LU beside cooperative ones was claimed";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("rbd image rbd/shared is already served by another LU"),
                  std::string::npos)
            << e.what();
    }
    RbdImageClaim moved(std::move(a));  // the claim goes with it, not twice
    a = RbdImageClaim();
    EXPECT_THROW(RbdImageClaim(img, kTakeover, &lu3), Error);
}
