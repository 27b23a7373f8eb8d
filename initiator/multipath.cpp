// MultipathSession: one Session per portal of an LU, ALUA-aware path
// choice, failover and fail back (see multipath.hpp).
#include "rbio/initiator/multipath.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <set>
#include <system_error>

#include "rbio/initiator/error.hpp"
#include "rbio/initiator/log.hpp"

namespace rbio::initiator {

using Clock = std::chrono::steady_clock;

namespace {

constexpr uint32_t kNoPath = UINT32_MAX;
constexpr size_t kMaxPaths = 16;
constexpr uint8_t kSenseNotReady = 0x02;
constexpr std::chrono::milliseconds kRtpgTimeout{10000};
constexpr std::chrono::milliseconds kWaitingRefresh{100};
// How long a command refused as unavailable (04/0C) waits before it is
// sent again, whatever REPORT TARGET PORT GROUPS then says: a gateway whose
// RBD image another client keeps locked refuses writes that way while
// still reporting active (and serving reads), and re-sending at once would
// use up the command's resends in a moment instead of waiting for the lock.
constexpr std::chrono::milliseconds kUnavailableResendDelay{1000};
constexpr unsigned kRtpgRetries = 5;

// A portal that answers for another LU than the first portal: a
// configuration error, not a path failure.
struct LuMismatch : InitiatorError {
    explicit LuMismatch(const std::string& m) : InitiatorError(ErrorKind::UnknownTarget, m) {}
};

struct Identity {
    std::vector<Designator> lu;
    std::optional<uint16_t> group;
    AluaState state = AluaState::ActiveOptimized;
};

std::string describe_lu(const std::vector<Designator>& lu) {
    std::string s;
    for (const Designator& d : lu) s += (s.empty() ? "" : ", ") + d.to_string();
    return s.empty() ? "no designators" : s;
}

// The LU's designators, the port group of this path and its state, read
// through `s`; `expect` (when set) must match the LU designators.
Identity identify(Session& s, uint64_t lun, const Portal& portal, const std::vector<Designator>* expect,
                  const std::string& first_portal) {
    Identity id;
    std::vector<Designator> all = device_identification(s, lun);
    id.lu = lu_designators(all);
    if (id.lu.empty())
        fail(ErrorKind::UnknownTarget,
             "portal " + portal.to_string() + ": LUN " + std::to_string(lun) +
                 " reports no LU designators (VPD 83h), so paths to it cannot be matched");
    if (expect && id.lu != *expect)
        throw LuMismatch("portal " + portal.to_string() + " serves another LU as LUN " + std::to_string(lun) +
                         " (" + describe_lu(id.lu) + ") than portal " + first_portal + " (" +
                         describe_lu(*expect) + ")");
    id.group = target_port_group(all);
    if (id.group) {
        TargetPortGroups tpgs = report_target_port_groups(s, lun);
        const TargetPortGroup* g = tpgs.find(*id.group);
        if (!g)
            fail(ErrorKind::Protocol, "portal " + portal.to_string() +
                                          ": REPORT TARGET PORT GROUPS does not list " +
                                          "its own target port group " + std::to_string(*id.group));
        id.state = g->state;
    }
    return id;
}

void add(SessionStats& to, const SessionStats& s) {
    to.transport += s.transport;
    to.poll_calls += s.poll_calls;
    to.passes += s.passes;
    to.commands += s.commands;
    to.data_direct_bytes += s.data_direct_bytes;
    to.reinstatements += s.reinstatements;
    to.reconnect_attempts += s.reconnect_attempts;
    to.commands_retried += s.commands_retried;
    to.pings_sent += s.pings_sent;
    to.pings_answered += s.pings_answered;
    to.tasks_aborted += s.tasks_aborted;
    to.lun_resets += s.lun_resets;
}

std::string group_name(const std::optional<uint16_t>& g) {
    return g ? "port group " + std::to_string(*g) : "no port group";
}

// Path `index`'s ISID, kept for every login of that path so that a login
// ends the path's old session at the target (session reinstatement, RFC
// 7143 §6.3.5) and no path's login ends another's. Random format (T=10b,
// A reserved, B and C random; RFC 7143 §11.12.5) with the path in the
// qualifier; from the caller's ISID when one is set.
std::array<uint8_t, 6> path_isid(const std::optional<std::array<uint8_t, 6>>& base, size_t index,
                                 uint32_t random) {
    std::array<uint8_t, 6> isid = base.value_or(
        std::array<uint8_t, 6>{0x80, uint8_t(random >> 16), uint8_t(random >> 8), uint8_t(random), 0, 0});
    const uint16_t q = uint16_t(((isid[4] << 8) | isid[5]) + index);
    isid[4] = uint8_t(q >> 8);
    isid[5] = uint8_t(q);
    return isid;
}

}  // namespace

// ---------------------------------------------------------------- pure parts

PathVerdict classify(const ScsiOutcome& o) {
    if (o.response != 0 || o.status != kStatusCheckCondition) return PathVerdict::Complete;
    SenseInfo s = decode_sense(o.sense);
    if (!s.valid) return PathVerdict::Complete;
    if (s.key == kSenseUnitAttention)
        return s.asc == 0x2a && s.ascq == 0x06 ? PathVerdict::StateChanged : PathVerdict::Retry;
    if (s.key == kSenseNotReady && s.asc == 0x04 && (s.ascq == 0x0a || s.ascq == 0x0b || s.ascq == 0x0c))
        return PathVerdict::PortRefused;
    return PathVerdict::Complete;
}

AluaState refused_state(const ScsiOutcome& o) {
    SenseInfo s = decode_sense(o.sense);
    if (s.ascq == 0x0b) return AluaState::Standby;
    if (s.ascq == 0x0c) return AluaState::Unavailable;
    return AluaState::Transitioning;
}

int choose_path(std::span<const PathChoice> paths, uint32_t& cursor) {
    size_t optimized = 0, nonoptimized = 0;
    for (const PathChoice& p : paths) {
        if (!p.usable) continue;
        optimized += p.state == AluaState::ActiveOptimized;
        nonoptimized += p.state == AluaState::ActiveNonOptimized;
    }
    const AluaState tier = optimized ? AluaState::ActiveOptimized : AluaState::ActiveNonOptimized;
    const size_t n = optimized ? optimized : nonoptimized;
    if (n == 0) return -1;
    size_t k = cursor++ % n;
    for (size_t i = 0; i < paths.size(); ++i)
        if (paths[i].usable && paths[i].state == tier && k-- == 0) return int(i);
    return -1;  // not reached
}

std::string short_state(const PathStats& p) {
    if (!p.up) return "down";
    if (!p.state_known) return "unknown";
    switch (p.state) {
        case AluaState::ActiveOptimized: return "ao";
        case AluaState::ActiveNonOptimized: return "ano";
        default: return to_string(p.state);
    }
}

// ---------------------------------------------------------------- state

struct MultipathSession::Entry {
    ScsiCommand cmd;   // the caller's, `done` included
    uint32_t gen = 0;  // bumps with every send: a stale answer is ignored
    uint32_t path = kNoPath;
    uint16_t resends = 0;
    bool live = false;
    bool moved = false;              // re-sent off a failed or refusing path
    uint64_t seq = 0;                // submission order
    Clock::time_point not_before{};  // in delayed_: re-sent from then on
};

// What a background login needs, copied: it runs on a thread of its own.
struct MultipathSession::LoginJob {
    Portal portal;  // the path's, or for a fence where the held commands went
    SessionOptions options;
    uint64_t lun = 0;  // the LU whose identity must match
    std::vector<Designator> expect;
    std::string first_portal;
    std::vector<uint64_t> fence_luns;  // none: no fence
    std::optional<uint16_t> fence_group;
    // Portals of the other paths to the same port group (so the same
    // gateway): a fence goes through them when `portal` does not answer.
    std::vector<Portal> fence_alternates;
    Clock::time_point fence_until{};
    int notify_fd = -1;  // the session's eventfd
};

// A background login of a failed path: the thread fills the fields, then
// sets `done` and writes to the session's eventfd.
struct MultipathSession::Login {
    std::thread thread;
    std::atomic<bool> done{false};
    std::unique_ptr<Session> session;
    Identity identity;
    std::string error;
    bool fenced = false;         // a LOGICAL UNIT RESET of every held command's LU answered Complete
    std::string fenced_through;  // the alternate portal that did it (no session kept then)
    bool refused = false;        // the path's portal refused the connection
    ~Login() {
        if (thread.joinable()) thread.join();
    }
};

struct MultipathSession::Path {
    Portal portal;
    std::unique_ptr<Session> session;  // none while down
    uint64_t epoch = 0;                // bumps with every session and failure
    std::optional<uint16_t> group;
    bool state_known = false;
    AluaState state = AluaState::Unavailable;
    bool rtpg_in_flight = false;
    std::vector<uint8_t> rtpg_buf = std::vector<uint8_t>(4096);
    bool dirty = false;  // has commands queued that have not left
    size_t fd_begin = 0, fd_count = 0;
    Clock::time_point wake_by{};
    uint32_t in_flight = 0;
    std::unique_ptr<Login> login;
    Clock::time_point next_login{};
    bool login_error_logged = false;
    bool refusals_logged = false;   // the first 04/0C refusal, said once
    std::array<uint8_t, 6> isid{};  // every login's (Fence::LuReset)
    // Commands that may change the LU, from its failures, waiting until
    // the gateway is fenced (Fence::LuReset); since held_since.
    std::vector<uint32_t> held;
    Clock::time_point held_since{};
    // Where the held commands went: the failed session's portal (after a
    // redirect, where it led) and port group. Only a reset there, through
    // the same port group, or a refusal there fences them.
    Portal fence_portal;
    std::optional<uint16_t> fence_group;
    PathStats stats;  // stats.session: the ended sessions' counters
    bool usable() const { return session && state_known; }
};

MultipathSession::MultipathSession(const MultipathOptions& options) : options_(options) {
    options_.session.replacement_timeout = std::chrono::milliseconds(0);
    options_.session.wake_fd = -1;
    int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fd < 0) throw std::system_error(errno, std::generic_category(), "multipath: eventfd");
    login_fd_.reset(fd);
    refresh_due_ = Clock::now() + options_.state_poll_interval;
}

