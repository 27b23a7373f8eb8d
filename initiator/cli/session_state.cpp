#include "session_state.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <stdexcept>

#include "rbio/bs/atomic_file.hpp"
#include "socket.hpp"  // UniqueFd

namespace rbio::cli {

using initiator::UniqueFd;

std::string state_key(const std::string& target) {
    std::string k = target;
    for (char& c : k)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) c = '_';
    return k;
}

std::string state_path(const std::string& dir, const std::string& key, const char* suffix) {
    return dir + "/" + key + suffix;
}

void ensure_state_dir(const std::string& dir) {
    std::string path;
    for (size_t pos = 0; pos != std::string::npos;) {
        pos = dir.find('/', pos + 1);
        path = dir.substr(0, pos);
        if (path.empty()) continue;
        if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST)
            throw std::runtime_error("state folder " + path + ": " + std::strerror(errno));
    }
}

void write_record(const std::string& dir, const SessionRecord& r) {
    std::string path = state_path(dir, r.key, ".state");
    std::string tmp = path + ".tmp";
    {
        std::ofstream out(tmp, std::ios::trunc);
        out << "pid=" << r.pid << "\ntarget=" << r.target << "\nportal=" << r.portal
            << "\ninitiator=" << r.initiator << "\nmount=" << r.mount << "\nsocket=" << r.socket
            << "\nlog=" << r.log << "\n";
        if (!out.flush()) throw std::runtime_error("cannot write " + tmp);
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0)
        throw std::runtime_error("rename " + tmp + ": " + std::strerror(errno));
}

std::optional<SessionRecord> read_record(const std::string& dir, const std::string& key) {
    std::ifstream in(state_path(dir, key, ".state"));
    if (!in) return std::nullopt;
    SessionRecord r;
    r.key = key;
    std::string line;
    while (std::getline(in, line)) {
        size_t eq = line.find('=');
        if (eq == std::string::npos) continue;
        std::string k = line.substr(0, eq), v = line.substr(eq + 1);
        if (k == "pid") r.pid = pid_t(std::atol(v.c_str()));
        else if (k == "target") r.target = v;
        else if (k == "portal") r.portal = v;
        else if (k == "initiator") r.initiator = v;
        else if (k == "mount") r.mount = v;
        else if (k == "socket") r.socket = v;
        else if (k == "log") r.log = v;
    }
    if (r.pid <= 0 || r.target.empty()) return std::nullopt;
    return r;
}

std::vector<SessionRecord> list_records(const std::string& dir) {
    std::vector<SessionRecord> out;
    DIR* d = ::opendir(dir.c_str());
    if (!d) return out;
    while (dirent* e = ::readdir(d)) {
        std::string name = e->d_name;
        const std::string suffix = ".state";
        if (name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix))
            continue;
        if (auto r = read_record(dir, name.substr(0, name.size() - suffix.size()))) out.push_back(*r);
    }
    ::closedir(d);
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.key < b.key; });
    return out;
}

void remove_record(const std::string& dir, const std::string& key) {
    ::unlink(state_path(dir, key, ".state").c_str());
    ::unlink(state_path(dir, key, ".sock").c_str());
}

bool process_alive(pid_t pid) {
    if (pid <= 0 || (::kill(pid, 0) != 0 && errno == ESRCH)) return false;
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string stat;
    if (!std::getline(in, stat)) return false;
    size_t paren = stat.rfind(')');
    return paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] != 'Z';
}

UniqueFd lock_session(const std::string& dir, const std::string& key) {
    // The metrics file's one-writer lock, on KEY (its PATH.lock is KEY.lock).
    return rbio::bs::claim_file(state_path(dir, key, ""));
}

bool session_running(const std::string& dir, const SessionRecord& r) {
    UniqueFd fd(::open(state_path(dir, r.key, ".lock").c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (fd.get() < 0) return process_alive(r.pid);
    // Taken for a moment when free (a login at that very moment is told
    // the session is busy, and may try again).
    return ::flock(fd.get(), LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
}

int control_request(const std::string& socket_path, const std::string& request, std::string& reply,
                    int timeout_ms) {
    return control_request(socket_path, request, reply, std::chrono::milliseconds(timeout_ms),
                           [](std::chrono::milliseconds) { return false; });
}

int control_request(const std::string& socket_path, const std::string& request, std::string& reply,
                    std::chrono::milliseconds slice,
                    const std::function<bool(std::chrono::milliseconds)>& keep_waiting) {
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    if (socket_path.size() >= sizeof sa.sun_path) return ENAMETOOLONG;
    std::memcpy(sa.sun_path, socket_path.c_str(), socket_path.size() + 1);
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (fd.get() < 0) return errno;
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) return errno;
    std::string line = request + "\n";
    if (::send(fd.get(), line.data(), line.size(), MSG_NOSIGNAL) != ssize_t(line.size())) return errno;
    const auto start = std::chrono::steady_clock::now();
    auto deadline = start + slice;
    char buf[4096];
    for (;;) {
        const auto now = std::chrono::steady_clock::now();
        if (now >= deadline) {
            if (!keep_waiting(std::chrono::duration_cast<std::chrono::milliseconds>(now - start)))
                return ETIMEDOUT;
            deadline = now + slice;
            continue;
        }
        // Rounded up: a poll of 0 ms would spin for the last fraction.
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - now);
        pollfd p{fd.get(), POLLIN, 0};
        int n = ::poll(&p, 1, int(left.count()));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return errno;
        if (n == 0) continue;
        ssize_t r = ::read(fd.get(), buf, sizeof buf);
        if (r == 0) return 0;
        if (r < 0) {
            if (errno == EINTR) continue;
            return errno == ECONNRESET ? 0 : errno;
        }
        reply.append(buf, size_t(r));
    }
}

}  // namespace rbio::cli
