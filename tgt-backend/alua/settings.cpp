// ALUA's keys of /etc/rbio/tgtd.conf and their environment overrides.
#include <charconv>

#include "rbio/bs/alua_settings.hpp"
#include "rbio/bs/config_file.hpp"

namespace rbio::bs::alua {

namespace {

uint16_t parse_group(std::string_view v, const std::string& where) {
    unsigned n = 0;
    auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (v.empty() || ec != std::errc{} || end != v.data() + v.size() || n > 65535)
        throw ConfigError(where + ": '" + std::string(v) +
                          "' is not a port group from 1 to 65535 (0: no ALUA)");
    return uint16_t(n);
}

void apply(Settings& s, std::string_view key, std::string_view value, const std::string& where) {
    const std::string w = where + ": " + std::string(key);
    if (key == "port_group") s.port_group = parse_group(value, w);
    else if (key == "alua_groups_file") {
        // Empty is an unfilled variable more often than a choice: taken as
        // "no file", it would make this gateway active/optimized alone.
        if (value.empty())
            throw ConfigError(w +
                              ": empty: give the groups file's absolute path, or none for a gateway alone");
        s.groups_file = value == "none" ? "" : std::string(value);
        if (!s.groups_file.empty() && s.groups_file.front() != '/')
            throw ConfigError(w + ": '" + s.groups_file + "' is not an absolute path (or none)");
    }
}

}  // namespace

bool is_setting(std::string_view key) { return key == "port_group" || key == "alua_groups_file"; }

Settings load_settings() {
    Settings s;
    auto [path, must_exist] = config_source();
    if (read_config(path, must_exist, [&](std::string_view k, std::string_view v, const std::string& where) {
            if (is_setting(k)) apply(s, k, v, where);
        }))
        s.source = path;

    std::string env_used = apply_environment(
        {{"RBIO_PORT_GROUP", "port_group"}, {"RBIO_ALUA_GROUPS", "alua_groups_file"}},
        [&](std::string_view k, std::string_view v, const std::string& where) { apply(s, k, v, where); });
    if (!env_used.empty()) s.source += " + " + env_used;

    if (!s.groups_file.empty() && !s.enabled())
        throw ConfigError(s.source +
                          ": alua_groups_file is set but port_group is not: "
                          "which group is this gateway?");
    return s;
}

}  // namespace rbio::bs::alua