MultipathSession::~MultipathSession() {
    // Background logins write to login_fd_ and hold copies of options_: done first.
    for (Path& p : paths_) p.login.reset();
}

std::unique_ptr<MultipathSession> MultipathSession::open(const std::vector<Portal>& portals,
                                                         const MultipathOptions& options) {
    if (portals.empty()) throw std::invalid_argument("multipath: no portal");
    if (portals.size() > kMaxPaths)
        throw std::invalid_argument("multipath: " + std::to_string(portals.size()) + " portals, at most " +
                                    std::to_string(kMaxPaths));
    if (options.session.transport != Transport::Tcp)
        throw std::invalid_argument("multipath: several portals work over TCP only, not iSER");
    // 0 would end the session at the first command that waits for REPORT
    // TARGET PORT GROUPS to name the next active path (or for a UNIT
    // ATTENTION on the only active one to be answered).
    if (options.no_path_timeout <= std::chrono::milliseconds(0))
        throw std::invalid_argument(
            "multipath: the replacement timeout (how long commands wait for an active path) must not be 0 "
            "with several portals");
    std::set<std::string> seen;
    for (const Portal& p : portals)
        if (!seen.insert(p.to_string()).second)
            throw std::invalid_argument("multipath: portal " + p.to_string() + " given twice");

    std::unique_ptr<MultipathSession> mp(new MultipathSession(options));
    mp->wake_fd_ = options.session.wake_fd;
    mp->paths_.resize(portals.size());
    const uint32_t random = std::random_device{}();
    for (size_t i = 0; i < portals.size(); ++i)
        mp->paths_[i].isid = path_isid(options.session.isid, i, random);
    std::optional<InitiatorError> first_error;
    std::string errors;
    std::string first_portal;
    const Clock::time_point now = Clock::now();
    for (size_t i = 0; i < portals.size(); ++i) {
        Path& x = mp->paths_[i];
        x.portal = portals[i];
        x.stats.portal = portals[i].to_string();
        try {
            auto s = Session::login(x.portal, mp->login_options(x));
            Identity id = identify(*s, options.lun, x.portal,
                                   first_portal.empty() ? nullptr : &mp->lu_identity_, first_portal);
            if (first_portal.empty()) {
                first_portal = mp->identity_portal_ = x.stats.portal;
                mp->lu_identity_ = id.lu;
                mp->params_ = s->params();
            }
            x.session = std::move(s);
            x.group = id.group;
            x.state = id.state;
            x.state_known = true;
            x.stats.logins = x.stats.login_attempts = 1;
            RBIO_LOG(Info, "multipath: path " << x.stats.portal << " up, " << group_name(x.group) << " "
                                              << to_string(x.state));
        } catch (const LuMismatch&) {
            throw;
        } catch (const InitiatorError& e) {
            if (!first_error) first_error = e;
            errors += (errors.empty() ? "" : "; ") + x.stats.portal + ": " + e.what();
            x.stats.last_error = e.what();
            x.stats.login_attempts = 1;
            x.stats.failures = 1;
            x.next_login = now + options.relogin_interval;
            x.login_error_logged = true;
            RBIO_LOG(Warning, "multipath: path " << x.stats.portal << " down: " << e.what()
                                                 << "; retrying every " << options.relogin_interval.count()
                                                 << " ms");
        }
    }
    if (first_portal.empty())
        throw InitiatorError(first_error->kind(),
                             "no portal of " + std::to_string(portals.size()) + " logged in: " + errors);
    return mp;
}

