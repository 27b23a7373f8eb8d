#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 12)
#include "fuse_export.hpp"

#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <vector>

#include "fuse_mounts.hpp"
#include "rbio/initiator/log.hpp"

namespace rbio::fuse {
namespace {

// Inode 1 is the root directory; LU i is inode 2 + i.
constexpr fuse_ino_t kFirstLunIno = 2;
// Names and sizes never change while mounted: let the kernel cache them.
constexpr double kAttrTimeout = 3600.0;
// Largest read/write request asked of the kernel (libfuse's buffers hold 1 MiB).
constexpr unsigned kMaxWrite = 1u << 20;

FuseExport& self(fuse_req_t req) { return *static_cast<FuseExport*>(fuse_req_userdata(req)); }

// The LU index of `ino`, or -1.
long lun_index(FuseExport& fx, fuse_ino_t ino) {
    if (ino < kFirstLunIno || ino - kFirstLunIno >= fx.io().luns().size()) return -1;
    return long(ino - kFirstLunIno);
}

bool fill_attr(FuseExport& fx, fuse_ino_t ino, struct stat& st) {
    std::memset(&st, 0, sizeof st);
    st.st_ino = ino;
    st.st_uid = ::getuid();
    st.st_gid = ::getgid();
    st.st_atime = st.st_mtime = st.st_ctime = fx.mount_time();
    if (ino == FUSE_ROOT_ID) {
        st.st_mode = S_IFDIR | 0755;
        st.st_nlink = 2;
        return true;
    }
    long i = lun_index(fx, ino);
    if (i < 0) return false;
    const LunInfo& l = fx.io().luns()[size_t(i)];
    st.st_mode = S_IFREG | 0600;
    st.st_nlink = 1;
    st.st_size = off_t(l.bytes());
    st.st_blksize = blksize_t(std::max<uint32_t>(l.block_size, 4096));
    st.st_blocks = blkcnt_t(l.bytes() / 512);
    return true;
}

void op_init(void*, struct fuse_conn_info* conn) {
    conn->max_write = kMaxWrite;
    // No writeback cache: a write is answered only once the LU has it.
    conn->want &= ~unsigned(FUSE_CAP_WRITEBACK_CACHE);
}

void op_lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
    FuseExport& fx = self(req);
    if (parent != FUSE_ROOT_ID) return void(fuse_reply_err(req, ENOENT));
    const auto& luns = fx.io().luns();
    for (size_t i = 0; i < luns.size(); ++i) {
        if (luns[i].name != name) continue;
        fuse_entry_param e{};
        e.ino = kFirstLunIno + i;
        e.generation = 1;
        e.attr_timeout = e.entry_timeout = kAttrTimeout;
        fill_attr(fx, e.ino, e.attr);
        return void(fuse_reply_entry(req, &e));
    }
    fuse_reply_err(req, ENOENT);
}

void op_getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
    struct stat st;
    if (!fill_attr(self(req), ino, st)) return void(fuse_reply_err(req, ENOENT));
    fuse_reply_attr(req, &st, kAttrTimeout);
}

void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info*) {
    // The size is the LU's; mode, owner and times are fixed. Accepting a
    // "change" to the same size keeps O_TRUNC-less tools (dd conv=notrunc) happy.
    struct stat st;
    if (!fill_attr(self(req), ino, st)) return void(fuse_reply_err(req, ENOENT));
    if ((to_set & FUSE_SET_ATTR_SIZE) && attr->st_size != st.st_size) return void(fuse_reply_err(req, EPERM));
    fuse_reply_attr(req, &st, kAttrTimeout);
}

