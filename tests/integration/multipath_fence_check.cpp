// A write held by a gateway that is cut off but alive, and a newer write to
// the same block through another path: which one does the LU keep?
// (docs/several-gateways.md, "Consistency"; SessionOptions::fence.) For
// initiator-fence.sh:
//   multipath_fence_check MODE PORTAL_A PORTAL_B IQN LUN PID_A
//                         [DISK_PID DISK_LOG GROUPS_FILE]  (store modes need them)
//   multipath_fence_check other-portal|other-portal-absent RELAY_A PORTAL_B IQN LUN RELAY_PID PORTAL_A2
//                         RELAY_LOG
// PORTAL_A must be the active/optimized gateway and PORTAL_B an
// active/non-optimized one of the same LU; PID_A is gateway A's tgtd.
//
// W1 in A's socket (MODE none, lu-reset, timeout): block 8 gets W0
// through A. Then the check stops A (SIGSTOP) and writes W1: it waits in
// A's socket. A's path fails on unanswered NOP-Out pings (1 s + 1 s), and:
//   none      W1 is re-sent through B at once and completes; W2 is written
//             through B; A continues (SIGCONT) and applies its copy of W1;
//   lu-reset  W1 must be held (not completed) while A is stopped; A
//             continues, and W1 must complete only after A's path was
//             fenced (LOGICAL UNIT RESET); then W2;
//   timeout   as lu-reset, but A stays stopped past the 8 s no_path_timeout:
//             run_once must give up with W1 never reported done.
//
// W1 in A's store (MODE store-none, store-lu-reset): A's LU is a
// faulty_disk file (DISK_PID, its log DISK_LOG) that holds the first write
// to block 16 until SIGUSR1; B's LU is the file under it. W1 goes to A and
// is held there; then A is stopped, and its path fails:
//   store-none      W1 is re-sent through B and completes, then W2; A
//                   continues and the disk lets W1 go: it lands over W2;
//   store-lu-reset  GROUPS_FILE makes B active/optimized and A
//                   active/non-optimized before A stops (so a W1 released
//                   early would complete through B at once); W1 must be
//                   held; A continues, and
//                   W1 must stay held for 2 s while A's store still holds
//                   its copy (the fence's reset waits for it); the disk
//                   lets it go, then W1 completes, then W2.
// A's portal cut while A runs (MODE other-portal, other-portal-absent):
// PORTAL_A is a relay to gateway A (PID_A is the relay's) and PORTAL_A2
// another portal of gateway A itself. The check stops the relay (SIGSTOP:
// connections through it, new ones too, go unanswered) and submits W1
// four times: A and A2 both being active/optimized, they take turns; the
// copies on A2 complete, A's path fails and holds its two. (Two: a LOGICAL
// UNIT RESET also leaves a unit attention for A's old session, which the
// first command that session still brings would get instead of running;
// the second would run.) Then
//   other-portal         (paths A, B, A2) the fence's login at A times out,
//                        and the fence goes through A2, gateway A's other
//                        portal: the held W1 completes well within the 8 s
//                        no_path_timeout, fenced once, elsewhere. Then W2;
//                        the relay continues, and the connection of A's
//                        old session must end there (the fence's login
//                        ended it at gateway A: RELAY_LOG, the relay's
//                        stderr, says so) without either held copy of W1
//                        landing: after a reset through A2, the block
//                        holds W2;
//   other-portal-absent  (paths A, B: the control) nothing else reaches
//                        gateway A: the session gives up unfenced.
// In the other modes, A's tgtd is then let finish whatever it had (a
// LOGICAL UNIT RESET of its own through A, answered only then) and the
// block is read.
// A command that breaks every path (MODE bounce, see run_bounce).
// Exit 0: the LU holds W2 (timeout: the session gave up with W1 not done);
// 1: it holds W1 (the stale copy landed over the newer write), or a
// lu-reset/timeout expectation failed; 2: usage or setup error.
#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "rbio/initiator/error.hpp"
#include "rbio/initiator/multipath.hpp"
#include "rbio/initiator/scsi.hpp"
#include "rbio/initiator/session.hpp"

using namespace rbio::initiator;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

constexpr uint64_t kSocketLba = 8;
constexpr uint64_t kStoreLba = 16;  // the block faulty_disk holds writes to

