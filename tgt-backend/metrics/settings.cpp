// The metrics' key of /etc/rbio/tgtd.conf and its environment override.
#include "rbio/bs/config_file.hpp"
#include "rbio/bs/metrics_settings.hpp"

namespace rbio::bs::metrics {

namespace {

// Leaves room for the ".tmp" of the atomic write within PATH_MAX.
constexpr size_t kMaxPath = 4000;

// "%c" in v becomes the control port: two tgtds of one box read one
// config file, and each needs a file of its own.
std::string parse_file(std::string_view v, unsigned control_port, const std::string& where) {
    if (v == "none") return "";
    std::string path;
    expand_placeholder(v, 'c', control_port, path);
    if (path.empty() || path.front() != '/')
        throw ConfigError(where + ": '" + path + "' is not an absolute path (or none)");
    if (path.back() == '/') throw ConfigError(where + ": '" + path + "' names a folder, not a file");
    if (path.size() > kMaxPath) throw ConfigError(where + ": path too long");
    return path;
}

}  // namespace

bool is_setting(std::string_view key) { return key == "metrics_file"; }

Settings load_settings(unsigned control_port) {
    Settings s;
    auto apply = [&](std::string_view k, std::string_view v, const std::string& where) {
        if (is_setting(k)) s.file = parse_file(v, control_port, where + ": " + std::string(k));
    };
    auto [path, must_exist] = config_source();
    if (read_config(path, must_exist, apply)) s.source = path;
    std::string env_used = apply_environment({{"RBIO_METRICS_FILE", "metrics_file"}}, apply);
    if (!env_used.empty()) s.source += " + " + env_used;
    return s;
}

}  // namespace rbio::bs::metrics
