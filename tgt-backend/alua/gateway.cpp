#include "rbio/bs/alua_gateway.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>

#include "rbio/bs/config_file.hpp"
#include "rbio/common/unique_fd.hpp"

namespace rbio::bs::alua {

namespace {

// A groups file lists at most a few hundred groups; anything much larger
// is the wrong file.
constexpr size_t kMaxGroupsFile = 64 * 1024;

// The whole file into `text`; 0, or the errno that stopped it (EFBIG: too
// large to be a groups file).
int read_groups_file(const std::string& path, std::string& text) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return errno;
    text.clear();
    char buf[4096];
    for (;;) {
        ssize_t n = ::read(fd.get(), buf, sizeof buf);
        if (n < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        if (n == 0) return 0;
        if (text.size() + size_t(n) > kMaxGroupsFile) return EFBIG;
        text.append(buf, size_t(n));
    }
}

}  // namespace

Gateway::Gateway(Settings s) : settings_(std::move(s)), file_ok_(settings_.groups_file.empty()) {
    own_state_ = settings_.groups_file.empty() ? State::active_optimized : State::transitioning;
    groups_ = {{settings_.port_group, own_state_}};
}

Gateway::Poll Gateway::reject(const std::string& why) {
    file_ok_ = false;
    message_ = why + "; port group " + std::to_string(settings_.port_group) + " stays " +
               std::string(state_name(own_state_));
    return Poll::bad;
}

Gateway::Poll Gateway::poll() {
    message_.clear();
    if (settings_.groups_file.empty()) return Poll::unchanged;
    const std::string& path = settings_.groups_file;

    // Read every time rather than when stat() says the file changed: on a
    // network file system stat() may answer from a cache for up to a
    // minute where open() revalidates (close-to-open), and an edit in
    // place within one timestamp tick leaves size and times as they were.
    // A few hundred bytes once a second.
    std::string text;
    if (int err = read_groups_file(path, text)) {
        // A file being replaced (rename over it) is never missing; one that
        // is gone or unreadable is reported once, not every second.
        if (unreadable_reported_) return Poll::unchanged;
        unreadable_reported_ = true;
        have_text_ = false;
        return reject(
            "ALUA groups file " + path + ": " +
            (err == EFBIG ? "larger than " + std::to_string(kMaxGroupsFile / 1024) + " KiB, not a groups file"
                          : std::string(std::strerror(err))));
    }
    unreadable_reported_ = false;
    if (have_text_ && text == text_) return Poll::unchanged;
    text_ = std::move(text);
    have_text_ = true;

    GroupTable next;
    try {
        next = parse_groups(text_, path);
    } catch (const ConfigError& e) {
        return reject(e.what());
    }
    auto own = state_of(next, settings_.port_group);
    if (!own)
        return reject("ALUA groups file " + path + " does not list this gateway's port group " +
                      std::to_string(settings_.port_group));
    file_ok_ = true;  // also when a good version comes back unchanged
    if (next == groups_) return Poll::unchanged;
    groups_ = std::move(next);
    own_state_ = *own;
    changed_ = true;
    return Poll::changed;
}

std::string Gateway::describe() const {
    std::string s = "port group " + std::to_string(settings_.port_group) + ": " +
                    std::string(state_name(own_state_)) + " (groups";
    const char* sep = " ";
    for (const auto& g : groups_) {
        s += sep + std::to_string(g.id) + " " + std::string(state_name(g.state));
        sep = ", ";
    }
    s += settings_.groups_file.empty() ? "; no groups file" : "; from " + settings_.groups_file;
    return s + "; settings from " + settings_.source + ")";
}

}  // namespace rbio::bs::alua
