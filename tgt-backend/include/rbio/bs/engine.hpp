#pragma once
// The backing-store engine of one logical unit: turns SCSI block commands
// into io_uring operations on the backing file, or into librbd requests on
// a Ceph RBD image ("rbd:POOL/IMAGE", see rbd_image.hpp).
//
// Per event-loop pass of tgtd, commands are only queued (no system call);
// at the end of the pass flush() coalesces adjacent requests, hands every
// SQE to the kernel with one io_uring_enter and reaps what already finished
// without another call. Completions that finish later wake tgtd's epoll
// through an eventfd and are reaped in bulk by on_event(). Everything runs on
// tgtd's one event-loop thread: no locks, no thread hop per command, and no
// allocation per command once the pools have grown to the load. An RBD
// image gets the same gathering and merging; its requests leave through
// librbd's asynchronous calls and its completions wake the same eventfd.
#include <sys/uio.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "rbio/bs/c_api.h"
#include "rbio/bs/coalesce.hpp"
#include "rbio/bs/options.hpp"
#include "rbio/bs/rbd_image.hpp"
#include "rbio/bs/rbd_image_claim.hpp"
#include "rbio/bs/rbd_reopen.hpp"
#include "rbio/bs/ring.hpp"
#include "rbio/common/unique_fd.hpp"

namespace rbio::bs {

// Page-aligned memory for a std::vector: the engine's own buffers are read
// and written with the backing file's flags, O_DIRECT included, which
// refuses (EINVAL) memory not aligned to the device's logical block.
template <class T>
struct PageAlignedAllocator {
    using value_type = T;
    static constexpr std::align_val_t kAlign{4096};
    PageAlignedAllocator() = default;
    template <class U>
    PageAlignedAllocator(const PageAlignedAllocator<U>&) noexcept {}
    T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlign)); }
    void deallocate(T* p, size_t) noexcept { ::operator delete(p, kAlign); }
    friend bool operator==(const PageAlignedAllocator&, const PageAlignedAllocator&) { return true; }
};
using ScratchBuffer = std::vector<uint8_t, PageAlignedAllocator<uint8_t>>;

struct Counters {
    uint64_t commands = 0;       // SCSI commands taken
    uint64_t ios = 0;            // SQEs issued (after coalescing)
    uint64_t merged = 0;         // commands that rode in another command's I/O
    uint64_t submit_calls = 0;   // io_uring_enter calls that submitted
    uint64_t passes = 0;         // flushes that had work
    uint64_t reaped_inline = 0;  // completions found right after submitting
    uint64_t reaped_event = 0;   // completions found on an eventfd wake-up
    uint64_t event_wakeups = 0;
    uint64_t inline_ios = 0;  // reads/writes done synchronously in the loop
    // Commands that ended in CHECK CONDITION, but for MISCOMPARE: VMware's
    // ATS locking makes those in normal use, and an alert on errors must
    // not fire on them.
    uint64_t errors = 0;
    uint64_t miscompares = 0;         // COMPARE AND WRITEs that found other data
    uint64_t rbd_writes_held = 0;     // RBD writes done during a header notice, held until it was read
    uint64_t rbd_lock_takeovers = 0;  // rbd_lock=takeover: takeovers of the image's lock started
    uint64_t rbd_fences = 0;          // times the cluster fenced this LU's client
    uint64_t rbd_quiet_ends = 0;      // sessions ended for a write after a silence (rbd_quiet_s)
    uint64_t reads = 0;               // READ(6/10/12/16) commands taken
    uint64_t read_bytes = 0;          // bytes they address
    uint64_t writes = 0;              // WRITE and WRITE AND VERIFY commands taken
    uint64_t written_bytes = 0;       // bytes they address
};

struct OpenedFile {
    int fd = -1;  // -1 for an RBD image
    uint64_t size = 0;
    uint32_t blksize = 0;
    bool readonly = false;
};

class Engine {
public:
    Engine(const Options& opts, const rbio_bs_hooks& hooks);
    ~Engine();
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    // Opens the backing file or RBD image; throws Error with the path and
    // the reason.
    OpenedFile open(const std::string& path, int oflags);
    // Whether small reads and writes bypass io_uring for the open file.
    bool inline_io() const { return inline_io_; }
    // Finishes every queued and in-flight command, then closes the file.
    void close() noexcept;

