#include "session_daemon.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <sstream>

#include "../fuse/fuse_export.hpp"
#include "../fuse/lun_io.hpp"
#include "options.hpp"
#include "rbio/initiator/error.hpp"
#include "rbio/initiator/log.hpp"
#include "rbio/initiator/multipath.hpp"
#include "rbio/initiator/scsi.hpp"
#include "session_state.hpp"

namespace rbio::cli {
namespace {

using initiator::UniqueFd;

constexpr uint8_t kDirectAccessBlockDevice = 0x00;
// How often a session lost for good is tried again.
constexpr std::chrono::milliseconds kReconnectInterval{5000};

void write_all(int fd, const std::string& text) {
    size_t off = 0;
    while (off < text.size()) {
        ssize_t n = ::send(fd, text.data() + off, text.size() - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == ENOTSOCK) n = ::write(fd, text.data() + off, text.size() - off);
        if (n <= 0) return;  // the reader went away
        off += size_t(n);
    }
}

// The disk LUs of the target (peripheral type 0; tgt's LUN 0 is a
// controller), each ready and with its capacity.
std::vector<fuse::LunInfo> disk_luns(initiator::IoSession& s) {
    std::vector<fuse::LunInfo> out;
    for (uint64_t lun : initiator::report_luns(s)) {
        initiator::InquiryData inq = initiator::inquiry(s, lun);
        if (inq.peripheral_type != kDirectAccessBlockDevice) {
            RBIO_LOG(Info,
                     "LUN " << lun << ": peripheral type " << int(inq.peripheral_type) << ", not exported");
            continue;
        }
        initiator::test_unit_ready(s, lun);
        initiator::Capacity cap = initiator::read_capacity16(s, lun);
        out.push_back({lun, cap.block_size, cap.blocks, "lun" + std::to_string(lun)});
    }
    return out;
}

UniqueFd listen_unix(const std::string& path) {
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    if (path.size() >= sizeof sa.sun_path) throw std::runtime_error("control socket path too long: " + path);
    std::memcpy(sa.sun_path, path.c_str(), path.size() + 1);
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (fd.get() < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
    ::unlink(path.c_str());
    mode_t old = ::umask(0077);
    int rc = ::bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa);
    ::umask(old);
    if (rc != 0 || ::listen(fd.get(), 8) != 0)
        throw std::runtime_error("control socket " + path + ": " + std::strerror(errno));
    return fd;
}

// Several portals: the first disk LU (its identity and ALUA states decide
// for the multipath layer), found through the first portal that logs in.
// REPORT LUNS and INQUIRY are served by gateways in every ALUA state.
uint64_t first_disk_lun(const DaemonConfig& c, initiator::SessionOptions opts) {
    opts.wake_fd = -1;
    opts.replacement_timeout = std::chrono::milliseconds(0);
    std::string errors;
    for (const initiator::Portal& p : c.portals) {
        try {
            auto s = initiator::Session::login(p, opts);
            uint64_t found = 0;
            for (uint64_t lun : initiator::report_luns(*s))
                if (initiator::inquiry(*s, lun).peripheral_type == kDirectAccessBlockDevice) {
                    found = lun;
                    break;
                }
            s->logout();
            return found;
        } catch (const initiator::InitiatorError& e) {
            errors += (errors.empty() ? "" : "; ") + p.to_string() + ": " + e.what();
        }
    }
    initiator::fail(initiator::ErrorKind::Unreachable,
                    "no portal of " + std::to_string(c.portals.size()) + " logged in: " + errors);
}

std::string report(const SessionRecord& rec, const fuse::LunIo& io) {
    fuse::IoSnapshot s = io.snapshot();
    std::ostringstream o;
    o << rec.target << "\n"
      << "  portal " << rec.portal << "  pid " << rec.pid << "  state " << s.state << "\n"
      << "  initiator " << rec.initiator << "\n"
      << "  mount " << (rec.mount.empty() ? "(none)" : rec.mount) << "\n";
    for (const auto& l : io.luns())
        o << "  " << l.name << ": " << (rec.mount.empty() ? std::string("-") : rec.mount + "/" + l.name)
          << "  " << l.blocks << " blocks of " << l.block_size << " bytes (" << l.bytes() << " bytes)\n";
    o << "  negotiated " << initiator::describe(s.params) << "\n";
    const fuse::IoCounters& c = s.io;
    o << "  io reads=" << c.reads << " writes=" << c.writes << " syncs=" << c.syncs
      << " read_bytes=" << c.read_bytes << " written_bytes=" << c.written_bytes << " rmw=" << c.rmw
      << " fua_writes=" << c.fua_writes << " unaligned_reads=" << c.unaligned_reads
      << " ordered_waits=" << c.ordered_waits << " errors=" << c.errors << " in_flight=" << s.in_flight
      << " max_in_flight=" << c.max_in_flight << "\n";
    const auto& t = s.session.transport;
    o << "  transport pdus_out=" << t[iser::Counter::PdusOut] << " pdus_in=" << t[iser::Counter::PdusIn]
      << " send_calls=" << t[iser::Counter::SendCalls] << " recv_calls=" << t[iser::Counter::RecvCalls]
      << " poll_calls=" << s.session.poll_calls << " commands=" << s.session.commands
      << " reinstatements=" << s.session.reinstatements << " commands_retried=" << s.session.commands_retried
      << " pings=" << s.session.pings_sent << " pings_answered=" << s.session.pings_answered << "\n"
      << "  log " << rec.log << "\n";
    for (const std::string& p : s.paths) o << "  path " << p << "\n";
    return o.str();
}

// Reads one request line from a fresh control connection (2 s at most).
std::string read_request(int fd) {
    std::string line;
    char buf[256];
    for (int waited = 0; waited < 2000 && line.find('\n') == std::string::npos && line.size() < 256;) {
        pollfd p{fd, POLLIN, 0};
        int n = ::poll(&p, 1, 100);
        if (n == 0) {
            waited += 100;
            continue;
        }
        ssize_t r = ::read(fd, buf, sizeof buf);
        if (r <= 0) {
            if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
            break;
        }
        line.append(buf, size_t(r));
    }
    return line.substr(0, line.find('\n'));
}

// Runs fn on a session just logged in; if it throws, the session logs out
// before the exception goes on (a Session's destructor only closes its
// connection).
template <class Fn>
auto logged_out_on_throw(initiator::IoSession& session, Fn&& fn) {
    try {
        return fn();
    } catch (...) {
        try {
            session.logout();
        } catch (const std::exception& e) {
            RBIO_LOG(Warning, "logout after a failed set-up: " << e.what());
        }
        throw;
    }
}

// On every way out that end_session() has not taken: FUSE's loop ends
// first (nothing calls into io from then on), then io answers what is
// in flight, flushes and logs out (also a session whose set-up failed
// after login), and only then does the FUSE session go, which those
// answers are sent through.
struct Teardown {
    std::unique_ptr<fuse::LunIo>& io;
    std::optional<fuse::FuseExport>& fx;
    ~Teardown() {
        try {
            if (fx) {
                fx->unmount(true);
                fx->join();
            }
            if (io && !io->ended()) {
                if (!io->started()) io->start();  // to log out
                std::string err = io->shutdown();
                if (!err.empty()) RBIO_LOG(Warning, "logout: " << err);
            }
        } catch (const std::exception& e) {
            RBIO_LOG(Error, "ending the session: " << e.what());
        }
        fx.reset();
    }
};

}  // namespace

int run_session_daemon(const DaemonConfig& c, UniqueFd ready) {
    auto report_failure = [&](int code, const std::string& message) {
        RBIO_LOG(Error, message);
        if (ready.get() >= 0) write_all(ready.get(), std::to_string(code) + "\n" + message);
        return code;
    };
    // Signals are taken through a signalfd by the control loop; every thread
    // started below inherits the mask.
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
    ::signal(SIGPIPE, SIG_IGN);

    SessionRecord rec;
    rec.key = c.key;
    rec.pid = ::getpid();
    rec.target = c.options.target_name;
    for (const initiator::Portal& p : c.portals)
        rec.portal += (rec.portal.empty() ? "" : ",") + p.to_string();
    rec.initiator = c.options.initiator_name;
    rec.mount = c.mount;
    rec.socket = state_path(c.state_dir, c.key, ".sock");
    rec.log = c.log;

    std::unique_ptr<fuse::LunIo> io;
    std::optional<fuse::FuseExport> fx;
    UniqueFd listen_fd, sig_fd, end_fd;
    Teardown teardown{io, fx};  // after the fds: FUSE's loop may write end_fd until joined
    try {
        UniqueFd wake = fuse::LunIo::make_wake_fd();
        initiator::SessionOptions opts = c.options;
        opts.wake_fd = wake.get();
        auto open_session = [&c, opts] {
            fuse::LunIo::NewSession n;
            if (c.portals.size() == 1) {
                n.session = initiator::Session::login(c.portals.front(), opts);
            } else {
                initiator::MultipathOptions mo;
                mo.session = opts;
                mo.lun = first_disk_lun(c, opts);
                mo.no_path_timeout = opts.replacement_timeout;
                auto mp = initiator::MultipathSession::open(c.portals, mo);
                n.describe_paths = [m = mp.get()] { return m->describe_paths(); };
                n.session = std::move(mp);
            }
            return n;
        };
        fuse::LunIo::NewSession first = open_session();
        std::vector<fuse::LunInfo> luns = logged_out_on_throw(*first.session, [&] {
            std::vector<fuse::LunInfo> found = disk_luns(*first.session);
            if (found.empty() && !c.mount.empty())
                initiator::fail(initiator::ErrorKind::Io,
                                "target " + rec.target + " has no disk LUs to export");
            return found;
        });
        io = std::make_unique<fuse::LunIo>(std::move(first.session), std::move(wake), luns,
                                           std::move(first.describe_paths));
        // A session lost for good is logged in again, for the same LUs: the
        // files keep their sizes, so an LU that shrank or changed its block
        // size (or went) is not served again.
        io->set_reconnect(
            [open_session, luns] {
                fuse::LunIo::NewSession n = open_session();
                logged_out_on_throw(*n.session, [&] {
                    std::vector<fuse::LunInfo> now = disk_luns(*n.session);
                    for (const fuse::LunInfo& was : luns) {
                        auto it = std::find_if(now.begin(), now.end(),
                                               [&](const fuse::LunInfo& l) { return l.lun == was.lun; });
                        if (it == now.end() || it->block_size != was.block_size || it->blocks < was.blocks)
                            throw std::runtime_error(
                                "LUN " + std::to_string(was.lun) +
                                " is gone or smaller than at login: not serving it again");
                    }
                    return 0;
                });
                return n;
            },
            kReconnectInterval);
        if (!c.mount.empty()) fx.emplace(*io, c.mount, "rbio:" + rec.target);
        listen_fd = listen_unix(rec.socket);
        sig_fd = UniqueFd(::signalfd(-1, &sigs, SFD_CLOEXEC | SFD_NONBLOCK));
        end_fd = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
        if (sig_fd.get() < 0 || end_fd.get() < 0)
            throw std::runtime_error(std::string("signalfd/eventfd: ") + std::strerror(errno));
        io->start();
        int efd = end_fd.get();
        if (fx)
            fx->start([efd] {
                uint64_t one = 1;
                ssize_t n = ::write(efd, &one, sizeof one);
                (void)n;
            });
        write_record(c.state_dir, rec);
    } catch (const initiator::InitiatorError& e) {
        return report_failure(e.exit_code(), std::string(initiator::to_string(e.kind())) + ": " + e.what());
    } catch (const fuse::MountError& e) {
        return report_failure(kExitMount, e.what());
    } catch (const std::exception& e) {
        return report_failure(kExitInternal, std::string("internal error: ") + e.what());
    }
    {
        std::string ok = "0\n";
        for (const auto& l : io->luns())
            if (!c.mount.empty()) ok += c.mount + "/" + l.name + " " + std::to_string(l.bytes()) + "\n";
        write_all(ready.get(), ok);
        ready = UniqueFd();
    }
    RBIO_LOG(Info, "logged in to " << rec.target << " at " << rec.portal << "; serving " << io->luns().size()
                                   << " LUs" << (c.mount.empty() ? "" : " on " + c.mount));

    // Ends the session: unmount (refused while a file is open unless lazy),
    // drain, SYNCHRONIZE CACHE, logout. Returns "" or "CODE\tMESSAGE".
    auto end_session = [&](bool lazy) -> std::optional<std::pair<int, std::string>> {
        if (fx) {
            int err = fx->unmount(lazy);
            if (err == EBUSY)
                return std::make_pair(kExitBusy, c.mount +
                                                     " is in use (a file is open, e.g. by a loop device: "
                                                     "losetup -d it first)");
            if (err) return std::make_pair(kExitMount, "umount " + c.mount + ": " + std::strerror(err));
            if (!lazy) fx->join();
        }
        std::string err = io->shutdown();
        // Every request is answered: the FUSE session can go. (Lazily
        // detached, its loop may still be blocked in /dev/fuse: the caller
        // ends the process instead.)
        if (fx && !lazy) fx->close();
        remove_record(c.state_dir, c.key);
        if (!err.empty()) return std::make_pair(int(initiator::ErrorKind::ConnectionLost), "logout: " + err);
        return std::nullopt;
    };

    UniqueFd last_client;  // open until the process ends: its EOF tells `rbio logout` we are gone
    for (;;) {
        pollfd fds[3] = {{listen_fd.get(), POLLIN, 0}, {sig_fd.get(), POLLIN, 0}, {end_fd.get(), POLLIN, 0}};
        if (::poll(fds, 3, -1) < 0) {
            if (errno == EINTR) continue;
            RBIO_LOG(Error, "poll: " << std::strerror(errno));
            break;
        }
        if (fds[1].revents) {
            signalfd_siginfo si{};
            ssize_t n = ::read(sig_fd.get(), &si, sizeof si);
            (void)n;
            RBIO_LOG(Warning, "signal " << si.ssi_signo << ": logging out (lazy unmount)");
            auto r = end_session(true);
            if (r) RBIO_LOG(Error, r->second);
            // The session is logged out and the I/O thread joined. The
            // unmount ended the FUSE connection where it could open its
            // abort file; where it could not, a lazily detached mount still
            // in use keeps the loop threads blocked in /dev/fuse, so they
            // are not joined: the process ends here, and the kernel ends the
            // connection when /dev/fuse closes (later I/O on open files
            // gets ENOTCONN).
            std::fflush(nullptr);
            ::_exit(r ? r->first : kExitOk);
        }
        if (fds[2].revents) {
            RBIO_LOG(Warning, c.mount << " was unmounted from outside: logging out");
            auto r = end_session(false);
            if (r) RBIO_LOG(Error, r->second);
            return r ? r->first : kExitOk;
        }
        if (fds[0].revents) {
            UniqueFd client(::accept4(listen_fd.get(), nullptr, nullptr, SOCK_CLOEXEC));
            if (client.get() < 0) continue;
            std::string req = read_request(client.get());
            if (req == "stats") {
                write_all(client.get(), report(rec, *io));
            } else if (req == "logout") {
                RBIO_LOG(Info, "logout requested");
                auto r = end_session(false);
                if (r && r->first == kExitBusy) {
                    write_all(client.get(), "error " + std::to_string(r->first) + " " + r->second + "\n");
                    continue;  // still logged in and mounted
                }
                write_all(client.get(),
                          r ? "error " + std::to_string(r->first) + " " + r->second + "\n" : "ok\n");
                last_client = std::move(client);
                return r ? r->first : kExitOk;
            } else {
                write_all(client.get(), "error 2 unknown request '" + req + "'\n");
            }
        }
    }
    return kExitInternal;
}

}  // namespace rbio::cli
