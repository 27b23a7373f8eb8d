#pragma once
// Several paths to one LU: one Session per portal (the gateways of a
// multi-gateway LU, docs/several-gateways.md), driven from one thread as one
// IoSession, using the LU's ALUA states (SPC-4 5.16).
//
// Each path's target port group comes from the VPD 83h page it answers;
// its state from REPORT TARGET PORT GROUPS on that same path (each gateway
// knows its own state first). Commands go to the paths of the best state
// (active/optimized, else active/non-optimized), round robin among them.
// The multipath layer keeps its own record of every command in flight and
// the path it went to, so:
//
// - a path whose session ends (the paths run without session
//   reinstatement: a broken connection ends the session at once) has its
//   commands re-sent on the other paths (those that may change the LU
//   once the path is fenced, below), and is logged in again in the
//   background every relogin_interval until it comes back (fail back);
// - a command refused with NOT READY 04/0A, 04/0B or 04/0C (the port is
//   transitioning, standby or unavailable) or with UNIT ATTENTION 2A/06
//   (states changed) makes the layer re-read the states and re-sends the
//   command on a path that serves I/O; any other UNIT ATTENTION is re-sent
//   too (bounded by max_resends);
// - a command completes once, with the outcome of the last path it ran
//   on; it fails only when no path has been usable for no_path_timeout,
//   or its failed path could not be fenced within it (or the target itself
//   failed it).
//
// Data-In lands in the caller's buffer from whichever path serves the
// command; a path's session is destroyed before its commands are re-sent,
// so a dead path never writes into a buffer again. Writes re-sent after a
// path failure may have been applied by the dead gateway already: SCSI
// writes are idempotent, and callers do not overlap writes in flight. A
// gateway cut off from us but alive may also apply such a write later,
// over a newer one to the same blocks through another path
// (docs/several-gateways.md, "Consistency"). So with Fence::LuReset (the
// default, SessionOptions::fence) a failed path's commands that may change
// the LU are held, not re-sent, until that gateway has ended its copies: the
// path's background login where the failed session was (each path keeps
// one ISID, so the login ends the old session there; when that fails other
// than by a refused connection, the same login through the portals of the
// other paths to that port group, the gateway's other portals) checks that
// the portal answers as the same port group, then sends LOGICAL UNIT
// RESET, and only "function complete" -- or a refused connection there,
// taken to mean its tgtd has exited -- releases them, in the order they
// were submitted. Held commands wait at
// most no_path_timeout; then run_once throws and they are never reported
// done.
//
// TCP only for now (iSER paths are refused). One thread drives it; `done`
// callbacks run inside run_once/run_nowait and must not throw.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "rbio/common/unique_fd.hpp"
#include "rbio/initiator/scsi.hpp"
#include "rbio/initiator/session.hpp"

