#include "rbio/bs/config_file.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "rbio/bs/tcp_transport.h"

namespace rbio::bs {

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
    return s;
}

bool read_config(const std::string& path, bool must_exist,
                 const std::function<void(std::string_view, std::string_view, const std::string&)>& apply) {
    std::ifstream in(path);
    if (!in) {
        if (!must_exist && errno == ENOENT) return false;
        throw ConfigError(path + ": " + std::strerror(errno));
    }
    std::string line;
    for (int no = 1; std::getline(in, line); ++no) {
        std::string_view l = line;
        if (auto hash = l.find('#'); hash != l.npos) l = l.substr(0, hash);
        l = trim(l);
        if (l.empty()) continue;
        std::string where = path + ":" + std::to_string(no);
        auto eq = l.find('=');
        if (eq == l.npos) throw ConfigError(where + ": expected key = value");
        apply(trim(l.substr(0, eq)), trim(l.substr(eq + 1)), where);
    }
    return true;
}

std::string apply_environment(
    std::initializer_list<EnvOverride> overrides,
    const std::function<void(std::string_view, std::string_view, const std::string&)>& apply) {
    std::string used;
    for (const auto& o : overrides) {
        if (const char* v = std::getenv(o.variable)) {
            apply(o.key, trim(v), std::string("environment ") + o.variable);
            used += std::string(used.empty() ? "" : ",") + o.variable;
        }
    }
    return used;
}

ConfigSource config_source() {
    const char* config = std::getenv("RBIO_CONFIG");
    if (config && *config) return {config, true};
    return {RBIO_TP_DEFAULT_CONFIG, false};
}

}  // namespace rbio::bs