// ---------------------------------------------------------------- commands

void MultipathSession::submit(ScsiCommand command) {
    if (command.cdb_length < 6 || command.cdb_length > 16)
        throw std::invalid_argument("SCSI command: CDB of " + std::to_string(command.cdb_length) + " bytes");
    if (command.buffer.size() > UINT32_MAX) throw std::invalid_argument("SCSI command: buffer beyond 4 GiB");
    if (command.direction == DataDirection::None && !command.buffer.empty())
        throw std::invalid_argument("SCSI command: a buffer without a data direction");
    uint32_t slot;
    if (!free_.empty()) {
        slot = free_.back();
        free_.pop_back();
    } else {
        slot = uint32_t(entries_.size());
        entries_.emplace_back();
    }
    Entry& e = entries_[slot];
    e.cmd = std::move(command);
    e.live = true;
    e.resends = 0;
    e.moved = false;
    e.seq = next_seq_++;
    ++outstanding_;
    dispatch(slot);
}

int MultipathSession::choose() {
    std::array<PathChoice, kMaxPaths> c{};
    for (size_t i = 0; i < paths_.size(); ++i) c[i] = {paths_[i].usable(), paths_[i].state};
    return choose_path(std::span<const PathChoice>(c.data(), paths_.size()), cursor_);
}

void MultipathSession::dispatch(uint32_t slot) {
    int p = choose();
    if (p < 0) {
        waiting_.push_back(slot);
        if (!no_path_since_) {
            no_path_since_ = Clock::now();
            RBIO_LOG(Info, "multipath: no path serves I/O now ("
                               << path_summary() << "); commands wait up to "
                               << options_.no_path_timeout.count() << " ms");
        }
        request_refresh(std::chrono::milliseconds(0));
        return;
    }
    send_on(size_t(p), slot);
}

void MultipathSession::send_on(size_t p, uint32_t slot) {
    Entry& e = entries_[slot];
    Path& x = paths_[p];
    e.path = uint32_t(p);
    const uint32_t gen = ++e.gen;
    ScsiCommand c;
    c.lun = e.cmd.lun;
    c.cdb = e.cmd.cdb;
    c.cdb_length = e.cmd.cdb_length;
    c.direction = e.cmd.direction;
    c.buffer = e.cmd.buffer;
    c.timeout = e.cmd.timeout;
    // Three words: std::function keeps them in place, no allocation.
    c.done = [this, slot, gen](const ScsiOutcome& o) { on_done(slot, gen, o); };
    x.session->submit(std::move(c));
    ++x.in_flight;
    ++x.stats.commands;
    ++x.stats.commands_since_login;
    x.dirty = true;
}