void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
    FuseExport& fx = self(req);
    if (ino != FUSE_ROOT_ID) return void(fuse_reply_err(req, ENOTDIR));
    std::vector<std::pair<std::string, fuse_ino_t>> names = {{".", FUSE_ROOT_ID}, {"..", FUSE_ROOT_ID}};
    for (size_t i = 0; i < fx.io().luns().size(); ++i)
        names.emplace_back(fx.io().luns()[i].name, kFirstLunIno + i);
    std::vector<char> buf(size);
    size_t used = 0;
    for (size_t i = size_t(off); i < names.size(); ++i) {
        struct stat st {};
        st.st_ino = names[i].second;
        st.st_mode = names[i].second == FUSE_ROOT_ID ? S_IFDIR : S_IFREG;
        size_t n =
            fuse_add_direntry(req, buf.data() + used, size - used, names[i].first.c_str(), &st, off_t(i + 1));
        if (n > size - used) break;
        used += n;
    }
    fuse_reply_buf(req, buf.data(), used);
}

void op_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
    if (ino == FUSE_ROOT_ID) return void(fuse_reply_err(req, EISDIR));
    if (lun_index(self(req), ino) < 0) return void(fuse_reply_err(req, ENOENT));
    fi->direct_io = 1;
    fi->keep_cache = 0;
    fuse_reply_open(req, fi);
}

void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
    FuseExport& fx = self(req);
    long i = lun_index(fx, ino);
    if (i < 0 || off < 0) return void(fuse_reply_err(req, EINVAL));
    fx.io().read(size_t(i), uint64_t(off), size, [req](int err, std::span<const uint8_t> data) {
        if (err) fuse_reply_err(req, err);
        else fuse_reply_buf(req, reinterpret_cast<const char*>(data.data()), data.size());
    });
}

void op_write(fuse_req_t req, fuse_ino_t ino, const char* buf, size_t size, off_t off, fuse_file_info* fi) {
    FuseExport& fx = self(req);
    long i = lun_index(fx, ino);
    if (i < 0 || off < 0) return void(fuse_reply_err(req, EINVAL));
    // A file opened O_SYNC or O_DSYNC (or a pwritev2 with RWF_DSYNC): the
    // kernel passes the flag here and sends no fsync after a direct-I/O
    // write, so the write itself must be durable before it is answered,
    // also on a target with a volatile write cache. (O_SYNC includes
    // O_DSYNC's bit.)
    const bool fua = fi && (fi->flags & O_DSYNC);
    // libfuse reuses its buffer once we return: the bytes are copied.
    std::vector<uint8_t> data(reinterpret_cast<const uint8_t*>(buf),
                              reinterpret_cast<const uint8_t*>(buf) + size);
    fx.io().write(size_t(i), uint64_t(off), std::move(data), fua, [req, size](int err) {
        if (err) fuse_reply_err(req, err);
        else fuse_reply_write(req, size);
    });
}

void op_fsync(fuse_req_t req, fuse_ino_t ino, int, fuse_file_info*) {
    FuseExport& fx = self(req);
    long i = lun_index(fx, ino);
    if (i < 0) return void(fuse_reply_err(req, EINVAL));
    fx.io().sync(size_t(i), [req](int err) { fuse_reply_err(req, err); });
}

void op_flush(fuse_req_t req, fuse_ino_t, fuse_file_info*) {
    // close(): writes were answered only once the LU had them; durability is fsync's.
    fuse_reply_err(req, 0);
}

void op_release(fuse_req_t req, fuse_ino_t, fuse_file_info*) { fuse_reply_err(req, 0); }

const fuse_lowlevel_ops kOps = [] {
    fuse_lowlevel_ops ops{};
    ops.init = op_init;
    ops.lookup = op_lookup;
    ops.getattr = op_getattr;
    ops.setattr = op_setattr;
    ops.readdir = op_readdir;
    ops.open = op_open;
    ops.read = op_read;
    ops.write = op_write;
    ops.fsync = op_fsync;
    ops.flush = op_flush;
    ops.release = op_release;
    return ops;
}();

}  // namespace

