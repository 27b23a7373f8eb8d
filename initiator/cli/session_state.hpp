#pragma once
// Where `rbio login` leaves its background sessions for `rbio session` and
// `rbio logout` to find: a state folder (default /run/rbio/initiator,
// --state-dir DIR) holding, per session, KEY.state (key=value lines: pid,
// target, portal, initiator, mount, socket, log), KEY.sock (the session
// process's control socket) and KEY.log (its log). KEY is the target name
// with every character outside [A-Za-z0-9._-] turned into '_'.
//
// Control protocol (unix stream socket, mode 0600): the client sends one
// line, "stats" or "logout"; the session process answers with text and
// closes. "stats": the report `rbio session` prints. "logout": "ok" or
// "error CODE MESSAGE" (CODE is an rbio exit code); after "ok" the process
// exits, so the client's EOF means it is gone.
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "rbio/common/unique_fd.hpp"

namespace rbio::cli {

// Exit codes of the session commands, after InitiatorError's 3..10.
inline constexpr int kExitNoSession = 11;  // no session for that target (or none at all)
inline constexpr int kExitBusy = 12;       // already logged in / the mount is in use
inline constexpr int kExitMount = 13;      // the FUSE mount could not be set up

inline constexpr const char* kDefaultStateDir = "/run/rbio/initiator";

// A failure of a session command with its exit code; main prints
// "rbio: MESSAGE" and exits with `code`.
struct CommandError : std::runtime_error {
    CommandError(int code, const std::string& message) : std::runtime_error(message), code(code) {}
    int code;
};

struct SessionRecord {
    std::string key;
    pid_t pid = 0;
    std::string target, portal, initiator, mount, socket, log;
};

std::string state_key(const std::string& target);
std::string state_path(const std::string& dir, const std::string& key, const char* suffix);
// mkdir -p with mode 0700; throws std::runtime_error.
void ensure_state_dir(const std::string& dir);
// Atomically (temporary file + rename). Throws std::runtime_error.
void write_record(const std::string& dir, const SessionRecord& r);
std::optional<SessionRecord> read_record(const std::string& dir, const std::string& key);
// Every KEY.state of `dir`, sorted by key.
std::vector<SessionRecord> list_records(const std::string& dir);
// Removes KEY.state and KEY.sock (the log stays for post-mortems).
void remove_record(const std::string& dir, const std::string& key);

// Whether `pid` is a live process (not a zombie).
bool process_alive(pid_t pid);

// KEY.lock: taken by `rbio login` before it checks for a session and held,
// through the fork, by the session process for its whole life -- two
// logins of one target cannot both start one, and a record whose lock is
// free is stale whatever process its pid names now. The file stays (as the
// log does): removing it could let two processes lock two files of one
// name. Returns the descriptor holding the lock, or none when another
// process holds it; throws std::runtime_error when it cannot be made.
rbio::UniqueFd lock_session(const std::string& dir, const std::string& key);

// Whether the session process of `r` runs: its lock is held (a session
// from before the lock existed: its pid is alive).
bool session_running(const std::string& dir, const SessionRecord& r);

// Sends `request` to the control socket and reads the answer until EOF
// (at most `timeout_ms`). Returns 0 or an errno (ENOENT/ECONNREFUSED: no
// process behind the socket; ETIMEDOUT).
int control_request(const std::string& socket_path, const std::string& request, std::string& reply,
                    int timeout_ms);

// The same without a fixed limit, for answers whose time the client cannot
// know (a logout waits for the commands in flight, which may wait for a
// path for the whole replacement timeout): after each `slice` without the
// answer, `keep_waiting(time waited so far)` decides; false gives ETIMEDOUT.
int control_request(const std::string& socket_path, const std::string& request, std::string& reply,
                    std::chrono::milliseconds slice,
                    const std::function<bool(std::chrono::milliseconds)>& keep_waiting);

}  // namespace rbio::cli