void MultipathSession::on_done(uint32_t slot, uint32_t gen, const ScsiOutcome& o) {
    Entry& e = entries_[slot];
    if (!e.live || e.gen != gen || e.path == kNoPath) return;
    const size_t p = e.path;
    Path& x = paths_[p];
    --x.in_flight;
    e.path = kNoPath;
    const PathVerdict v = classify(o);
    if (v != PathVerdict::Complete && e.resends < options_.max_resends) {
        ++e.resends;
        ++totals_.resends;
        if (v == PathVerdict::PortRefused) {
            ++x.stats.refused;
            ++x.stats.moved_away;
            ++totals_.commands_moved;
            e.moved = true;
            if (!failover_since_) failover_since_ = Clock::now();
            const AluaState refused = refused_state(o);
            set_state(p, refused, "NOT READY");
            request_refresh(std::chrono::milliseconds(0));
            if (refused == AluaState::Unavailable) {
                if (!x.refusals_logged)
                    RBIO_LOG(Warning, "multipath: path "
                                          << x.stats.portal
                                          << " refused a command as unavailable; such commands "
                                             "are re-sent a second apart (logged once per path)");
                x.refusals_logged = true;
                e.not_before = Clock::now() + kUnavailableResendDelay;
                delayed_.push_back(slot);
                return;
            }
        } else {
            ++x.stats.unit_attentions;
            if (v == PathVerdict::StateChanged) {
                if (x.state_known)
                    RBIO_LOG(Info, "multipath: path "
                                       << x.stats.portal
                                       << ": asymmetric access state changed (2A/06), re-reading states");
                x.state_known = false;
                request_refresh(std::chrono::milliseconds(0));
            }
        }
        dispatch(slot);
        return;
    }
    ++x.stats.completed;
    if (e.moved && failover_since_ && o.good()) {
        double ms = std::chrono::duration<double, std::milli>(Clock::now() - *failover_since_).count();
        totals_.last_failover_ms = ms;
        totals_.max_failover_ms = std::max(totals_.max_failover_ms, ms);
        failover_since_.reset();
        RBIO_LOG(Info, "multipath: failover done: a moved command completed on " << x.stats.portal
                                                                                 << " after " << ms << " ms");
    }
    finish(slot, o);
}

void MultipathSession::finish(uint32_t slot, const ScsiOutcome& o) {
    Entry& e = entries_[slot];
    auto done = std::move(e.cmd.done);
    e.cmd.done = nullptr;
    e.live = false;
    free_.push_back(slot);
    --outstanding_;
    if (done) done(o);  // may submit, which may reallocate entries_
}

void MultipathSession::drain_waiting() {
    while (!waiting_.empty()) {
        int p = choose();
        if (p < 0) return;
        uint32_t slot = waiting_.front();
        waiting_.pop_front();
        send_on(size_t(p), slot);
    }
    if (no_path_since_) {
        RBIO_LOG(Info,
                 "multipath: a path serves I/O again after "
                     << std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - *no_path_since_)
                            .count()
                     << " ms (" << path_summary() << ")");
        no_path_since_.reset();
    }
}

// ---------------------------------------------------------------- states

void MultipathSession::request_refresh(std::chrono::milliseconds delay) {
    refresh_due_ = std::min(refresh_due_, Clock::now() + delay);
}

void MultipathSession::send_rtpg(size_t p) {
    Path& x = paths_[p];
    if (!x.session || x.rtpg_in_flight) return;
    if (!x.group) {  // no ALUA on that target: always active
        set_state(p, AluaState::ActiveOptimized, "no ALUA");
        return;
    }
    ScsiCommand c = make_report_target_port_groups(options_.lun, x.rtpg_buf);
    c.timeout = kRtpgTimeout;
    c.done = [this, p, epoch = x.epoch](const ScsiOutcome& o) { on_rtpg(p, epoch, o, kRtpgRetries); };
    x.session->submit(std::move(c));
    x.rtpg_in_flight = true;
    x.dirty = true;
    ++x.stats.rtpg;
}

void MultipathSession::on_rtpg(size_t p, uint64_t epoch, const ScsiOutcome& o, unsigned retries) {
    Path& x = paths_[p];
    if (epoch != x.epoch || !x.session) return;
    x.rtpg_in_flight = false;
    if (!o.good()) {
        if (classify(o) != PathVerdict::Complete && retries > 0) {  // a unit attention: ask again
            ScsiCommand c = make_report_target_port_groups(options_.lun, x.rtpg_buf);
            c.timeout = kRtpgTimeout;
            c.done = [this, p, epoch, retries](const ScsiOutcome& r) { on_rtpg(p, epoch, r, retries - 1); };
            x.session->submit(std::move(c));
            x.rtpg_in_flight = true;
            x.dirty = true;
            ++x.stats.rtpg;
            return;
        }
        RBIO_LOG(Warning, "multipath: path " << x.stats.portal << ": REPORT TARGET PORT GROUPS failed: "
                                             << describe(o) << "; not used until it answers");
        x.state_known = false;
        request_refresh(kWaitingRefresh);
        return;
    }
    try {
        size_t got = std::min<size_t>(o.bytes_transferred, x.rtpg_buf.size());
        TargetPortGroups t =
            decode_report_target_port_groups(std::span<const uint8_t>(x.rtpg_buf.data(), got));
        const TargetPortGroup* g = t.find(*x.group);
        if (!g)
            fail(ErrorKind::Protocol, "REPORT TARGET PORT GROUPS does not list its own target port group " +
                                          std::to_string(*x.group));
        set_state(p, g->state, "REPORT TARGET PORT GROUPS");
    } catch (const InitiatorError& e) {
        RBIO_LOG(Warning,
                 "multipath: path " << x.stats.portal << ": " << e.what() << "; not used until it answers");
        x.state_known = false;
        request_refresh(kWaitingRefresh);
        return;
    }
    drain_waiting();
}