// Setup went wrong: exit 2, not a verdict.
struct SetupError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// Sends `sig` to `pid` once: at send(), or when this ends, whatever ends
// the check. It continues gateway A (SIGCONT) after a SIGSTOP, and lets go
// the write faulty_disk holds (SIGUSR1), so an early end leaves neither a
// stopped gateway nor a held write for the next check or the cleanup.
class SignalAtEnd {
public:
    SignalAtEnd(pid_t pid, int sig) : pid_(pid), sig_(sig) {}
    ~SignalAtEnd() { send(); }
    SignalAtEnd(const SignalAtEnd&) = delete;
    SignalAtEnd& operator=(const SignalAtEnd&) = delete;
    void send() {
        if (pid_ > 0) ::kill(pid_, sig_);
        pid_ = 0;
    }

private:
    pid_t pid_;
    int sig_;
};

// SIGSTOP to gateway A, continued (SIGCONT) by `stopped`.
// Every thread of `pid` stopped (state T in /proc/PID/task/*/stat).
bool all_stopped(pid_t pid) {
    const std::filesystem::path tasks = "/proc/" + std::to_string(pid) + "/task";
    std::error_code ec;
    size_t n = 0;
    for (const auto& t : std::filesystem::directory_iterator(tasks, ec)) {
        std::ifstream f(t.path() / "stat");
        std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        // "TID (COMM) STATE ...": COMM may hold spaces and parentheses.
        const size_t close = stat.rfind(')');
        if (close == std::string::npos || close + 2 >= stat.size() || stat[close + 2] != 'T') return false;
        ++n;
    }
    return !ec && n > 0;
}

// kill() returns before the threads have stopped: on a busy host a stopped
// gateway (or relay) could still pass on what is sent right after.
void stop_gateway(pid_t pid, std::optional<SignalAtEnd>& stopped) {
    if (::kill(pid, SIGSTOP) != 0) throw SetupError("cannot stop pid " + std::to_string(pid));
    stopped.emplace(pid, SIGCONT);
    const Clock::time_point until = Clock::now() + 5s;
    while (!all_stopped(pid)) {
        if (Clock::now() >= until)
            throw SetupError("pid " + std::to_string(pid) + " did not stop within 5 s");
        std::this_thread::sleep_for(1ms);  // polling for the condition, not standing for it
    }
}

void run_until(IoSession& s, const std::function<bool()>& done, std::chrono::seconds limit,
               const char* what) {
    const Clock::time_point until = Clock::now() + limit;
    while (!done()) {
        if (Clock::now() >= until)
            throw SetupError(std::string("no ") + what + " within " + std::to_string(limit.count()) + " s");
        s.run_once(100ms);
    }
}

size_t count_in_file(const char* path, const std::string& text) {
    std::ifstream f(path);
    const std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    size_t n = 0;
    for (size_t at = all.find(text); at != std::string::npos; at = all.find(text, at + 1)) ++n;
    return n;
}

int usage(const char* self) {
    std::fprintf(
        stderr,
        "usage: %s none|lu-reset|timeout PORTAL_A PORTAL_B IQN LUN PID_A\n"
        "       %s other-portal|other-portal-absent RELAY_A PORTAL_B IQN LUN RELAY_PID PORTAL_A2 RELAY_LOG\n"
        "       %s store-none|store-lu-reset PORTAL_A PORTAL_B IQN LUN PID_A DISK_PID DISK_LOG "
        "GROUPS_FILE\n"
        "       %s bounce RELAY_A RELAY_B IQN LUN\n",
        self, self, self, self);
    return 2;
}

