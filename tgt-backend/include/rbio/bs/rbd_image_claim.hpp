#pragma once
// One tgtd serves an RBD image through one LU when that LU takes the lock
// over (rbd_lock=takeover).
//
// Each LU opens the image with a librbd client of its own. Two LUs of one
// tgtd on one image, either with takeover, break each other's lock at the
// first write of each, and breaking a lock blocklists its owner: the LUs
// fence each other in turn, each reopening (rbd_reopen=auto) to be fenced
// again by the other's next write, and hosts see their sessions end over
// and over. So the second such LU is refused when it opens. LUs with the
// cooperative lock may share an image: librbd hands the lock between them.
//
// The image is told apart by cluster name, ceph.conf and pool/namespace/
// image as the LUs' options name them.
#include <cstdint>
#include <string>

#include "rbio/bs/options.hpp"
#include "rbio/bs/rbd_image.hpp"

namespace rbio::bs {

class RbdImageClaim {
public:
    RbdImageClaim() = default;
    // Claims `where` for `owner` (an LU; its own earlier claims never
    // conflict, so a path update may claim before it lets the old go).
    // Throws Error naming the conflict.
    RbdImageClaim(const RbdLocation& where, const RbdSettings& how, const void* owner);
    RbdImageClaim(RbdImageClaim&& o) noexcept : id_(o.id_) { o.id_ = 0; }
    RbdImageClaim& operator=(RbdImageClaim&& o) noexcept;
    RbdImageClaim(const RbdImageClaim&) = delete;
    RbdImageClaim& operator=(const RbdImageClaim&) = delete;
    ~RbdImageClaim() { release(); }

private:
    void release() noexcept;
    uint64_t id_ = 0;  // 0: claims nothing
};

}  // namespace rbio::bs