    // Queues one command; it always completes later through hooks.complete.
    // Returns -1 only when memory for it could not be had.
    int submit(const rbio_bs_cmd& c) noexcept;
    // Completes c later with 02/04/0C without running it (see c_api.h).
    int refuse(const rbio_bs_cmd& c) noexcept;
    // c came after its connection's silence of rbd_quiet_s: whether it writes data to the image (whoever owns
    // the lock: a late write must not land anywhere), so that its session is to end; counted.
    bool ends_quiet_session(const rbio_bs_cmd& c) noexcept;
    // End of an event-loop pass.
    void flush() noexcept;
    // The eventfd is readable: resets it, then reaps (it is watched
    // level-triggered; see c_api.h).
    void on_event() noexcept;
    // Blocks until nothing is queued or in flight.
    void drain() noexcept;
    // Whether the open backing store is an RBD image.
    bool rbd() const { return rbd_ != nullptr; }
    // The cluster fenced this gateway's client (librbd said ESHUTDOWN:
    // blocklisted, after another gateway broke its lock). Until a new
    // client has opened the image (rbd_reopen=auto: by itself; manual:
    // tgtd restarted or the LU re-added).
    bool fenced() const { return fenced_; }
    // Most blocks of 2^block_shift bytes one COMPARE AND WRITE may carry
    // (0: none). Files: RBIO_BS_MAX_COMPARE_AND_WRITE_BLOCKS. RBD: what
    // librbd makes atomic in the OSD, one 512-byte sector: one block of
    // 512 bytes, none of 4096.
    uint32_t max_compare_and_write_blocks(uint32_t block_shift) const;

    int event_fd() const { return ring_.event_fd(); }
    const Options& options() const { return opts_; }
    const Counters& counters() const { return counters_; }
    uint32_t in_flight() const { return inflight_; }
    std::string stats() const;

private:
    enum class Kind : uint8_t {
        Read,
        Write,
        Flush,
        Prefetch,
        Unmap,
        WriteSame,
        CompareAndWrite,
        OrWrite,
        Verify,
        WriteVerify,
        Done,
    };

    // Commands that change the medium: on RBD they need the image's lock.
    static constexpr bool writes(Kind k) {
        return k == Kind::Write || k == Kind::Unmap || k == Kind::WriteSame || k == Kind::CompareAndWrite ||
               k == Kind::OrWrite || k == Kind::WriteVerify;
    }

    struct Cmd {
        void* handle = nullptr;
        Cmd* next = nullptr;
        Kind kind = Kind::Done;
        uint8_t stage = 0;
        bool fua = false;      // durable before status
        bool barrier = false;  // read-modify-write: runs alone on the LU
        uint8_t ws_flags = 0;  // WRITE SAME LBDATA (0x02) / PBDATA (0x04)
        uint8_t bytchk = 0;
        uint32_t block_size = 512;
        uint64_t offset = 0;  // first byte
        uint64_t length = 0;  // bytes
        uint64_t pos = 0;     // progress of chunked and multi-range work
        uint64_t chunk = 0;   // bytes of the step in flight
        uint8_t* data = nullptr;
        uint8_t* aux = nullptr;  // COMPARE AND WRITE: data to write; UNMAP: descriptors
        uint32_t aux_len = 0;
        ScratchBuffer scratch;  // read-back/pattern, only for rare commands
        rbio_bs_result result{};
    };

    static constexpr uint32_t kMaxIov = 64;
    struct Io {
        Cmd* cmds[kMaxIov];
        iovec iov[kMaxIov];
        uint32_t n = 0;
        bool step = false;  // one step of a multi-step command (cmds[0])
        bool write = false;
        bool rbd_fua = false;      // RBD: flush once the write is done, then complete
        uint32_t rbd_notices = 0;  // RBD: held until these header notices are read (on_rbd_done)
        uint64_t offset = 0;
        uint64_t length = 0;
        Io* next_free = nullptr;
    };

    void decode(const rbio_bs_cmd& c, Cmd& cmd);
    void pump(bool from_event);
    void fill();
    Cmd* pop_pending();
    void issue_rw(Cmd* first);
    void start(Cmd* c);
    void on_cqe(const io_uring_cqe& cqe);
    void io_done(Io* io, int64_t res);
    void on_rbd_done(Io* io, int64_t res);
    bool rbd_start(Io* io, int rc);
    void park_rbd_write(Io* io);
    unsigned resume_rbd_writes();
    int64_t rbd_write_result(const Io* io, uint32_t notices);  // notices: begun before it, all read
    [[gnu::cold]] void rbd_fenced();
    [[gnu::cold]] bool lock_for(Cmd* c);
    [[gnu::cold]] unsigned lock_taken();
    int64_t clipped_rbd_write(const Io* io);
    Io* rbd_io_for(Cmd* c);
    bool rbd_write_same(Cmd* c);
    bool rbd_compare_and_write(Cmd* c);
    void check_capacity(int64_t size_or_error);
    void complete_later(Cmd* c);
    void wait_for_completion();
    void rw_done(Io* io, int res);
    // rw_done() for an error or a short transfer: out of line, so that the
    // per-I/O path saves no registers and keeps no frame for its messages.
    [[gnu::noinline, gnu::cold]] void rw_failed(Io* io, int res);
    // issue_rw()'s other ends, out of line so the file path's pread and
    // SQE stay lean: an RBD image's request (librbd dwarfs a call) and a
    // full submission queue (cannot happen; fails the commands).
    [[gnu::noinline]] void issue_rbd(Io* io, Cmd* first);
    [[gnu::noinline, gnu::cold]] void sq_full(Io* io);
    void step_done(Cmd* c, int res);
    void finish(Cmd* c, const rbio_bs_result& r);
    void deliver_done();