// MODE other-portal / other-portal-absent (see the top).
int run_other_portal(const std::string& mode, char** argv) {
    const Portal a = Portal::parse(argv[2]), b = Portal::parse(argv[3]), a2 = Portal::parse(argv[7]);
    const uint64_t lun = std::strtoull(argv[5], nullptr, 10);
    const auto relay = pid_t(std::strtol(argv[6], nullptr, 10));
    if (relay <= 0) throw SetupError("bad pid " + std::string(argv[6]));
    MultipathOptions mo;
    mo.session.target_name = argv[4];
    mo.session.noop_out_interval = 1s;
    mo.session.noop_out_timeout = 1s;
    mo.session.connect_timeout = 2s;
    mo.session.login_timeout = 2s;
    mo.lun = lun;
    mo.no_path_timeout = 8s;
    mo.state_poll_interval = 500ms;
    const bool alternate = mode == "other-portal";
    auto mp = alternate ? MultipathSession::open({a, b, a2}, mo) : MultipathSession::open({a, b}, mo);
    auto path = [&mp](size_t i) { return mp->multipath_stats().paths.at(i); };
    if (!path(0).up || path(0).state != AluaState::ActiveOptimized || (alternate && !path(2).up))
        throw SetupError("want every path up, A active/optimized");
    const Capacity cap = read_capacity16(*mp, lun);
    std::vector<uint8_t> w1(cap.block_size, 0xa1);
    // The unit attentions a new session gets (and those of the checks
    // before) are taken by reads, which take turns like the writes below,
    // and the states they make re-read are known again before the writes:
    // a path not usable then would leave every copy to the other one.
    for (int i = 0; i < 4; ++i) {
        std::vector<uint8_t> got(cap.block_size);
        if (ScsiOutcome o = mp->execute(make_read16(lun, kSocketLba, 1, got)); !o.good())
            throw SetupError("read: " + describe(o));
    }
    run_until(
        *mp,
        [&] {
            return path(0).up && path(0).state_known && path(0).state == AluaState::ActiveOptimized &&
                   (!alternate ||
                    (path(2).up && path(2).state_known && path(2).state == AluaState::ActiveOptimized));
        },
        10s, "A (and A2) active/optimized and usable");
    int done = 0;
    std::string bad;  // a copy of W1 that failed
    std::optional<SignalAtEnd> stopped;
    stop_gateway(relay, stopped);
    for (int i = 0; i < 4; ++i) {
        ScsiCommand c = make_write16(lun, kSocketLba, 1, w1);
        c.done = [&done, &bad](const ScsiOutcome& o) {
            if (!o.good()) bad = describe(o);
            ++done;
        };
        mp->submit(std::move(c));
    }
    run_until(
        *mp, [&] { return path(0).failures > 0; }, 30s, "failure of A's path");
    std::printf(
        "A's portal cut with W1 sent to it: its path failed; %d of 4 copies of W1 completed, %llu held\n",
        done, (unsigned long long)path(0).held);
    if (path(0).held != (alternate ? 2 : 4)) {
        std::printf("FAIL: want %d copies of W1 held for A's path (commands sent through A: %llu%s%llu)\n",
                    alternate ? 2 : 4, (unsigned long long)path(0).commands,
                    alternate ? ", through A2: " : "",
                    alternate ? (unsigned long long)path(2).commands : 0ULL);
        return 1;
    }
    std::string why;
    try {
        run_until(
            *mp, [&] { return done == 4; }, 30s, "completion of every copy of W1");
    } catch (const InitiatorError& e) {
        why = e.what();
    }
    if (!alternate) {
        std::printf("without another path to gateway A: %s\n", why.empty() ? "W1 completed" : why.c_str());
        if (why.find("was not fenced") == std::string::npos) {
            std::printf("FAIL: the session did not give up unfenced\n");
            return 1;
        }
        return 0;
    }
    if (!why.empty() || !bad.empty()) {
        std::printf("FAIL: %s\n", why.empty() ? ("W1: " + bad).c_str() : why.c_str());
        return 1;
    }
    std::printf(
        "every copy completed: fences=%llu (through another portal: %llu, by a refused connection: "
        "%llu), fenced %.0f ms after the failure\n",
        (unsigned long long)path(0).fences, (unsigned long long)path(0).fences_elsewhere,
        (unsigned long long)path(0).fences_by_refusal, mp->multipath_stats().last_fence_ms);
    if (path(0).fences != 1 || path(0).fences_elsewhere != 1 || path(0).up) {
        std::printf("FAIL: want one fence, through A2, with A's portal still cut\n");
        return 1;
    }
    std::vector<uint8_t> w2(cap.block_size, 0xa2);
    if (ScsiOutcome o = mp->execute(make_write16(lun, kSocketLba, 1, w2)); !o.good())
        throw SetupError("W2: " + describe(o));
    stopped->send();  // the relay passes on W1, to A's old session if it is still open
    run_until(
        *mp, [&] { return count_in_file(argv[8], "connection 1 ended") > 0; }, 10s,
        "end of the relayed connection of A's old session (still open at gateway A?)");
    std::printf("W2 written; the relay continued, and A's old session's connection has ended\n");
    {
        auto s = Session::login(a2, mo.session);  // A's tgtd has finished what it had once this answers
        if (const TmfResponse r = s->lun_reset(lun); r != TmfResponse::Complete)
            throw SetupError("LOGICAL UNIT RESET through A2: " + to_string(r));
        s->logout();
    }
    std::vector<uint8_t> got(cap.block_size);
    if (ScsiOutcome o = mp->execute(make_read16(lun, kSocketLba, 1, got)); !o.good())
        throw SetupError("read: " + describe(o));
    mp->logout();
    if (got != w2) {
        std::printf("FAIL: block %llu holds %s, not W2\n", (unsigned long long)kSocketLba,
                    got == w1 ? "W1: A's old session applied it" : "neither W1 nor W2");
        return 1;
    }
    std::printf("block %llu holds W2, the newest write\n", (unsigned long long)kSocketLba);
    return 0;
}

