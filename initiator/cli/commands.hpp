#pragma once
// The subcommands of `rbio`; each returns the process exit code and throws
// InitiatorError or UsageError on failure.
namespace rbio::cli {

int discover_main(int argc, char** argv);        // argv[0] is "discover"
int bench_main(int argc, char** argv);           // argv[0] is "bench"
int login_main(int argc, char** argv);           // argv[0] is "login"
int logout_main(int argc, char** argv);          // argv[0] is "logout"
int session_main(int argc, char** argv);         // argv[0] is "session"
int inquiry_main(int argc, char** argv);         // argv[0] is "inquiry"
int discard_main(int argc, char** argv);         // argv[0] is "discard"
int target_metrics_main(int argc, char** argv);  // argv[0] is "target-metrics"

// target-metrics: no metrics file configured, or none (or an empty one) there.
inline constexpr int kExitNoMetrics = 14;

}  // namespace rbio::cli
