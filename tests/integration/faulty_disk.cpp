// faulty_disk: a FUSE file system with one file, "disk", that passes reads
// and writes through to a backing file except in given block ranges, where
// they fail with EIO -- a disk with bad sectors under an LU, on a host
// without device-mapper's dm-error.
//
//   faulty_disk BACKING MOUNTPOINT [--bad FIRST:COUNT]... [--bad-writes FIRST:COUNT]...
//               [--block N] [--cached] [--log-syncs] [--no-punch] [--hold-writes BLOCK]
//
// Ranges are in blocks of --block bytes (512); --bad-writes ranges fail
// writes only. --log-syncs writes a line "faulty_disk: fsync" to stderr
// for each sync the kernel asks of the disk (fsync, fdatasync, a write
// with O_DSYNC or RWF_DSYNC), before it answers. It runs in the foreground
// until unmounted (fusermount3 -u MOUNTPOINT) or signalled and counts the
// failures it injected on stderr at exit. By default every file handle is
// direct_io, so each request reaches it (no page cache hides an error).
// --cached turns on the kernel's writeback cache instead: writes land in
// the page cache and a bad block fails later, when the kernel writes it
// back -- the error a file's next fsync reports, once.
// --no-punch refuses to punch holes (EOPNOTSUPP), as NFSv3 or a FUSE file
// system without fallocate do.
// --hold-writes keeps each write that covers BLOCK waiting (a hung NFS
// server, as its writer sees it) until a SIGUSR1 lets it go, saying
// "faulty_disk: holding a write to block N" on stderr. (The kernel sends
// this file's direct writes one at a time: nothing else is written while
// one is held.) SIGUSR2 lets every write go and holds none from then on
// (a test's cleanup: signals of one kind merge, so SIGUSR1s may not count).
#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 12)
#include <fcntl.h>
#include <fuse.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace {

struct Range {
    uint64_t first, count;
    bool writes_only;
};

struct Disk {
    int fd = -1;
    uint64_t block = 512;
    bool cached = false;
    bool log_syncs = false;
    bool no_punch = false;
    std::vector<Range> bad;
    std::atomic<uint64_t> read_errors{0}, write_errors{0};
    std::optional<uint64_t> hold_block;
    int release_fd = -1;                     // eventfd, written by SIGUSR1's handler
    volatile sig_atomic_t hold_no_more = 0;  // SIGUSR2
};
Disk disk;

constexpr const char* kName = "/disk";

bool hits_bad(off_t off, size_t len, bool write) {
    if (len == 0) return false;
    uint64_t first = uint64_t(off) / disk.block, last = (uint64_t(off) + len - 1) / disk.block;
    for (const Range& r : disk.bad)
        if ((write || !r.writes_only) && first < r.first + r.count && last >= r.first) return true;
    return false;
}

int fs_getattr(const char* path, struct stat* st, fuse_file_info*) {
    std::memset(st, 0, sizeof *st);
    if (std::strcmp(path, "/") == 0) {
        st->st_mode = S_IFDIR | 0755;
        st->st_nlink = 2;
        return 0;
    }
    if (std::strcmp(path, kName) != 0) return -ENOENT;
    struct stat b {};
    if (::fstat(disk.fd, &b) != 0) return -errno;
    st->st_mode = S_IFREG | 0600;
    st->st_nlink = 1;
    st->st_size = b.st_size;
    st->st_blocks = b.st_blocks;
    return 0;
}

int fs_readdir(const char* path, void* buf, fuse_fill_dir_t fill, off_t, fuse_file_info*,
               fuse_readdir_flags) {
    if (std::strcmp(path, "/") != 0) return -ENOENT;
    fill(buf, ".", nullptr, 0, fuse_fill_dir_flags(0));
    fill(buf, "..", nullptr, 0, fuse_fill_dir_flags(0));
    fill(buf, kName + 1, nullptr, 0, fuse_fill_dir_flags(0));
    return 0;
}

int fs_open(const char* path, fuse_file_info* fi) {
    if (std::strcmp(path, kName) != 0) return -ENOENT;
    fi->direct_io = disk.cached ? 0 : 1;
    return 0;
}

void* fs_init(fuse_conn_info* conn, fuse_config*) {
    if (disk.cached) {
        if (!(conn->capable & FUSE_CAP_WRITEBACK_CACHE)) {
            std::fprintf(stderr, "faulty_disk: the kernel offers no writeback cache\n");
            std::exit(3);
        }
        conn->want |= FUSE_CAP_WRITEBACK_CACHE;
    }
    return nullptr;
}

int fs_read(const char*, char* buf, size_t len, off_t off, fuse_file_info*) {
    if (hits_bad(off, len, false)) {
        ++disk.read_errors;
        return -EIO;
    }
    ssize_t n = ::pread(disk.fd, buf, len, off);
    return n < 0 ? -errno : int(n);
}

void release_held(int sig) {
    // SIGUSR2: enough releases for any write that could still be waiting.
    if (sig == SIGUSR2) disk.hold_no_more = 1;
    uint64_t n = sig == SIGUSR2 ? 1u << 20 : 1;
    ssize_t w = ::write(disk.release_fd, &n, sizeof n);
    (void)w;
}

