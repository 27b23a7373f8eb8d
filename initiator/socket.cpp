#include "socket.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <stdexcept>

#include "rbio/initiator/error.hpp"
#include "rbio/initiator/log.hpp"

namespace rbio::initiator {

Portal Portal::parse(std::string_view text) {
    Portal p;
    std::string_view port;
    if (!text.empty() && text.front() == '[') {
        size_t close = text.find(']');
        if (close == std::string_view::npos)
            throw std::invalid_argument("portal '" + std::string(text) + "': missing ']'");
        p.host = std::string(text.substr(1, close - 1));
        std::string_view rest = text.substr(close + 1);
        if (!rest.empty()) {
            if (rest.front() != ':')
                throw std::invalid_argument("portal '" + std::string(text) + "': junk after ']'");
            port = rest.substr(1);
        }
    } else {
        size_t colon = text.rfind(':');
        if (colon != std::string_view::npos && text.find(':') == colon) {
            p.host = std::string(text.substr(0, colon));
            port = text.substr(colon + 1);
        } else {
            p.host = std::string(text);
        }
    }
    // A TargetAddress may end in ",TPGT".
    if (size_t comma = port.find(','); comma != std::string_view::npos) port = port.substr(0, comma);
    if (p.host.empty()) throw std::invalid_argument("portal '" + std::string(text) + "': no host");
    if (!port.empty()) {
        unsigned v = 0;
        for (char c : port) {
            if (c < '0' || c > '9' || v > 65535)
                throw std::invalid_argument("portal '" + std::string(text) + "': bad port");
            v = v * 10 + unsigned(c - '0');
        }
        if (v == 0 || v > 65535) throw std::invalid_argument("portal '" + std::string(text) + "': bad port");
        p.port = uint16_t(v);
    }
    return p;
}

std::string Portal::to_string() const {
    if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
    return host + ":" + std::to_string(port);
}

UniqueFd connect_tcp(const Portal& portal, std::chrono::milliseconds timeout) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* raw = nullptr;
    int rc = ::getaddrinfo(portal.host.c_str(), std::to_string(portal.port).c_str(), &hints, &raw);
    if (rc != 0)
        fail(ErrorKind::Unreachable,
             "portal " + portal.to_string() + ": cannot resolve: " + gai_strerror(rc));
    std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> list(raw, freeaddrinfo);
    auto deadline = std::chrono::steady_clock::now() + timeout;
    std::string last = "no address";
    unsigned tried = 0, refused = 0;  // all refused: nothing listens there
    for (addrinfo* ai = list.get(); ai; ai = ai->ai_next) {
        ++tried;
        UniqueFd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
        if (fd.get() < 0) {
            last = std::strerror(errno);
            continue;
        }
        int one = 1;
        ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) == 0) return fd;
        if (errno != EINPROGRESS) {
            refused += errno == ECONNREFUSED;
            last = std::strerror(errno);
            continue;
        }
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
                                                                          std::chrono::steady_clock::now());
        pollfd pfd{fd.get(), POLLOUT, 0};
        int n;
        do {
            n = ::poll(&pfd, 1, int(std::max<int64_t>(0, left.count())));
        } while (n < 0 && errno == EINTR);
        if (n == 0) {
            last = "no answer within " + std::to_string(timeout.count()) + " ms";
            continue;
        }
        int err = 0;
        socklen_t len = sizeof err;
        if (n < 0 || ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
        if (err == 0) return fd;
        refused += err == ECONNREFUSED;
        last = std::strerror(err);
    }
    const std::string why = "portal " + portal.to_string() + ": cannot connect: " + last;
    if (tried > 0 && refused == tried) throw ConnectionRefused(portal.to_string(), why);
    fail(ErrorKind::Unreachable, why);
}

}  // namespace rbio::initiator
