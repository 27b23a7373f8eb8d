#include "rbio/bs/rbd_image.hpp"

#include <rados/librados.h>
#include <rbd/librbd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <span>
#include <vector>

#include "rbio/bs/error.hpp"
#include "rbio/bs/ring.hpp"

namespace rbio::bs {

namespace {

constexpr std::string_view kPrefix = "rbd:";

bool valid_name(std::string_view s) {
    if (s.empty() || s.size() > 255) return false;
    for (char ch : s)
        if (ch == '/' || ch == '@' || ch == ':' || static_cast<unsigned char>(ch) < 0x21) return false;
    return true;
}

std::string rados_error(const std::string& what, int rc) { return what + ": " + std::strerror(-rc); }

}  // namespace

std::string RbdLocation::describe() const {
    return ns.empty() ? pool + "/" + image : pool + "/" + ns + "/" + image;
}

bool is_rbd_path(std::string_view path) { return path.substr(0, kPrefix.size()) == kPrefix; }

RbdLocation parse_rbd_path(std::string_view path) {
    const std::string shown(path);
    if (!is_rbd_path(path)) throw Error("'" + shown + "' is not an RBD path (rbd:POOL/IMAGE)");
    std::string_view rest = path.substr(kPrefix.size());
    RbdLocation loc;
    size_t a = rest.find('/');
    if (a == std::string_view::npos)
        throw Error("'" + shown + "': expected rbd:POOL/IMAGE or rbd:POOL/NAMESPACE/IMAGE");
    size_t b = rest.find('/', a + 1);
    loc.pool = rest.substr(0, a);
    if (b == std::string_view::npos) {
        loc.image = rest.substr(a + 1);
    } else {
        loc.ns = rest.substr(a + 1, b - a - 1);
        loc.image = rest.substr(b + 1);
        if (!valid_name(loc.ns)) throw Error("'" + shown + "': bad namespace name '" + loc.ns + "'");
    }
    if (!valid_name(loc.pool)) throw Error("'" + shown + "': bad pool name '" + loc.pool + "'");
    if (!valid_name(loc.image))
        throw Error("'" + shown + "': bad image name '" + loc.image +
                    "' (snapshots are not served: an LU must be writable)");
    return loc;
}

namespace {

// A librados setting rbio makes on its client.
struct Setting {
    const char* key;
    std::string value;
    // What a pool or image setting of another value would break; those
    // take precedence over a client's (checked once the image is open).
    const char* needed_for = nullptr;
};

// `rbd config pool|image set` values override a client's own when librbd
// opens the image: throws if one undoes a setting the LU relies on.
void refuse_overrides(rbd_image_t image, std::span<const Setting> settings, const RbdLocation& where,
                      const std::string& name) {
    const auto failed = [&](int rc) {
        return Error(rados_error("rbd " + name + ": listing the image's settings", rc));
    };
    int count = 0;
    int rc = rbd_config_image_list(image, nullptr, &count);
    if (rc < 0 && rc != -ERANGE) throw failed(rc);
    std::vector<rbd_config_option_t> listed(size_t(std::max(count, 0)));
    rc = rbd_config_image_list(image, listed.data(), &count);
    if (rc < 0) throw failed(rc);
    const struct Owned {
        std::vector<rbd_config_option_t>& v;
        int n;
        ~Owned() { rbd_config_image_list_cleanup(v.data(), n); }
    } owned{listed, count};
    for (const rbd_config_option_t& o : std::span(listed).first(size_t(count))) {
        if (o.source == RBD_CONFIG_SOURCE_CONFIG || !o.name || !o.value) continue;
        const bool pool = o.source == RBD_CONFIG_SOURCE_POOL;
        for (const auto& set : settings)
            if (set.needed_for && std::strcmp(o.name, set.key) == 0 && set.value != o.value)
                throw Error("rbd " + name + ": the " + (pool ? "pool's" : "image's") + " setting " + o.name +
                            "=" + o.value + " overrides rbio's " + set.value + ", and " + set.needed_for +
                            " (remove it: rbd config " +
                            (pool ? "pool rm " + where.pool : "image rm " + where.describe()) + " " + o.name +
                            ")");
    }
}

}  // namespace

// librados/librbd handles, released in reverse order of creation.
struct RbdImage::Handles {
    rados_t cluster = nullptr;
    bool connected = false;
    rados_ioctx_t ioctx = nullptr;
    rbd_image_t image = nullptr;
    uint64_t watch = 0;
    bool watching = false;