    // Steps of multi-step commands: each issues one SQE for c.
    bool step_rw(Cmd* c, bool write, uint8_t* buf, uint64_t len, uint64_t off, bool dsync);
    bool step_fsync(Cmd* c);
    bool step_punch(Cmd* c, uint64_t off, uint64_t len);
    bool step_fadvise(Cmd* c, uint64_t off, uint64_t len);
    io_uring_sqe* sqe_for(Cmd* c);
    io_uring_sqe* next_sqe();
    enum class Step { started, done, failed };
    Step next_unmap_range(Cmd* c);
    // After a punch (UNMAP, WRITE SAME with UNMAP): GOOD, or first an
    // fdatasync when the command must be durable (write cache off).
    void punched(Cmd* c);
    void write_same_chunk(Cmd* c);
    // Between two steps of a long command: ends it with TASK ABORTED when
    // task management waits for it (hooks.aborting).
    bool abort_between_steps(Cmd* c);
    // Completes a transfer the kernel did only in part, synchronously
    // (error path only). Returns 0 or a positive errno.
    int settle(bool write, uint8_t* buf, uint64_t len, uint64_t off, bool dsync, int res);
    void log(int level, const std::string& msg) const;
    // The ERROR line every LU opened with debug_unsafe_fua=on gets.
    void warn_unsafe_fua(const std::string& what) const;

    Cmd* alloc_cmd();
    // alloc_cmd() past the high-water mark: out of line (see rw_failed).
    [[gnu::noinline, gnu::cold]] Cmd* grow_cmds();
    void free_cmd(Cmd* c);
    Io* alloc_io();
    void free_io(Io* io);

    Options opts_;
    rbio_bs_hooks hooks_;
    MergeLimits limits_;
    Ring ring_;
    UniqueFd fd_;
    std::unique_ptr<RbdImage> rbd_;
    RbdImageClaim rbd_claim_;             // this LU's image, against another LU fencing it
    uint64_t size_ = 0;                   // what hosts were last told (RBD resize)
    uint64_t refused_size_ = UINT64_MAX;  // an RBD size under one block, logged once
    std::deque<Cmd> cmd_store_;           // grows with the load, never shrinks or moves
    Cmd* free_cmds_ = nullptr;
    std::vector<Io> io_store_;
    Io* free_ios_ = nullptr;
    Cmd* pending_head_ = nullptr;  // arrival order
    Cmd* pending_tail_ = nullptr;
    Cmd* done_head_ = nullptr;  // finished without I/O, delivered at flush
    Cmd* done_tail_ = nullptr;
    Io* parked_rbd_writes_ = nullptr;  // RBD writes done while a header notice is read (on_rbd_done)
    uint64_t rbd_size_ = 0;            // librbd's size for this pass's writes (rbd_write_result)
    bool rbd_size_valid_ = false;
    uint32_t rbd_size_notices_ = 0;  // header notices begun (all read) when rbd_size_ was taken
    Cmd* exclusive_ = nullptr;       // barrier command running
    uint32_t inflight_ = 0;          // Ios in the kernel
    bool in_pump_ = false;
    bool inline_io_ = false;
    bool sync_open_ = false;      // opened O_SYNC / O_DSYNC (bsoflags sync): every write syncs
    bool in_submit_ = false;      // inside tgt's submit call: nothing may complete
    bool told_no_punch_ = false;  // logged that UNMAP cannot punch this file
    bool flush_requested_ = false;
    bool was_rbd_ = false;  // opened on an RBD image (stats() runs after close())
    bool fenced_ = false;   // see fenced()
    // rbd_lock=takeover: writes wait in the pending queue until this
    // gateway's client owns the image's lock (fill, lock_for). Ordered so
    // that one comparison tells the hot path nothing is to be done.
    enum class LockState : uint8_t { NotNeeded, Owned, Wanted, Taking };
    LockState lock_ = LockState::NotNeeded;
    bool lock_owned_once_ = false;  // since open: librbd's policy is then the managed one
    std::chrono::steady_clock::time_point lock_retry_at_{};  // after a failed takeover
    uint32_t punch_align_ = 1;  // a block device's logical sector, where over 512 bytes
    Counters counters_;
    // A fenced RBD client is replaced by a new one (reopen): the glue is told
    // first (hooks.fenced: it closes the sessions that could still bring late
    // commands), from an event handler of its own, never inside pump().
    std::string path_;
    bool fence_told_ = true;              // hooks.fenced called for the current fence
    std::unique_ptr<RbdImage> reopened_;  // taken from reopen_, waiting for the old client's I/O
    [[gnu::cold]] void tell_fence();
    // Asks tgt for flush() at the end of this event-loop pass, once per pass.
    void want_flush() noexcept {
        if (!flush_requested_ && hooks_.request_flush) {
            flush_requested_ = true;
            hooks_.request_flush(hooks_.ctx);
        }
    }
    [[gnu::cold]] unsigned swap_reopened();
    // Last: stopped before the ring whose eventfd it signals goes.
    RbdReopen reopen_;
};

}  // namespace rbio::bs
