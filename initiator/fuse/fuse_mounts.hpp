#pragma once
// FUSE mounts as the kernel lists them (/proc/self/mountinfo), and the end
// of a mount's connection through the fuse control file system.
//
// Why a connection is ended by hand: a mount namespace made after the mount
// (a service started with PrivateTmp or another sandbox) holds a copy of
// it, and the kernel ends a FUSE connection only when its last mount goes.
// Unmounting here then leaves the connection, and the session's FUSE loop
// with it, alive for as long as that namespace lives.
#include <istream>
#include <string>
#include <vector>

#include "rbio/common/unique_fd.hpp"

namespace rbio::fuse {

struct FuseMount {
    std::string point;        // the mount point, unescaped
    std::string source;       // rbio's: "rbio:TARGET"
    std::string type;         // "fuse" or "fuse.SUBTYPE"
    unsigned connection = 0;  // its number in the fuse control file system
};

// The FUSE mounts listed in `mountinfo` (the format of
// /proc/PID/mountinfo), in its order: a later one is mounted over an
// earlier one on the same point. Lines that do not parse are skipped.
std::vector<FuseMount> parse_fuse_mounts(std::istream& mountinfo);
// Those of this process's mount namespace.
std::vector<FuseMount> fuse_mounts();

// Opens the abort file of FUSE connection `connection` in the fuse control
// file system: a private instance of it (fsopen; nothing is mounted
// anywhere), else /sys/fs/fuse/connections. The file names that connection
// and no later one of the same number, so it is opened while the mount
// holds the connection and kept: written after the connection has ended,
// it does nothing. Returns an fd, or -1 with errno set.
UniqueFd open_connection_abort(unsigned connection);
// Ends the connection in every mount namespace: its pending and later
// requests fail (ENOTCONN), and the daemon's reads of /dev/fuse return
// ENODEV, which ends its loop. Returns 0 or an errno.
int abort_connection(const UniqueFd& abort_file);

}  // namespace rbio::fuse