namespace rbio::initiator {

struct MultipathOptions {
    // Every path's login options (target_name set). Their
    // replacement_timeout is ignored: paths never reinstate themselves,
    // the layer fails over instead. wake_fd, when set, is polled once for
    // all paths.
    SessionOptions session;
    uint64_t lun = 0;  // the LU whose identity and states decide
    // How long commands wait while no path serves I/O (all down, or all
    // standby/unavailable/transitioning), and held commands for their
    // path's fence (SessionOptions::fence), before run_once throws.
    std::chrono::milliseconds no_path_timeout{120000};
    // A failed path is logged in again this often, in the background.
    std::chrono::milliseconds relogin_interval{1000};
    // States are re-read this often even without a unit attention (a path
    // carrying no I/O sees none), and every 100 ms while commands wait.
    std::chrono::milliseconds state_poll_interval{5000};
    // A command is re-sent at most this often (unit attentions, refusals,
    // path failures) before its last outcome is reported (a path failure
    // has none: iSCSI response 01h, target failure).
    unsigned max_resends = 64;
};

// ---- pure parts (unit tested)

// What a path's answer to a command means for the multipath layer.
enum class PathVerdict : uint8_t {
    Complete,      // report it (GOOD, or a failure no other path would change)
    Retry,         // UNIT ATTENTION other than 2A/06: send it again
    StateChanged,  // UNIT ATTENTION 2A/06: re-read states, send it again
    PortRefused,   // NOT READY 04/0A, 04/0B, 04/0C: this port serves no I/O now
};
PathVerdict classify(const ScsiOutcome& outcome);
// The state a PortRefused answer says its port is in (04/0A transitioning,
// 04/0B standby, 04/0C unavailable).
AluaState refused_state(const ScsiOutcome& outcome);

// One path as the chooser sees it: usable (logged in, state known) and its state.
struct PathChoice {
    bool usable = false;
    AluaState state = AluaState::Unavailable;
};
// The path the next command goes to: among the usable ones of the best
// state that serves I/O (active/optimized, else active/non-optimized), the
// next in round robin (`cursor` advances); -1 when none serves I/O.
int choose_path(std::span<const PathChoice> paths, uint32_t& cursor);

// ---- counters

struct PathStats {
    std::string portal;
    bool up = false;
    std::optional<uint16_t> group;  // from VPD 83h; none: the target has no ALUA (always active)
    bool state_known = false;
    AluaState state = AluaState::Unavailable;
    uint64_t commands = 0;              // commands sent here (re-sends included), RTPG not counted
    uint64_t completed = 0;             // commands completed here
    uint64_t commands_since_login = 0;  // commands sent since its latest login
    uint64_t moved_away = 0;            // commands re-sent elsewhere after a failure or refusal here
    uint64_t refused = 0;               // NOT READY 04/0A/0B/0C answers
    uint64_t unit_attentions = 0;       // UNIT ATTENTION answers (2A/06 included)
    uint64_t state_changes = 0;         // times its known state changed
    uint64_t failures = 0;              // times its session ended
    uint64_t logins = 0;                // successful logins (the first and every fail back)
    uint64_t login_attempts = 0;
    uint64_t rtpg = 0;               // REPORT TARGET PORT GROUPS sent
    uint64_t held = 0;               // commands held after its failures until it was fenced
    uint64_t fences = 0;             // times it was fenced (LU reset answered, or connections refused)
    uint64_t fences_by_refusal = 0;  // of those, by connections refused
    uint64_t fences_elsewhere = 0;   // of those, through another portal of its port group
    std::string last_error;          // why it last failed or could not log in
    SessionStats session;            // its sessions' loop and transport counters, summed
};

struct MultipathStats {
    std::vector<PathStats> paths;
    uint64_t failovers = 0;       // path failures that moved commands
    uint64_t commands_moved = 0;  // commands re-sent on another path (failures and refusals)
    uint64_t resends = 0;         // all re-sends (unit attentions included)
    // From a failure or refusal moving commands to the first moved command
    // completing on another path.
    double last_failover_ms = 0;
    double max_failover_ms = 0;
    // From a failure that held commands to their release (the fence).
    double last_fence_ms = 0;
    double max_fence_ms = 0;
    uint64_t loop_polls = 0;  // the layer's own poll() calls
};

// "ao", "ano", "standby", "unavailable", "transitioning", "down", "unknown"
// for one path: what progress lines show.
std::string short_state(const PathStats& p);

class MultipathSession final : public IoSession {
public:
    // Logs in on every portal (of one target name) and reads each path's
    // port group and state. A portal that cannot log in now is retried in
    // the background; throws the first portal's error when none logs in,
    // InitiatorError(UnknownTarget) when a portal reaches a different LU
    // (other LU designators) than the first one, std::invalid_argument for
    // no portal, a portal given twice, or iSER.
    static std::unique_ptr<MultipathSession> open(const std::vector<Portal>& portals,
                                                  const MultipathOptions& options);
    ~MultipathSession() override;
    MultipathSession(const MultipathSession&) = delete;
    MultipathSession& operator=(const MultipathSession&) = delete;

