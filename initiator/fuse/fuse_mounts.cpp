#include "fuse_mounts.hpp"

#include <fcntl.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <fstream>
#include <sstream>

#include "rbio/common/unique_fd.hpp"

namespace rbio::fuse {
namespace {

// Undoes the \ooo escapes (space, tab, newline, backslash) of a mountinfo field.
std::string unescape(const std::string& f) {
    std::string out;
    for (size_t i = 0; i < f.size(); ++i) {
        unsigned v = 0;
        if (f[i] == '\\' && i + 3 < f.size() &&
            std::from_chars(f.data() + i + 1, f.data() + i + 4, v, 8).ptr == f.data() + i + 4 && v < 256) {
            out += char(v);
            i += 3;
        } else {
            out += f[i];
        }
    }
    return out;
}

// The kernel's dev_t (MKDEV: major << 20 | minor) of "MAJOR:MINOR", which
// names the connection's folder in the fuse control file system.
bool parse_dev(const std::string& s, unsigned& dev) {
    unsigned major = 0, minor = 0;
    const char* end = s.data() + s.size();
    auto [p, ec] = std::from_chars(s.data(), end, major);
    if (ec != std::errc() || p == end || *p != ':') return false;
    auto [q, ec2] = std::from_chars(p + 1, end, minor);
    if (ec2 != std::errc() || q != end || major >= (1u << 12) || minor >= (1u << 20)) return false;
    dev = major << 20 | minor;
    return true;
}

}  // namespace

std::vector<FuseMount> parse_fuse_mounts(std::istream& mountinfo) {
    std::vector<FuseMount> out;
    for (std::string line; std::getline(mountinfo, line);) {
        // ID PARENT MAJOR:MINOR ROOT POINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPER-OPTIONS
        std::istringstream f(line);
        std::string id, parent, dev, root, point, field, type, source;
        if (!(f >> id >> parent >> dev >> root >> point)) continue;
        while (f >> field && field != "-") {
        }
        if (field != "-" || !(f >> type >> source)) continue;
        if (type != "fuse" && type.rfind("fuse.", 0) != 0) continue;
        FuseMount m;
        if (!parse_dev(dev, m.connection)) continue;
        m.point = unescape(point);
        m.source = unescape(source);
        m.type = type;
        out.push_back(std::move(m));
    }
    return out;
}

std::vector<FuseMount> fuse_mounts() {
    std::ifstream in("/proc/self/mountinfo");
    return parse_fuse_mounts(in);
}

UniqueFd open_connection_abort(unsigned connection) {
    const std::string abort = std::to_string(connection) + "/abort";
    // fusectl has one super block, which lists every connection.
    UniqueFd fs(::fsopen("fusectl", FSOPEN_CLOEXEC));
    if (fs && ::fsconfig(fs.get(), FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) == 0) {
        UniqueFd mnt(::fsmount(fs.get(), FSMOUNT_CLOEXEC, 0));
        if (mnt) return UniqueFd(::openat(mnt.get(), abort.c_str(), O_WRONLY | O_CLOEXEC));
    }
    // Where the new mount API is refused (an older kernel, a seccomp filter).
    const int err = errno;
    UniqueFd f(::open(("/sys/fs/fuse/connections/" + abort).c_str(), O_WRONLY | O_CLOEXEC));
    if (!f) errno = err;
    return f;
}

int abort_connection(const UniqueFd& abort_file) {
    if (::write(abort_file.get(), "1", 1) != 1) return errno;
    return 0;
}

}  // namespace rbio::fuse
