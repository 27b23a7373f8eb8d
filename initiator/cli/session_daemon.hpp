#pragma once
// The background process of `rbio login`: it holds the session, serves the
// FUSE export and answers `rbio session` / `rbio logout` on its control
// socket (see session_state.hpp for the protocol).
#include <string>

#include "rbio/initiator/session.hpp"
#include "socket.hpp"  // UniqueFd

namespace rbio::cli {

struct DaemonConfig {
    // One portal, or several of the same LU (multipath: one session each).
    std::vector<initiator::Portal> portals;
    initiator::SessionOptions options;  // target_name set
    std::string mount;                  // absolute path; "" = no FUSE export
    std::string state_dir;
    std::string key;
    std::string log;  // STATE_DIR/KEY.log, or kJournalLog
};

// DaemonConfig::log when the session process keeps the stderr of
// `rbio login` because it is systemd's journal (rbio-session@.service).
inline constexpr const char* kJournalLog = "journal";

// Runs in the child of `rbio login`, already detached (setsid, stdio on
// /dev/null and the log, or stderr kept as the journal). Logs in, finds
// the disk LUs, mounts, starts the I/O and FUSE threads, writes the state
// file, then reports on `ready`:
// "0\nPATH SIZE\n..." once the files are being served, or "CODE\nMESSAGE"
// (and returns CODE) when something failed. Then serves until logout or
// SIGTERM/SIGINT and returns the process's exit code.
int run_session_daemon(const DaemonConfig& config, initiator::UniqueFd ready);

}  // namespace rbio::cli