void MultipathSession::set_state(size_t p, AluaState s, const char* why) {
    Path& x = paths_[p];
    if (x.state != s) {
        ++x.stats.state_changes;
        RBIO_LOG(Info, "multipath: path " << x.stats.portal << " (" << group_name(x.group)
                                          << "): " << to_string(x.state) << " -> " << to_string(s) << " ("
                                          << why << ")");
    }
    x.state = s;
    x.state_known = true;
}

// ---------------------------------------------------------------- paths

void MultipathSession::path_failed(size_t p, const std::string& why) {
    Path& x = paths_[p];
    // Out of the path table first: commands the dying session completes, or
    // callers submit meanwhile, go elsewhere.
    std::unique_ptr<Session> dying = std::move(x.session);
    add(x.stats.session, dying->stats());
    ++x.epoch;
    x.rtpg_in_flight = false;
    x.state_known = false;
    x.dirty = false;
    ++x.stats.failures;
    x.stats.last_error = why;
    const Clock::time_point now = Clock::now();
    x.next_login = now + options_.relogin_interval;
    x.login_error_logged = false;
    x.fence_portal = dying->portal();
    x.fence_group = x.group;
    dying.reset();  // its outstanding commands never complete now
    const bool fence = options_.session.fence == Fence::LuReset;
    // A path holds commands only while it has no session: `held` is empty
    // here, and fills from this failure alone.
    x.held_since = now;
    std::vector<uint32_t> moved;
    for (uint32_t s = 0; s < entries_.size(); ++s) {
        Entry& e = entries_[s];
        if (!e.live || e.path != p) continue;
        e.path = kNoPath;
        e.moved = true;
        if (fence && may_change_lu(e.cmd.cdb[0])) x.held.push_back(s);
        else moved.push_back(s);
    }
    const size_t held = x.held.size();
    x.in_flight = 0;
    x.stats.moved_away += moved.size();
    x.stats.held += held;
    totals_.commands_moved += moved.size();
    totals_.resends += moved.size();
    if (!moved.empty() || held) {
        ++totals_.failovers;
        if (!failover_since_) failover_since_ = now;
    }
    if (held)
        RBIO_LOG(Warning, "multipath: path "
                              << x.stats.portal << " failed: " << why << "; " << moved.size()
                              << " commands re-sent on other paths, " << x.held.size()
                              << " that may change the LU held until that gateway has ended its copies "
                                 "(a LOGICAL UNIT RESET there answered, or its portal refusing connections), "
                                 "at most "
                              << options_.no_path_timeout.count() << " ms; logging in again every "
                              << options_.relogin_interval.count() << " ms");
    else
        RBIO_LOG(Warning, "multipath: path " << x.stats.portal << " failed: " << why << "; " << moved.size()
                                             << " commands re-sent on other paths; logging in again every "
                                             << options_.relogin_interval.count() << " ms");
    for (uint32_t s : moved) resend_or_give_up(s, x.stats.portal);
}

// A command re-sent off a failed path counts against max_resends as a
// refused one does: a command that breaks every path it takes (one that
// crashes the target, or is answered with a protocol error) would go
// round the paths forever, never done, failing everyone else's I/O on them
// each time. Once over, it fails.
void MultipathSession::resend_or_give_up(uint32_t slot, const std::string& portal) {
    Entry& e = entries_[slot];
    if (e.resends < options_.max_resends) {
        ++e.resends;
        dispatch(slot);
        return;
    }
    RBIO_LOG(Error, "multipath: a command (opcode 0x"
                        << std::hex << int(e.cmd.cdb[0]) << std::dec << ") was sent " << e.resends + 1
                        << " times and its path failed each time (last " << portal
                        << "): failing it (max_resends " << options_.max_resends << ")");
    ScsiOutcome o;
    o.response = 0x01;  // target failure: not completed at the target
    finish(slot, o);
}

void MultipathSession::release_held(size_t p, bool by_refusal, const std::string& through) {
    const std::string how = by_refusal        ? "its portal refuses connections"
                            : through.empty() ? "LOGICAL UNIT RESET answered function complete"
                                              : "LOGICAL UNIT RESET answered function complete through " +
                                                    through + ", another portal of its gateway";
    Path& x = paths_[p];
    std::vector<uint32_t> held = std::move(x.held);
    x.held.clear();
    // In the order they were submitted, as they were first sent.
    std::sort(held.begin(), held.end(),
              [this](uint32_t a, uint32_t b) { return entries_[a].seq < entries_[b].seq; });
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - x.held_since).count();
    ++x.stats.fences;
    x.stats.fences_by_refusal += by_refusal;
    x.stats.fences_elsewhere += !through.empty();
    totals_.last_fence_ms = ms;
    totals_.max_fence_ms = std::max(totals_.max_fence_ms, ms);
    x.stats.moved_away += held.size();
    totals_.commands_moved += held.size();
    totals_.resends += held.size();
    RBIO_LOG(Warning, "multipath: path " << x.stats.portal << " fenced " << ms << " ms after its failure ("
                                         << how << "); re-sending the " << held.size()
                                         << " commands held for it");
    for (uint32_t s : held)
        if (entries_[s].live) resend_or_give_up(s, x.stats.portal);
}

Clock::time_point MultipathSession::fence_deadline(const Path& x) const {
    return x.held_since + options_.no_path_timeout;
}