// A write covering the hold block waits for a SIGUSR1 (on its FUSE
// thread; reads go on), and takes it: the next one waits for another.
void maybe_hold(off_t off, size_t len) {
    if (!disk.hold_block || len == 0 || disk.hold_no_more) return;
    const uint64_t b = *disk.hold_block * disk.block;
    if (b + disk.block <= uint64_t(off) || b >= uint64_t(off) + len) return;
    std::fprintf(stderr, "faulty_disk: holding a write to block %llu\n",
                 (unsigned long long)*disk.hold_block);
    uint64_t count = 0;
    while (::read(disk.release_fd, &count, sizeof count) < 0 && errno == EINTR) {
    }
    std::fprintf(stderr, "faulty_disk: released the write to block %llu\n",
                 (unsigned long long)*disk.hold_block);
}

int fs_write(const char*, const char* buf, size_t len, off_t off, fuse_file_info*) {
    if (hits_bad(off, len, true)) {
        ++disk.write_errors;
        return -EIO;
    }
    maybe_hold(off, len);
    ssize_t n = ::pwrite(disk.fd, buf, len, off);
    return n < 0 ? -errno : int(n);
}

int fs_fsync(const char*, int datasync, fuse_file_info*) {
    if (disk.log_syncs) std::fprintf(stderr, "faulty_disk: fsync\n");
    return (datasync ? ::fdatasync(disk.fd) : ::fsync(disk.fd)) == 0 ? 0 : -errno;
}

int fs_truncate(const char*, off_t size, fuse_file_info*) {
    return ::ftruncate(disk.fd, size) == 0 ? 0 : -errno;
}

// With the writeback cache the kernel keeps a file's times and sends them
// on fsync; refusing them would fail every fsync.
int fs_utimens(const char*, const timespec tv[2], fuse_file_info*) {
    return ::futimens(disk.fd, tv) == 0 ? 0 : -errno;
}

int fs_fallocate(const char*, int mode, off_t off, off_t len, fuse_file_info*) {
    if (disk.no_punch && (mode & FALLOC_FL_PUNCH_HOLE)) return -EOPNOTSUPP;
    return ::fallocate(disk.fd, mode, off, len) == 0 ? 0 : -errno;
}

[[noreturn]] void usage(const std::string& why) {
    std::fprintf(stderr,
                 "faulty_disk: %s\nusage: faulty_disk BACKING MOUNTPOINT [--bad FIRST:COUNT]... "
                 "[--bad-writes FIRST:COUNT]... "
                 "[--block N] [--cached] [--log-syncs] [--no-punch] [--hold-writes BLOCK]\n",
                 why.c_str());
    std::exit(2);
}

uint64_t number(const std::string& s) {
    char* end = nullptr;
    errno = 0;
    unsigned long long v = std::strtoull(s.c_str(), &end, 10);
    if (s.empty() || *end || errno) usage("not a number: " + s);
    return v;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 3) usage("missing arguments");
    for (int i = 3; i < argc; ++i) {
        std::string a = argv[i];
        if ((a == "--bad" || a == "--bad-writes") && i + 1 < argc) {
            std::string r = argv[++i];
            auto colon = r.find(':');
            if (colon == r.npos) usage(a + " wants FIRST:COUNT, got " + r);
            disk.bad.push_back(
                {number(r.substr(0, colon)), number(r.substr(colon + 1)), a == "--bad-writes"});
        } else if (a == "--block" && i + 1 < argc) {
            disk.block = number(argv[++i]);
            if (disk.block == 0) usage("--block must not be 0");
        } else if (a == "--cached") {
            disk.cached = true;
        } else if (a == "--log-syncs") {
            disk.log_syncs = true;
        } else if (a == "--no-punch") {
            disk.no_punch = true;
        } else if (a == "--hold-writes" && i + 1 < argc) {
            disk.hold_block = number(argv[++i]);
        } else {
            usage("unknown option " + a);
        }
    }
    if (disk.hold_block) {
        // Semaphore mode: each read takes one signal's release.
        disk.release_fd = ::eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
        if (disk.release_fd < 0) usage(std::string("eventfd: ") + std::strerror(errno));
        struct sigaction sa {};
        sa.sa_handler = release_held;
        ::sigaction(SIGUSR1, &sa, nullptr);
        ::sigaction(SIGUSR2, &sa, nullptr);
    }
    disk.fd = ::open(argv[1], O_RDWR | O_CLOEXEC);
    if (disk.fd < 0) usage(std::string("cannot open ") + argv[1] + ": " + std::strerror(errno));

    fuse_operations ops{};
    ops.getattr = fs_getattr;
    ops.readdir = fs_readdir;
    ops.open = fs_open;
    ops.read = fs_read;
    ops.write = fs_write;
    ops.fsync = fs_fsync;
    ops.truncate = fs_truncate;
    ops.fallocate = fs_fallocate;
    ops.init = fs_init;
    ops.utimens = fs_utimens;
    // Foreground, multi-threaded (io_uring's workers send requests in
    // parallel), and other users (tgtd runs as root too, but in its own
    // mount namespace) may open the file.
    std::vector<char*> fargs = {argv[0], argv[2], const_cast<char*>("-f"), const_cast<char*>("-o"),
                                const_cast<char*>("allow_other")};
    int rc = fuse_main(int(fargs.size()), fargs.data(), &ops, nullptr);
    std::fprintf(stderr, "faulty_disk: injected %llu read errors, %llu write errors\n",
                 (unsigned long long)disk.read_errors.load(), (unsigned long long)disk.write_errors.load());
    ::close(disk.fd);
    return rc;
}
