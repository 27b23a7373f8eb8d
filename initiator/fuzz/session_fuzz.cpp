// libFuzzer target for the initiator's response handling: an arbitrary
// target-side byte stream (login responses, text responses, Data-In, R2T,
// SCSI responses, NOP-In, Reject, Async Message, Logout Response) is written
// by a peer thread into one end of a socketpair, followed by end of stream,
// in lockstep with the session's requests; a Session logs in
// over the other end (Session::login_on), then runs SendTargets (discovery)
// or a fixed set of SCSI commands and a logout. Whatever the stream holds,
// the session must end normally or with InitiatorError -- any other
// exception, a crash, a sanitizer report or a hang is a finding.
//
// Input: byte 0 = mode (0 normal session with commands, 1 discovery,
// 2 normal with one-way CHAP), byte 1 = settings bits (header digest,
// data digest, small receive buffer, small direct threshold), then the
// stream as records (2-byte length, bytes), one written per burst of
// requests (see peer()). The ISID is fixed (SessionOptions::isid) so responses can echo
// it; ITTs start at 1 (login) and CmdSNs at 1. Seeds: make_seeds.py.
#include <fcntl.h>
#include <linux/sockios.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <thread>
#include <vector>

#include "rbio/initiator/error.hpp"
#include "rbio/initiator/log.hpp"
#include "rbio/initiator/scsi.hpp"
#include "rbio/initiator/session.hpp"

namespace {

using namespace rbio::initiator;

struct PeerFd {
    int fd = -1;
    ~PeerFd() {
        if (fd >= 0) ::close(fd);
    }
};

[[noreturn]] void finding(const char* what) {
    std::fprintf(stderr, "session_fuzz: %s\n", what);
    std::abort();
}

void run(Session& s, uint8_t mode) {
    if (mode == 1) {
        (void)s.send_targets();
        s.logout(std::chrono::milliseconds(2000));
        return;
    }
    std::vector<uint8_t> r1(512), w1(512, 0xa5), w2(8192, 0x5a), r2(8192);
    int done = 0;
    auto count = [&](const ScsiOutcome&) { ++done; };
    std::vector<ScsiCommand> cmds;
    cmds.push_back(make_read16(0, 0, 1, r1));
    cmds.push_back(make_write16(0, 1, 1, w1));
    cmds.push_back(make_write16(0, 2, 16, w2));
    cmds.push_back(make_read16(0, 18, 16, r2));
    cmds.push_back(make_test_unit_ready(0));
    for (auto& c : cmds) {
        c.timeout = std::chrono::milliseconds(2000);
        c.done = count;
        s.submit(std::move(c));
    }
    // The stream ends with EOF, so every pass makes progress or throws;
    // the bound only turns a livelock into a finding.
    int passes = 0;
    while (done < 5) {
        if (++passes > 100000) finding("no progress after 100000 passes");
        s.run_once(std::chrono::milliseconds(0));
    }
    s.logout(std::chrono::milliseconds(2000));
}

// Whether thread `tid` of this process sleeps in poll(2): the session has
// handled what it read and waits for more. The kernel names the system call
// a blocked thread is in (proc(5), /proc/PID/task/TID/syscall).
bool sleeps_in_poll(pid_t tid) {
    char path[64], text[128];
    std::snprintf(path, sizeof path, "/proc/self/task/%d/syscall", int(tid));
    int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) finding("cannot open /proc/self/task/TID/syscall");
    ssize_t n = ::read(fd, text, sizeof text - 1);
    ::close(fd);
    if (n <= 0) return false;
    text[n] = 0;
    if (!std::isdigit(static_cast<unsigned char>(text[0]))) return false;  // "running", "-1 ..."
    long nr = std::strtol(text, nullptr, 10);
    return nr == SYS_poll || nr == SYS_ppoll;
}

