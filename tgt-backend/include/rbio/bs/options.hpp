#pragma once
// The --bsopts of an rbio logical unit: "key=value:key=value" (';' works
// too, except through tgt-admin, whose shell takes ';').
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace rbio::bs {

// How an LU on "rbd:POOL/IMAGE" reaches its Ceph cluster (bsopts rbd_conf,
// rbd_id, rbd_keyring, rbd_cluster, rbd_timeout, rbd_lock, rbd_quiet_s,
// rbd_reopen). Ignored for files.
struct RbdSettings {
    std::string conf;          // ceph.conf; empty: librados' own search (/etc/ceph/$cluster.conf)
    std::string id = "admin";  // client id, without "client."
    std::string keyring;       // empty: as ceph.conf says
    std::string cluster = "ceph";
    uint32_t timeout_s = 10;  // connecting and monitor operations; never I/O
    // Who gets the image's exclusive lock. cooperative: librbd's own way,
    // the owner hands it over when another client asks. takeover: a write
    // at a gateway that does not own it breaks the owner's lock, which
    // blocklists the owner, and takes it for good (see docs/ceph-rbd.md).
    enum class Lock : uint8_t { Cooperative, Takeover };
    Lock lock = Lock::Cooperative;
    // A write from a connection that had heard nothing from its host for
    // at least this many seconds (and whose host has not read a response
    // since) ends its session instead: its host may have given it up and
    // written through another gateway since (docs/ceph-rbd.md). 0: off.
    // Unset: 10 with takeover, off with the cooperative lock, whose LUs
    // keep serving as they did for hosts that are silent longer.
    std::optional<uint32_t> quiet_s;
    uint32_t quiet_limit_s() const { return quiet_s ? *quiet_s : lock == Lock::Takeover ? 10 : 0; }
    // After the cluster fenced this gateway's client (blocklisted it), auto:
    // end the LU's sessions and open the image with a new client, as a
    // restart would; manual: refuse every request until tgtd restarts or the
    // LU is added again (an admin who fenced the gateway on purpose keeps
    // it out). takeover needs auto: it fences the old owner at every change
    // of the writing gateway.
    enum class Reopen : uint8_t { Auto, Manual };
    Reopen reopen = Reopen::Auto;
    bool operator==(const RbdSettings&) const = default;
};

struct Options {
    // Ring size and the most I/Os in flight per LU.
    uint32_t queue_depth = 128;
    // Gather commands of one event-loop pass and submit them with one
    // io_uring_enter; off submits each command on arrival (stock-like).
    bool batch = true;
    // Merge adjacent same-direction requests of a pass into one readv/writev.
    bool coalesce = true;
    // Largest merged I/O, in KiB.
    uint32_t coalesce_max_kib = 1024;
    // Reap completions right after submitting (most page-cache I/O is done
    // by then) instead of waiting for the eventfd wake-up.
    bool inline_reap = true;
    // Reads and writes up to inline_max_kib done synchronously in the event
    // loop instead of through io_uring. io_uring cannot complete I/O on
    // memory file systems (tmpfs) inside io_uring_enter: it hands it to a
    // kernel worker thread and wakes tgtd again, which costs more than the
    // copy. auto: on for tmpfs/ramfs files only.
    enum class Inline : uint8_t { Auto, On, Off };
    Inline inline_io = Inline::Auto;
    uint32_t inline_max_kib = 128;
    // Advertise thin provisioning (UNMAP, WRITE SAME with UNMAP, GET LBA
    // STATUS) on the LU.
    bool thin = true;
    RbdSettings rbd;
    // TEST ONLY, never in production: acknowledge FUA writes and
    // SYNCHRONIZE CACHE without making anything durable (no RWF_DSYNC, no
    // fdatasync), as a disk that lies about its cache would. It exists so
    // that vm.crash-durability can show that its check catches a store
    // that loses acknowledged writes in a crash.
    bool debug_unsafe_fua = false;
};

// Parses bsopts (empty or null means defaults). Throws Error naming the bad
// key or value and listing the accepted ones.
Options parse_options(std::string_view bsopts);

// The canonical form, e.g. "queue_depth=128:batch=on:...".
std::string to_string(const Options& o);
// The Ceph settings that differ from the defaults, each as ":key=value";
// empty when none do.
std::string rbd_to_string(const RbdSettings& r);

}  // namespace rbio::bs