FuseExport::FuseExport(LunIo& io, const std::string& mountpoint, const std::string& fsname)
    : io_(io), mountpoint_(mountpoint), mount_time_(long(::time(nullptr))) {
    std::vector<std::string> argv = {"rbio", "-o", "fsname=" + fsname + ",subtype=rbio,default_permissions"};
    std::vector<char*> ptrs;
    ptrs.reserve(argv.size());
    for (auto& a : argv) ptrs.push_back(a.data());
    fuse_args args = FUSE_ARGS_INIT(int(ptrs.size()), ptrs.data());
    se_ = fuse_session_new(&args, &kOps, sizeof kOps, this);
    fuse_opt_free_args(&args);
    if (!se_) throw MountError("cannot create a FUSE session (libfuse3; see the log above)");
    if (fuse_session_mount(se_, mountpoint_.c_str()) != 0) {
        fuse_session_destroy(se_);
        se_ = nullptr;
        throw MountError("cannot mount FUSE on " + mountpoint_ + " (is /dev/fuse there? see the log above)");
    }
    mounted_ = true;
    // The connection is the one of the last FUSE mount on the point: ours,
    // just made. Its abort file is opened now, while the mount holds it.
    unsigned connection = 0;
    for (const auto& m : fuse_mounts())
        if (m.point == mountpoint_) connection = m.connection;
    if (connection) abort_file_ = open_connection_abort(connection);
    if (!abort_file_)
        RBIO_LOG(Warning,
                 "cannot open the abort file of the FUSE connection on "
                     << mountpoint_ << " (" << (connection ? std::strerror(errno) : "not in mountinfo")
                     << "): a copy of the mount in a mount namespace made later will hold up logout");
}

FuseExport::~FuseExport() {
    if (mounted_) unmount(true);
    stop();
}

void FuseExport::start(std::function<void()> on_end) {
    loop_ = std::thread([this, on_end = std::move(on_end)] {
        fuse_loop_config* cfg = fuse_loop_cfg_create();
        fuse_loop_cfg_set_max_threads(cfg, 16);
        int rc = fuse_session_loop_mt(se_, cfg);
        fuse_loop_cfg_destroy(cfg);
        RBIO_LOG(Info, "FUSE loop on " << mountpoint_ << " ended (" << rc << ")");
        if (on_end) on_end();
    });
}

int FuseExport::unmount(bool lazy) {
    if (!mounted_) return 0;
    if (::umount2(mountpoint_.c_str(), lazy ? MNT_DETACH : 0) != 0) {
        int err = errno;
        if (err != EINVAL) return err;  // EINVAL: no longer a mount point
    }
    mounted_ = false;
    // The kernel ends the connection when the last mount goes; reads of
    // /dev/fuse then fail with ENODEV and the loop returns. A mount
    // namespace made after the mount (a service started with PrivateTmp, a
    // sandbox) holds a copy, which would keep the connection, the loop and
    // so logout going for as long as it lives: the session is ending, so
    // the connection is ended outright (the copies then answer ENOTCONN).
    fuse_session_exit(se_);
    if (abort_file_) {
        if (int err = abort_connection(abort_file_); err != 0)
            RBIO_LOG(Warning,
                     "cannot end the FUSE connection of " << mountpoint_ << ": " << std::strerror(err));
        abort_file_ = UniqueFd();
    }
    return 0;
}

void FuseExport::join() {
    if (loop_.joinable()) loop_.join();
}

void FuseExport::close() {
    join();
    if (se_ && io_.answering()) {
        // An answer still to come would be sent through the freed session:
        // it stays (the process is ending), and the caller's order is wrong.
        RBIO_LOG(Error, "internal error: the FUSE session on "
                            << mountpoint_
                            << " was to be released while requests could still be answered; kept");
        return;
    }
    if (se_) {
        // unmount() uses umount2 itself (to see EBUSY), so libfuse's own
        // unmount never ran and its copy of the mount point (strdup'ed by
        // fuse_session_mount) would leak. Once the loop has ended the kernel
        // has ended the connection, so this only closes /dev/fuse and frees
        // that copy (libfuse unmounts only while the connection lives,
        // i.e. when the loop ended for another reason and it is still ours).
        fuse_session_unmount(se_);
        fuse_session_destroy(se_);
        se_ = nullptr;
    }
}

}  // namespace rbio::fuse
