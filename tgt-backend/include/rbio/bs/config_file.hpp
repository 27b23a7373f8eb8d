#pragma once
// /etc/rbio/tgtd.conf (or $RBIO_CONFIG): "key = value" lines, '#' starts a
// comment. Read by every part of the module that has settings (the
// transports, ALUA), each applying its own keys; where they come from and
// how lines are split is decided here once.
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>

namespace rbio::bs {

struct ConfigError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// Spaces, tabs and a trailing CR off both ends.
std::string_view trim(std::string_view s);

// `pattern` with every "%" `letter` replaced by `value`, into `out` (which
// keeps its capacity: no allocation once it is large enough). The file
// settings' placeholders: stats_file's %p (tgtd's pid), metrics_file's %c
// (its control port).
void expand_placeholder(std::string_view pattern, char letter, uint64_t value, std::string& out);

// Calls apply(key, value, where) for each setting of the file, `where` being
// "FILE:LINE". A missing file is no error unless must_exist; an unreadable
// one, a folder, a line without '=' and a key set
// twice throw ConfigError naming file and line.
// Returns whether the file was read.
bool read_config(
    const std::string& path, bool must_exist,
    const std::function<void(std::string_view key, std::string_view value, const std::string& where)>& apply);

// Environment overrides: for each {VARIABLE, key} that is set, calls
// apply(key, value, "environment VARIABLE"). Returns the variables used,
// comma-separated, for the log ("" if none).
struct EnvOverride {
    const char* variable;
    const char* key;
};
std::string apply_environment(
    std::initializer_list<EnvOverride> overrides,
    const std::function<void(std::string_view key, std::string_view value, const std::string& where)>& apply);

// The config file in effect: $RBIO_CONFIG if set and not empty (it must
// exist then), else RBIO_TP_DEFAULT_CONFIG, /etc/rbio/tgtd.conf
// (it may be missing).
struct ConfigSource {
    std::string path;
    bool must_exist;
};
ConfigSource config_source();

}  // namespace rbio::bs
