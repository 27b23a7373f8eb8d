#pragma once
// ALUA's settings, in /etc/rbio/tgtd.conf (or $RBIO_CONFIG) beside the
// transports', the environment overriding the file:
//   port_group = N          (RBIO_PORT_GROUP)   this gateway's target port
//                                                group, 1..65535; 0 or unset:
//                                                no ALUA (TPGS 0, as stock)
//   alua_groups_file = PATH (RBIO_ALUA_GROUPS)  "ID STATE" per line, read by
//                                                every gateway of the LU set;
//                                                unset: this gateway alone,
//                                                active/optimized
#include <cstdint>
#include <string>
#include <string_view>

namespace rbio::bs::alua {

struct Settings {
    uint16_t port_group = 0;
    std::string groups_file;
    std::string source = "defaults";  // where they came from, for the log
    bool enabled() const { return port_group != 0; }
};

// Whether `key` is one of ALUA's, so other readers of the file skip it.
bool is_setting(std::string_view key);

// Reads the settings; throws ConfigError naming file, line or variable.
Settings load_settings();

}  // namespace rbio::bs::alua