SessionOptions MultipathSession::login_options(const Path& x) const {
    SessionOptions o = options_.session;
    // The same ISID every time: the login ends the old session at the
    // target (its unread commands are dropped) before the fence's reset.
    if (o.fence == Fence::LuReset) o.isid = x.isid;
    return o;
}

void MultipathSession::start_logins(Clock::time_point now) {
    for (Path& x : paths_) {
        if (x.session || x.login || now < x.next_login) continue;
        ++x.stats.login_attempts;
        LoginJob job;
        job.options = login_options(x);
        job.lun = options_.lun;
        job.expect = lu_identity_;
        job.first_portal = identity_portal_;
        job.notify_fd = login_fd_.get();
        // The LUs of the commands held for this path: each is reset once
        // the login is through (a reset on the new session also waits for
        // the old session's commands: tgtd matches it by LU, on every
        // session).
        for (uint32_t s : x.held)
            if (std::find(job.fence_luns.begin(), job.fence_luns.end(), entries_[s].cmd.lun) ==
                job.fence_luns.end())
                job.fence_luns.push_back(entries_[s].cmd.lun);
        // A fence goes where the held commands went (or, when that portal
        // does not answer, through another portal of the same port group),
        // and each try ends by the fence's deadline (the session ends then,
        // and its destruction waits for this thread): run_login.
        job.portal = job.fence_luns.empty() ? x.portal : x.fence_portal;
        job.fence_group = x.fence_group;
        job.fence_until = fence_deadline(x);
        if (!job.fence_luns.empty() && x.fence_group)
            for (const Path& y : paths_)
                if (&y != &x && y.group == x.fence_group &&
                    y.portal.to_string() != x.fence_portal.to_string())
                    job.fence_alternates.push_back(y.portal);
        auto l = std::make_unique<Login>();
        l->thread = std::thread([raw = l.get(), job = std::move(job)] { run_login(*raw, job); });
        x.login = std::move(l);
    }
}

void MultipathSession::run_login(Login& l, const LoginJob& job) {
    // Logs in at `portal` and, for a fence, resets every held command's LU
    // there (the login, with the path's ISID, has ended the old session
    // first: tgtd matches a session by initiator and ISID, whatever the
    // portal).
    auto time_left = [&job] {
        return std::chrono::ceil<std::chrono::milliseconds>(job.fence_until - Clock::now());
    };
    auto login_at = [&job, &time_left](const Portal& portal, Identity& identity) -> std::unique_ptr<Session> {
        SessionOptions o = job.options;
        if (!job.fence_luns.empty()) {
            // Each try's connect and login end by the fence's deadline, its
            // resets together too (identify's commands take their usual
            // timeout).
            const auto left = time_left();
            if (left <= std::chrono::milliseconds(0))
                fail(ErrorKind::Timeout, "no time left to fence through " + portal.to_string());
            o.connect_timeout = std::min(o.connect_timeout, left);
            o.login_timeout = std::min(o.login_timeout, left);
        }
        auto session = Session::login(portal, o);
        identity = identify(*session, job.lun, portal, &job.expect, job.first_portal);
        if (job.fence_luns.empty()) return session;
        // A reset elsewhere would not end the held copies.
        if (session->portal().to_string() != portal.to_string())
            fail(ErrorKind::LoginRefused, "the login to fence through " + portal.to_string() +
                                              " was redirected to " + session->portal().to_string());
        if (identity.group != job.fence_group)
            fail(ErrorKind::UnknownTarget,
                 portal.to_string() + " now answers as " + group_name(identity.group) + ", not as " +
                     group_name(job.fence_group) +
                     " that had the held commands: another gateway, whose reset would "
                     "not end them");
        for (uint64_t lu : job.fence_luns) {
            const auto left = time_left();
            if (left <= std::chrono::milliseconds(0))
                fail(ErrorKind::Timeout, "no time left to fence through " + portal.to_string());
            TmfResponse r = session->lun_reset(lu, std::min(left, job.options.lu_reset_timeout));
            if (r != TmfResponse::Complete)
                fail(ErrorKind::Protocol, "LOGICAL UNIT RESET of LUN " + std::to_string(lu) + " through " +
                                              portal.to_string() +
                                              " to fence the path answered: " + to_string(r));
        }
        return session;
    };
    try {
        try {
            l.session = login_at(job.portal, l.identity);
            l.fenced = !job.fence_luns.empty();
        } catch (const ConnectionRefused&) {
            throw;  // nothing listens there: the held commands' tgtd has exited
        } catch (const std::exception& e) {
            // The fence failed there other than by a refused connection
            // (most often that portal does not answer: a cut link, a fabric
            // down): the same gateway through another of its portals can
            // end the held copies as well, each try checked as above. The
            // session stays at the path's own portal, so that one is logged
            // out again, by the fence's deadline.
            if (job.fence_alternates.empty()) throw;
            std::string errors = e.what();
            for (const Portal& alt : job.fence_alternates) {
                std::unique_ptr<Session> through;
                try {
                    Identity ignored;
                    through = login_at(alt, ignored);
                } catch (const std::exception& f) {
                    errors += std::string("; through ") + alt.to_string() + ": " + f.what();
                    continue;
                }
                l.fenced = true;
                l.fenced_through = alt.to_string();
                l.error = errors;
                const auto left = time_left();
                try {
                    // Without time for it, the connection closes with the
                    // session, which ends it at tgtd all the same.
                    if (left > std::chrono::milliseconds(0))
                        through->logout(std::min(left, std::chrono::milliseconds(2000)));
                } catch (const std::exception&) {
                    // Fenced already; the connection closes with the session.
                }
                break;
            }
            if (!l.fenced) throw InitiatorError(ErrorKind::Timeout, errors);
        }
    } catch (const ConnectionRefused& e) {
        l.session.reset();
        l.error = e.what();
        l.refused = e.portal() == job.portal.to_string();
    } catch (const std::exception& e) {
        l.session.reset();
        l.error = e.what();
    }
    l.done.store(true, std::memory_order_release);
    uint64_t one = 1;
    ssize_t n = ::write(job.notify_fd, &one, sizeof one);
    (void)n;  // EAGAIN: the counter is saturated, the fd is readable anyway
}