    // Throws std::invalid_argument as Session::submit does; never fails for
    // want of a path (the command waits).
    void submit(ScsiCommand command) override;
    size_t outstanding() const override { return outstanding_; }
    // One pass over every path: what is queued leaves, one poll() waits on
    // all paths (at most max_wait), what arrived is received. Throws
    // InitiatorError(ConnectionLost) once commands have waited for a usable
    // path for no_path_timeout; the session is unusable afterwards.
    void run_once(std::chrono::milliseconds max_wait) override;
    void run_nowait() override;
    // The first path's negotiated parameters.
    const NegotiatedParams& params() const override { return params_; }
    // Every path's sessions summed.
    SessionStats stats() const override;
    // Logs out of every path that is up; throws the first failure after
    // trying all.
    void logout(std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) override;

    // A path failed with commands held for its fence, and no fence came
    // within no_path_timeout (the failure run_once threw).
    bool left_unfenced_writes() const override { return unfenced_; }

    MultipathStats multipath_stats() const;
    // One line per path: "PORTAL group G STATE: commands=... ...".
    std::vector<std::string> describe_paths() const;

private:
    struct Path;
    struct Entry;
    struct Login;
    struct LoginJob;
    explicit MultipathSession(const MultipathOptions& options);

    void pass(std::chrono::milliseconds max_wait, bool nowait);
    void drive(size_t p);
    void path_failed(size_t p, const std::string& why);
    void resend_or_give_up(uint32_t slot, const std::string& portal);
    void dispatch(uint32_t slot);
    void send_on(size_t p, uint32_t slot);
    void on_done(uint32_t slot, uint32_t gen, const ScsiOutcome& o);
    void finish(uint32_t slot, const ScsiOutcome& o);
    void drain_waiting();
    int choose();
    void request_refresh(std::chrono::milliseconds delay);
    void send_rtpg(size_t p);
    void on_rtpg(size_t p, uint64_t epoch, const ScsiOutcome& o, unsigned retries);
    void set_state(size_t p, AluaState s, const char* why);
    void start_logins(std::chrono::steady_clock::time_point now);
    static void run_login(Login& l, const LoginJob& job);
    void adopt_logins();
    void check_no_path(std::chrono::steady_clock::time_point now);
    void check_fences(std::chrono::steady_clock::time_point now);
    SessionOptions login_options(const Path& x) const;
    // When a path's held commands stop waiting for its fence.
    std::chrono::steady_clock::time_point fence_deadline(const Path& x) const;
    void release_held(size_t p, bool by_refusal, const std::string& through);
    std::string path_summary() const;

    MultipathOptions options_;
    std::vector<Path> paths_;
    std::vector<Designator> lu_identity_;  // the first path's LU designators
    std::string identity_portal_;          // ... and its portal
    int wake_fd_ = -1;                     // the caller's (SessionOptions::wake_fd)
    NegotiatedParams params_;

    std::vector<Entry> entries_;
    std::vector<uint32_t> free_;
    std::deque<uint32_t> waiting_;  // commands with no path serving I/O yet
    std::deque<uint32_t> delayed_;  // commands refused as unavailable, re-sent at not_before
    size_t outstanding_ = 0;
    uint32_t cursor_ = 0;
    uint64_t next_seq_ = 0;  // submission order, for held commands

    std::vector<pollfd> pollfds_;
    UniqueFd login_fd_;  // eventfd: a background login finished
    std::chrono::steady_clock::time_point refresh_due_;
    std::optional<std::chrono::steady_clock::time_point> no_path_since_;
    std::optional<std::chrono::steady_clock::time_point> failover_since_;
    std::string failed_;     // set once run_once gave up
    bool unfenced_ = false;  // ... with held commands never fenced
    bool closing_ = false;   // logout: no new state reads or logins
    MultipathStats totals_;  // everything but `paths`
};

}  // namespace rbio::initiator
