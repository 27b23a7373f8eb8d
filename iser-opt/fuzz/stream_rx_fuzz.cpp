// libFuzzer target for StreamRx, the receive side tgt's iSCSI core pulls
// from: an arbitrary byte stream goes through a real socketpair in writes of
// sizes drawn from the input, and is read back in requests of sizes drawn
// from the input (small ones like a BHS, large ones that take the direct
// path), one receive per simulated event. Besides the sanitizers' checks it
// asserts that the bytes come out exactly as they went in, that no event
// costs more than one receive call, and that the end of stream comes only
// after every byte.
//
// Input: 4 bytes of settings, then the stream. Build and run: see
// iser-opt/README.md.
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <vector>

#include "rbio/iser/stream_rx.hpp"

#include "rbio/common/fuzz_check.hpp"

namespace {

using namespace rbio::iser;

struct Fds {
    int fd[2] = {-1, -1};
    ~Fds() {
        for (int f : fd)
            if (f >= 0) ::close(f);
    }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 4) return 0;
    StreamRxConfig cfg;
    cfg.capacity = 4096 + size_t(data[0]) * 256;
    cfg.direct_threshold = 1 + size_t(data[1]) * 64;
    uint32_t seed = uint32_t(data[2]) << 8 | data[3];
    const uint8_t* stream = data + 4;
    size_t len = size - 4;

    Fds sp;
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sp.fd) != 0) return 0;
    ConnectionCounters c;
    StreamRx rx(sp.fd[0], cfg, c);

    auto next = [&seed](uint32_t mod) {
        seed = seed * 1103515245u + 12345u;
        return (seed >> 8) % mod;
    };
    std::vector<uint8_t> out, req;
    size_t sent = 0, have = 0;
    bool closed = false;
    for (int events = 0; events < 100000 && out.size() < len; ++events) {
        if (sent < len) {
            size_t n = std::min<size_t>(len - sent, 1 + next(3000));
            ssize_t w = ::send(sp.fd[1], stream + sent, n, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (w > 0) sent += size_t(w);
        } else if (!closed) {
            ::shutdown(sp.fd[1], SHUT_WR);
            closed = true;
        }
        uint64_t calls_before = c[Counter::RecvCalls];
        rx.take_event();
        ssize_t f = rx.fill();
        FUZZ_CHECK(f >= 0 || f == -EAGAIN);
        for (;;) {
            if (req.empty()) {
                size_t left = len - out.size();
                if (left == 0) break;
                size_t want = next(4) == 0 ? 48 : 1 + next(20000);
                req.resize(std::min(want, left));
                have = 0;
            }
            ssize_t n = rx.read(std::span<uint8_t>(req).subspan(have));
            if (n == -EAGAIN) break;
            FUZZ_CHECK(n > 0);  // no end of stream before every byte is out
            have += size_t(n);
            if (have == req.size()) {
                out.insert(out.end(), req.begin(), req.end());
                req.clear();
            }
        }
        FUZZ_CHECK(c[Counter::RecvCalls] - calls_before <= 1);
    }
    FUZZ_CHECK(out.size() == len);
    FUZZ_CHECK(std::equal(out.begin(), out.end(), stream));
    return 0;
}
