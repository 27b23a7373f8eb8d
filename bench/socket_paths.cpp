// socket_paths: what this host's kernel charges a server per request on
// loopback TCP, for ways of driving the socket, side by side. It answers
// one question of issue 18 before anyone rewrites a transport for it: how
// much of tgtd's CPU per 4 KiB I/O (with a client that sends one PDU per
// call) would go if the socket were driven through io_uring, one
// io_uring_enter per pass, instead of epoll_wait + recv + sendmsg?
//
//   socket_paths [--rounds N] [--seconds S] [--depth Q] [--shapes read,write]
//                [--data BYTES] [--modes epoll,uring,zerocopy]
//
// No iSCSI and no storage: a server thread answers fixed-size requests
// (a 48-byte header, with the data segment's length in bytes 5-7 as in an
// iSCSI BHS) and a client thread keeps Q of them in flight, sending each
// request with its own send() call the way libiscsi does. Shapes: "read"
// (48-byte request, 48 + BYTES response) and "write" (48 + BYTES request,
// 48-byte response); BYTES is 4096 unless --data says otherwise. Server
// modes (default epoll,uring), in a rotating order round by round:
//
//   epoll  rbio's TCP transport as it is: epoll_wait, one recv into a
//          linear buffer, every whole request answered, one sendmsg of all
//          the responses (header and data as separate iovecs, no copy).
//   uring  one recv SQE into the same buffer and one sendmsg SQE, both
//          submitted, and the next completion waited for, in one
//          io_uring_enter (IORING_SETUP_DEFER_TASKRUN when the kernel has
//          it, so completions are run in that call, not by interrupting).
//   zerocopy  epoll, with the responses sent MSG_ZEROCOPY (issue 18's
//          candidate for large Data-In) and the socket's error queue
//          drained of the kernel's notices; the table adds how many of the
//          sends the kernel copied anyway.
//
// The server thread runs on CPU 0 and the client on CPU 1 (on a machine with
// two or more), as tgtd and its client mostly do on a two-core host. CPU
// time is each thread's own (CLOCK_THREAD_CPUTIME_ID: user and system),
// counted over S seconds after a warm-up. The table shows medians over
// rounds: the server's CPU µs per request, its ratio to the first mode's in
// the same round, the same with the client's CPU added (on loopback the
// kernel runs a segment's receive inside the sender's system call, so work
// can move to the client without going away), requests per second, system
// calls per request and requests per pass. Which of two runs a machine
// lands in moves the absolute figures by half again (how the host places
// the vCPUs); the ratios within a run are what compare.
//
// Exit 0: measured; 2: bad arguments or a socket or ring that could not be
// set up (one line on stderr).
#include <liburing.h>
#include <linux/errqueue.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "rbio/common/unique_fd.hpp"

namespace {

using rbio::UniqueFd;

constexpr size_t kHeader = 48;
constexpr size_t kPage = 4096;

[[noreturn]] void fail(const std::string& what) {
    throw std::runtime_error(what + ": " + std::strerror(errno));
}

struct Shape {
    const char* name;
    size_t request_data;
    size_t response_data;
};

enum class Mode { Epoll, Uring, ZeroCopy };
constexpr size_t kModes = 3;
const char* name_of(Mode m) {
    switch (m) {
        case Mode::Epoll: return "epoll";
        case Mode::Uring: return "uring";
        case Mode::ZeroCopy: return "zerocopy";
    }
    return "?";
}

// What the server measured over the counted seconds.
struct Sample {
    double cpu_us = 0;
    uint64_t requests = 0;
    uint64_t syscalls = 0;
    uint64_t passes = 0;
    double seconds = 0;
    uint64_t zc_notices = 0;  // sends the kernel reported done (zerocopy)
    uint64_t zc_copied = 0;   // ... of them, copied after all
    double client_cpu_us = 0;
};

// 0: warming up, 1: counting, 2: stop. The server looks at it once a pass.
std::atomic<int> g_phase{0};

double thread_cpu_us() {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return double(t.tv_sec) * 1e6 + double(t.tv_nsec) / 1e3;
}

uint32_t data_length(const uint8_t* h) { return uint32_t(h[5]) << 16 | uint32_t(h[6]) << 8 | h[7]; }
void set_data_length(uint8_t* h, uint32_t n) {
    h[5] = uint8_t(n >> 16);
    h[6] = uint8_t(n >> 8);
    h[7] = uint8_t(n);
}

void pin_to(unsigned cpu) {
    if (std::thread::hardware_concurrency() < 2) return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);  // best effort: a restricted cpuset may refuse
}

