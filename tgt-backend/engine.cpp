#include "rbio/bs/engine.hpp"

#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <linux/magic.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <new>

#include "rbio/bs/error.hpp"
#include "rbio/bs/scsi.hpp"

namespace rbio::bs {

using namespace scsi;

namespace {

// WRITE SAME writes its pattern in chunks of this size, one at a time, so a
// command covering a whole LU neither pins memory nor floods the ring.
constexpr uint64_t kWriteSameChunk = 1u << 20;
// Scratch buffers above this size are given back after the command.
constexpr size_t kKeepScratch = 1u << 20;
// VERIFY reads the media back in chunks of this size: BYTCHK=0 and 3 may
// cover the whole LU (with no data, or one block).
constexpr uint64_t kVerifyChunk = 1u << 20;
// Cmd::stage of an UNMAP or WRITE SAME whose holes are being made durable
// (the write cache is off); WRITE SAME's own stages are 0-2.
constexpr uint8_t kStageSyncAfterPunch = 3;

}  // namespace

Engine::Engine(const Options& opts, const rbio_bs_hooks& hooks)
    : opts_(opts), hooks_(hooks), ring_(opts.queue_depth), io_store_(opts.queue_depth) {
    limits_.max_bytes = opts.coalesce_max_kib * 1024u;
    limits_.max_iov = opts.coalesce ? kMaxIov : 1;
    for (auto& io : io_store_) free_io(&io);
}

Engine::~Engine() { close(); }

void Engine::warn_unsafe_fua(const std::string& what) const {
    log(RBIO_BS_LOG_ERROR,
        what +
            ": debug_unsafe_fua=on: FUA writes and SYNCHRONIZE CACHE are "
            "acknowledged without being made durable; for tests only, data is lost in a crash");
}

void Engine::log(int level, const std::string& msg) const {
    if (hooks_.log) hooks_.log(hooks_.ctx, level, msg.c_str());
}

OpenedFile Engine::open(const std::string& path, int oflags) {
    OpenedFile f;
    // A new open (tgt's path update) may be another store: a new RBD
    // client, another device.
    fenced_ = false;
    fence_told_ = true;
    path_ = path;
    lock_ = LockState::NotNeeded;
    lock_owned_once_ = false;
    lock_retry_at_ = {};
    punch_align_ = 1;
    if (is_rbd_path(path)) {
        // librbd signals finished requests on the ring's eventfd too: tgtd
        // watches one fd per LU whatever the store.
        const RbdLocation where = parse_rbd_path(path);
        RbdImageClaim claim(where, opts_.rbd, this);  // before the cluster is asked anything
        auto image = std::make_unique<RbdImage>(where, opts_.rbd, ring_.event_fd());
        f.size = image->size_read();
        if (f.size < 512)
            throw Error("rbd " + image->name() + " is too small (" + std::to_string(f.size) +
                        " bytes); grow it with rbd resize");
        // The LU's physical block: 4 KiB, not the 4 MiB object, which would
        // make hosts align every I/O to objects.
        f.blksize = 4096;
        size_ = f.size;
        inline_io_ = false;  // librbd's calls do not block: nothing to run inline
        if (opts_.inline_io == Options::Inline::On || opts_.inline_max_kib != Options{}.inline_max_kib)
            log(RBIO_BS_LOG_ERROR, "rbd " + image->name() +
                                       ": inline_io=on and inline_max_kib are for files and ignored: "
                                       "librbd's requests never block");
        if (opts_.debug_unsafe_fua) warn_unsafe_fua("rbd " + image->name());
        rbd_ = std::move(image);
        rbd_claim_ = std::move(claim);
        was_rbd_ = true;
        lock_ = opts_.rbd.lock == RbdSettings::Lock::Takeover ? LockState::Wanted : LockState::NotNeeded;
        log(RBIO_BS_LOG_INFO, "opened rbd image " + rbd_->name() + " (" + std::to_string(f.size) +
                                  " bytes, " + std::to_string(rbd_->object_size()) +
                                  "-byte objects; librbd cache off; " + to_string(opts_) + ") as " +
                                  rbd_->client());
        return f;
    }
    int fd = ::open(path.c_str(), O_RDWR | O_LARGEFILE | O_CLOEXEC | oflags);
    if (fd < 0 && (errno == EACCES || errno == EROFS)) {
        fd = ::open(path.c_str(), O_RDONLY | O_LARGEFILE | O_CLOEXEC | oflags);
        f.readonly = true;
    }
    if (fd < 0 && errno == EISDIR)
        throw Error(path + " is a directory; the backing store must be a regular file or a block device");
    if (fd < 0) throw sys_error("open " + path, errno);
    UniqueFd owned(fd);
    sync_open_ = (oflags & O_DSYNC) != 0;  // O_SYNC includes O_DSYNC's bit
    struct stat st {};
    if (::fstat(fd, &st) < 0) throw sys_error("stat " + path, errno);
    if (S_ISREG(st.st_mode)) {
        f.size = uint64_t(st.st_size);
        f.blksize = uint32_t(st.st_blksize);
    } else if (S_ISBLK(st.st_mode)) {
        if (::ioctl(fd, BLKGETSIZE64, &f.size) < 0) throw sys_error("BLKGETSIZE64 " + path, errno);
        int pbs = 0;
        if (::ioctl(fd, BLKPBSZGET, &pbs) == 0 && pbs > 0) f.blksize = uint32_t(pbs);
        // The kernel zeroes or discards whole logical sectors of a device
        // only (fallocate: EINVAL otherwise), and an LU of 512-byte blocks
        // on a 4Kn disk asks for less (see next_unmap_range).
        int lbs = 0;
        if (::ioctl(fd, BLKSSZGET, &lbs) == 0 && lbs > 512) punch_align_ = uint32_t(lbs);
    } else if (S_ISDIR(st.st_mode)) {
        throw Error(path + " is a directory; the backing store must be a regular file or a block device");
    } else {
        throw Error(path + " is neither a regular file nor a block device");
    }
    if (f.size < 512)
        throw Error(path + " is too small (" + std::to_string(f.size) +
                    " bytes); create it with e.g. truncate -s 1G " + path);
    f.fd = fd;
    fd_ = std::move(owned);
    // A regular file's file system only: a block device's node usually
    // lives on devtmpfs, which reports TMPFS_MAGIC, and would otherwise get
    // blocking I/O to a real disk done inline in tgtd's event loop.
    struct statfs sfs {};
    const bool memory_fs = S_ISREG(st.st_mode) && ::fstatfs(fd, &sfs) == 0 &&
                           (sfs.f_type == TMPFS_MAGIC || sfs.f_type == RAMFS_MAGIC);
    inline_io_ = opts_.inline_io == Options::Inline::On ||
                 (opts_.inline_io == Options::Inline::Auto && memory_fs && !(oflags & O_DIRECT));
    if (const std::string ceph = rbd_to_string(opts_.rbd); !ceph.empty())
        log(RBIO_BS_LOG_ERROR, path + ": Ceph settings (" + ceph.substr(1) +
                                   ") are for rbd:POOL/IMAGE paths and ignored for this file");
    if (opts_.debug_unsafe_fua) warn_unsafe_fua(path);
    log(RBIO_BS_LOG_INFO, "opened " + path + " (" + std::to_string(f.size) + " bytes" +
                              (f.readonly ? ", read-only" : "") +
                              (inline_io_ ? ", small I/O inline" : ", all I/O through io_uring") + "; " +
                              to_string(opts_) + ")");
    return f;
}

void Engine::close() noexcept {
    drain();
    reopen_.stop();
    // An attempt that ended during the stop left its image or failure: it
    // was for this LU's old client, and must not reach a later open().
    (void)reopen_.take();
    reopened_.reset();
    rbd_.reset();
    rbd_claim_ = {};
    fd_.reset();
}

// ---------------------------------------------------------------- pools

Engine::Cmd* Engine::alloc_cmd() {
    if (!free_cmds_) [[unlikely]]
        return grow_cmds();
    Cmd* c = free_cmds_;
    free_cmds_ = c->next;
    return c;
}

Engine::Cmd* Engine::grow_cmds() {
    // Once per new concurrency high-water mark, never per command.
    cmd_store_.emplace_back();
    return &cmd_store_.back();
}

void Engine::free_cmd(Cmd* c) {
    if (c->scratch.capacity() > kKeepScratch) ScratchBuffer().swap(c->scratch);
    c->next = free_cmds_;
    free_cmds_ = c;
}

Engine::Io* Engine::alloc_io() {
    Io* io = free_ios_;
    if (io) free_ios_ = io->next_free;
    return io;
}

void Engine::free_io(Io* io) {
    io->next_free = free_ios_;
    free_ios_ = io;
}

// ---------------------------------------------------------------- submit

void Engine::decode(const rbio_bs_cmd& c, Cmd& cmd) {
    const uint8_t op = c.cdb[0];
    const uint8_t flags = c.cdb_len > 1 ? c.cdb[1] : 0;
    const uint32_t bs = 1u << c.block_shift;
    cmd.kind = Kind::Done;
    cmd.stage = 0;
    cmd.fua = false;
    cmd.barrier = false;
    cmd.block_size = bs;
    cmd.offset = c.offset;
    cmd.length = 0;
    cmd.pos = 0;
    cmd.data = nullptr;
    cmd.aux = nullptr;
    cmd.aux_len = 0;
    cmd.result = good();
    // FUA is bit 3 of byte 1 in every 10/12/16-byte write; a disabled write
    // cache makes every write FUA.
    const bool fua = (op != kWrite6 && (flags & 0x08)) || !c.write_cache;
    // The CDB's length in 64 bits: tgt's c.transfer is 32 (see rw_blocks).
    const uint64_t cdb_bytes = uint64_t(rw_blocks(c.cdb)) << c.block_shift;

    switch (op) {
        case kRead6:
        case kRead10:
        case kRead12:
        case kRead16:
            cmd.kind = Kind::Read;
            cmd.data = c.in_buf;
            cmd.length = std::min(c.in_len, c.transfer);
            break;
        case kWrite6:
        case kWrite10:
        case kWrite12:
        case kWrite16:
            cmd.kind = Kind::Write;
            cmd.data = c.out_buf;
            cmd.length = std::min(c.out_len, c.transfer);
            cmd.fua = fua;
            break;
        case kWriteVerify10:
        case kWriteVerify12:
        case kWriteVerify16:
            cmd.kind = Kind::WriteVerify;
            cmd.data = c.out_buf;
            cmd.length = std::min(c.out_len, c.transfer);
            cmd.fua = fua;
            break;
        case kVerify10:
        case kVerify12:
        case kVerify16: {
            cmd.kind = Kind::Verify;
            cmd.bytchk = (flags >> 1) & 0x3;
            cmd.data = c.out_buf;
            cmd.length = uint64_t(verify_blocks(c.cdb)) << c.block_shift;
            switch (cmd.bytchk) {
                case 0:
                    // The medium alone: every block is read back (a scan for
                    // bad blocks, as sg_verify does), nothing compared.
                    cmd.data = nullptr;
                    break;
                case 1:
                    // Every block compared: a GOOD for less data than that
                    // would claim blocks nobody compared. (No block: nothing
                    // to compare, and no data comes.)
                    if (cmd.length && (!c.out_buf || c.out_len < cmd.length))
                        cmd.result = check(kIllegalRequest, kAscParameterListLength);
                    break;
                case 3:
                    // One block from the initiator, compared against every block.
                    if (cmd.length && (!c.out_buf || c.out_len < bs))
                        cmd.result = check(kIllegalRequest, kAscParameterListLength);
                    break;
                default:  // 10b is reserved (SBC-4)
                    cmd.result = check(kIllegalRequest, kAscInvalidFieldInCdb);
            }
            if (cmd.offset + cmd.length > c.lu_size) cmd.result = check(kIllegalRequest, kAscLbaOutOfRange);
            if (cmd.result.status != kGood || cmd.length == 0) cmd.kind = Kind::Done;
            break;
        }
        case kSyncCache10:
        case kSyncCache16:
            // IMMED would need status before the flush is done; like stock
            // rdwr we refuse it rather than pretend.
            if (flags & 0x02) cmd.result = check(kIllegalRequest, kAscInvalidFieldInCdb);
            else cmd.kind = Kind::Flush;
            break;
        case kPreFetch10:
        case kPreFetch16:
            cmd.kind = Kind::Prefetch;
            cmd.length = c.transfer;
            break;
        case kWriteSame10:
        case kWriteSame16: {
            cmd.kind = Kind::WriteSame;
            // NUMBER OF LOGICAL BLOCKS 0: to the LU's last whole block (tgt
            // checked the range; a part block past it has no LBA, and
            // librbd's writesame refuses a length that is not whole
            // blocks). From 4 GiB on tgt's length wraps, to 0 for a whole
            // 8 GiB LU: GOOD for nothing written.
            const uint64_t whole = c.lu_size >> c.block_shift << c.block_shift;
            cmd.length = cdb_bytes ? cdb_bytes : (c.offset < whole ? whole - c.offset : 0);
            // tgt checked the range; a store does not act past the LU on
            // its word alone (the range is 64-bit here, and runs for long).
            if (c.offset > c.lu_size || cmd.length > c.lu_size - c.offset) {
                cmd.result = check(kIllegalRequest, kAscLbaOutOfRange);
                cmd.kind = Kind::Done;
                break;
            }
            cmd.ws_flags = flags & 0x06;
            cmd.fua = !c.write_cache;
            const bool have_data = c.out_buf && c.out_len >= bs;
            cmd.data = have_data ? c.out_buf : nullptr;
            // UNMAP=1 deallocates whatever the data (as stock rdwr does and
            // as libiscsi's conformance tests expect); unmapped blocks then
            // read as zeros, which the LU reports with LBPRZ.
            cmd.stage = ((flags & 0x08) && c.thin) ? 1 : 0;
            if (cmd.length == 0) cmd.kind = Kind::Done;
            break;
        }
        case kUnmap: {
            if (!c.thin) {
                cmd.result = check(kIllegalRequest, kAscInvalidFieldInCdb);
                break;
            }
            if (c.out_len < 8) break;  // no descriptors: nothing to do
            uint32_t bd_len = be16(c.out_buf + 2);
            uint32_t avail = c.out_len - 8;
            uint32_t n = std::min(bd_len, avail) / 16;
            if (n > RBIO_BS_MAX_UNMAP_DESCRIPTORS) {
                cmd.result = check(kIllegalRequest, kAscInvalidFieldInParameterList);
                break;
            }
            const uint8_t* d = c.out_buf + 8;
            for (uint32_t i = 0; i < n; ++i, d += 16) {
                uint64_t lba = be64(d);
                uint64_t blocks = be32(d + 8);
                uint64_t lbas = c.lu_size >> c.block_shift;
                if (lba > lbas || blocks > lbas - lba) {
                    cmd.result = check(kIllegalRequest, kAscLbaOutOfRange);
                    return;
                }
            }
            if (n == 0) break;
            cmd.kind = Kind::Unmap;
            cmd.aux = c.out_buf + 8;
            cmd.aux_len = n;
            cmd.fua = !c.write_cache;
            break;
        }
        case kCompareAndWrite: {
            // NUMBER OF LOGICAL BLOCKS 0 with no data: nothing read,
            // compared or written, and no error (SBC). With data it is a
            // NUMBER that does not match what was sent (an initiator's 256
            // blocks wrap to 0 in the one-byte field), refused below.
            if (c.transfer == 0 && c.out_len == 0) break;
            uint32_t half = c.out_len / 2;
            if (half != c.transfer || half == 0 || (c.out_len & 1) != 0 ||
                (c.transfer >> c.block_shift) > max_compare_and_write_blocks(c.block_shift)) {
                cmd.result = check(kIllegalRequest, kAscInvalidFieldInCdb);
                break;
            }
            cmd.kind = Kind::CompareAndWrite;
            cmd.barrier = true;
            cmd.data = c.out_buf;
            cmd.aux = c.out_buf + half;
            cmd.length = half;
            cmd.fua = fua;
            break;
        }
        case kOrWrite16:
            cmd.kind = Kind::OrWrite;
            cmd.barrier = true;
            cmd.data = c.out_buf;
            cmd.length = std::min(c.out_len, c.transfer);
            cmd.fua = fua;
            if (cmd.length == 0) cmd.kind = Kind::Done;
            break;
        default:
            // tgt's SBC layer handles everything else itself.
            break;
    }
    if (cmd.kind == Kind::Read || cmd.kind == Kind::Write || cmd.kind == Kind::WriteVerify ||
        cmd.kind == Kind::OrWrite) {
        // 4 GiB or more in the CDB reached us wrapped: tgt sized the
        // residual by the wrapped length too. No buffer holds that much
        // (tgt's are sized in an int): refuse it rather than move a part.
        if (cdb_bytes != c.transfer) [[unlikely]] {
            cmd.result = check(kIllegalRequest, kAscInvalidFieldInCdb);
            cmd.kind = Kind::Done;
        } else if (cmd.length == 0) {
            cmd.kind = Kind::Done;
        }
    }
    if (opts_.debug_unsafe_fua) {
        // Test only (vm.crash-durability's control): GOOD without durability.
        cmd.fua = false;
        if (cmd.kind == Kind::Flush) cmd.kind = Kind::Done;
    }
}

int Engine::refuse(const rbio_bs_cmd& c) noexcept {
    Cmd* cmd;
    try {
        cmd = alloc_cmd();
    } catch (const std::exception&) {
        return -1;
    }
    cmd->handle = c.cmd;
    cmd->kind = Kind::Done;
    cmd->result = check(kNotReady, kAscTargetPortUnavailable);
    complete_later(cmd);
    want_flush();
    return 0;
}

bool Engine::ends_quiet_session(const rbio_bs_cmd& c) noexcept {
    if (!rbd_) return false;
    Cmd probe;
    decode(c, probe);
    if (!writes(probe.kind)) return false;
    ++counters_.rbd_quiet_ends;
    return true;
}

int Engine::submit(const rbio_bs_cmd& c) noexcept {
    Cmd* cmd;
    try {
        cmd = alloc_cmd();
    } catch (const std::exception&) {
        log(RBIO_BS_LOG_ERROR, "out of memory for a command");
        return -1;
    }
    cmd->handle = c.cmd;
    cmd->next = nullptr;
    decode(c, *cmd);
    ++counters_.commands;
    if (cmd->kind == Kind::Read) {
        ++counters_.reads;
        counters_.read_bytes += cmd->length;
    } else if (cmd->kind == Kind::Write || cmd->kind == Kind::WriteVerify) {
        ++counters_.writes;
        counters_.written_bytes += cmd->length;
    }
    if (pending_tail_) pending_tail_->next = cmd;
    else pending_head_ = cmd;
    pending_tail_ = cmd;

    if (!opts_.batch && !in_pump_) {
        // Stock-like: one io_uring_enter per command. Completions are still
        // reaped at the end of the pass, never inside tgt's submit call.
        in_submit_ = true;
        fill();
        in_submit_ = false;
        if (ring_.pending()) {
            ring_.submit();
            ++counters_.submit_calls;
        }
    }
    want_flush();
    return 0;
}

void Engine::flush() noexcept {
    flush_requested_ = false;
    pump(false);
    if (!fence_told_) [[unlikely]]
        tell_fence();
}

void Engine::on_event() noexcept {
    ++counters_.event_wakeups;
    // The eventfd is watched level-triggered (see c_api.h): reset it before
    // reaping, so it stays readable only while completions posted after this
    // reap are waiting.
    ring_.clear_event();
    if (rbd_) {
        if (auto change = rbd_->take_header_change(); change.seen) check_capacity(change.size_or_error);
    }
    pump(true);
    if (!fence_told_) [[unlikely]]
        tell_fence();
}

// An RBD image's header changed: if its size did, tell hosts (the glue
// raises CAPACITY DATA HAS CHANGED). librbd's notification thread read the
// size (RbdImage::on_header_change); a failed read leaves the size hosts
// know, and the next notice tries again.
void Engine::check_capacity(int64_t size_or_error) {
    if (size_or_error < 0) {
        // How a fenced gateway that gets no writes learns it: breaking its
        // lock ends its watch, and librbd reports the watch re-made.
        if (size_or_error == -ESHUTDOWN) rbd_fenced();
        log(RBIO_BS_LOG_ERROR, "rbd image " + rbd_->name() + ": reading its size after a header change: " +
                                   std::strerror(int(-size_or_error)) + "; hosts keep " +
                                   std::to_string(size_) + " bytes");
        return;
    }
    const auto now = uint64_t(size_or_error);
    if (now == size_) {
        if (refused_size_ != UINT64_MAX) {
            log(RBIO_BS_LOG_INFO, "rbd image " + rbd_->name() + " is back to " + std::to_string(now) +
                                      " bytes, the size hosts know");
            refused_size_ = UINT64_MAX;
        }
        return;
    }
    if (now < 512) {
        // No block left: READ CAPACITY would compute the last LBA as -1
        // and hosts would see an LU of 2^32 or 2^64 blocks. As at open, an
        // image this small is not served; hosts keep the size they know,
        // and I/O past the image's end fails in librbd.
        if (now != refused_size_)
            log(RBIO_BS_LOG_ERROR, "rbd image " + rbd_->name() + " shrank to " + std::to_string(now) +
                                       " bytes, under one 512-byte block: hosts keep " +
                                       std::to_string(size_) + " bytes until it grows again");
        refused_size_ = now;
        return;
    }
    refused_size_ = UINT64_MAX;
    log(RBIO_BS_LOG_INFO, "rbd image " + rbd_->name() + " resized from " + std::to_string(size_) + " to " +
                              std::to_string(now) + " bytes");
    size_ = now;
    if (hooks_.capacity_changed) hooks_.capacity_changed(hooks_.ctx, now);
}

void Engine::drain() noexcept {
    for (;;) {
        pump(true);
        if (!pending_head_ && !done_head_ && inflight_ == 0) return;
        // (Writes waiting for a lock takeover: its thread signals the eventfd.)
        if (inflight_ == 0 && lock_ != LockState::Taking) continue;
        if (rbd_) {
            wait_for_completion();
            continue;
        }
        int rc = ring_.wait_one();
        if (rc < 0) {
            log(RBIO_BS_LOG_ERROR, std::string("waiting for in-flight I/O: ") + std::strerror(-rc));
            return;
        }
    }
}

// RBD: librbd signals the eventfd when a request finishes. Requests never
// time out (an OSD that stops stalls them), so closing waits as long as the
// cluster does, with a log line every minute.
void Engine::wait_for_completion() {
    pollfd p{ring_.event_fd(), POLLIN, 0};
    for (int waited_s = 0;; ++waited_s) {
        int rc = ::poll(&p, 1, 1000);
        if (rc > 0 || (rc < 0 && errno != EINTR)) break;
        if (waited_s % 60 == 59)
            log(RBIO_BS_LOG_ERROR, lock_ == LockState::Taking
                                       ? "still waiting to take rbd image " + rbd_->name() +
                                             "'s lock over (the cluster's monitors do not answer?)"
                                       : "still waiting for " + std::to_string(inflight_) +
                                             " request(s) to rbd image " + rbd_->name());
    }
    ring_.clear_event();
}

// One pass: issue what is queued, hand it to the kernel with one call, reap
// whatever is complete, and go round again only while reaping made room or
// issued follow-up steps.
void Engine::pump(bool from_event) {
    if (in_pump_) return;
    in_pump_ = true;
    bool worked = false;
    // A pass that reaps needs no eventfd signal for what it reaps: page
    // cache I/O is mostly complete when io_uring_enter returns, and its
    // signal would cost tgtd a wake-up and a read() of the eventfd per I/O.
    const bool reaping = opts_.inline_reap || from_event;
    bool quiet = reaping && !rbd_ && ring_.signal_completions(false);
    for (;;) {
        fill();
        if (ring_.pending()) {
            int rc = ring_.submit();
            ++counters_.submit_calls;
            worked = true;
            if (rc < 0 && rc != -EAGAIN && rc != -EBUSY)
                log(RBIO_BS_LOG_ERROR, std::string("io_uring_enter: ") + std::strerror(-rc));
        }
        unsigned n = 0;
        if (opts_.inline_reap || from_event) {
            n = ring_.reap([this](const io_uring_cqe& cqe) { on_cqe(cqe); });
            unsigned resumed = 0;
            if (rbd_) {
                rbd_size_valid_ = false;
                n += rbd_->poll([this](void* tag, int64_t res) { on_rbd_done(static_cast<Io*>(tag), res); });
                if (lock_ == LockState::Taking) [[unlikely]]
                    n += lock_taken();
                if (reopen_.has_news() || reopened_) [[unlikely]]
                    n += swap_reopened();
                if (parked_rbd_writes_) [[unlikely]] {
                    rbd_size_valid_ = false;        // a size from after their notices' reads
                    resumed = resume_rbd_writes();  // reaped (and counted) before
                }
            }
            (from_event ? counters_.reaped_event : counters_.reaped_inline) += n;
            n += resumed;
        }
        if (done_head_) {
            deliver_done();
            worked = true;
        }
        if (n == 0 && !ring_.pending()) {
            if (!quiet) break;
            // Completions posted from now on signal again; one posted after
            // the last reap did not, so look once more. This is a store-load
            // handshake with the kernel, which may post from an io-wq worker
            // on another CPU: we store the flag and load the CQ tail, it
            // stores the tail and loads the flag, and a full barrier on each
            // side (our fence; the locked operations the kernel performs
            // between the two when it signals) means at least one of us sees
            // the other's store: the completion is reaped here, or signals.
            ring_.signal_completions(true);
            std::atomic_thread_fence(std::memory_order_seq_cst);
            quiet = false;
            if (ring_.completions_ready() == 0) break;
            continue;
        }
        worked = true;
    }
    if (worked) ++counters_.passes;
    in_pump_ = false;
}

void Engine::deliver_done() {
    while (done_head_) {
        Cmd* c = done_head_;
        done_head_ = c->next;
        if (!done_head_) done_tail_ = nullptr;
        finish(c, c->result);
    }
}

Engine::Cmd* Engine::pop_pending() {
    Cmd* c = pending_head_;
    pending_head_ = c->next;
    if (!pending_head_) pending_tail_ = nullptr;
    c->next = nullptr;
    return c;
}

void Engine::fill() {
    while (pending_head_ && !exclusive_) {
        Cmd* c = pending_head_;
        // The fenced client refuses everything (ESHUTDOWN: 02/04/0C), and
        // the new one may serve nothing taken before it (swap_reopened).
        // Answered here, without a trip through librbd: under a host's
        // steady retries, I/O always in flight on the old client would put
        // the swap to the new one off for as long as they came.
        if (fenced_ && c->kind != Kind::Done) [[unlikely]] {
            c->result = check(kNotReady, kAscTargetPortUnavailable);
            c->kind = Kind::Done;
        }
        if (lock_ >= LockState::Wanted) [[unlikely]]
            if (!lock_for(c)) break;
        if (c->kind != Kind::Done) {
            if (c->barrier ? inflight_ > 0 : free_ios_ == nullptr) break;
        }
        pop_pending();
        switch (c->kind) {
            case Kind::Done:
                if (done_tail_) done_tail_->next = c;
                else done_head_ = c;
                done_tail_ = c;
                break;
            case Kind::Read:
            case Kind::Write: issue_rw(c); break;
            default:
                if (c->barrier) exclusive_ = c;
                start(c);
                break;
        }
    }
}

void Engine::issue_rw(Cmd* first) {
    Io* io = alloc_io();
    io->step = false;
    io->write = first->kind == Kind::Write;
    io->offset = first->offset;
    io->length = first->length;
    io->n = 1;
    io->cmds[0] = first;
    io->iov[0] = {first->data, size_t(first->length)};
    Extent run{io->offset, uint32_t(io->length), io->write, first->fua};
    while (pending_head_ && opts_.coalesce) {
        Cmd* nx = pending_head_;
        if (nx->kind != first->kind || nx->barrier) break;
        Extent e{nx->offset, uint32_t(nx->length), nx->kind == Kind::Write, nx->fua};
        if (!can_append(run, io->n, e, limits_)) break;
        pop_pending();
        io->cmds[io->n] = nx;
        io->iov[io->n] = {nx->data, size_t(nx->length)};
        ++io->n;
        run.length += e.length;
        ++counters_.merged;
    }
    io->length = run.length;

    if (rbd_) {
        issue_rbd(io, first);
        return;
    }

    if (inline_io_ && io->length <= uint64_t(opts_.inline_max_kib) * 1024u && !in_submit_) {
        const int fd = fd_.get();
        const bool dsync = io->write && first->fua;
        ssize_t r;
        if (io->n == 1 && !dsync) {
            // One buffer: pread/pwrite skip the kernel's import of an iovec
            // from user memory (~0.1 us of a ~0.9 us 4 KiB tmpfs read here).
            const iovec& v = io->iov[0];
            r = io->write ? ::pwrite(fd, v.iov_base, v.iov_len, off_t(io->offset))
                          : ::pread(fd, v.iov_base, v.iov_len, off_t(io->offset));
        } else {
            r = io->write ? ::pwritev2(fd, io->iov, int(io->n), off_t(io->offset), dsync ? RWF_DSYNC : 0)
                          : ::preadv2(fd, io->iov, int(io->n), off_t(io->offset), 0);
        }
        ++counters_.inline_ios;
        ++counters_.ios;
        rw_done(io, r < 0 ? -errno : int(r));
        return;
    }

    io_uring_sqe* sqe = next_sqe();
    if (!sqe) [[unlikely]] {
        sq_full(io);
        return;
    }
    const int fd = fd_.get();
    if (io->n == 1) {
        if (io->write) io_uring_prep_write(sqe, fd, first->data, unsigned(io->length), io->offset);
        else io_uring_prep_read(sqe, fd, first->data, unsigned(io->length), io->offset);
    } else {
        if (io->write) io_uring_prep_writev(sqe, fd, io->iov, io->n, io->offset);
        else io_uring_prep_readv(sqe, fd, io->iov, io->n, io->offset);
    }
    if (io->write && first->fua) sqe->rw_flags = RWF_DSYNC;
    io_uring_sqe_set_data(sqe, io);
    ++inflight_;
    ++counters_.ios;
}

void Engine::issue_rbd(Io* io, Cmd* first) {
    io->rbd_fua = io->write && first->fua;
    rbd_start(io, io->write ? rbd_->writev(io->iov, int(io->n), io->offset, io)
                            : rbd_->readv(io->iov, int(io->n), io->offset, io));
}

void Engine::sq_full(Io* io) {
    // Cannot happen while in-flight Ios never exceed the SQ size; fail
    // loudly rather than hang the commands.
    log(RBIO_BS_LOG_ERROR, "submission queue full");
    for (uint32_t i = 0; i < io->n; ++i)
        finish(io->cmds[i], check(kHardwareError, kAscInternalTargetFailure));
    free_io(io);
}

// ---------------------------------------------------------------- steps

io_uring_sqe* Engine::next_sqe() {
    io_uring_sqe* sqe = ring_.get_sqe();
    if (!sqe) {
        // Only when an earlier submit left SQEs behind: hand them over first.
        ring_.submit();
        ++counters_.submit_calls;
        sqe = ring_.get_sqe();
    }
    return sqe;
}

io_uring_sqe* Engine::sqe_for(Cmd* c) {
    Io* io = alloc_io();
    if (!io) return nullptr;
    io_uring_sqe* sqe = next_sqe();
    if (!sqe) {
        free_io(io);
        return nullptr;
    }
    io->step = true;
    io->n = 1;
    io->cmds[0] = c;
    io_uring_sqe_set_data(sqe, io);
    ++inflight_;
    ++counters_.ios;
    return sqe;
}

// ---------------------------------------------------------------- RBD

// An Io for one step of c on an RBD image (nullptr when none is free).
Engine::Io* Engine::rbd_io_for(Cmd* c) {
    Io* io = alloc_io();
    if (!io) return nullptr;
    io->step = true;
    io->write = false;
    io->rbd_fua = false;
    io->n = 1;
    io->cmds[0] = c;
    // The range a write step covers, for the check of what librbd clipped
    // (on_rbd_done); step_rw narrows it to its chunk.
    io->offset = c->offset;
    io->length = c->length;
    return io;
}

// rc: what librbd said when the request was started. When it refused,
// the Io is freed; the commands of a read/write fail from the done list
// (never inside tgt's submit call), a step's caller fails its command.
bool Engine::rbd_start(Io* io, int rc) {
    if (rc == 0) {
        ++inflight_;
        ++counters_.ios;
        return true;
    }
    if (rc == -ESHUTDOWN) rbd_fenced();
    else if (rc == -EROFS && lock_ == LockState::Owned) lock_ = LockState::Wanted;
    log(RBIO_BS_LOG_ERROR, "rbd image " + rbd_->name() + " refused a request: " + std::strerror(-rc));
    if (!io->step) {
        for (uint32_t i = 0; i < io->n; ++i) {
            io->cmds[i]->result = check(kHardwareError, kAscInternalTargetFailure);
            complete_later(io->cmds[i]);
        }
    }
    free_io(io);
    return false;
}

void Engine::complete_later(Cmd* c) {
    c->next = nullptr;
    if (done_tail_) done_tail_->next = c;
    else done_head_ = c;
    done_tail_ = c;
}

// A FUA write is followed by rbd_aio_flush before its status: librbd's
// flush completes after every write started before it, so the command's
// data is in the cluster whatever caching a ceph.conf turns on. (With the
// cache off, as rbio sets it, the flush finds nothing to write back and
// costs one trip through librbd.)
void Engine::on_rbd_done(Io* io, int64_t res) {
    if (res == -ESHUTDOWN) [[unlikely]]
        rbd_fenced();
    else if (res == -EROFS && lock_ == LockState::Owned) [[unlikely]]
        lock_ = LockState::Wanted;  // lost it unfenced (a client that took it on purpose): take it again
    if (io->rbd_fua && res >= 0) {
        io->rbd_fua = false;
        --inflight_;  // the flush takes the write's place
        Cmd* first = io->cmds[0];
        const bool step = io->step;
        if (!rbd_start(io, rbd_->flush(io)) && step)
            finish(first, check(kHardwareError, kAscInternalTargetFailure));
        return;
    }
    // librbd gives the bytes read, but 0 for a write that succeeded, also
    // for one it shortened because it ran past the image's end: that one
    // fails, as a short write (the host knew a larger size than the image
    // has: a shrink it has not heard of yet, or one under a block).
    if (res >= 0 && io->write) [[likely]] {
        const uint32_t notices = rbd_->notices_begun();
        if (!rbd_->read_through(notices)) [[unlikely]] {
            io->rbd_notices = notices;
            park_rbd_write(io);
            return;
        }
        res = rbd_write_result(io, notices);
    }
    io_done(io, res);
}

// rbd_lock=takeover and this gateway does not own the image's lock:
// whether fill() may go on with c. A command that writes starts a
// takeover; fill() stops while it runs (every later command waits behind
// c, so none overtakes it), and then goes on; a takeover that failed fails
// the writes of the next second as from a port that cannot reach the LU
// (hosts try another path; rbio's initiator re-sends a second later), then
// the next tries. A flush before this client ever owned the lock is GOOD
// at once: it has written nothing it could flush (it writes only once it
// owns the lock, and librbd's cache is off), and librbd, still in its
// automatic policy, would ask the owner for the lock to flush, which a
// cooperative owner hands over (kernel initiators flush the standby path
// too, as udev closes its disk). Once it has owned the lock, librbd's
// policy is the managed one, which asks nobody and fails a flush without
// the lock (EROFS): a flush then takes the lock again as a write does, and
// librbd orders it after the writes still in flight.
bool Engine::lock_for(Cmd* c) {
    if (fenced_) return true;  // fill() answers it
    if (c->kind == Kind::Flush && !lock_owned_once_) {
        c->result = good();
        c->kind = Kind::Done;
        return true;
    }
    if (!writes(c->kind) && c->kind != Kind::Flush) return true;
    if (lock_ == LockState::Taking) return false;
    const auto now = std::chrono::steady_clock::now();
    if (now >= lock_retry_at_) {
        try {
            rbd_->start_lock_takeover();
            lock_ = LockState::Taking;
            ++counters_.rbd_lock_takeovers;
            return false;
        } catch (const std::exception& e) {
            log(RBIO_BS_LOG_ERROR, "rbd image " + rbd_->name() + ": starting the lock takeover: " + e.what());
            lock_retry_at_ = now + std::chrono::seconds(1);
        }
    }
    c->result = check(kNotReady, kAscTargetPortUnavailable);
    c->kind = Kind::Done;
    return true;
}

// The takeover thread signalled: returns 1 once it has finished (fill()
// then goes on with the writes that waited), else 0.
unsigned Engine::lock_taken() {
    RbdImage::LockTakeover t;
    if (!rbd_->take_lock_takeover(t)) return 0;
    if (t.rc == 0) {
        lock_ = LockState::Owned;
        lock_owned_once_ = true;
        log(RBIO_BS_LOG_INFO, "rbd image " + rbd_->name() + ": " + t.said + " in " + std::to_string(t.ms) +
                                  " ms, for a write (rbd_lock=takeover)");
        return 1;
    }
    if (t.rc == -ESHUTDOWN) rbd_fenced();
    lock_ = LockState::Wanted;
    lock_retry_at_ = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    log(RBIO_BS_LOG_ERROR, "rbd image " + rbd_->name() + ": taking the exclusive lock (rbd_lock=takeover): " +
                               t.said + " after " + std::to_string(t.ms) +
                               " ms; writes fail as from an unavailable port (02/04/0C) for a second, "
                               "then the next one tries again");
    return 1;
}

// With ALUA, the glue then reports this LU's port as unavailable, so that
// hosts stop coming back to it (see alua_glue.c).
void Engine::rbd_fenced() {
    if (fenced_) return;
    fenced_ = true;
    fence_told_ = false;  // tell_fence() at the end of this event's handling
    ++counters_.rbd_fences;
    log(RBIO_BS_LOG_ERROR, "rbd image " + rbd_->name() +
                               ": the cluster fenced this gateway (blocklisted: another gateway took the "
                               "image's lock over). " +
                               (opts_.rbd.reopen == RbdSettings::Reopen::Auto
                                    ? "Every request fails until a new client has opened the image"
                                    : "Every request fails from now on; restart tgtd (or delete and add the "
                                      "LU) to serve the image again (rbd_reopen=manual)"));
}

// The glue ends the sessions that existed at the fence (their late commands
// are refused from now on), then a new client opens the image on a thread:
// librbd's open waits for the cluster.
void Engine::tell_fence() {
    fence_told_ = true;
    // rbd_reopen=manual: the fenced gateway waits for its admin, who may
    // have fenced it on purpose (options.hpp).
    if (!rbd_ || !hooks_.fenced || opts_.rbd.reopen == RbdSettings::Reopen::Manual) return;
    if (hooks_.fenced(hooks_.ctx) != 0) {
        log(RBIO_BS_LOG_ERROR, "rbd image " + rbd_->name() +
                                   ": could not end the sessions of the fenced client; restart tgtd to serve "
                                   "the image again");
        return;
    }
    log(RBIO_BS_LOG_INFO, "rbd image " + rbd_->name() +
                              ": ended the sessions of the LU's target that existed at the fence (their late "
                              "commands are refused); opening the image with a new client");
    try {
        reopen_.start([where = parse_rbd_path(path_), how = opts_.rbd,
                       fd = ring_.event_fd()] { return std::make_unique<RbdImage>(where, how, fd); },
                      [fd = ring_.event_fd()] { signal_event_fd(fd); });
    } catch (const std::exception& e) {
        log(RBIO_BS_LOG_ERROR, "rbd image " + rbd_->name() + ": cannot open it again: " + e.what() +
                                   "; restart tgtd to serve it again");
    }
}

// News from reopen_: each failed attempt is logged (reopen_ tries again
// by itself); a new client takes the old one's place once nothing of the
// old one is in flight. Returns 1 when it did, else 0.
unsigned Engine::swap_reopened() {
    if (reopen_.has_news()) {
        RbdReopen::News news = reopen_.take();
        for (const RbdReopen::Failure& f : news.failures)
            log(RBIO_BS_LOG_ERROR,
                "rbd image " + rbd_->name() + ": opening it again with a new client (attempt " +
                    std::to_string(f.attempt) + "): " + f.why + "; trying again in " +
                    (f.next_in.count() % 1000 == 0 ? std::to_string(f.next_in.count() / 1000) + " s"
                                                   : std::to_string(f.next_in.count()) + " ms"));
        if (news.opened) reopened_ = std::move(news.image);
    }
    if (!reopened_ || inflight_ != 0 || parked_rbd_writes_ || lock_ == LockState::Taking || exclusive_)
        return 0;
    // Every command still queued was taken while the old client was fenced,
    // and may be a late one of an ended session (the glue saw it before the
    // fence): it fails as it would have there, never on the new client.
    while (pending_head_) {
        Cmd* c = pop_pending();
        c->result = check(kNotReady, kAscTargetPortUnavailable);
        complete_later(c);
    }
    std::unique_ptr<RbdImage> old = std::move(rbd_);
    rbd_ = std::move(reopened_);
    old.reset();
    fenced_ = false;
    lock_ = opts_.rbd.lock == RbdSettings::Lock::Takeover ? LockState::Wanted : LockState::NotNeeded;
    lock_owned_once_ = false;
    lock_retry_at_ = {};
    log(RBIO_BS_LOG_INFO, "rbd image " + rbd_->name() + ": opened again as " + rbd_->client() +
                              " after the cluster fenced the old client; the sessions that existed then "
                              "were ended, and their late commands are refused");
    check_capacity(int64_t(rbd_->size_read()));
    return 1;
}

int64_t Engine::rbd_write_result(const Io* io, uint32_t notices) {
    // One size per pass of reaping (pump resets it): librbd's locks, not
    // one trip per write. Unless a header notice began since it was taken
    // (this write's `notices`, all read): that read may have brought a
    // shrink that librbd clipped this write to, and the pass's size would
    // call it whole.
    if (!rbd_size_valid_ || notices != rbd_size_notices_) {
        rbd_size_ = rbd_->size_now();
        rbd_size_notices_ = notices;
        rbd_size_valid_ = true;
    }
    if (io->offset + io->length > rbd_size_) [[unlikely]]
        return clipped_rbd_write(io);
    return io->step ? int64_t(io->cmds[0]->chunk) : int64_t(io->length);
}

// A header notice is being read: librbd may have clipped this write to a
// new size, known once the read ends (its callback wakes the loop, and
// pump() finishes the write in resume_rbd_writes). Still in flight.
void Engine::park_rbd_write(Io* io) {
    ++counters_.rbd_writes_held;
    io->next_free = parked_rbd_writes_;
    parked_rbd_writes_ = io;
}

// Finishes the held writes whose notices are read (later notices do not
// hold them longer); returns how many.
unsigned Engine::resume_rbd_writes() {
    unsigned n = 0;
    Io** link = &parked_rbd_writes_;
    while (Io* io = *link) {
        if (!rbd_->read_through(io->rbd_notices)) {
            link = &io->next_free;
            continue;
        }
        *link = io->next_free;
        io->next_free = nullptr;
        io_done(io,
                rbd_write_result(io, io->rbd_notices));  // a FUA write's flush is done: rbd_fua was cleared
        ++n;
    }
    return n;
}

// A merged write gives the bytes that fit, so rw_failed() fails only the
// commands that reach past the end; a step fails whole.
int64_t Engine::clipped_rbd_write(const Io* io) {
    log(RBIO_BS_LOG_ERROR, "write of " + std::to_string(io->length) + " bytes at offset " +
                               std::to_string(io->offset) + " ends past rbd image " + rbd_->name() + "'s " +
                               std::to_string(rbd_size_) +
                               " bytes (shrunk before hosts learnt of it): librbd wrote only the part "
                               "that fits; the write fails");
    if (io->step) return -EIO;
    return rbd_size_ > io->offset ? int64_t(rbd_size_ - io->offset) : 0;
}

// WRITE SAME without LBDATA/PBDATA: one librbd request for the whole range
// (librbd writes it object by object, and turns zeros into discards when
// the image allows).
bool Engine::rbd_write_same(Cmd* c) {
    const uint64_t bs = c->block_size;
    const uint8_t* pattern = c->data;
    if (!pattern) {
        try {
            c->scratch.assign(bs, 0);
        } catch (const std::exception&) {
            return false;
        }
        pattern = c->scratch.data();
    }
    Io* io = rbd_io_for(c);
    if (!io) return false;
    c->stage = 2;
    c->chunk = c->length;
    io->write = true;
    io->rbd_fua = c->fua;
    return rbd_start(io, rbd_->write_same(c->offset, c->length, pattern, bs, io));
}

uint32_t Engine::max_compare_and_write_blocks(uint32_t block_shift) const {
    if (!rbd_) return RBIO_BS_MAX_COMPARE_AND_WRITE_BLOCKS;
    return block_shift < 64 && (uint64_t(1) << block_shift) == RbdImage::kCompareAndWriteBytes ? 1 : 0;
}

// Atomic in the OSD, so it holds across gateways too.
bool Engine::rbd_compare_and_write(Cmd* c) {
    Io* io = rbd_io_for(c);
    if (!io) return false;
    c->stage = 2;
    c->chunk = c->length;
    c->pos = 0;  // librbd puts the first mismatching offset here
    io->write = true;
    io->rbd_fua = c->fua;
    return rbd_start(io, rbd_->compare_and_write(c->offset, c->length, c->data, c->aux, &c->pos, io));
}

bool Engine::step_rw(Cmd* c, bool write, uint8_t* buf, uint64_t len, uint64_t off, bool dsync) {
    if (rbd_) {
        Io* io = rbd_io_for(c);
        if (!io) return false;
        c->chunk = len;
        io->write = write;
        io->rbd_fua = write && dsync;
        io->offset = off;
        io->length = len;
        io->iov[0] = {buf, size_t(len)};
        return rbd_start(io, write ? rbd_->writev(io->iov, 1, off, io) : rbd_->readv(io->iov, 1, off, io));
    }
    io_uring_sqe* sqe = sqe_for(c);
    if (!sqe) return false;
    c->chunk = len;
    if (write) io_uring_prep_write(sqe, fd_.get(), buf, unsigned(len), off);
    else io_uring_prep_read(sqe, fd_.get(), buf, unsigned(len), off);
    if (write && dsync) sqe->rw_flags = RWF_DSYNC;
    return true;
}

bool Engine::step_fsync(Cmd* c) {
    if (rbd_) {
        // Completes after every write started before it.
        Io* io = rbd_io_for(c);
        return io && rbd_start(io, rbd_->flush(io));
    }
    io_uring_sqe* sqe = sqe_for(c);
    if (!sqe) return false;
    io_uring_prep_fsync(sqe, fd_.get(), IORING_FSYNC_DATASYNC);
    // Writes handed to the kernel before this flush complete before it.
    sqe->flags |= IOSQE_IO_DRAIN;
    return true;
}

bool Engine::step_punch(Cmd* c, uint64_t off, uint64_t len) {
    if (rbd_) {
        Io* io = rbd_io_for(c);
        return io && rbd_start(io, rbd_->discard(off, len, io));
    }
    io_uring_sqe* sqe = sqe_for(c);
    if (!sqe) return false;
    io_uring_prep_fallocate(sqe, fd_.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off_t(off),
                            off_t(len));
    return true;
}

bool Engine::step_fadvise(Cmd* c, uint64_t off, uint64_t len) {
    if (rbd_) {
        // librbd has no read-ahead hint without its cache: PRE-FETCH is a
        // no-op that succeeds, as SBC allows.
        c->result = good();
        complete_later(c);
        return true;
    }
    io_uring_sqe* sqe = sqe_for(c);
    if (!sqe) return false;
    io_uring_prep_fadvise(sqe, fd_.get(), off, off_t(len), POSIX_FADV_WILLNEED);
    return true;
}

Engine::Step Engine::next_unmap_range(Cmd* c) {
    while (c->pos < c->aux_len) {
        const uint8_t* d = c->aux + c->pos * 16;
        ++c->pos;
        uint64_t off = be64(d) * c->block_size;
        uint64_t len = uint64_t(be32(d + 8)) * c->block_size;
        if (punch_align_ > 1) {
            // Only the device sectors the range covers whole: the others keep
            // their data, as SBC lets an unmap operation do.
            const uint64_t first = (off + punch_align_ - 1) / punch_align_ * punch_align_;
            const uint64_t end = (off + len) / punch_align_ * punch_align_;
            off = first;
            len = end > first ? end - first : 0;
        }
        if (len) return step_punch(c, off, len) ? Step::started : Step::failed;
    }
    return Step::done;
}

void Engine::punched(Cmd* c) {
    // A hole is the file system's metadata, durable only after a sync;
    // librbd's discard is durable when it completes.
    if (!c->fua || rbd_) {
        finish(c, good());
        return;
    }
    c->stage = kStageSyncAfterPunch;
    if (!step_fsync(c)) finish(c, check(kHardwareError, kAscInternalTargetFailure));
}

bool Engine::abort_between_steps(Cmd* c) {
    if (!hooks_.aborting || !hooks_.aborting(hooks_.ctx, c->handle)) return false;
    finish(c, task_aborted());
    return true;
}

void Engine::write_same_chunk(Cmd* c) {
    const uint64_t bs = c->block_size;
    uint64_t len = std::min<uint64_t>(c->length - c->pos, c->scratch.size());
    if (c->ws_flags) {
        // LBDATA/PBDATA: each block starts with its own LBA.
        uint64_t lba = (c->offset + c->pos) / bs;
        for (uint64_t b = 0; b < len / bs; ++b) {
            uint8_t* blk = c->scratch.data() + b * bs;
            if (c->ws_flags == 0x02) put_be32(blk, uint32_t(lba + b));
            else put_be64(blk, lba + b);
        }
    }
    if (!step_rw(c, true, c->scratch.data(), len, c->offset + c->pos, c->fua))
        finish(c, check(kHardwareError, kAscInternalTargetFailure));
}

void Engine::start(Cmd* c) {
    bool ok = true;
    switch (c->kind) {
        case Kind::Flush: ok = step_fsync(c); break;
        case Kind::Prefetch: ok = step_fadvise(c, c->offset, c->length); break;
        case Kind::Unmap:
            c->pos = 0;
            switch (next_unmap_range(c)) {
                case Step::started: return;
                case Step::done: punched(c); return;  // every descriptor was empty
                case Step::failed: ok = false; break;
            }
            break;
        case Kind::WriteSame:
            // WRITE SAME with UNMAP must leave zeros in every block: a range
            // the device cannot zero whole (see punch_align_) is written.
            if (c->stage == 1 && (c->offset % punch_align_ || c->length % punch_align_)) c->stage = 0;
            if (c->stage == 1) {
                ok = step_punch(c, c->offset, c->length);
                break;
            }
            if (rbd_ && !c->ws_flags) {
                ok = rbd_write_same(c);
                break;
            }
            try {
                uint64_t bs = c->block_size;
                uint64_t chunk = std::max<uint64_t>(bs, std::min(c->length, kWriteSameChunk) / bs * bs);
                c->scratch.resize(chunk);
                for (uint64_t off = 0; off < chunk; off += bs) {
                    if (c->data) std::memcpy(c->scratch.data() + off, c->data, bs);
                    else std::memset(c->scratch.data() + off, 0, bs);
                }
            } catch (const std::exception&) {
                finish(c, check(kHardwareError, kAscInternalTargetFailure));
                return;
            }
            write_same_chunk(c);
            return;
        case Kind::Verify: try { c->scratch.resize(std::min<uint64_t>(c->length, kVerifyChunk));
            } catch (const std::exception&) {
                finish(c, check(kHardwareError, kAscInternalTargetFailure));
                return;
            }
            c->pos = 0;
            ok = step_rw(c, false, c->scratch.data(), c->scratch.size(), c->offset, false);
            break;
        case Kind::CompareAndWrite:
        case Kind::OrWrite:
            if (rbd_ && c->kind == Kind::CompareAndWrite) {
                ok = rbd_compare_and_write(c);
                break;
            }
            try {
                c->scratch.resize(c->length);
            } catch (const std::exception&) {
                finish(c, check(kHardwareError, kAscInternalTargetFailure));
                return;
            }
            ok = step_rw(c, false, c->scratch.data(), c->length, c->offset, false);
            break;
        case Kind::WriteVerify: ok = step_rw(c, true, c->data, c->length, c->offset, c->fua); break;
        default: ok = false; break;
    }
    if (!ok) finish(c, check(kHardwareError, kAscInternalTargetFailure));
}

int Engine::settle(bool write, uint8_t* buf, uint64_t len, uint64_t off, bool dsync, int res) {
    if (res < 0) return -res;
    if (rbd_) return uint64_t(res) < len ? EIO : 0;  // librbd does whole requests or fails them
    uint64_t done = uint64_t(res);
    while (done < len) {
        ssize_t n;
        if (write) {
            iovec v{buf + done, size_t(len - done)};
            n = ::pwritev2(fd_.get(), &v, 1, off_t(off + done), dsync ? RWF_DSYNC : 0);
        } else {
            n = ::pread(fd_.get(), buf + done, size_t(len - done), off_t(off + done));
        }
        if (n < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        if (n == 0) return write ? ENOSPC : EIO;  // EOF: the file shrank
        done += uint64_t(n);
    }
    return 0;
}

void Engine::on_cqe(const io_uring_cqe& cqe) {
    io_done(static_cast<Io*>(io_uring_cqe_get_data(&cqe)), cqe.res);
}

void Engine::io_done(Io* io, int64_t res64) {
    // Results are at most one merged I/O or one WRITE SAME chunk, except a
    // whole-range RBD WRITE SAME, whose step_done only looks at the sign.
    const int res =
        res64 < 0 ? int(std::max<int64_t>(res64, -4095)) : int(std::min<int64_t>(res64, INT32_MAX));
    --inflight_;
    if (io->step) {
        Cmd* c = io->cmds[0];
        free_io(io);
        step_done(c, res);
    } else {
        rw_done(io, res);
    }
}

void Engine::rw_done(Io* io, int res) {
    if (res < 0 || uint64_t(res) != io->length) [[unlikely]] {
        rw_failed(io, res);
        return;
    }
    for (uint32_t i = 0; i < io->n; ++i) finish(io->cmds[i], good());
    free_io(io);
}

void Engine::rw_failed(Io* io, int res) {
    // Error or short transfer: settle each command of the I/O on its own so
    // only the ones really affected fail. A merged I/O that failed as a whole
    // (EIO from one bad block) is retried command by command: its other
    // commands may be fine. Not a FUA write (RWF_DSYNC), whose error may be
    // an earlier write-back's anywhere in the file: the kernel reports that
    // once per open file, to its next sync, so a retry would succeed and no
    // host would learn that acknowledged data was lost. The same for every
    // write of a file opened O_SYNC (bsoflags sync), which syncs each one.
    // librbd's errors are the cluster's, not a bad block's.
    const bool whole = io->n == 1 || rbd_ || (io->write && (io->cmds[0]->fua || sync_open_));
    uint64_t start = 0;
    for (uint32_t i = 0; i < io->n; ++i) {
        Cmd* c = io->cmds[i];
        // Read before finish(): completing may submit a command (tgt
        // performs the next of an LU's queue) that reuses c's slot.
        const uint64_t length = c->length;
        int c_res;
        if (res < 0) c_res = whole ? res : 0;
        else if (uint64_t(res) >= start + length) c_res = int(length);
        else c_res = uint64_t(res) > start ? int(uint64_t(res) - start) : 0;
        int err = settle(io->write, c->data, length, c->offset, c->fua, c_res);
        if (err) {
            log(RBIO_BS_LOG_ERROR, std::string(io->write ? "write" : "read") + " of " +
                                       std::to_string(c->length) + " bytes at offset " +
                                       std::to_string(c->offset) + " failed: " + std::strerror(err));
            finish(c, io_failure(io->write, err, rbd_ ? Backing::Rbd : Backing::File));
        } else {
            finish(c, good());
        }
        start += length;
    }
    free_io(io);
}

void Engine::step_done(Cmd* c, int res) {
    auto fail_io = [&](bool write, int err, const char* what) {
        log(RBIO_BS_LOG_ERROR,
            std::string(what) + " at offset " + std::to_string(c->offset) + " failed: " + std::strerror(err));
        finish(c, io_failure(write, err, rbd_ ? Backing::Rbd : Backing::File));
    };
    switch (c->kind) {
        case Kind::Flush:
            if (res < 0) fail_io(true, -res, "flush");
            else finish(c, good());
            return;
        case Kind::Prefetch:
            if (res < 0) fail_io(false, -res, "prefetch");
            else finish(c, good());
            return;
        case Kind::Unmap:
            if (c->stage == kStageSyncAfterPunch) {
                if (res < 0) fail_io(true, -res, "sync after UNMAP");
                else finish(c, good());
                return;
            }
            if (res == -EOPNOTSUPP && !rbd_) {
                // The file system cannot punch holes (NFSv3, some FUSE file
                // systems): the blocks stay mapped and keep their data,
                // which SBC allows an unmap operation to do, and hosts
                // trimming (fstrim, mkfs) go on. Said once per LU.
                if (!told_no_punch_) {
                    told_no_punch_ = true;
                    log(RBIO_BS_LOG_ERROR, "UNMAP: the backing file cannot punch holes (" +
                                               std::string(std::strerror(EOPNOTSUPP)) +
                                               "): unmapped blocks stay allocated and keep their data");
                }
                finish(c, good());
                return;
            }
            if (res < 0) {
                // As a write's error: a fenced RBD client (ESHUTDOWN) is a
                // path to leave, not a broken target.
                fail_io(true, -res, "UNMAP");
                return;
            }
            switch (next_unmap_range(c)) {
                case Step::started: break;
                case Step::done: punched(c); break;
                case Step::failed: finish(c, check(kHardwareError, kAscInternalTargetFailure)); break;
            }
            return;
        case Kind::WriteSame:
            if (c->stage == 2) {  // RBD, whole range
                if (res < 0) fail_io(true, -res, "WRITE SAME");
                else finish(c, good());
                return;
            }
            if (c->stage == 1) {
                if (res == -EOPNOTSUPP) {
                    // The file system cannot punch holes: write the zeros.
                    c->stage = 0;
                    start(c);
                } else if (res < 0) {
                    fail_io(true, -res, "WRITE SAME with UNMAP");
                } else {
                    punched(c);
                }
                return;
            }
            if (c->stage == kStageSyncAfterPunch) {
                if (res < 0) fail_io(true, -res, "sync after WRITE SAME");
                else finish(c, good());
                return;
            }
            if (int err = settle(true, c->scratch.data(), c->chunk, c->offset + c->pos, c->fua, res)) {
                fail_io(true, err, "WRITE SAME");
                return;
            }
            c->pos += c->chunk;
            if (c->pos >= c->length) finish(c, good());
            else if (!abort_between_steps(c)) write_same_chunk(c);
            return;
        case Kind::Verify: {
            const uint64_t at = c->offset + c->pos;
            if (int err = settle(false, c->scratch.data(), c->chunk, at, false, res)) {
                fail_io(false, err, "VERIFY");
                return;
            }
            const uint8_t* media = c->scratch.data();
            for (uint64_t i = 0; c->bytchk != 0 && i < c->chunk; ++i) {
                // BYTCHK=3: one block of data stands for every block.
                uint8_t want = c->bytchk == 3 ? c->data[(c->pos + i) % c->block_size] : c->data[c->pos + i];
                if (media[i] != want) {
                    finish(c, check_info(kMiscompare, kAscMiscompareDuringVerify, c->pos + i));
                    return;
                }
            }
            c->pos += c->chunk;
            if (c->pos >= c->length) {
                finish(c, good());
                return;
            }
            if (abort_between_steps(c)) return;
            uint64_t len = std::min<uint64_t>(c->length - c->pos, c->scratch.size());
            if (!step_rw(c, false, c->scratch.data(), len, c->offset + c->pos, false))
                finish(c, check(kHardwareError, kAscInternalTargetFailure));
            return;
        }
        case Kind::CompareAndWrite:
            if (c->stage == 2) {  // RBD: compared and written by the OSD
                if (res == -EILSEQ) {
                    // librbd 16.2 reports the first differing byte as the
                    // image offset of its object's start plus its index in
                    // the command (measured: 4194604 for byte 300 of a
                    // command in the second 4 MiB object); later ones as the
                    // index, or its image offset. The command is one
                    // 512-byte sector, 512-aligned, as every object start
                    // is: the index is the offset within 512 in all three.
                    const uint64_t at = c->pos % RbdImage::kCompareAndWriteBytes;
                    finish(c, check_info(kMiscompare, kAscMiscompareDuringVerify, at));
                } else if (res < 0) {
                    fail_io(true, -res, "COMPARE AND WRITE");
                } else {
                    finish(c, good());
                }
                return;
            }
            [[fallthrough]];
        case Kind::OrWrite:
        case Kind::WriteVerify: {
            const bool writing = (c->kind == Kind::WriteVerify) ? c->stage == 0 : c->stage == 1;
            uint8_t* buf =
                writing ? (c->kind == Kind::CompareAndWrite ? c->aux : c->data) : c->scratch.data();
            if (int err = settle(writing, buf, c->chunk, c->offset, c->fua, res)) {
                fail_io(writing, err,
                        c->kind == Kind::CompareAndWrite ? "COMPARE AND WRITE"
                        : c->kind == Kind::OrWrite       ? "ORWRITE"
                                                         : "WRITE AND VERIFY");
                return;
            }
            if (writing && c->kind != Kind::WriteVerify) {  // the write ends CAW/ORWRITE
                finish(c, good());
                return;
            }
            if (c->kind == Kind::WriteVerify && c->stage == 0) {
                c->stage = 1;
                try {
                    c->scratch.resize(c->length);
                } catch (const std::exception&) {
                    finish(c, check(kHardwareError, kAscInternalTargetFailure));
                    return;
                }
                if (!step_rw(c, false, c->scratch.data(), c->length, c->offset, false))
                    finish(c, check(kHardwareError, kAscInternalTargetFailure));
                return;
            }
            // The media is in scratch: compare, OR, or write.
            const uint8_t* media = c->scratch.data();
            if (c->kind == Kind::OrWrite) {
                for (uint64_t i = 0; i < c->length; ++i) c->data[i] |= media[i];
                c->stage = 1;
                if (!step_rw(c, true, c->data, c->length, c->offset, c->fua))
                    finish(c, check(kHardwareError, kAscInternalTargetFailure));
                return;
            }
            uint64_t bad = c->length;
            if (std::memcmp(media, c->data, c->length) != 0) {
                bad = 0;
                while (media[bad] == c->data[bad]) ++bad;
            }
            if (bad != c->length) {
                finish(c, check_info(kMiscompare, kAscMiscompareDuringVerify, bad));
                return;
            }
            if (c->kind == Kind::CompareAndWrite) {
                c->stage = 1;
                if (!step_rw(c, true, c->aux, c->length, c->offset, c->fua))
                    finish(c, check(kHardwareError, kAscInternalTargetFailure));
                return;
            }
            finish(c, good());
            return;
        }
        default: finish(c, check(kHardwareError, kAscInternalTargetFailure)); return;
    }
}

void Engine::finish(Cmd* c, const rbio_bs_result& r) {
    if (in_submit_) [[unlikely]] {
        // Inside tgt's submit call (batch off): tgt still writes to the
        // command after it (sbc_unmap builds sense, the caller marks it
        // processed), and a command freed meanwhile would be written to
        // after its free. It completes at the end of the pass instead; the
        // LU is no longer its alone now, or the commands behind it would
        // wait for that.
        if (c == exclusive_) exclusive_ = nullptr;
        c->result = r;
        complete_later(c);
        return;
    }
    if (c == exclusive_) exclusive_ = nullptr;
    if (r.status != kGood) ++(r.sense_key == kMiscompare ? counters_.miscompares : counters_.errors);
    void* handle = c->handle;
    // A copy: r may be c's own result, and completing may submit a command
    // that takes c's slot.
    const rbio_bs_result result = r;
    free_cmd(c);
    if (hooks_.complete) hooks_.complete(hooks_.ctx, handle, &result);
}

std::string Engine::stats() const {
    const Counters& k = counters_;
    auto per = [](uint64_t a, uint64_t b) {
        if (!b) return std::string("-");
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.2f", double(a) / double(b));
        return std::string(buf);
    };
    // ios counts every read/write/flush issued after coalescing, inline or
    // through io_uring; submit_calls counts io_uring_enter calls only.
    return "commands=" + std::to_string(k.commands) + " ios=" + std::to_string(k.ios) +
           " merged=" + std::to_string(k.merged) + " submit_calls=" + std::to_string(k.submit_calls) +
           " uring_ios_per_submit=" + per(k.ios - k.inline_ios, k.submit_calls) +
           " reaped_inline=" + std::to_string(k.reaped_inline) +
           " reaped_event=" + std::to_string(k.reaped_event) +
           " event_wakeups=" + std::to_string(k.event_wakeups) +
           " inline_ios=" + std::to_string(k.inline_ios) +
           (was_rbd_ ? " rbd_writes_held=" + std::to_string(k.rbd_writes_held) +
                           " rbd_lock_takeovers=" + std::to_string(k.rbd_lock_takeovers) +
                           " rbd_fences=" + std::to_string(k.rbd_fences) +
                           " rbd_quiet_ends=" + std::to_string(k.rbd_quiet_ends)
                     : std::string()) +
           " miscompares=" + std::to_string(k.miscompares) + " errors=" + std::to_string(k.errors);
}

}  // namespace rbio::bs
