#pragma once
// The LUs of one session as files of a FUSE mount (libfuse3, low-level API):
// MOUNT/lun<N> for each LU, regular files of the LU's size.
//
// Requests are answered asynchronously: read, write and fsync hand the
// request to LunIo and return, and the reply leaves from the I/O thread when
// the SCSI command completes, so one FUSE worker thread keeps many commands
// in flight (libfuse's multi-threaded loop adds threads when one blocks).
// Files are opened with direct_io: every read and write reaches the LU (no
// page cache in front of it, so nothing is left to write back at logout);
// fsync is SYNCHRONIZE CACHE.
#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include "lun_io.hpp"
#include "rbio/common/unique_fd.hpp"

struct fuse_session;

namespace rbio::fuse {

// Thrown when the mount cannot be set up.
struct MountError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

class FuseExport {
public:
    // Creates the FUSE session and mounts it on `mountpoint` (an existing
    // directory). `fsname` shows in /proc/mounts. Throws MountError.
    FuseExport(LunIo& io, const std::string& mountpoint, const std::string& fsname);
    // Unmounts (lazily) if still mounted and waits for the loop.
    ~FuseExport();
    FuseExport(const FuseExport&) = delete;
    FuseExport& operator=(const FuseExport&) = delete;

    // Serves requests on a thread pool; `on_end` runs (on the loop thread)
    // once the loop has ended, e.g. because someone unmounted the directory.
    void start(std::function<void()> on_end);
    // Unmounts: 0, or the errno of umount2 (EBUSY: a file is open, e.g. by
    // a loop device). `lazy` detaches even a busy mount. Once unmounted
    // here, the connection is ended, also for copies of the mount in other
    // mount namespaces.
    int unmount(bool lazy);
    // Waits for the loop to end (after unmount): from then on nothing calls
    // into the LunIo. Requests it holds may still be answered.
    void join();
    // Releases the FUSE session, which answers use: only once the LunIo has
    // answered every request (LunIo::shutdown).
    void close();
    void stop() {
        join();
        close();
    }
    const std::string& mountpoint() const { return mountpoint_; }

    // Called by the FUSE operations (fuse_export.cpp).
    LunIo& io() { return io_; }
    long mount_time() const { return mount_time_; }

private:
    LunIo& io_;
    std::string mountpoint_;
    struct fuse_session* se_ = nullptr;
    std::thread loop_;
    std::atomic<bool> mounted_{false};
    UniqueFd abort_file_;  // the connection's, in the fuse control file system
    long mount_time_ = 0;
};

}  // namespace rbio::fuse