void no_delay(int fd) {
    int one = 1;
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) < 0) fail("setsockopt(TCP_NODELAY)");
}

// The part common to both modes: requests parsed out of a linear receive
// buffer, responses queued as iovecs (header slot, then the data block).
class Server {
public:
    Server(int fd, const Shape& s, size_t depth)
        : fd_(fd), shape_(s), rx_((depth + 1) * (kHeader + s.request_data) + kPage), slots_(depth * 4) {
        set_data_length(response_header_.data(), uint32_t(s.response_data));
        for (auto& h : slots_) h = response_header_;
        data_.assign(s.response_data, 0x5a);
        iov_.reserve(slots_.size() * 2);
    }

    Sample run(Mode m) {
        switch (m) {
            case Mode::Epoll: return run_epoll(false);
            case Mode::Uring: return run_uring();
            case Mode::ZeroCopy: return run_epoll(true);
        }
        return {};
    }

private:
    // Answers every whole request in rx_[rx_start_, rx_len_); a partial one
    // stays for the next receive.
    void answer() {
        size_t off = rx_start_;
        while (rx_len_ - off >= kHeader) {
            const size_t len = kHeader + data_length(&rx_[off]);
            if (rx_len_ - off < len) break;
            auto& slot = slots_[next_slot_++ % slots_.size()];
            iov_.push_back({slot.data(), kHeader});
            if (shape_.response_data) iov_.push_back({data_.data(), shape_.response_data});
            pending_ += kHeader + shape_.response_data;
            ++requests_;
            off += len;
        }
        rx_start_ = off;
    }
    // Moves the partial request to the buffer's start, before a receive
    // (never while one is out: the kernel writes at rx_len_).
    size_t compact() {
        std::memmove(rx_.data(), rx_.data() + rx_start_, rx_len_ - rx_start_);
        rx_len_ -= rx_start_;
        rx_start_ = 0;
        return rx_.size() - rx_len_;
    }
    // After `n` bytes of the queued responses went out: drop what was sent.
    void sent(size_t n) {
        pending_ -= n;
        size_t i = 0;
        while (i < iov_.size() && n >= iov_[i].iov_len) n -= iov_[i++].iov_len;
        if (i < iov_.size() && n) {
            iov_[i].iov_base = static_cast<char*>(iov_[i].iov_base) + n;
            iov_[i].iov_len -= n;
        }
        iov_.erase(iov_.begin(), iov_.begin() + long(i));
    }
    msghdr message() {
        msghdr m{};
        m.msg_iov = iov_.data();
        m.msg_iovlen = std::min<size_t>(iov_.size(), IOV_MAX);
        return m;
    }
    // Phase bookkeeping once a pass; false when the round is over.
    bool tick() {
        const int p = g_phase.load(std::memory_order_relaxed);
        if (p == 1 && !counting_) {
            counting_ = true;
            start_ = Sample{thread_cpu_us(), requests_, syscalls_, passes_, 0};
            t0_ = std::chrono::steady_clock::now();
        }
        if (p == 2) {
            end_ = Sample{thread_cpu_us(), requests_, syscalls_, passes_, 0};
            end_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
            return false;
        }
        ++passes_;
        return true;
    }
    Sample result() const {
        Sample r{end_.cpu_us - start_.cpu_us, end_.requests - start_.requests,
                 end_.syscalls - start_.syscalls, end_.passes - start_.passes, end_.seconds};
        r.zc_notices = zc_notices_;
        r.zc_copied = zc_copied_;
        return r;
    }

