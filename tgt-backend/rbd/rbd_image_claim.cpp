#include "rbio/bs/rbd_image_claim.hpp"

#include <map>
#include <mutex>

#include "rbio/bs/error.hpp"

namespace rbio::bs {

namespace {

struct Claim {
    std::string key;
    const void* owner;
    bool takeover;
};

// LUs open in tgtd's main thread, but a lock costs nothing at open time
// and keeps the registry safe whoever calls.
std::mutex registry_mutex;
std::map<uint64_t, Claim> registry;
uint64_t last_id = 0;

}  // namespace

RbdImageClaim::RbdImageClaim(const RbdLocation& where, const RbdSettings& how, const void* owner) {
    const bool takeover = how.lock == RbdSettings::Lock::Takeover;
    std::string key = how.cluster + '\n' + how.conf + '\n' + where.describe();
    std::lock_guard<std::mutex> hold(registry_mutex);
    for (const auto& [id, c] : registry) {
        if (c.key != key || c.owner == owner || !(takeover || c.takeover)) continue;
        throw Error("rbd image " + where.describe() + " is already served by another LU of this tgtd" +
                    (c.takeover ? " with rbd_lock=takeover" : "") +
                    ": two LUs of one gateway on one image fence each other at every write when "
                    "either takes the lock over; serve it through one LU, or give both the "
                    "cooperative lock");
    }
    id_ = ++last_id;
    registry.emplace(id_, Claim{std::move(key), owner, takeover});
}

RbdImageClaim& RbdImageClaim::operator=(RbdImageClaim&& o) noexcept {
    if (this != &o) {
        release();
        id_ = o.id_;
        o.id_ = 0;
    }
    return *this;
}

void RbdImageClaim::release() noexcept {
    if (id_ == 0) return;
    std::lock_guard<std::mutex> hold(registry_mutex);
    registry.erase(id_);
    id_ = 0;
}

}  // namespace rbio::bs
