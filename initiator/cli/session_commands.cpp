// rbio login / logout / session: a session held by a background process,
// its LUs exported as files through FUSE (see session_daemon.hpp).
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <iostream>
#include <optional>
#include <sstream>
#include <thread>

#include "../fuse/fuse_mounts.hpp"
#include "commands.hpp"
#include "open_iscsi.hpp"
#include "options.hpp"
#include "session_daemon.hpp"
#include "session_state.hpp"

namespace rbio::cli {
namespace {

using initiator::UniqueFd;

// Absolute: the session process works from "/" (it must not hold the
// caller's folder busy), and logout may run from anywhere else.
std::string state_dir_option(const Args& args) {
    const std::string dir = args.get("--state-dir", kDefaultStateDir);
    if (dir.empty()) throw UsageError("--state-dir: empty path");
    std::error_code ec;
    std::filesystem::path abs = std::filesystem::absolute(dir, ec);
    if (ec) throw UsageError("--state-dir " + dir + ": " + ec.message());
    return abs.lexically_normal().string();
}

// The portal of -p, or of the target's first open-iscsi node record; CHAP
// from that record (the one of -p's portal, if any) unless the command line
// gives it, as iscsiadm's login takes node.session.auth.*.
initiator::Portal login_portal(const Args& args, const std::string& target,
                               initiator::SessionOptions& options) {
    std::vector<NodeRecord> nodes;
    try {
        nodes = read_node_records();
    } catch (const std::exception& e) {
        if (!args.has("--portal")) throw UsageError(std::string("no -p, and ") + e.what());
    }
    std::optional<initiator::Portal> wanted;
    // With several -p (multipath) the first one's record gives the CHAP.
    if (args.has("--portal")) wanted = portal_options(args).front();
    for (const NodeRecord& n : nodes) {
        if (n.target != target || (wanted && (n.address != wanted->host || n.port != wanted->port))) continue;
        if (!options.chap && n.chap) {
            options.chap = n.chap;
            if (!options.chap_in) options.chap_in = n.chap_in;
        }
        initiator::Portal p;
        p.host = n.address;
        p.port = uint16_t(n.port);
        return p;
    }
    if (wanted) return *wanted;
    throw UsageError("no -p, and no open-iscsi node record for " + target +
                     " (rbio discover -p PORTAL stores them)");
}

// The session's records: the one of --target, or all.
std::vector<SessionRecord> selected(const Args& args, const std::string& dir) {
    if (!args.has("--target")) return list_records(dir);
    auto r = read_record(dir, state_key(args.get("--target")));
    // Another target's record under the same key (names that differ only
    // in characters the key replaces): not this target's session.
    if (!r || r->target != args.get("--target"))
        throw CommandError(kExitNoSession, "no session for " + args.get("--target") + " (in " + dir + ")");
    return {*r};
}

// Whether stderr is systemd's journal: systemd sets JOURNAL_STREAM to the
// "DEVICE:INODE" of the stream it connected (systemd.exec(5)); a stderr
// redirected elsewhere by the unit or a shell has another inode.
bool stderr_is_journal() {
    const char* v = std::getenv("JOURNAL_STREAM");
    struct stat st;
    if (!v || ::fstat(STDERR_FILENO, &st) != 0) return false;
    return std::string(v) == std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
}

// Where the session process logs: the journal under systemd (with the
// service's other output, e.g. journalctl -u rbio-session@NAME), else
// STATE_DIR/KEY.log.
std::string session_log(const std::string& state_dir, const std::string& key) {
    return stderr_is_journal() ? std::string(kJournalLog) : state_path(state_dir, key, ".log");
}

// Detaches the child from the caller: own session, stdio on /dev/null and
// the log (kJournalLog: stderr stays the journal), no inherited descriptors
// but those in `keep`.
void detach(const std::string& log, std::initializer_list<int> keep) {
    ::setsid();
    if (::chdir("/") != 0) std::perror("chdir /");
    UniqueFd null(::open("/dev/null", O_RDWR | O_CLOEXEC));
    UniqueFd logfd;
    if (log != kJournalLog)
        logfd = UniqueFd(::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
    if (null.get() >= 0) {
        ::dup2(null.get(), 0);
        ::dup2(null.get(), 1);
        if (log != kJournalLog) ::dup2(logfd.get() >= 0 ? logfd.get() : null.get(), 2);
    }
    // E.g. a test harness's pipes: holding them would keep it waiting.
    for (int fd = 3; fd < 1024; ++fd)
        if (std::find(keep.begin(), keep.end(), fd) == keep.end() && fd != null.get() && fd != logfd.get())
            ::close(fd);
}

// Whether `dir` has a FUSE mount of `source` (rbio's is "rbio:TARGET").
bool mounted_from(const std::string& dir, const std::string& source) {
    for (const auto& m : fuse::fuse_mounts())
        if (m.point == dir && m.source == source) return true;
    return false;
}

// The folder to mount on, resolved. The FUSE mount of a session process
// that died without ending (crash, SIGKILL, the OOM killer) stays, dead
// (ENOTCONN inside): that of this target's stale record is detached
// first, or a restart (systemd's Restart=on-failure) would mount over it
// and leave it there for good. No live session holds it: its lock was free.
std::string mount_dir(const std::string& arg, const std::string& target,
                      const std::optional<SessionRecord>& stale) {
    char real[PATH_MAX];
    struct stat st;
    if (!::realpath(arg.c_str(), real) || ::stat(real, &st) != 0 || !S_ISDIR(st.st_mode))
        throw CommandError(kExitMount, "--mount " + arg + ": not a directory");
    if (stale && stale->mount == real) {
        // Stacked ones too (a restart that mounted over one before this fix).
        for (int i = 0; i < 16 && mounted_from(real, "rbio:" + target); ++i) {
            if (::umount2(real, MNT_DETACH) != 0)
                throw CommandError(
                    kExitMount, "--mount " + arg +
                                    ": the dead mount of an ended session is there: " + std::strerror(errno));
            std::cerr << "rbio: " << real << ": detached the dead mount of the session that ended (pid "
                      << stale->pid << ")\n";
        }
    }
    return real;
}

}  // namespace

int login_main(int argc, char** argv) {
    Args args(argc, argv, 1, {});
    args.allow_only({"--portal", "--target", "--mount", "--state-dir"});
    if (!args.has("--target")) throw UsageError("login needs -T IQN (and -p HOST[:PORT] or a node record)");
    const std::string target = args.get("--target");
    DaemonConfig c;
    c.options = session_options(args);
    c.portals = {login_portal(args, target, c.options)};
    if (args.get_all("--portal").size() > 1) {
        if (c.options.transport != initiator::Transport::Tcp)
            throw UsageError("several --portal work over --transport tcp only");
        // With 0 a command that waits for ALUA to name the next active
        // path (REPORT TARGET PORT GROUPS) would end the session at once.
        if (c.options.replacement_timeout <= std::chrono::milliseconds(0))
            throw UsageError(
                "several --portal need a --replacement-timeout other than 0: it is how long "
                "commands wait for an active path");
        c.portals = portal_options(args);
    }
    // The FUSE mount's requests (up to 1 MiB) are ordinary memory, and over
    // iSER the session takes only registered regions or bounce slots of
    // 256 KiB: a larger request would end the session.
    if (args.has("--mount") && c.options.transport != initiator::Transport::Tcp)
        throw UsageError("--mount works over --transport tcp only");
    c.options.target_name = target;
    // Whole FUSE requests (up to 1 MiB) in few Data-In PDUs.
    c.options.offer.max_recv_data_segment_length = 256u << 10;
    c.options.rx_buffer_bytes = 1u << 20;
    c.state_dir = state_dir_option(args);
    c.key = state_key(target);
    c.log = session_log(c.state_dir, c.key);
    try {
        ensure_state_dir(c.state_dir);
    } catch (const std::exception& e) {
        throw CommandError(kExitInternal, e.what());
    }
    // Held from here by this process and, through the fork, by the session
    // process: another login of the target finds it taken.
    UniqueFd lock;
    try {
        lock = lock_session(c.state_dir, c.key);
    } catch (const std::exception& e) {
        throw CommandError(kExitInternal, e.what());
    }
    auto r = read_record(c.state_dir, c.key);
    if (!lock && r && r->target != target)
        throw CommandError(kExitBusy, "the state files " + state_path(c.state_dir, c.key, ".*") +
                                          " are those of the session of " + r->target + " (pid " +
                                          std::to_string(r->pid) + "): its name and " + target +
                                          " differ only in characters outside A-Z a-z 0-9 . _ -; log in "
                                          "to one of them with another --state-dir");
    if (!lock)
        throw CommandError(kExitBusy,
                           "already logged in to " + target +
                               (r ? " (pid " + std::to_string(r->pid) + ")" : " (a login is under way)") +
                               "; rbio session, rbio logout -T " + target);
    if (r) remove_record(c.state_dir, c.key);  // its process is gone: the lock was free
    if (args.has("--mount")) c.mount = mount_dir(args.get("--mount"), target, r);

    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    UniqueFd rd(p[0]), wr(p[1]);
    std::fflush(nullptr);
    std::cout.flush();
    std::cerr.flush();
    pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
        rd = UniqueFd();
        detach(c.log, {wr.get(), lock.get()});
        return run_session_daemon(c, std::move(wr));
    }
    wr = UniqueFd();
    std::string msg;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(rd.get(), buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
        if (n > 0) msg.append(buf, size_t(n));
    size_t nl = msg.find('\n');
    int code = msg.empty() ? -1 : std::atoi(msg.substr(0, nl).c_str());
    std::string rest = nl == std::string::npos ? "" : msg.substr(nl + 1);
    if (code != 0) {
        int status = 0;
        while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        if (code < 0)
            throw CommandError(kExitInternal, "the session process ended before reporting (status " +
                                                  std::to_string(status) + "); see " + c.log);
        throw CommandError(code, rest);
    }
    // Usable files: each one answers stat() through the mount. A line is
    // "PATH SIZE"; the path may hold spaces (the --mount folder's).
    std::istringstream lines(rest);
    std::string line;
    std::string at;
    for (const initiator::Portal& p : c.portals) at += (at.empty() ? "" : ",") + p.to_string();
    std::cout << "rbio: logged in to " << target << " at " << at << " (session process " << pid << ")\n";
    while (std::getline(lines, line)) {
        const size_t sp = line.rfind(' ');
        if (sp == std::string::npos || sp == 0) continue;
        const std::string path = line.substr(0, sp);
        const uint64_t size = std::strtoull(line.c_str() + sp + 1, nullptr, 10);
        struct stat st;
        if (::stat(path.c_str(), &st) != 0 || uint64_t(st.st_size) != size)
            throw CommandError(kExitMount, path + " is not usable: " + std::strerror(errno));
        std::cout << "  " << path << " (" << size << " bytes)\n";
    }
    return kExitOk;
}

// Waits up to 5 s for r's session process to end (its lock goes a moment
// before the process: it exits after that); whether it did.
bool wait_until_gone(const std::string& dir, const SessionRecord& r) {
    for (int i = 0; i < 200 && (session_running(dir, r) || process_alive(r.pid)); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(25));
    return !session_running(dir, r) && !process_alive(r.pid);
}

// A logout that got no answer: the session process answers one logout and
// ends, so another one sent at the same time (an admin's and systemd's
// ExecStop) sees its connection closed. Done if the process ended within 5
// s and removed its record on the way out, as a clean logout does; a
// process that died leaves its record.
bool logged_out_by_another(const std::string& dir, const SessionRecord& r) {
    if (!wait_until_gone(dir, r)) return false;
    auto now = read_record(dir, r.key);
    return !now || now->pid != r.pid;
}

// How often `rbio logout` says it is still waiting.
constexpr std::chrono::milliseconds kLogoutProgressEvery{5000};

int logout_main(int argc, char** argv) {
    Args args(argc, argv, 1, {});
    args.allow_only({"--target", "--state-dir"}, Args::Login::No);
    const std::string dir = state_dir_option(args);
    std::vector<SessionRecord> records = selected(args, dir);
    if (records.empty()) throw CommandError(kExitNoSession, "no sessions (in " + dir + ")");
    int rc = kExitOk;
    for (const SessionRecord& r : records) {
        // The answer comes once the commands in flight have finished, and
        // those wait for a path up to the session's replacement timeout: so
        // wait as long as the session process lives, saying why.
        std::string reply;
        int err = control_request(
            r.socket, "logout", reply, kLogoutProgressEvery, [&r](std::chrono::milliseconds waited) {
                if (!process_alive(r.pid)) return false;
                std::cerr << "rbio: " << r.target << ": still logging out after " << waited.count() / 1000
                          << " s: the session process " << r.pid
                          << " first finishes its commands in flight (they wait "
                             "up to its replacement timeout for a path)\n";
                return true;
            });
        if (err == 0 && reply.empty() && logged_out_by_another(dir, r)) {
            std::cout << "rbio: logged out of " << r.target << " (by another logout at the same time)\n";
            continue;
        }
        if ((err == 0 && reply.empty()) || (err == ETIMEDOUT && !process_alive(r.pid))) {
            std::cerr << "rbio: " << r.target << ": the session process " << r.pid
                      << " ended without answering the logout; its log: " << r.log << "\n";
            if (rc == kExitOk) rc = kExitInternal;
            continue;
        }
        if (err == ENOENT || err == ECONNREFUSED) {
            if (!session_running(dir, r)) {
                remove_record(dir, r.key);
                std::cerr << "rbio: " << r.target << ": the session process " << r.pid
                          << " had ended; removed its state\n";
                if (rc == kExitOk) rc = kExitNoSession;
                continue;
            }
        }
        if (err) {
            std::cerr << "rbio: " << r.target << ": control socket " << r.socket << ": " << std::strerror(err)
                      << "\n";
            if (rc == kExitOk) rc = kExitInternal;
            continue;
        }
        if (reply.rfind("ok", 0) != 0) {
            int code = kExitInternal;
            std::string text = reply;
            if (reply.rfind("error ", 0) == 0) {
                code = std::atoi(reply.c_str() + 6);
                size_t sp = reply.find(' ', 6);
                text = sp == std::string::npos ? reply : reply.substr(sp + 1);
            }
            while (!text.empty() && text.back() == '\n') text.pop_back();
            std::cerr << "rbio: " << r.target << ": " << text << "\n";
            if (rc == kExitOk) rc = code ? code : kExitInternal;
            continue;
        }
        // "ok" and EOF: the process is ending; wait until it is gone.
        wait_until_gone(dir, r);
        std::cout << "rbio: logged out of " << r.target << "\n";
    }
    return rc;
}

int session_main(int argc, char** argv) {
    Args args(argc, argv, 1, {});
    args.allow_only({"--target", "--state-dir"}, Args::Login::No);
    const std::string dir = state_dir_option(args);
    for (const SessionRecord& r : selected(args, dir)) {
        std::string reply;
        int err = control_request(r.socket, "stats", reply, 5000);
        if (err) {
            std::cout << r.target << "\n  portal " << r.portal << "  pid " << r.pid << "  state "
                      << (session_running(dir, r)
                              ? "not answering (" + std::string(std::strerror(err)) + ")"
                              : std::string("ended (stale; rbio logout -T " + r.target + " removes it)"))
                      << "\n";
            continue;
        }
        std::cout << reply;
    }
    return kExitOk;
}

}  // namespace rbio::cli