    // MSG_ZEROCOPY: each notice covers a range of sends; the data block is
    // never written, so nothing waits for one except the socket's option
    // memory, which the notices use up until they are read.
    void drain_notices() {
        for (;;) {
            std::array<char, 256> control{};
            msghdr m{};
            m.msg_control = control.data();
            m.msg_controllen = control.size();
            ++syscalls_;
            if (recvmsg(fd_, &m, MSG_ERRQUEUE | MSG_DONTWAIT) < 0) {
                if (errno == EAGAIN) return;
                fail("recvmsg(MSG_ERRQUEUE)");
            }
            for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
                if (!((c->cmsg_level == SOL_IP && c->cmsg_type == IP_RECVERR) ||
                      (c->cmsg_level == SOL_IPV6 && c->cmsg_type == IPV6_RECVERR)))
                    continue;
                sock_extended_err e{};
                std::memcpy(&e, CMSG_DATA(c), sizeof e);
                if (e.ee_origin != SO_EE_ORIGIN_ZEROCOPY) continue;
                const uint64_t n = uint64_t(e.ee_data - e.ee_info) + 1;
                if (counting_) {
                    zc_notices_ += n;
                    if (e.ee_code & SO_EE_CODE_ZEROCOPY_COPIED) zc_copied_ += n;
                }
            }
        }
    }

    Sample run_epoll(bool zerocopy) {
        UniqueFd ep(epoll_create1(EPOLL_CLOEXEC));
        if (!ep) fail("epoll_create1");
        epoll_event ev{EPOLLIN, {}};
        if (epoll_ctl(ep.get(), EPOLL_CTL_ADD, fd_, &ev) < 0) fail("epoll_ctl");
        int send_flags = MSG_DONTWAIT | MSG_NOSIGNAL;
        if (zerocopy) {
            int one = 1;
            if (setsockopt(fd_, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof one) < 0)
                fail("setsockopt(SO_ZEROCOPY)");
            send_flags |= MSG_ZEROCOPY;
        }
        while (tick()) {
            epoll_event got{};
            ++syscalls_;
            if (epoll_wait(ep.get(), &got, 1, 100) < 0 && errno != EINTR) fail("epoll_wait");
            if (zerocopy && (got.events & EPOLLERR)) drain_notices();
            ++syscalls_;
            const ssize_t r = recv(fd_, rx_.data() + rx_len_, compact(), MSG_DONTWAIT);
            if (r == 0) break;
            if (r < 0 && errno != EAGAIN) fail("recv");
            if (r > 0) rx_len_ += size_t(r);
            answer();
            while (pending_) {
                const msghdr m = message();
                ++syscalls_;
                const ssize_t s = sendmsg(fd_, &m, send_flags);
                if (s < 0 && errno == ENOBUFS && zerocopy) {
                    drain_notices();  // option memory full of notices
                    continue;
                }
                if (s < 0 && errno != EAGAIN) fail("sendmsg");
                if (s > 0) sent(size_t(s));
                if (s < 0 || (pending_ && size_t(s) < pending_)) {
                    pollfd p{fd_, POLLOUT, 0};
                    ++syscalls_;
                    poll(&p, 1, 100);
                }
            }
        }
        return result();
    }

    Sample run_uring() {
        io_uring ring{};
        int rc = io_uring_queue_init(64, &ring, IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN);
        if (rc == -EINVAL) rc = io_uring_queue_init(64, &ring, 0);
        if (rc < 0) {
            errno = -rc;
            fail("io_uring_queue_init");
        }
        struct RingGuard {
            io_uring* r;
            ~RingGuard() { io_uring_queue_exit(r); }
        } guard{&ring};
        enum : uint64_t { kRecv = 1, kSend = 2 };
        bool recv_out = false, send_out = false, eof = false;
        msghdr m{};
        while (!eof && tick()) {
            if (!recv_out) {
                const size_t room = compact();
                io_uring_sqe* sqe = io_uring_get_sqe(&ring);
                io_uring_prep_recv(sqe, fd_, rx_.data() + rx_len_, room, 0);
                io_uring_sqe_set_data64(sqe, kRecv);
                recv_out = true;
            }
            if (!send_out && pending_) {
                m = message();
                io_uring_sqe* sqe = io_uring_get_sqe(&ring);
                io_uring_prep_sendmsg(sqe, fd_, &m, MSG_NOSIGNAL);
                io_uring_sqe_set_data64(sqe, kSend);
                send_out = true;
            }
            ++syscalls_;
            __kernel_timespec wait{0, 100'000'000};
            io_uring_cqe* cqe = nullptr;
            rc = io_uring_submit_and_wait_timeout(&ring, &cqe, 1, &wait, nullptr);
            if (rc < 0 && rc != -ETIME && rc != -EINTR) {
                errno = -rc;
                fail("io_uring_submit_and_wait_timeout");
            }
            unsigned head, seen = 0;
            io_uring_for_each_cqe(&ring, head, cqe) {
                ++seen;
                if (cqe->user_data == kRecv) {
                    recv_out = false;
                    if (cqe->res == 0) eof = true;
                    else if (cqe->res < 0 && cqe->res != -EAGAIN) {
                        errno = -cqe->res;
                        fail("recv (io_uring)");
                    } else if (cqe->res > 0) rx_len_ += size_t(cqe->res);
                } else {
                    send_out = false;
                    if (cqe->res < 0 && cqe->res != -EAGAIN) {
                        errno = -cqe->res;
                        fail("sendmsg (io_uring)");
                    }
                    if (cqe->res > 0) sent(size_t(cqe->res));
                }
            }
            io_uring_cq_advance(&ring, seen);
            // Responses are queued only while no sendmsg is out: its iovecs
            // are the queue's, and must not move under the kernel.
            if (!send_out) answer();
        }
        return result();
    }

    int fd_;
    Shape shape_;
    std::vector<uint8_t> rx_;  // larger than depth whole requests: never full
    size_t rx_start_ = 0, rx_len_ = 0;
    std::array<uint8_t, kHeader> response_header_{};
    std::vector<std::array<uint8_t, kHeader>> slots_;
    std::vector<uint8_t> data_;
    std::vector<iovec> iov_;
    size_t next_slot_ = 0, pending_ = 0;
    uint64_t requests_ = 0, syscalls_ = 0, passes_ = 0, zc_notices_ = 0, zc_copied_ = 0;
    bool counting_ = false;
    Sample start_, end_;
    std::chrono::steady_clock::time_point t0_;
};

