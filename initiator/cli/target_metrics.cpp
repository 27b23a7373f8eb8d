// rbio target-metrics: the metrics the target side (tgtd with rbio's
// module) writes once a second, printed as they are: Prometheus' text
// format, what node_exporter's textfile collector reads from the same file.
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <sstream>

#include "commands.hpp"
#include "options.hpp"
#include "rbio/bs/config_file.hpp"
#include "rbio/bs/metrics_settings.hpp"
#include "session_state.hpp"

namespace rbio::cli {

namespace {

// tgtd rewrites the file every second; older than this, it has stopped
// (the file of a tgtd that crashed stays behind).
constexpr time_t kStaleSeconds = 10;

std::string configured_path(unsigned control_port) {
    rbio::bs::metrics::Settings s;
    try {
        s = rbio::bs::metrics::load_settings(control_port);
    } catch (const rbio::bs::ConfigError& e) {
        throw CommandError(kExitNoMetrics, e.what());
    }
    if (s.file.empty())
        throw CommandError(kExitNoMetrics, "no metrics file: metrics_file is not set in " +
                                               rbio::bs::config_source().path +
                                               " nor in RBIO_METRICS_FILE (or pass --file PATH)");
    return s.file;
}

}  // namespace

int target_metrics_main(int argc, char** argv) {
    Args args(argc, argv, 1, {});
    args.allow_only({"--file", "--control-port"}, Args::Login::No);
    if (args.has("--file") && args.has("--control-port"))
        throw UsageError("--control-port picks the configured file: not with --file");
    // As tgtadm's -C: which tgtd of the box, for a metrics_file with "%c".
    const auto control_port = unsigned(
        args.has("--control-port") ? parse_uint("--control-port", args.get("--control-port"), 0, 32767) : 0);
    const std::string path = args.has("--file") ? args.get("--file") : configured_path(control_port);
    std::ifstream in(path);
    if (!in)
        throw CommandError(kExitNoMetrics, "no metrics in " + path + ": " + std::strerror(errno) +
                                               " (is tgtd running with rbio's module?)");
    std::ostringstream text;
    text << in.rdbuf();
    if (text.str().empty())
        throw CommandError(kExitNoMetrics, "no metrics in " + path + ": the file is empty");
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && std::time(nullptr) - st.st_mtime > kStaleSeconds)
        std::cerr << "rbio: warning: " << path << " was last written " << std::time(nullptr) - st.st_mtime
                  << " s ago: has tgtd stopped?\n";
    std::cout << text.str();
    return kExitOk;
}

}  // namespace rbio::cli