// MODE bounce: RELAY_A and RELAY_B (relays to two gateways of one LU) cut
// every connection that sends a READ(16) of LBA kBounceLba. That read
// breaks each path it goes to; with max_resends 3 it must fail within 30 s
// (paths log in again every 300 ms) instead of going round for ever, and
// the paths, logged in again, serve the next read.
constexpr uint64_t kBounceLba = 12345;

int run_bounce(char** argv) {
    MultipathOptions mo;
    mo.session.target_name = argv[4];
    mo.session.connect_timeout = 2s;
    mo.session.login_timeout = 2s;
    mo.lun = std::strtoull(argv[5], nullptr, 10);
    mo.no_path_timeout = 60s;
    mo.relogin_interval = 300ms;
    mo.state_poll_interval = 500ms;
    mo.max_resends = 3;
    auto mp = MultipathSession::open({Portal::parse(argv[2]), Portal::parse(argv[3])}, mo);
    const Capacity cap = read_capacity16(*mp, mo.lun);
    std::vector<uint8_t> buf(cap.block_size);
    std::optional<ScsiOutcome> got;
    ScsiCommand c = make_read16(mo.lun, kBounceLba, 1, buf);
    c.done = [&got](const ScsiOutcome& o) { got = o; };
    mp->submit(std::move(c));
    try {
        run_until(
            *mp, [&] { return got.has_value(); }, 30s, "end of the read that breaks every path");
    } catch (const SetupError& e) {
        std::printf("FAIL: %s (failures: A %llu, B %llu)\n", e.what(),
                    (unsigned long long)mp->multipath_stats().paths.at(0).failures,
                    (unsigned long long)mp->multipath_stats().paths.at(1).failures);
        return 1;
    }
    const auto failures =
        mp->multipath_stats().paths.at(0).failures + mp->multipath_stats().paths.at(1).failures;
    std::printf("the read that breaks every path ended %s after %llu path failures\n",
                got->good() ? "GOOD" : "failed", (unsigned long long)failures);
    if (got->good() || failures != 4) {
        std::printf("FAIL: want it failed after 4 path failures (3 resends)\n");
        return 1;
    }
    if (ScsiOutcome o = mp->execute(make_read16(mo.lun, 0, 1, buf)); !o.good()) {
        std::printf("FAIL: the next read: %s\n", describe(o).c_str());
        return 1;
    }
    std::printf("the next read is GOOD\n");
    return 0;
}

int bounce(char** argv) {
    try {
        return run_bounce(argv);
    } catch (const std::exception& e) {
        std::printf("error: %s\n", e.what());
        return 2;
    }
}

int other_portal(const std::string& mode, char** argv) {
    try {
        return run_other_portal(mode, argv);
    } catch (const std::exception& e) {
        std::printf("error: %s\n", e.what());
        return 2;
    }
}

void write_file(const std::string& path, const std::string& text) {
    {
        std::ofstream f(path + ".new");
        f << text;
        if (!f) throw SetupError("cannot write " + path + ".new");
    }
    if (std::rename((path + ".new").c_str(), path.c_str()) != 0) throw SetupError("cannot replace " + path);
}

}  // namespace