// Keeps `depth` requests in flight, one send() per request, until the
// server hangs up. Returns its thread's CPU µs over the counted seconds:
// on loopback the kernel runs a segment's receive in the sender's system
// call, so work can move between server and client without going away.
double client(int fd, const Shape& s, size_t depth) {
    double cpu0 = 0, cpu1 = 0;
    auto tick = [&] {
        const int p = g_phase.load(std::memory_order_relaxed);
        if (p >= 1 && cpu0 == 0) cpu0 = thread_cpu_us();
        if (p == 2 && cpu1 == 0) cpu1 = thread_cpu_us();
    };
    // The server may hang up while this thread is sending, before a recv
    // saw the phase end: then the end is now (at most a pass late).
    auto spent = [&] {
        if (cpu0 > 0 && cpu1 == 0) cpu1 = thread_cpu_us();
        return cpu1 - cpu0;
    };
    std::vector<uint8_t> request(kHeader + s.request_data, 0x11);
    std::memset(request.data(), 0, kHeader);
    set_data_length(request.data(), uint32_t(s.request_data));
    auto send_one = [&] {
        size_t off = 0;
        while (off < request.size()) {
            const ssize_t r = send(fd, request.data() + off, request.size() - off, MSG_NOSIGNAL);
            if (r <= 0) return false;
            off += size_t(r);
        }
        return true;
    };
    for (size_t i = 0; i < depth; ++i)
        if (!send_one()) return 0;
    std::vector<uint8_t> rx(depth * (kHeader + s.response_data) + kPage);
    size_t len = 0;
    const size_t response = kHeader + s.response_data;
    for (;;) {
        const ssize_t r = recv(fd, rx.data() + len, rx.size() - len, 0);
        tick();
        if (r <= 0) return spent();
        len += size_t(r);
        const size_t whole = len / response;
        for (size_t i = 0; i < whole; ++i)
            if (!send_one()) return spent();
        len -= whole * response;
        std::memmove(rx.data(), rx.data() + whole * response, len);
    }
}

