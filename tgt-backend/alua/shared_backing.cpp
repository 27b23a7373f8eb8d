// Whether a backing store is safe to share between gateways (no cache of
// one gateway hides a write from another).
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/vfs.h>

#include <cerrno>
#include <cstring>

#include "rbio/bs/alua.hpp"

namespace rbio::bs::alua {

namespace {

// File systems whose page cache is per client box (statfs f_type).
struct NetworkFs {
    long magic;
    const char* name;
};
constexpr NetworkFs network_fs[] = {
    {0x6969, "NFS"},        {0x517b, "SMB"},    {long(0xff534d42), "CIFS"}, {long(0xfe534d42), "SMB2"},
    {0x00c36400, "CephFS"}, {0x01021997, "9P"}, {0x65735546, "FUSE"},
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
    for (const auto& n : network_fs)
        if (long(sfs.f_type) == n.magic)
            return std::string("a file on ") + n.name +
                   " served by several gateways needs O_DIRECT (bsoflags direct): "
                   "each box's page cache would hide writes from the others";
    return std::nullopt;
}

}  // namespace rbio::bs::alua
