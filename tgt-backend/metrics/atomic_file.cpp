#include "rbio/bs/atomic_file.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "rbio/bs/error.hpp"
#include "rbio/common/unique_fd.hpp"

namespace rbio::bs {

namespace {

// Opens `name` (beside `path`) with `flags`; a missing last folder of
// `path` is made first, 0755 whatever the umask: node_exporter runs as
// another user and must get through it.
UniqueFd open_beside(const std::string& name, const std::string& path, int flags) {
    UniqueFd fd(::open(name.c_str(), flags, 0644));
    if (!fd && errno == ENOENT) {
        auto slash = path.rfind('/');
        if (slash != std::string::npos && slash > 0) {
            const std::string dir = path.substr(0, slash);
            if (::mkdir(dir.c_str(), 0755) == 0) ::chmod(dir.c_str(), 0755);
        }
        fd.reset(::open(name.c_str(), flags, 0644));
    }
    if (!fd) throw sys_error(name, errno);
    return fd;
}

UniqueFd create(const std::string& tmp, const std::string& path) {
    return open_beside(tmp, path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW);
}

void write_all(int fd, std::string_view content, const std::string& tmp) {
    while (!content.empty()) {
        ssize_t n = ::write(fd, content.data(), content.size());
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw sys_error(tmp, errno);
        content.remove_prefix(size_t(n));
    }
}

}  // namespace

void write_file_atomically(const std::string& path, std::string_view content) {
    write_file_atomically(path, path + ".tmp", content);
}

void write_file_atomically(const std::string& path, const std::string& tmp, std::string_view content) {
    UniqueFd fd = create(tmp, path);
    try {
        if (::fchmod(fd.get(), 0644) != 0) throw sys_error(tmp, errno);
        write_all(fd.get(), content, tmp);
        if (::close(fd.release()) != 0) throw sys_error(tmp, errno);
        if (::rename(tmp.c_str(), path.c_str()) != 0) throw sys_error(path, errno);
    } catch (...) {
        ::unlink(tmp.c_str());
        throw;
    }
}

UniqueFd claim_file(const std::string& path) {
    const std::string lock = path + ".lock";
    UniqueFd fd = open_beside(lock, path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW);
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
        if (errno == EWOULDBLOCK) return {};
        throw sys_error(lock, errno);
    }
    return fd;
}

}  // namespace rbio::bs