Sample round(Mode mode, const Shape& s, size_t depth, double seconds) {
    UniqueFd listener(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!listener) fail("socket");
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof a;
    if (bind(listener.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) < 0) fail("bind 127.0.0.1:0");
    if (listen(listener.get(), 1) < 0) fail("listen");
    if (getsockname(listener.get(), reinterpret_cast<sockaddr*>(&a), &alen) < 0) fail("getsockname");
    UniqueFd c(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!c) fail("socket");
    if (connect(c.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) < 0) fail("connect");
    UniqueFd srv(accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!srv) fail("accept");
    no_delay(c.get());
    no_delay(srv.get());

    g_phase = 0;
    Sample out;
    std::string error;
    std::thread server([&] {
        pin_to(0);
        try {
            Server sv(srv.get(), s, depth);
            out = sv.run(mode);
        } catch (const std::exception& e) {
            error = e.what();
        }
        shutdown(srv.get(), SHUT_RDWR);  // the client's recv returns 0
    });
    double client_cpu = 0;
    std::thread cl([&] {
        pin_to(1);
        client_cpu = client(c.get(), s, depth);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    g_phase = 1;
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    g_phase = 2;
    server.join();
    cl.join();
    if (!error.empty()) throw std::runtime_error(std::string(name_of(mode)) + " server: " + error);
    if (out.requests == 0) throw std::runtime_error(std::string(name_of(mode)) + " server answered nothing");
    out.client_cpu_us = client_cpu;
    return out;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

[[noreturn]] void usage(const std::string& why) {
    std::fprintf(
        stderr,
        "socket_paths: %s (options: --rounds N --seconds S --depth Q --shapes read,write --data BYTES "
        "--modes epoll,uring,zerocopy)\n",
        why.c_str());
    std::exit(2);
}

long number(const char* flag, const char* v, long lo, long hi) {
    char* end = nullptr;
    errno = 0;
    const long n = std::strtol(v, &end, 10);
    if (errno || !end || *end || n < lo || n > hi)
        usage(std::string(flag) + " wants a whole number from " + std::to_string(lo) + " to " +
              std::to_string(hi));
    return n;
}

}  // namespace

int main(int argc, char** argv) {
    long rounds = 5, seconds = 3, depth = 32, data = long(kPage);
    std::vector<std::string> shape_names;
    std::vector<Mode> modes;
    auto split = [](std::string rest) {
        std::vector<std::string> out;
        while (!rest.empty()) {
            out.push_back(rest.substr(0, rest.find(',')));
            rest = out.back().size() < rest.size() ? rest.substr(out.back().size() + 1) : "";
        }
        return out;
    };
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--help") {
            std::printf(
                "socket_paths [--rounds N] [--seconds S] [--depth Q] [--shapes read,write] [--data BYTES] "
                "[--modes epoll,uring,zerocopy]\n(see bench/README.md, \"Socket paths\")\n");
            return 0;
        }
        if (a != "--rounds" && a != "--seconds" && a != "--depth" && a != "--data" && a != "--shapes" &&
            a != "--modes")
            usage("unknown option " + a);
        if (i + 1 >= argc) usage(a + " needs a value");
        const char* v = argv[++i];
        if (a == "--rounds") rounds = number("--rounds", v, 1, 99);
        else if (a == "--seconds") seconds = number("--seconds", v, 1, 600);
        else if (a == "--depth") depth = number("--depth", v, 1, 256);
        else if (a == "--data") data = number("--data", v, 1, 1 << 20);
        else if (a == "--shapes") {
            for (const auto& one : split(v)) {
                if (one != "read" && one != "write") usage("unknown shape '" + one + "' (read, write)");
                shape_names.push_back(one);
            }
        } else if (a == "--modes") {
            for (const auto& one : split(v)) {
                if (one == "epoll") modes.push_back(Mode::Epoll);
                else if (one == "uring") modes.push_back(Mode::Uring);
                else if (one == "zerocopy") modes.push_back(Mode::ZeroCopy);
                else usage("unknown mode '" + one + "' (epoll, uring, zerocopy)");
            }
        }
    }
    if (shape_names.empty()) shape_names = {"read", "write"};
    if (modes.empty()) modes = {Mode::Epoll, Mode::Uring};
    std::vector<Shape> shapes;
    shapes.reserve(shape_names.size());
    for (const auto& n : shape_names)
        shapes.push_back(n == "read" ? Shape{"read", 0, size_t(data)} : Shape{"write", size_t(data), 0});

    try {
        std::printf("%ld B of data, %ld in flight, medians of %ld rounds of %ld s\n\n", data, depth, rounds,
                    seconds);
        std::printf(
            "| shape | server | CPU µs/request | to %s | with the client's | to %s | requests/s | "
            "system calls/request | requests/pass | zero-copy sends copied |\n"
            "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|\n",
            name_of(modes[0]), name_of(modes[0]));
        for (const Shape& s : shapes) {
            std::vector<double> cpu[kModes], rate[kModes], calls[kModes], per_pass[kModes], ratio[kModes],
                both[kModes], both_ratio[kModes];
            uint64_t notices[kModes] = {}, copied[kModes] = {};
            for (long r = 0; r < rounds; ++r) {
                // Rotate which mode goes first, so drift favours none.
                std::vector<double> this_round(kModes, 0), this_both(kModes, 0);
                for (size_t k = 0; k < modes.size(); ++k) {
                    const Mode m = modes[(k + size_t(r)) % modes.size()];
                    const Sample x = round(m, s, size_t(depth), double(seconds));
                    const auto i = size_t(m);
                    cpu[i].push_back(x.cpu_us / double(x.requests));
                    rate[i].push_back(double(x.requests) / x.seconds);
                    calls[i].push_back(double(x.syscalls) / double(x.requests));
                    per_pass[i].push_back(double(x.requests) / double(std::max<uint64_t>(x.passes, 1)));
                    notices[i] += x.zc_notices;
                    copied[i] += x.zc_copied;
                    both[i].push_back((x.cpu_us + x.client_cpu_us) / double(x.requests));
                    this_round[i] = cpu[i].back();
                    this_both[i] = both[i].back();
                    std::fprintf(stderr,
                                 "socket_paths: %s round %ld/%ld %s: %.2f µs/request, %.0f requests/s\n",
                                 s.name, r + 1, rounds, name_of(m), cpu[i].back(), rate[i].back());
                }
                for (Mode m : modes) {
                    ratio[size_t(m)].push_back(this_round[size_t(m)] / this_round[size_t(modes[0])]);
                    both_ratio[size_t(m)].push_back(this_both[size_t(m)] / this_both[size_t(modes[0])]);
                }
            }
            for (Mode m : modes) {
                const auto i = size_t(m);
                char zc[64] = "-";
                if (m == Mode::ZeroCopy)
                    std::snprintf(zc, sizeof zc, "%llu of %llu", (unsigned long long)copied[i],
                                  (unsigned long long)notices[i]);
                std::printf("| %s | %s | %.2f | %.2f | %.2f | %.2f | %.0f | %.2f | %.2f | %s |\n", s.name,
                            name_of(m), median(cpu[i]), median(ratio[i]), median(both[i]),
                            median(both_ratio[i]), median(rate[i]), median(calls[i]), median(per_pass[i]),
                            zc);
            }
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "socket_paths: error: %s\n", e.what());
        return 2;
    }
    return 0;
}
