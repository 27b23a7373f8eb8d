#pragma once
// One Ceph RBD image opened through librbd's asynchronous C API, for the
// engine of an LU whose backing store is "rbd:POOL/IMAGE".
//
// Completions do not run callbacks on librbd's threads: librbd queues them
// and signals the engine's eventfd (rbd_set_image_notification), and the
// engine collects them with poll() from tgtd's own event loop. So there is
// no thread hop and no lock on rbio's side per I/O; librbd itself allocates
// one small completion object per request (its C API has no other way).
//
// librbd's cache is always off: several gateways may serve one image, and
// a write acknowledged to a host must already be in the cluster.
#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "rbio/bs/options.hpp"

namespace rbio::bs {

// Where an image lives: "rbd:POOL/IMAGE" or "rbd:POOL/NAMESPACE/IMAGE".
struct RbdLocation {
    std::string pool;
    std::string ns;  // empty: the pool's default namespace
    std::string image;
    std::string describe() const;  // "POOL/IMAGE" or "POOL/NS/IMAGE"
};

bool is_rbd_path(std::string_view path);
// Throws Error naming what is wrong with the path.
RbdLocation parse_rbd_path(std::string_view path);

class RbdImage {
public:
    // Connects and opens the image; throws Error with a one-line reason
    // (unreadable ceph.conf, unreachable monitors, refused key, missing pool
    // or image). event_fd: where librbd signals finished requests and image
    // header changes (e.g. a resize).
    RbdImage(const RbdLocation& where, const RbdSettings& how, int event_fd);
    ~RbdImage();
    RbdImage(const RbdImage&) = delete;
    RbdImage& operator=(const RbdImage&) = delete;

    // Object size: the physical block the LU reports.
    uint64_t object_size() const { return object_size_; }
    const std::string& name() const { return name_; }
    // This gateway as the cluster knows it, e.g. "client.4135 at
    // 127.0.0.1:0/2773466925": the names `rbd status` (watchers), `rbd lock
    // ls` (the exclusive lock's owner) and `ceph osd blocklist ls` show.
    const std::string& client() const { return client_; }

    // Each starts one request and returns 0, or -errno if librbd refused
    // it (then it will not come back through poll()). `tag` identifies the
    // request in poll().
    int readv(const iovec* iov, int n, uint64_t off, void* tag);
    int writev(const iovec* iov, int n, uint64_t off, void* tag);
    int flush(void* tag);
    int discard(uint64_t off, uint64_t len, void* tag);
    // `len` bytes at off, each `pattern_len` bytes a copy of pattern.
    int write_same(uint64_t off, uint64_t len, const uint8_t* pattern, uint64_t pattern_len, void* tag);
    // Atomic in the OSD: writes `data` only if the media equals `cmp`.
    // A miscompare finishes with -EILSEQ and *mismatch set to the first
    // differing byte (librbd 16.2: its object's image offset plus the
    // byte's index in the command; see the engine). librbd takes at
    // most one 512-byte sector (kCompareAndWriteBytes, aligned): anything
    // longer finishes with -EINVAL. One at a time (-EBUSY otherwise).
    static constexpr uint64_t kCompareAndWriteBytes = 512;
    int compare_and_write(uint64_t off, uint64_t len, const uint8_t* cmp, const uint8_t* data,
                          uint64_t* mismatch, void* tag);

    // Calls fn(tag, result) for every finished request (result: bytes or
    // 0 on success, -errno on failure); returns how many. Never blocks.
    template <class Fn>
    unsigned poll(Fn&& fn) {
        unsigned total = 0;
        void* batch[kPollBatch];
        for (;;) {
            int n = poll_batch(batch, kPollBatch);
            for (int i = 0; i < n; ++i) {
                void* tag = tag_of(batch[i]);
                // Not expected of librbd 16.2, which never sends COMPARE
                // AND WRITE through the event socket: should a librbd do
                // both, its callback has reported it already. (Such a
                // librbd could also push it after tgtd released it; it is
                // unsupported until seen.)
                if (tag == this) continue;
                fn(tag, finish(batch[i]));
            }
            total += unsigned(n > 0 ? n : 0);
            if (n < int(kPollBatch)) break;
        }
        if (void* c = caw_finished_.exchange(nullptr, std::memory_order_acquire)) {
            void* tag = caw_tag_;
            caw_tag_ = nullptr;
            fn(tag, finish(c));
            ++total;
        }
        return total;
    }
    // Requests started and not yet returned by poll().
    uint32_t in_flight() const { return in_flight_; }

