#pragma once
// Where tgtd writes its metrics, in /etc/rbio/tgtd.conf (or $RBIO_CONFIG)
// beside the transports' settings, the environment overriding the file:
//   metrics_file = PATH   (RBIO_METRICS_FILE)   an absolute path, e.g. in
//                                               node_exporter's textfile
//                                               folder; "none" or unset:
//                                               no metrics file; "%c"
//                                               becomes tgtd's control port
// Read by tgtd's module and by `rbio target-metrics`, which prints the file.
#include <string>
#include <string_view>

namespace rbio::bs::metrics {

struct Settings {
    std::string file;                 // "" = none
    std::string source = "defaults";  // where it came from, for messages
};

// Whether `key` is the metrics' own, so other readers of the file skip it.
bool is_setting(std::string_view key);

// Reads the setting for the tgtd on `control_port` (tgtd -C, 0 by
// default); throws ConfigError naming file, line or variable.
Settings load_settings(unsigned control_port);

}  // namespace rbio::bs::metrics
