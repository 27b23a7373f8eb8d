// Whether a backing store is safe to share between gateways (no cache of
// one gateway hides a write from another).
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/vfs.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "rbio/bs/alua.hpp"

namespace rbio::bs::alua {

namespace {

// File systems whose page cache is per client box (statfs f_type), named
// in the refusal.
struct NamedFs {
    long magic;
    const char* name;
};
constexpr NamedFs network_fs[] = {
    {0x6969, "NFS"},        {0x517b, "SMB"},    {long(0xff534d42), "CIFS"}, {long(0xfe534d42), "SMB2"},
    {0x00c36400, "CephFS"}, {0x01021997, "9P"}, {0x65735546, "FUSE"},
};
// Local file systems: gateways can share a file there only on its own box,
// through one page cache, so buffered I/O is coherent. Anything not listed
// (a cluster or network file system not named above) needs O_DIRECT: an
// unknown cache is not trusted.
constexpr long local_fs[] = {
    0xef53,            // ext2/3/4
    0x58465342,        // XFS
    long(0x9123683e),  // Btrfs
    0x01021994,        // tmpfs
    long(0xf2f52010),  // F2FS
    0x2fc12fc1,        // ZFS
    long(0x858458f6),  // ramfs
    0x794c7630,        // overlayfs
    long(0xca451a4e),  // bcachefs
    0x3153464a,        // JFS
    0x52654973,        // ReiserFS
};

}  // namespace

std::optional<std::string> shared_backing_problem(int fd, int oflags) {
    if (oflags & O_DIRECT) return std::nullopt;
    struct stat st {};
    if (::fstat(fd, &st) != 0) return std::string("cannot stat the backing store: ") + std::strerror(errno);
    if (S_ISBLK(st.st_mode))
        return std::string(
            "a block device served by several gateways needs O_DIRECT (bsoflags direct): "
            "gateways on other boxes would not see writes held in this box's page cache");
    struct statfs sfs {};
    if (::fstatfs(fd, &sfs) != 0)
        return std::string("cannot statfs the backing store: ") + std::strerror(errno);
    const long type = long(sfs.f_type);
    for (const auto& n : network_fs)
        if (type == n.magic)
            return std::string("a file on ") + n.name +
                   " served by several gateways needs O_DIRECT (bsoflags direct): "
                   "each box's page cache would hide writes from the others";
    for (long local : local_fs)
        if (type == local) return std::nullopt;
    char hex[24];
    std::snprintf(hex, sizeof hex, "%lx", static_cast<unsigned long>(type));
    return std::string("a file on a file system rbio does not know as local (statfs type 0x") + hex +
           ") served by several gateways needs O_DIRECT (bsoflags direct): its cache might hide "
           "writes made through another box";
}

}  // namespace rbio::bs::alua
