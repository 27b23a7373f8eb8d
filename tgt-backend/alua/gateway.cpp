#include "rbio/bs/alua_gateway.hpp"

#include <sys/stat.h>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "rbio/bs/config_file.hpp"

namespace rbio::bs::alua {

bool Gateway::FileVersion::operator==(const FileVersion& o) const {
    return dev == o.dev && ino == o.ino && size == o.size && mtime.tv_sec == o.mtime.tv_sec &&
           mtime.tv_nsec == o.mtime.tv_nsec && ctime.tv_sec == o.ctime.tv_sec &&
           ctime.tv_nsec == o.ctime.tv_nsec;
}

Gateway::Gateway(Settings s) : settings_(std::move(s)) {
    own_state_ = settings_.groups_file.empty() ? State::active_optimized : State::transitioning;
    groups_ = {{settings_.port_group, own_state_}};
}

Gateway::Poll Gateway::reject(const std::string& why) {
    message_ = why + "; port group " + std::to_string(settings_.port_group) + " stays " +
               std::string(state_name(own_state_));
    return Poll::bad;
}

Gateway::Poll Gateway::poll() {
    message_.clear();
    if (settings_.groups_file.empty()) return Poll::unchanged;
    const std::string& path = settings_.groups_file;

    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        const int err = errno;
        // A file being replaced (rename over it) is never missing; one that
        // is gone is reported once, not every second.
        if (missing_reported_) return Poll::unchanged;
        missing_reported_ = true;
        have_version_ = false;
        return reject("ALUA groups file " + path + ": " + std::strerror(err));
    }
    missing_reported_ = false;
    FileVersion v{st.st_dev, st.st_ino, st.st_size, st.st_mtim, st.st_ctim};
    if (have_version_ && v == version_) return Poll::unchanged;
    version_ = v;
    have_version_ = true;

    std::ifstream in(path);
    if (!in) return reject("ALUA groups file " + path + ": " + std::strerror(errno));
    std::ostringstream text;
    text << in.rdbuf();
    GroupTable next;
    try {
        next = parse_groups(text.str(), path);
    } catch (const ConfigError& e) {
        return reject(e.what());
    }
    auto own = state_of(next, settings_.port_group);
    if (!own)
        return reject("ALUA groups file " + path + " does not list this gateway's port group " +
                      std::to_string(settings_.port_group));
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