int main(int argc, char** argv) {
    const std::string mode = argc > 1 ? argv[1] : "";
    if ((mode == "other-portal" || mode == "other-portal-absent") && argc == 9)
        return other_portal(mode, argv);
    if (mode == "bounce" && argc == 6) return bounce(argv);
    const bool store = mode == "store-none" || mode == "store-lu-reset";
    // The socket modes ignore the last three (one command line for all).
    if ((argc != 7 && argc != 10) || (argc != 10 && store) ||
        (!store && mode != "none" && mode != "lu-reset" && mode != "timeout")) {
        return usage(argv[0]);
    }
    try {
        const Portal a = Portal::parse(argv[2]);
        const Portal b = Portal::parse(argv[3]);
        const uint64_t lun = std::strtoull(argv[5], nullptr, 10);
        const auto pid = pid_t(std::strtol(argv[6], nullptr, 10));
        if (pid <= 0) throw SetupError("bad pid " + std::string(argv[6]));

        MultipathOptions mo;
        mo.session.target_name = argv[4];
        mo.session.fence = mode == "none" || mode == "store-none" ? Fence::None : Fence::LuReset;
        mo.session.noop_out_interval = 1s;
        mo.session.noop_out_timeout = 1s;
        mo.session.connect_timeout = 2s;
        mo.session.login_timeout = 2s;
        mo.session.lu_reset_timeout = 10s;
        mo.lun = lun;
        mo.no_path_timeout = mode == "timeout" ? 8s : 60s;
        mo.state_poll_interval = 500ms;
        auto mp = MultipathSession::open({a, b}, mo);
        auto path = [&mp](size_t i) { return mp->multipath_stats().paths.at(i); };
        if (!path(0).up || path(0).state != AluaState::ActiveOptimized || !path(1).up ||
            path(1).state != AluaState::ActiveNonOptimized)
            throw SetupError("want A active/optimized and B active/non-optimized, up");

        const uint64_t lba = store ? kStoreLba : kSocketLba;
        const Capacity cap = read_capacity16(*mp, lun);
        auto pattern = [&cap](uint8_t v) { return std::vector<uint8_t>(cap.block_size, v); };
        std::vector<uint8_t> w0 = pattern(0xa0), w1 = pattern(0xa1), w2 = pattern(0xa2);
        auto write_now = [&](std::vector<uint8_t>& data, const char* name) {
            ScsiOutcome o = mp->execute(make_write16(lun, lba, 1, data));
            if (!o.good()) throw SetupError(std::string(name) + ": " + describe(o));
        };
        std::optional<ScsiOutcome> w1_done;
        auto submit_w1 = [&] {
            ScsiCommand c = make_write16(lun, lba, 1, w1);
            c.timeout = 120s;  // held in A's store longer than the default 30 s
            c.done = [&w1_done](const ScsiOutcome& o) { w1_done = o; };
            mp->submit(std::move(c));
        };
        const auto disk_pid = store ? pid_t(std::strtol(argv[7], nullptr, 10)) : 0;
        if (store && disk_pid <= 0) throw SetupError("bad disk pid " + std::string(argv[7]));
        std::optional<SignalAtEnd> held_write;  // SIGUSR1 to the disk
        std::optional<SignalAtEnd> stopped;     // SIGCONT to gateway A
        if (store) {
            // W0 would be a write the disk holds: W2 and W1 differ anyway.
            const size_t holds = count_in_file(argv[8], "holding a write to block");
            submit_w1();
            run_until(
                *mp, [&] { return count_in_file(argv[8], "holding a write to block") > holds; }, 10s,
                "hold of W1 in A's store");
            held_write.emplace(disk_pid, SIGUSR1);
            if (mode == "store-lu-reset") {
                // B active/optimized before A stops: a W1 released too early
                // would then complete through B at once (through A it would
                // wait in the disk, as the next write to that block).
                write_file(argv[9], "1 active/non-optimized\n2 active/optimized\n");
                run_until(
                    *mp,
                    [&] {
                        return path(0).state == AluaState::ActiveNonOptimized &&
                               path(1).state == AluaState::ActiveOptimized;
                    },
                    10s, "swap of the states");
            }
            stop_gateway(pid, stopped);
        } else {
            write_now(w0, "W0");
            stop_gateway(pid, stopped);
            submit_w1();
        }
        run_until(
            *mp, [&] { return path(0).failures > 0; }, 30s, "failure of A's path");
        std::printf("gateway A stopped with W1 sent to it: its path failed; W1 %s, %llu held\n",
                    w1_done ? "completed" : "not completed", (unsigned long long)path(0).held);

        auto release_disk = [&] {
            held_write->send();
            std::printf("the disk lets A's copy of W1 go\n");
        };
        if (mode == "none" || mode == "store-none") {
            run_until(
                *mp, [&] { return w1_done.has_value(); }, 20s, "completion of W1 through B");
            if (!w1_done->good()) throw SetupError("W1: " + describe(*w1_done));
            write_now(w2, "W2");
            std::printf("W1 re-sent and completed through B, then W2 written through B\n");
            stopped->send();
            if (store) release_disk();
        } else if (mode == "store-lu-reset") {
            if (w1_done || path(0).held != 1) {
                std::printf("FAIL: W1 was not held while gateway A was stopped\n");
                return 1;
            }
            stopped->send();
            // Not a wait for a condition: W1 must NOT complete while A's
            // store holds its copy, however long that is; 2 s is the test.
            const Clock::time_point until = Clock::now() + 2s;
            while (Clock::now() < until && !w1_done) mp->run_once(100ms);
            if (w1_done) {
                std::printf("FAIL: W1 completed while gateway A's store still held its copy\n");
                return 1;
            }
            std::printf("gateway A continued: W1 still held 2 s later, while A's store holds its copy\n");
            release_disk();
            run_until(
                *mp, [&] { return w1_done.has_value(); }, 60s, "completion of W1 after the disk");
            if (!w1_done->good()) throw SetupError("W1: " + describe(*w1_done));
            std::printf(
                "then W1 completed: fences=%llu (by a refused connection: %llu), fenced %.0f ms "
                "after the failure\n",
                (unsigned long long)path(0).fences, (unsigned long long)path(0).fences_by_refusal,
                mp->multipath_stats().last_fence_ms);
            if (path(0).fences != 1 || path(0).fences_by_refusal != 0) {
                std::printf("FAIL: W1 was released without A answering the fence's reset\n");
                return 1;
            }
            write_now(w2, "W2");
        } else {
            if (w1_done || path(0).held != 1) {
                std::printf("FAIL: W1 was not held while gateway A was stopped\n");
                return 1;
            }
            if (mode == "timeout") {
                std::string why;
                try {
                    run_until(
                        *mp, [] { return false; }, 30s, "end of the session");
                } catch (const InitiatorError& e) {
                    why = e.what();
                }
                std::printf("gateway A kept stopped: the session gave up: %s\n", why.c_str());
                if (why.find("was not fenced") == std::string::npos || w1_done) {
                    std::printf("FAIL: %s\n",
                                w1_done ? "W1 was reported done" : "it did not give up unfenced");
                    return 1;
                }
                std::printf("W1 was never reported done\n");
                return 0;
            }
            stopped->send();
            run_until(
                *mp, [&] { return w1_done.has_value(); }, 60s, "completion of W1 after A continued");
            if (!w1_done->good()) throw SetupError("W1: " + describe(*w1_done));
            std::printf(
                "gateway A continued: fences=%llu (by a refused connection: %llu), then W1 completed\n",
                (unsigned long long)path(0).fences, (unsigned long long)path(0).fences_by_refusal);
            if (path(0).fences != 1 || path(0).fences_by_refusal != 0) {
                std::printf("FAIL: W1 completed without A's path being fenced\n");
                return 1;
            }
            write_now(w2, "W2");
        }

        // Whatever A's tgtd had, it has finished once it answers a reset.
        run_until(
            *mp, [&] { return path(0).up; }, 30s, "login of A's path again");
        {
            SessionOptions so;
            so.target_name = argv[4];
            auto s = Session::login(a, so);
            const TmfResponse r = s->lun_reset(lun);
            if (r != TmfResponse::Complete) throw SetupError("LOGICAL UNIT RESET through A: " + to_string(r));
            s->logout();
        }
        std::vector<uint8_t> got(cap.block_size);
        ScsiOutcome o = mp->execute(make_read16(lun, lba, 1, got));
        if (!o.good()) throw SetupError("read: " + describe(o));
        mp->logout();
        if (got == w2) {
            std::printf("block %llu holds W2, the newest write\n", (unsigned long long)lba);
            return 0;
        }
        if (got == w1) {
            std::printf("block %llu holds W1: gateway A's stale copy landed over W2\n",
                        (unsigned long long)lba);
            return 1;
        }
        std::printf("block %llu holds neither W1 nor W2 (first byte 0x%02x)\n", (unsigned long long)lba,
                    got[0]);
        return 2;
    } catch (const SetupError& e) {
        std::printf("error: %s\n", e.what());
        return 2;
    } catch (const std::exception& e) {
        std::printf("error: %s\n", e.what());
        return 2;
    }
}