    ~Handles() {
        if (watching) rbd_update_unwatch(image, watch);
        if (image) rbd_close(image);
        if (ioctx) rados_ioctx_destroy(ioctx);
        if (cluster) rados_shutdown(cluster);  // also right when never connected
    }
};

RbdImage::RbdImage(const RbdLocation& where, const RbdSettings& how, int event_fd)
    : name_(where.describe()), event_fd_(event_fd), h_(std::make_unique<Handles>()) {
    const std::string client = "client." + how.id;
    int rc = rados_create2(&h_->cluster, how.cluster.c_str(), client.c_str(), 0);
    if (rc < 0) throw Error(rados_error("rbd " + name_ + ": creating the cluster handle for " + client, rc));

    rc = rados_conf_read_file(h_->cluster, how.conf.empty() ? nullptr : how.conf.c_str());
    if (rc < 0)
        throw Error(rados_error("rbd " + name_ + ": reading " +
                                    (how.conf.empty() ? "/etc/ceph/" + how.cluster + ".conf" : how.conf),
                                rc));
    const std::string timeout = std::to_string(how.timeout_s);
    const Setting settings[] = {
        // Gateways share images: no cache that could hold an acknowledged
        // write or serve a stale read.
        {"rbd_cache", "false", "librbd's cache would acknowledge writes only this gateway holds"},
        // librbd copies each write (its default). Its zero-copy writes would
        // save that copy, since the host's buffer lives until the command
        // completes, but librbd 16.2 never completes a zero-copy write that
        // fails for want of the exclusive lock: a gateway fenced by another
        // (blocklisted) would hang every write, and tgtd's shutdown, for ever.
        {"rbd_disable_zero_copy_writes", "true", "a gateway fenced by another would hang its writes"},
        // Dispatch each request in tgtd's loop instead of handing it to
        // librbd's io_context thread first: one thread wake-up less per I/O
        // (4 KiB at 1 in flight: 1.3-1.4x the IOPS; bench/rbd-compare.sh).
        // Nothing in the dispatch waits: lock acquisition, refresh and QoS
        // queue the request and go on asynchronously.
        {"rbd_non_blocking_aio", "false"},
        // The LU reports that unmapped blocks read as zeros (LBPRZ): a
        // discard of part of an object must zero it, not be skipped.
        {"rbd_skip_partial_discard", "false",
         "UNMAP would leave data in blocks the LU reports as reading zeros (LBPRZ)"},
        // WRITE SAME of zeros without UNMAP asks for the blocks to be
        // written (SBC: UNMAP=0 is a write; hosts preallocate with it, as
        // VMware's eager zeroing does); librbd would discard them instead.
        {"rbd_discard_on_zeroed_write_same", "false"},
        // Fencing: a gateway that takes the image's lock from another
        // (rbd_lock=takeover, or a dead owner's) must blocklist it, or the
        // other's late writes land over the new owner's, and it must not
        // leave the blocklisting to expire sooner than the cluster's own
        // default (0: mon_osd_blocklist_default_expire, an hour), or a
        // gateway stopped longer writes when it resumes.
        {"rbd_blocklist_on_break_lock", "true",
         "a gateway that takes the lock over would not fence the one it took it from"},
        {"rbd_blocklist_expire_seconds", "0",
         "a fenced gateway could write again once its blocklisting expired"},
        // The persistent write-back cache acknowledges writes it holds on
        // this gateway's disk, as librbd's cache does in memory.
        {"rbd_persistent_cache_mode", "disabled",
         "the persistent write-back cache would acknowledge writes only this gateway holds"},
        // A missing cluster, or an image whose placement groups are not
        // active, fails LU creation in seconds instead of holding tgtd's
        // event loop (every LU and session of this tgtd) for 300 s or for
        // ever. I/O itself never times out (an OSD that stops stalls it
        // instead): both timeouts are cleared once the image is open.
        {"client_mount_timeout", timeout},
        {"rados_mon_op_timeout", timeout},
        {"rados_osd_op_timeout", timeout},
        // librados logs to its own files unless told otherwise; tgtd's log
        // gets rbio's one-line reasons instead.
        {"log_to_stderr", "false"},
        {"err_to_stderr", "false"},
    };
    for (const auto& s : settings) {
        rc = rados_conf_set(h_->cluster, s.key, s.value.c_str());
        if (rc < 0) throw Error(rados_error(std::string("rbd ") + name_ + ": setting " + s.key, rc));
    }
    if (!how.keyring.empty()) {
        if (::access(how.keyring.c_str(), R_OK) != 0)
            throw Error(rados_error("rbd " + name_ + ": keyring " + how.keyring, -errno));
        rc = rados_conf_set(h_->cluster, "keyring", how.keyring.c_str());
        if (rc < 0) throw Error(rados_error("rbd " + name_ + ": setting keyring", rc));
    }

    rc = rados_connect(h_->cluster);
    if (rc < 0) {
        std::string why = rc == -ETIMEDOUT ? "no monitor answered within " + timeout + " s"
                          : rc == -EACCES || rc == -EPERM || rc == -ENOENT
                              ? std::string("authentication as ") + client + " refused or no key for it (" +
                                    std::strerror(-rc) + ")"
                              : std::strerror(-rc);
        throw Error("rbd " + name_ + ": cannot connect to cluster '" + how.cluster + "': " + why);
    }
    h_->connected = true;
    client_ = "client." + std::to_string(rados_get_instance_id(h_->cluster));
    char* addrs = nullptr;
    if (rados_getaddrs(h_->cluster, &addrs) == 0 && addrs) {
        client_ += std::string(" at ") + addrs;
        addr_ = addrs;
        rados_buffer_free(addrs);
    }

    rc = rados_ioctx_create(h_->cluster, where.pool.c_str(), &h_->ioctx);
    if (rc < 0) {
        h_->ioctx = nullptr;
        throw Error(rc == -ENOENT ? "rbd " + name_ + ": pool '" + where.pool + "' does not exist"
                                  : rados_error("rbd " + name_ + ": opening pool " + where.pool, rc));
    }
    if (!where.ns.empty()) rados_ioctx_set_namespace(h_->ioctx, where.ns.c_str());

    const auto no_osd = [&](const std::string& what) {
        return "rbd " + name_ + ": " + what + ": no OSD answered within " + timeout +
               " s (are the pool's placement groups active? ceph pg stat)";
    };
    rc = rbd_open(h_->ioctx, where.image.c_str(), &h_->image, nullptr);
    if (rc < 0) {
        h_->image = nullptr;
        throw Error(rc == -ENOENT      ? "rbd " + name_ + ": image '" + where.image + "' does not exist"
                    : rc == -ETIMEDOUT ? no_osd("opening the image")
                                       : rados_error("rbd " + name_ + ": opening the image", rc));
    }
    refuse_overrides(h_->image, settings, where, name_);

    rbd_image_info_t info{};
    rc = rbd_stat(h_->image, &info, sizeof info);
    if (rc < 0) throw Error(rados_error("rbd " + name_ + ": stat", rc));
    object_size_ = info.obj_size;
    if (how.lock == RbdSettings::Lock::Takeover) {
        uint64_t features = 0;
        rc = rbd_get_features(h_->image, &features);
        if (rc < 0) throw Error(rados_error("rbd " + name_ + ": reading the image's features", rc));
        if ((features & RBD_FEATURE_EXCLUSIVE_LOCK) == 0)
            throw Error("rbd " + name_ +
                        ": rbd_lock=takeover needs the image's exclusive-lock feature (rbd " +
                        "feature enable " + where.describe() + " exclusive-lock)");
    }

    rc = rbd_set_image_notification(h_->image, event_fd_, EVENT_TYPE_EVENTFD);
    if (rc < 0) throw Error(rados_error("rbd " + name_ + ": completion notification", rc));
    rc = rbd_update_watch(h_->image, &h_->watch, &RbdImage::on_header_change, this);
    if (rc < 0)
        throw Error(rc == -ETIMEDOUT ? no_osd("watching the image header")
                                     : rados_error("rbd " + name_ + ": watching the image header", rc));
    h_->watching = true;
    // Read after the watch is in place: a resize between rbd_stat and the
    // watch would otherwise go unnoticed, and hosts and the clip check
    // (size_read) would disagree with librbd until the next notice.
    uint64_t bytes = 0;
    rc = rbd_get_size(h_->image, &bytes);
    if (rc < 0) throw Error(rados_error("rbd " + name_ + ": size", rc));
    size_read_.store(bytes, std::memory_order_relaxed);

    // The monitor timeout was for opening only. From here on librbd asks
    // the monitors when it takes the lock over from a dead gateway (it
    // blocklists that gateway first): with a timeout, a takeover during a
    // monitor election, likely when the node that failed ran a monitor
    // too, would fail the host's write instead of letting it wait.
    // The same for the OSDs: an OSD that stops under I/O stalls it until
    // the OSD is back, and the host's own command timeout decides (librados
    // applies a changed timeout to requests sent from then on).
    for (const char* key : {"rados_mon_op_timeout", "rados_osd_op_timeout"}) {
        rc = rados_conf_set(h_->cluster, key, "0");
        if (rc < 0) throw Error(rados_error("rbd " + name_ + ": clearing " + key, rc));
    }
}

RbdImage::~RbdImage() = default;

// librbd's notification thread. The size is read here, not in tgtd's
// loop: after a notice librbd re-reads the header from an OSD before it
// answers, and an OSD that is slow or gone would stall every LU and
// session of this tgtd meanwhile. (Ceph's own rbd-nbd and rbd-ggate read
// it in this callback too.) librbd waits for a running callback before
// rbd_update_unwatch returns, so `self` outlives it.
void RbdImage::on_header_change(void* arg) {
    auto* self = static_cast<RbdImage*>(arg);
    // Counted first: writes reaped from here on wait for this read (see
    // notices_begun), since librbd may clip them to the size it finds.
    self->notices_begun_.fetch_add(1, std::memory_order_acq_rel);
    {
        std::lock_guard<std::mutex> one_reader(self->header_read_);
        // Every notice begun so far is covered by the read below: librbd
        // marked the header stale before it called back.
        const uint32_t covered = self->notices_begun_.load(std::memory_order_acquire);
        uint64_t bytes = 0;
        int rc = rbd_get_size(self->h_->image, &bytes);
        self->header_size_.store(rc < 0 ? int64_t(rc) : int64_t(std::min<uint64_t>(bytes, INT64_MAX)),
                                 std::memory_order_relaxed);
        if (rc >= 0) self->size_read_.store(bytes, std::memory_order_relaxed);
        self->notices_read_.store(covered, std::memory_order_release);
        self->header_changed_.store(true, std::memory_order_release);
    }
    self->wake_loop();
}

void RbdImage::wake_loop() const { signal_event_fd(event_fd_); }

void RbdImage::start_lock_takeover() {
    if (lock_worker_.joinable()) lock_worker_.join();  // one whose outcome was taken
    takeover_done_.store(false, std::memory_order_relaxed);
    lock_worker_ = std::jthread([this] { run_lock_takeover(); });
}

bool RbdImage::take_lock_takeover(LockTakeover& out) {
    if (!takeover_done_.exchange(false, std::memory_order_acquire)) return false;
    out = std::move(takeover_);
    return true;
}

// The takeover thread. Breaking first, even an owner that would hand the
// lock over on request: a gateway that handed it over asks for it back
// with its next write, and that write may be one a host gave up on and
// wrote again elsewhere since (a link cut and restored, a stalled loop).
// Blocklisted, it can write nothing.
void RbdImage::run_lock_takeover() {
    const auto t0 = std::chrono::steady_clock::now();
    LockTakeover r;
    const auto failed = [&](const std::string& what, int rc) {
        r.rc = rc;
        r.said = what + ": " + std::strerror(-rc);
    };
    constexpr size_t kMaxOwners = 8;  // an exclusive lock has one
    char* owners[kMaxOwners] = {};
    size_t n = kMaxOwners;
    rbd_lock_mode_t mode{};
    // Already the owner (librbd took it for a write before): no break,
    // which could name this client itself, only the managed mode below.
    int owner = 0;
    int rc = rbd_is_exclusive_lock_owner(h_->image, &owner);
    if (rc == 0 && owner) n = 0;
    else rc = rbd_lock_get_owners(h_->image, &mode, owners, &n);
    if (rc == -ENOENT) {
        n = 0;
        rc = 0;
    }
    if (rc < 0) {
        failed("listing the lock's owners", rc);
    } else {
        // -ENOENT: the owner released the lock meanwhile (librbd found no
        // locker to break), so it was not blocklisted.
        std::string broken, released;
        for (size_t i = 0; i < n && r.rc == 0; ++i) {
            if (addr_ == owners[i]) continue;
            rc = rbd_lock_break(h_->image, RBD_LOCK_MODE_EXCLUSIVE, owners[i]);
            if (rc < 0 && rc != -ENOENT) {
                failed(std::string("breaking the lock of ") + owners[i], rc);
                break;
            }
            std::string& list = rc == -ENOENT ? released : broken;
            list += (list.empty() ? "" : ", ") + std::string(owners[i]);
        }
        rbd_lock_get_owners_cleanup(owners, n);
        if (r.rc == 0) {
            rc = rbd_lock_acquire(h_->image, RBD_LOCK_MODE_EXCLUSIVE);
            if (rc < 0)
                failed("acquiring the lock" + (broken.empty() ? "" : " after breaking " + broken + "'s"), rc);
            else if (!broken.empty())
                r.said = "took the exclusive lock over from " + broken + " (blocklisted)";
            else if (!released.empty())
                r.said = "took the exclusive lock (" + released + " released it first: not blocklisted)";
            else r.said = "took the exclusive lock (no other owner)";
        }
    }
    r.ms = uint32_t(
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count());
    takeover_ = std::move(r);
    takeover_done_.store(true, std::memory_order_release);
    wake_loop();
}

uint64_t RbdImage::size_now() const {
    uint64_t bytes = 0;
    return rbd_get_size(h_->image, &bytes) < 0 ? size_read() : bytes;
}

void* RbdImage::completion_for(void* tag) {
    rbd_completion_t c = nullptr;
    if (rbd_aio_create_completion(tag, nullptr, &c) < 0) return nullptr;
    return c;
}

int RbdImage::started(void* completion, int rc) {
    if (rc < 0) {
        rbd_aio_release(static_cast<rbd_completion_t>(completion));
        return rc;
    }
    ++in_flight_;
    return 0;
}

int RbdImage::readv(const iovec* iov, int n, uint64_t off, void* tag) {
    void* c = completion_for(tag);
    if (!c) return -ENOMEM;
    return started(c, rbd_aio_readv(h_->image, iov, n, off, static_cast<rbd_completion_t>(c)));
}

int RbdImage::writev(const iovec* iov, int n, uint64_t off, void* tag) {
    void* c = completion_for(tag);
    if (!c) return -ENOMEM;
    return started(c, rbd_aio_writev(h_->image, iov, n, off, static_cast<rbd_completion_t>(c)));
}

int RbdImage::flush(void* tag) {
    void* c = completion_for(tag);
    if (!c) return -ENOMEM;
    return started(c, rbd_aio_flush(h_->image, static_cast<rbd_completion_t>(c)));
}

int RbdImage::discard(uint64_t off, uint64_t len, void* tag) {
    void* c = completion_for(tag);
    if (!c) return -ENOMEM;
    return started(c, rbd_aio_discard(h_->image, off, len, static_cast<rbd_completion_t>(c)));
}

int RbdImage::write_same(uint64_t off, uint64_t len, const uint8_t* pattern, uint64_t pattern_len,
                         void* tag) {
    void* c = completion_for(tag);
    if (!c) return -ENOMEM;
    return started(c, rbd_aio_writesame(h_->image, off, size_t(len), reinterpret_cast<const char*>(pattern),
                                        size_t(pattern_len), static_cast<rbd_completion_t>(c), 0));
}

int RbdImage::compare_and_write(uint64_t off, uint64_t len, const uint8_t* cmp, const uint8_t* data,
                                uint64_t* mismatch, void* tag) {
    if (caw_tag_) return -EBUSY;
    rbd_completion_t c = nullptr;
    if (rbd_aio_create_completion(this, &RbdImage::on_compare_and_write_done, &c) < 0) return -ENOMEM;
    caw_tag_ = tag;
    ssize_t rc = rbd_aio_compare_and_write(h_->image, off, size_t(len), reinterpret_cast<const char*>(cmp),
                                           reinterpret_cast<const char*>(data), c, mismatch, 0);
    if (rc < 0) caw_tag_ = nullptr;
    return started(c, int(rc < 0 ? rc : 0));
}

// librbd's thread, once the request finished. librbd holds its own
// reference to the completion until the callback and its aftermath are
// done, so tgtd's loop may release it as soon as it sees it here.
void RbdImage::on_compare_and_write_done(void* completion, void* arg) {
    auto* self = static_cast<RbdImage*>(arg);
    self->caw_finished_.store(completion, std::memory_order_release);
    self->wake_loop();
}

int RbdImage::poll_batch(void** out, unsigned max) {
    if (in_flight_ == 0) return 0;
    int n = rbd_poll_io_events(h_->image, reinterpret_cast<rbd_completion_t*>(out), int(max));
    return n > 0 ? n : 0;
}

void* RbdImage::tag_of(void* completion) {
    return rbd_aio_get_arg(static_cast<rbd_completion_t>(completion));
}

int64_t RbdImage::finish(void* completion) {
    auto c = static_cast<rbd_completion_t>(completion);
    int64_t res = rbd_aio_get_return_value(c);
    rbd_aio_release(c);
    --in_flight_;
    return res;
}

}  // namespace rbio::bs