void MultipathSession::adopt_logins() {
    for (size_t p = 0; p < paths_.size(); ++p) {
        Path& x = paths_[p];
        if (!x.login || !x.login->done.load(std::memory_order_acquire)) continue;
        std::unique_ptr<Login> l = std::move(x.login);
        l->thread.join();
        if (!l->session) {
            x.stats.last_error = l->error;
            x.next_login = Clock::now() + options_.relogin_interval;
            if (!x.login_error_logged)
                RBIO_LOG(Warning, "multipath: path " << x.stats.portal << ": login failed: " << l->error
                                                     << " (retrying every "
                                                     << options_.relogin_interval.count()
                                                     << " ms, logged once)");
            x.login_error_logged = true;
            // Nothing listens on its portal: the tgtd that had its
            // commands has exited, and they with it.
            if (l->refused && !x.held.empty()) release_held(p, true, "");
            // Fenced through another portal of its gateway.
            if (l->fenced && !x.held.empty()) release_held(p, false, l->fenced_through);
            continue;
        }
        x.session = std::move(l->session);
        ++x.epoch;
        x.group = l->identity.group;
        x.state = l->identity.state;
        x.state_known = true;
        x.in_flight = 0;
        ++x.stats.logins;
        x.stats.commands_since_login = 0;
        RBIO_LOG(Info, "multipath: path " << x.stats.portal << " logged in again (" << group_name(x.group)
                                          << ", " << to_string(x.state) << ")");
        if (l->fenced && !x.held.empty()) release_held(p, false, "");
    }
    drain_waiting();
}

void MultipathSession::check_no_path(Clock::time_point now) {
    if (waiting_.empty() || !no_path_since_ || now - *no_path_since_ < options_.no_path_timeout) return;
    failed_ = "no path served I/O to LUN " + std::to_string(options_.lun) + " for " +
              std::to_string(options_.no_path_timeout.count()) + " ms (" + path_summary() + ")";
    fail(ErrorKind::ConnectionLost, failed_);
}

void MultipathSession::check_fences(Clock::time_point now) {
    for (const Path& x : paths_) {
        if (x.held.empty() || now < fence_deadline(x)) continue;
        failed_ = "path " + x.stats.portal + " failed and was not fenced within " +
                  std::to_string(options_.no_path_timeout.count()) +
                  " ms (no LOGICAL UNIT RESET was answered at " + x.fence_portal.to_string() + " through " +
                  group_name(x.fence_group) +
                  ", and that portal did not refuse every connection; last error: " + x.stats.last_error +
                  "): its " + std::to_string(x.held.size()) +
                  " commands that may change the LU were not re-sent, as that gateway may still apply "
                  "them, and they may or may not have been applied";
        unfenced_ = true;
        fail(ErrorKind::ConnectionLost, failed_);
    }
}

std::string MultipathSession::path_summary() const {
    std::string s;
    for (const Path& x : paths_) {
        s += (s.empty() ? "" : "; ") + x.stats.portal + " ";
        if (!x.session) s += "down: " + x.stats.last_error;
        else if (!x.state_known) s += "state being read";
        else s += to_string(x.state);
    }
    return s;
}

// ---------------------------------------------------------------- the loop

void MultipathSession::drive(size_t p) {
    Path& x = paths_[p];
    if (!x.session) return;
    x.dirty = false;
    try {
        x.session->run_nowait();
    } catch (const InitiatorError& e) {
        path_failed(p, e.what());
    }
}

void MultipathSession::run_once(std::chrono::milliseconds max_wait) { pass(max_wait, false); }
void MultipathSession::run_nowait() { pass(std::chrono::milliseconds(0), true); }