// The target's side: writes one record of the input each time the session
// has sent something (a login step, a text request, commands), so the
// answers come in lockstep like a real target's. When a record draws no
// request (it did not hold a whole answer), the next one goes once the
// session has read all that was sent and sleeps in poll again: waiting out
// a fixed time instead made most inputs cost milliseconds. After the last
// record the stream ends (shutdown); whatever the session still sends is
// read and dropped until it closes its end.
void peer(int fd, pid_t session_tid, std::vector<std::vector<uint8_t>> records) {
    std::vector<uint8_t> sink(1 << 16);
    auto readable = [&](int timeout_ms) {
        pollfd p{fd, POLLIN, 0};
        return ::poll(&p, 1, timeout_ms) > 0;
    };
    // Reads what the session sent; false: the session closed its end.
    auto take = [&]() -> bool {
        for (;;) {
            ssize_t n = ::recv(fd, sink.data(), sink.size(), MSG_DONTWAIT);
            if (n == 0) return false;
            if (n < 0) return errno == EAGAIN || errno == EINTR;
        }
    };
    // Bytes sent that the session has not read yet (a stream socketpair
    // charges them to the sender until the receiver takes them).
    auto unread = [&] {
        int n = 0;
        return ::ioctl(fd, SIOCOUTQ, &n) != 0 || n > 0;
    };
    // Until the session answers or waits for more; false: it closed its end.
    auto answered = [&]() -> bool {
        // A bound far above any pass, so that a harness mistake shows as a
        // slow input rather than a hang; a session spinning is libFuzzer's
        // -timeout to find.
        for (int i = 0; i < 20000; ++i) {
            if (readable(0)) return take();
            if (!unread() && sleeps_in_poll(session_tid)) return !readable(0) || take();
            std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
        return true;
    };
    if (!readable(2000) || !take()) return;  // the first login request
    for (const auto& r : records) {
        size_t off = 0;
        while (off < r.size()) {
            ssize_t n = ::send(fd, r.data() + off, r.size() - off, MSG_NOSIGNAL);
            if (n <= 0) {
                if (n < 0 && errno == EAGAIN) {
                    if (!answered()) return;
                    continue;
                }
                return;
            }
            off += size_t(n);
        }
        if (!answered()) return;
    }
    ::shutdown(fd, SHUT_WR);
    while (readable(1000) && take()) {
    }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    std::signal(SIGPIPE, SIG_IGN);
    set_log_level(LogLevel::Error);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 2 || size > 200000) return 0;
    const uint8_t mode = data[0] % 3, bits = data[1];
    // Records: 2-byte big-endian length, then that many bytes (the last
    // one may be cut short). At most 32.
    std::vector<std::vector<uint8_t>> records;
    for (size_t off = 2; off < size && records.size() < 32;) {
        size_t len = off + 2 <= size ? size_t(data[off]) << 8 | data[off + 1] : 0;
        off += 2;
        size_t take = std::min(len, size > off ? size - off : 0);
        records.emplace_back(data + std::min(off, size), data + std::min(off, size) + take);
        off += take;
    }
    int sp[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sp) != 0)
        finding("socketpair failed");
    PeerFd peer_fd{sp[1]};
    std::thread target(peer, sp[1], pid_t(::gettid()), std::move(records));

    SessionOptions o;
    o.target_name = "iqn.2026-11.io.rbio:fuzz";
    o.discovery = mode == 1;
    if (mode == 2) o.chap = ChapCredentials{"fuzz-user", "fuzz-secret-1"};
    o.isid = std::array<uint8_t, 6>{0x40, 0x00, 0x00, 0x00, 0x00, 0x01};
    o.offer.header_digest = (bits & 1) ? DigestPolicy::Prefer : DigestPolicy::Accept;
    o.offer.data_digest = (bits & 2) ? DigestPolicy::Prefer : DigestPolicy::Accept;
    o.offer.max_recv_data_segment_length = 65536;
    o.rx_buffer_bytes = (bits & 4) ? 65536 + 48 + 8 : 1u << 18;
    o.direct_data_threshold = (bits & 8) ? 512 : 32 * 1024;
    o.login_timeout = std::chrono::milliseconds(3000);
    // Nothing that depends on wall-clock time beyond the command timeout:
    // an input must replay the same way (no pings, no ABORT TASK).
    o.noop_out_interval = std::chrono::milliseconds(0);
    o.abort_timeout = std::chrono::milliseconds(0);
    try {
        auto s = Session::login_on(sp[0], Portal{"fuzz-target", 3260}, o);
        run(*s, mode);
        if (std::getenv("RBIO_FUZZ_DEBUG")) std::fprintf(stderr, "session completed\n");
    } catch (const InitiatorError& e) {
        // The expected end of a malformed, cut or refused stream.
        if (std::getenv("RBIO_FUZZ_DEBUG")) std::fprintf(stderr, "session ended: %s\n", e.what());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "session_fuzz: unexpected exception: %s\n", e.what());
        std::abort();
    }
    // The session's socket is closed now: the peer sees the end and returns.
    target.join();
    return 0;
}