    // A header change (resize, feature or lock change, a watch re-made
    // after a network fault) seen since the last call: the size librbd
    // read after it, or the error it met reading it (-errno).
    struct HeaderChange {
        bool seen = false;
        int64_t size_or_error = 0;
    };
    HeaderChange take_header_change() {
        if (!header_changed_.exchange(false, std::memory_order_acq_rel)) return {};
        return {true, header_size_.load(std::memory_order_relaxed)};
    }

    // librbd shortens a write that runs past the image's end to the part
    // that fits and reports success: after another client's shrink, once a
    // header notice made it re-read the header, and, on the gateway whose
    // librbd runs the shrink itself (it holds the exclusive lock, so `rbd
    // resize` asks it to), as soon as the shrink starts, before its trim
    // and before any notice. So a finished write is judged against
    // size_now(), what librbd clips to at this moment, but only once every
    // notice begun before the write was reaped has been read
    // (notices_begun() then, read_through() later): with a notice still
    // unread, size_now() would re-read the header from an OSD in tgtd's
    // loop. Not seen: a shrink and a regrowth both within one write.
    uint32_t notices_begun() const { return notices_begun_.load(std::memory_order_acquire); }
    bool read_through(uint32_t notices) const {
        return int32_t(notices_read_.load(std::memory_order_acquire) - notices) >= 0;
    }
    // librbd's current size, shrinks in progress included (rbd_get_size:
    // two of librbd's locks; an OSD read only if a notice came since the
    // last read). On error, the last size read after a notice.
    uint64_t size_now() const;
    // The last size read without error: at open (once the header watch was
    // in place, so that every later change comes as a notice) or after a
    // notice.
    uint64_t size_read() const { return size_read_.load(std::memory_order_relaxed); }

    // rbd_lock=takeover. Takes the image's exclusive lock on a thread of its
    // own, because librbd's lock calls wait for the cluster (the monitors,
    // to blocklist): breaks another owner's lock, which blocklists that
    // client (rbd_blocklist_on_break_lock), then acquires the lock in
    // librbd's managed mode, where it is never handed over on request. So
    // a gateway that lost the lock this way can write nothing more, even
    // a write that reaches it late. Signals event_fd when done. Throws
    // std::system_error if no thread can be started; one at a time.
    void start_lock_takeover();
    struct LockTakeover {
        int rc = 0;        // 0: this client owns the lock; else -errno
        std::string said;  // what was done or what failed, for the log
        uint32_t ms = 0;   // how long it took
    };
    // The finished takeover's outcome, once; false while it runs (or when
    // none was started). tgtd's loop only.
    bool take_lock_takeover(LockTakeover& out);

private:
    static constexpr unsigned kPollBatch = 64;
    struct Handles;
    int poll_batch(void** out, unsigned max);
    static void* tag_of(void* completion);
    // The request's result; releases its completion.
    int64_t finish(void* completion);
    void* completion_for(void* tag);
    int started(void* completion, int rc);
    static void on_header_change(void* self);
    static void on_compare_and_write_done(void* completion, void* self);
    // From librbd's threads: makes the eventfd readable for tgtd's loop.
    void wake_loop() const;

    std::string name_;
    std::string client_;
    uint64_t object_size_ = 0;
    int event_fd_;
    uint32_t in_flight_ = 0;
    // Written by librbd's notification thread, read by tgtd's loop: the
    // size first, then the flag (release), so a taken flag shows a size at
    // least as new as the notice that raised it.
    std::atomic<int64_t> header_size_{0};
    std::atomic<bool> header_changed_{false};
    std::mutex header_read_;  // only between notification threads: newest size last
    // Notices counted as their callback begins and as its read of the
    // size ends (covering every notice begun before the read), and the
    // last size read without error.
    std::atomic<uint32_t> notices_begun_{0};
    std::atomic<uint32_t> notices_read_{0};
    std::atomic<uint64_t> size_read_{0};
    // librbd 16.2 never hands a COMPARE AND WRITE back through the image's
    // event socket (its C API starts it as not "native async", unlike
    // every other request), so rbd_poll_io_events never returns it. Its
    // completion calls back instead: librbd's thread stores it here and
    // signals the eventfd, and poll() takes it. caw_tag_ is tgtd's alone.
    std::atomic<void*> caw_finished_{nullptr};
    void* caw_tag_ = nullptr;
    void run_lock_takeover();
    std::string addr_;       // this client's address, as lock owners are named
    LockTakeover takeover_;  // written by the takeover thread before takeover_done_
    std::atomic<bool> takeover_done_{false};
    // After the members above, so destroyed before them: its destructor
    // ends the header watch, and librbd may run on_header_change until it
    // has, which uses them (also when the constructor throws after the
    // watch started).
    std::unique_ptr<Handles> h_;
    // After h_, so destroyed (joined) before the image it uses is closed.
    std::jthread lock_worker_;
};

}  // namespace rbio::bs