void MultipathSession::pass(std::chrono::milliseconds max_wait, bool nowait) {
    if (!failed_.empty()) fail(ErrorKind::ConnectionLost, failed_);
    Clock::time_point now = Clock::now();
    if (!closing_) start_logins(now);
    if (!closing_ && now >= refresh_due_) {
        for (size_t p = 0; p < paths_.size(); ++p) send_rtpg(p);
        refresh_due_ = now + (waiting_.empty() ? options_.state_poll_interval : kWaitingRefresh);
    }
    // Delayed commands (one delay for all, so in time order) go out again.
    while (!delayed_.empty() && now >= entries_[delayed_.front()].not_before) {
        const uint32_t slot = delayed_.front();
        delayed_.pop_front();
        if (entries_[slot].live) dispatch(slot);
    }
    // What is queued leaves first.
    for (size_t p = 0; p < paths_.size(); ++p)
        if (paths_[p].dirty) drive(p);
    check_no_path(now);
    check_fences(now);

    if (!nowait) {
        pollfds_.clear();
        Clock::time_point until = now + max_wait;
        bool busy = false;
        bool any_up = false;
        for (Path& x : paths_) {
            x.fd_begin = pollfds_.size();
            x.fd_count = 0;
            if (!x.session) {
                if (!x.login && !closing_) until = std::min(until, x.next_login);
                continue;
            }
            any_up = true;
            x.wake_by = x.session->poll_fds(pollfds_);
            x.fd_count = pollfds_.size() - x.fd_begin;
            until = std::min(until, x.wake_by);
            busy = busy || x.dirty;
        }
        if (any_up && !closing_) until = std::min(until, refresh_due_);
        if (!delayed_.empty()) until = std::min(until, entries_[delayed_.front()].not_before);
        if (no_path_since_ && !waiting_.empty())
            until = std::min(until, *no_path_since_ + options_.no_path_timeout);
        for (const Path& x : paths_)
            if (!x.held.empty()) until = std::min(until, fence_deadline(x));
        const size_t login_index = pollfds_.size();
        pollfds_.push_back({login_fd_.get(), POLLIN, 0});
        if (wake_fd_ >= 0) pollfds_.push_back({wake_fd_, POLLIN, 0});
        int timeout_ms = 0;
        if (!busy) {
            auto left = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now()).count();
            timeout_ms = int(std::clamp<int64_t>(left, 0, 60000));
        }
        ++totals_.loop_polls;
        int n = ::poll(pollfds_.data(), nfds_t(pollfds_.size()), timeout_ms);
        if (n < 0 && errno != EINTR)
            fail(ErrorKind::ConnectionLost, std::string("multipath: poll: ") + std::strerror(errno));
        if (n > 0 && pollfds_[login_index].revents) {
            uint64_t v;
            ssize_t r = ::read(login_fd_.get(), &v, sizeof v);
            (void)r;
        }
    }
    now = Clock::now();
    for (size_t p = 0; p < paths_.size(); ++p) {
        Path& x = paths_[p];
        if (!x.session) continue;
        bool ready = nowait || x.dirty || now >= x.wake_by;
        for (size_t i = x.fd_begin; !ready && i < x.fd_begin + x.fd_count && i < pollfds_.size(); ++i)
            ready = pollfds_[i].revents != 0;
        if (ready) drive(p);
    }
    adopt_logins();
}

// ---------------------------------------------------------------- the rest

SessionStats MultipathSession::stats() const {
    SessionStats s;
    for (const Path& x : paths_) {
        add(s, x.stats.session);
        if (x.session) add(s, x.session->stats());
    }
    s.poll_calls += totals_.loop_polls;
    return s;
}

void MultipathSession::logout(std::chrono::milliseconds timeout) {
    if (outstanding_ != 0) throw std::logic_error("multipath: logout with commands outstanding");
    // No new state reads or logins; the reads in flight finish first (a
    // session logs out only without commands).
    closing_ = true;
    const Clock::time_point until = Clock::now() + timeout;
    auto reading = [&] {
        return std::any_of(paths_.begin(), paths_.end(),
                           [](const Path& x) { return x.session && x.rtpg_in_flight; });
    };
    while (reading() && Clock::now() < until) pass(std::chrono::milliseconds(100), false);
    std::optional<InitiatorError> first;
    for (Path& x : paths_) {
        if (!x.session) continue;
        if (x.session->outstanding() != 0) {
            RBIO_LOG(Warning,
                     "multipath: path "
                         << x.stats.portal
                         << ": REPORT TARGET PORT GROUPS unanswered at logout; dropping the session");
            x.session.reset();
            continue;
        }
        try {
            x.session->logout(timeout);
        } catch (const InitiatorError& e) {
            if (!first) first = InitiatorError(e.kind(), "path " + x.stats.portal + ": " + e.what());
        }
    }
    if (first) throw *first;
}

MultipathStats MultipathSession::multipath_stats() const {
    MultipathStats m = totals_;
    for (const Path& x : paths_) {
        PathStats s = x.stats;
        s.up = x.session != nullptr;
        s.group = x.group;
        s.state_known = x.state_known;
        s.state = x.state;
        if (x.session) add(s.session, x.session->stats());
        m.paths.push_back(std::move(s));
    }
    return m;
}

std::vector<std::string> MultipathSession::describe_paths() const {
    std::vector<std::string> out;
    for (const PathStats& s : multipath_stats().paths) {
        char b[512];
        std::snprintf(
            b, sizeof b,
            "%s %s %s: commands=%llu completed=%llu since_login=%llu moved_away=%llu refused=%llu "
            "unit_attentions=%llu state_changes=%llu failures=%llu logins=%llu login_attempts=%llu rtpg=%llu "
            "held=%llu fences=%llu fences_by_refusal=%llu fences_elsewhere=%llu",
            s.portal.c_str(), group_name(s.group).c_str(),
            !s.up           ? "down"
            : s.state_known ? to_string(s.state).c_str()
                            : "unknown",
            (unsigned long long)s.commands, (unsigned long long)s.completed,
            (unsigned long long)s.commands_since_login, (unsigned long long)s.moved_away,
            (unsigned long long)s.refused, (unsigned long long)s.unit_attentions,
            (unsigned long long)s.state_changes, (unsigned long long)s.failures, (unsigned long long)s.logins,
            (unsigned long long)s.login_attempts, (unsigned long long)s.rtpg, (unsigned long long)s.held,
            (unsigned long long)s.fences, (unsigned long long)s.fences_by_refusal,
            (unsigned long long)s.fences_elsewhere);
        out.push_back(std::string(b) +
                      (s.up || s.last_error.empty() ? "" : " last_error=\"" + s.last_error + "\""));
    }
    return out;
}

}  // namespace rbio::initiator
