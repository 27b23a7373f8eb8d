// iscsi_hostile: a deliberately misbehaving iSCSI initiator for
// tests/integration/hostile-input.sh. It speaks iSCSI over a raw TCP socket
// on 127.0.0.1 (PDUs built with rbio_iser_opt), breaks the protocol in one
// chosen way and reports what the target did about it.
//
//   iscsi_hostile CASE --port N [options]
//
// Cases (each on fresh connections):
//   random          several connections that send random bytes right after
//                   connecting, before any login
//   bad-opcode      log in, then send a PDU with an undefined opcode (0x0b)
//   over-mrdsl      log in, then a WRITE(10) whose immediate data is 4 KiB
//                   longer than the target's MaxRecvDataSegmentLength
//   max-dsl         log in, then a WRITE(10) with DataSegmentLength 0xffffff
//                   followed by only 64 KiB of its data
//   huge-edtl       log in, then on fresh sessions a READ(10) of 4 KiB whose
//                   Expected Data Transfer Length is 0xffffffff,
//                   0xfffffff0 and 0x80000000: lengths that wrap when
//                   rounded up or read as a signed int, legal on the wire
//                   (the target sends 4 KiB and a residual); prints each
//                   reaction
//   data-out-beyond log in, send a WRITE(10) of 512 bytes without immediate
//                   data and an unsolicited Data-Out of 512 bytes at offset
//                   4096, then at 256 MiB (each on a new connection)
//   data-out-unasked log in, send a WRITE(10) of 4 KiB without immediate data
//                   with a solicited Data-Out before any R2T; then (new
//                   connection) a WRITE(10) with all its data immediate and
//                   an unsolicited Data-Out after it; then (new connection)
//                   a WRITE(10) with all its data immediate but F=0, and an
//                   empty unsolicited Data-Out with F=1 after it
//   bad-ahs         log in, send a TEST UNIT READY with a 4-byte AHS of a
//                   vendor type and an immediate NOP-Out with 1020 bytes of
//                   AHS; then (new connection) a TEST UNIT READY with an
//                   Extended CDB AHS of AHSLength 0; then (new connection)
//                   a bidirectional READ(10) of 1 MiB with a Read Length AHS
//                   of 0xffffffff
//   cmdsn-window    log in; a TEST UNIT READY at MaxCmdSN, then one at
//                   each CmdSN from ExpCmdSN up to it: every one must be
//                   answered GOOD, the connection open (the window's edge
//                   is legal, and out of order is legal). Then (new
//                   connections, each watched for --expect-close) a TEST
//                   UNIT READY at MaxCmdSN + 1; one at ExpCmdSN + 1 twice
//                   (ExpCmdSN skipped); one at ExpCmdSN - 1
//   cmdsn-connections  a session of two connections (--max-connections 2):
//                   on the first, the window past ExpCmdSN (parked), then
//                   a WRITE(10) at ExpCmdSN whose data is held back; the
//                   second joins at the next CmdSN (its login response
//                   advertises MaxCmdSN one beyond) and sends a TEST UNIT
//                   READY there; then the WRITE's data: every command must
//                   be answered GOOD, both connections open. Then (a new
//                   session) the first connection sends a WRITE(10) at
//                   ExpCmdSN + 1, data held back, and a joining connection
//                   a TEST UNIT READY at the same CmdSN, a duplicate: that
//                   connection is watched for --expect-close. Then (a new
//                   session) a connection joins with a login CmdSN 2^30
//                   ahead, and the first sends at MaxCmdSN + 2: the first
//                   is watched for --expect-close
//   ping-reply      (a well-behaved initiator, for a target with nop_interval
//                   set) log in; three times: wait for the target's NOP-In
//                   ping, then send its NOP-Out reply and a TEST UNIT READY
//                   in one send call. Prints "response_ms=<ms>" per round:
//                   how long the command's response took; exit 1 if one
//                   took longer than --wait-ms (a response queued behind
//                   the reply waited for the next ping in tgt's core)
//   login-flood     start a login, then send login requests that each stay
//                   in the security stage (T=0, unknown X- keys the target
//                   answers NotUnderstood) without reading a response, until
//                   the target stops reading; hold the connection
//   request-flood   log in, then send TEST UNIT READYs in CmdSN order
//                   without reading a response, until the target stops
//                   reading or has taken --max-mib; hold the connection.
//                   Prints "requests=N stopped=0|1"
//   data-out-cut    log in, send a WRITE(10) of 8 KiB at ExpCmdSN + 1 (parked)
//                   and part of its unsolicited Data-Out, then close (then
//                   the same ending with a TCP reset); then a session of two
//                   connections: a WRITE(10) on the first, its Data-Out on
//                   the second (watched for --expect-close)
//   truncate-close  log in, send part of a PDU, close (twice: cut inside
//                   the BHS, and cut inside the data segment)
//   truncate-reset  the same, but end with a TCP reset (SO_LINGER 0)
//   idle            connect and send nothing; hold the connection
//   churn           connect and close at once, over and over, for --hold-ms:
//                   the target removes a closed connection's fd from its
//                   event loop many times while other initiators' I/O is
//                   in flight
//   flood           log in, send --count READ(10) of --kib KiB each (READ(16)
//                   from 32 MiB up), never read the responses; hold the
//                   connection (its local port printed first, as the
//                   target's log names it)
//   logout-behind-reads  log in, send --count READ(10)s of --kib KiB,
//                   read nothing for --hold-ms (the target's responses fill
//                   its socket), send a Logout Request (close the session),
//                   then read everything the target sends, a PDU each 2 ms,
//                   until it closes.
//                   Exit 4 if no Logout Response came before the close (a
//                   target that closed with the response still queued
//                   behind the reads' data cancelled it); prints
//                   "logout_response=0|1 data_in_bytes=N"
//   lone-after-burst  log in; three times: 8 TEST UNIT READY one by one
//                   (each answered before the next: the passes of an
//                   initiator that sends one PDU per call), --count in one
//                   send call (so they arrive in one receive) and their
//                   responses read, then one TEST UNIT READY alone, timed.
//                   Prints "lone_ms=<ms>" per round: how long the lone
//                   command waited for its response (receive moderation
//                   holds it until its wait timer ends)
//
// Options:
//   --port N             the target's portal port on 127.0.0.1 (required)
//   --target IQN         target name (required except for random and idle)
//   --lun N              LUN for SCSI commands (default 1)
//   --seed N             seed for random bytes (default 1)
//   --connections N      connections of the random case (default 16)
//   --wait-ms N          how long to watch for the target's reaction to a
//                        malformed PDU (default 1000)
//   --expect-close       exit 1 unless the target closes (or resets) the
//                        connection within --wait-ms (flood: within
//                        --wait-ms after the hold)
//   --hold-ms N          idle/flood/logout-behind-reads: hold the connection
//                        (reading nothing) at least this long;
//                        churn: how long to keep connecting (default 3000)
//   --release FILE       idle/flood: after --hold-ms, hold until FILE exists
//   --max-hold-ms N      idle/flood: never hold longer (default 60000)
//   --count N, --kib N   flood: commands and KiB per command (64, 1024)
//   --max-mib N          request-flood: most MiB of requests sent (24)
//   --mrdsl N            the MaxRecvDataSegmentLength we declare at login
//                        (default 262144; the target's Data-In PDUs are at
//                        most this long)
//   --io-timeout-ms N    longest wait for a login response (default 10000)
//
// Exit status: 0 the case ran (and --expect-close held), 1 --expect-close
// did not hold, 2 usage or setup error (cannot connect, login refused, ...).
// idle and flood print a line containing "holding" once they hold the
// connection, so a script can start its other work then.
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "rbio/common/unique_fd.hpp"
#include "rbio/iser/pdu.hpp"

namespace {

using namespace rbio::iser;
using Bytes = std::vector<uint8_t>;
using Clock = std::chrono::steady_clock;

// Anything that keeps the case from running as designed: exit 2.
struct SetupError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

std::string errno_text(const std::string& what, int err) { return what + ": " + std::strerror(err); }

int ms_since(Clock::time_point t0) {
    return int(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count());
}

struct Options {
    std::string test_case;
    uint16_t port = 0;
    std::string target;
    unsigned lun = 1;
    uint64_t seed = 1;
    unsigned connections = 16;
    int wait_ms = 1000;
    bool expect_close = false;
    int hold_ms = 3000;
    std::string release;
    int max_hold_ms = 60000;
    unsigned count = 64;
    unsigned kib = 1024;
    unsigned max_mib = 24;  // request-flood: most it sends
    int io_timeout_ms = 10000;
    uint32_t mrdsl = 262144;       // the MaxRecvDataSegmentLength we declare
    unsigned max_connections = 1;  // the MaxConnections we offer
};

enum class Peer { Open, Closed, Reset };

const char* to_string(Peer p) {
    switch (p) {
        case Peer::Open: return "still open";
        case Peer::Closed: return "closed by the target";
        case Peer::Reset: return "reset by the target";
    }
    return "?";
}

// What the target did after a hostile PDU.
struct Reaction {
    Peer peer = Peer::Open;
    int after_ms = 0;
    std::vector<std::string> pdus;  // what it sent meanwhile

    std::string describe() const {
        std::string s = to_string(peer);
        if (peer != Peer::Open) s += " after " + std::to_string(after_ms) + " ms";
        else s += " after " + std::to_string(after_ms) + " ms of waiting";
        if (!pdus.empty()) {
            s += "; it sent";
            for (const auto& p : pdus) s += " [" + p + "]";
        }
        return s;
    }
};

std::string hex(unsigned v, int width = 2) {
    char b[16];
    std::snprintf(b, sizeof b, "0x%0*x", width, v);
    return b;
}

// One line for a PDU the target sent; `data` is its data segment.
std::string describe_pdu(const uint8_t* bhs, std::span<const uint8_t> data) {
    BhsView v(bhs);
    std::string s = opcode_name(v.opcode_byte());
    switch (v.opcode()) {
        case Opcode::Reject: s += " reason " + hex(bhs[2]); break;
        case Opcode::ScsiResponse:
            s += " status " + hex(bhs[3]) + " response " + hex(bhs[2]);
            // Sense data: a 2-byte SenseLength, then fixed-format sense.
            if (data.size() >= 2 + 14)
                s += " sense key " + hex(data[2 + 2] & 0x0f) + " ASC/ASCQ " + hex(data[2 + 12]) + "/" +
                     hex(data[2 + 13]);
            break;
        case Opcode::LoginResponse: s += " class " + hex(bhs[36]) + " detail " + hex(bhs[37]); break;
        case Opcode::DataIn: s += " offset " + std::to_string(v.buffer_offset()); break;
        default: break;
    }
    s += " ITT " + hex(v.itt(), 8) + ", " + std::to_string(data.size()) + " data bytes";
    return s;
}

// A TCP connection to the portal with the few operations the cases need.
class Conn {
public:
    explicit Conn(uint16_t port) : port_(port) {
        fd_ = rbio::UniqueFd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
        if (fd_.get() < 0) throw SetupError(errno_text("socket", errno));
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(port);
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (::connect(fd_.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
            throw SetupError(errno_text("connect to 127.0.0.1:" + std::to_string(port), errno));
    }

    int fd() const { return fd_.get(); }
    uint16_t port() const { return port_; }

    // Sends everything; 0, or the errno that stopped it (EPIPE, ECONNRESET
    // when the target has already dropped us).
    int send_all(std::span<const uint8_t> bytes) {
        while (!bytes.empty()) {
            ssize_t n = ::send(fd_.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL);
            if (n < 0) {
                if (errno == EINTR) continue;
                return errno;
            }
            bytes = bytes.subspan(size_t(n));
        }
        return 0;
    }
    void send_or_throw(std::span<const uint8_t> bytes, const std::string& what) {
        if (int e = send_all(bytes)) throw SetupError(errno_text("sending " + what, e));
    }

    // Reads exactly n bytes; throws on EOF, error or timeout.
    void recv_exact(uint8_t* out, size_t n, Clock::time_point deadline, const std::string& what) {
        while (n > 0) {
            int left =
                int(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
            if (left <= 0) throw SetupError("timed out waiting for " + what);
            pollfd p{fd_.get(), POLLIN, 0};
            int rc = ::poll(&p, 1, left);
            if (rc < 0 && errno != EINTR) throw SetupError(errno_text("poll", errno));
            if (rc <= 0) continue;
            ssize_t got = ::recv(fd_.get(), out, n, 0);
            if (got == 0) throw SetupError("the target closed the connection while we waited for " + what);
            if (got < 0) {
                if (errno == EINTR || errno == EAGAIN) continue;
                throw SetupError(errno_text("receiving " + what, errno));
            }
            out += got;
            n -= size_t(got);
        }
    }

    // One whole PDU (no digests are negotiated): BHS, then its data segment.
    std::pair<std::array<uint8_t, kBhsLength>, Bytes> recv_pdu(Clock::time_point deadline,
                                                               const std::string& what) {
        std::array<uint8_t, kBhsLength> bhs{};
        recv_exact(bhs.data(), bhs.size(), deadline, what);
        BhsView v(bhs.data());
        Bytes rest(v.ahs_length() + pad4(v.data_segment_length()));
        if (!rest.empty()) recv_exact(rest.data(), rest.size(), deadline, what);
        Bytes data(rest.begin() + long(v.ahs_length()),
                   rest.begin() + long(v.ahs_length() + v.data_segment_length()));
        return {bhs, std::move(data)};
    }

    // Watches the connection for up to wait_ms: returns once the target
    // closes or resets it, with the PDUs it sent before that.
    Reaction watch(int wait_ms) {
        Reaction r;
        const auto t0 = Clock::now();
        Bytes pending;
        uint8_t buf[65536];
        for (;;) {
            int left = wait_ms - ms_since(t0);
            if (left <= 0) break;
            pollfd p{fd_.get(), POLLIN, 0};
            int rc = ::poll(&p, 1, left);
            if (rc < 0 && errno != EINTR) throw SetupError(errno_text("poll", errno));
            if (rc <= 0) continue;
            ssize_t got = ::recv(fd_.get(), buf, sizeof buf, 0);
            if (got == 0) {
                r.peer = Peer::Closed;
                break;
            }
            if (got < 0) {
                if (errno == EINTR || errno == EAGAIN) continue;
                if (errno == ECONNRESET) {
                    r.peer = Peer::Reset;
                    break;
                }
                throw SetupError(errno_text("receiving", errno));
            }
            pending.insert(pending.end(), buf, buf + got);
            // Name every complete PDU; a huge Data-In is named once whole.
            while (pending.size() >= kBhsLength) {
                BhsView v(pending.data());
                size_t total = kBhsLength + v.ahs_length() + pad4(v.data_segment_length());
                if (pending.size() < total) break;
                if (r.pdus.size() < 8)
                    r.pdus.push_back(describe_pdu(
                        pending.data(),
                        std::span(pending).subspan(kBhsLength + v.ahs_length(), v.data_segment_length())));
                pending.erase(pending.begin(), pending.begin() + long(total));
            }
        }
        r.after_ms = ms_since(t0);
        return r;
    }

    // Ends the connection with a TCP reset instead of a FIN.
    void reset() {
        linger l{1, 0};
        if (::setsockopt(fd_.get(), SOL_SOCKET, SO_LINGER, &l, sizeof l) != 0)
            throw SetupError(errno_text("setsockopt SO_LINGER", errno));
        fd_.reset();
    }
    void close() { fd_.reset(); }

    // This end's port: the target logs the connection as 127.0.0.1:PORT.
    unsigned local_port() const {
        sockaddr_in a{};
        socklen_t len = sizeof a;
        if (::getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0)
            throw SetupError(errno_text("getsockname", errno));
        return ntohs(a.sin_port);
    }

    // Bytes the target sent that we have not read.
    int unread_bytes() const {
        int n = 0;
        if (::ioctl(fd_.get(), SIOCINQ, &n) != 0) throw SetupError(errno_text("ioctl SIOCINQ", errno));
        return n;
    }

    // Whether the target has closed or reset its end (without reading).
    bool peer_gone() const {
        pollfd p{fd_.get(), POLLRDHUP, 0};
        return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
    }

private:
    rbio::UniqueFd fd_;
    uint16_t port_;
};

// "Key=Value\0" pairs (RFC 7143 §6.1).
Bytes text_keys(const std::vector<std::pair<std::string, std::string>>& kv) {
    Bytes out;
    for (const auto& [k, v] : kv) {
        std::string s = k + "=" + v;
        out.insert(out.end(), s.begin(), s.end());
        out.push_back(0);
    }
    return out;
}

std::map<std::string, std::string> parse_keys(const Bytes& data) {
    std::map<std::string, std::string> m;
    size_t i = 0;
    while (i < data.size()) {
        size_t end = i;
        while (end < data.size() && data[end] != 0) ++end;
        std::string item(data.begin() + long(i), data.begin() + long(end));
        if (auto eq = item.find('='); eq != std::string::npos) m[item.substr(0, eq)] = item.substr(eq + 1);
        i = end + 1;
    }
    return m;
}

Bytes encode(const Bhs& bhs, std::span<const uint8_t> data = {}) {
    Bytes out(encoded_size(bhs.bytes(), data.size(), false, false));
    size_t n = encode_pdu(out, bhs.bytes(), data, false, false);
    if (n != out.size())
        throw SetupError("encode_pdu wrote " + std::to_string(n) + " of " + std::to_string(out.size()) +
                         " bytes");
    return out;
}

const char* kInitiatorName = "iqn.2026-11.io.rbio:hostile";

// A logged-in connection (full feature phase) and its sequence numbers.
struct Session {
    Conn conn;
    uint32_t cmd_sn = 0;
    uint32_t exp_stat_sn = 0;
    uint32_t max_cmd_sn = 0;
    uint32_t target_mrdsl = 8192;  // RFC 7143 default until the target declares its own
    uint32_t next_itt = 0x100;
    uint32_t isid_low = 0;  // the session's identity, for a connection that joins it
    uint16_t tsih = 0;
};

// Logs in as a Normal session: the security stage with AuthMethod=None,
// then operational negotiation, then full feature phase. With `join`, the
// connection (CID 1) joins that session instead, its login at CmdSN
// `join_cmd_sn` (the initiator's next).
Session login(const Options& o, const Session* join = nullptr, uint32_t join_cmd_sn = 0) {
    if (o.target.empty()) throw SetupError("--target is required for case " + o.test_case);
    Session s{Conn(o.port)};
    // A random-format ISID (type 0b10), different per connection, so no
    // login reinstates another connection's session.
    std::random_device rd;
    const uint32_t isid_low = join ? join->isid_low : rd();
    s.isid_low = isid_low;
    const std::string where = "login to 127.0.0.1:" + std::to_string(o.port) + " (" + o.target + ")";

    const std::vector<std::pair<std::string, std::string>> security = {{"InitiatorName", kInitiatorName},
                                                                       {"SessionType", "Normal"},
                                                                       {"TargetName", o.target},
                                                                       {"AuthMethod", "None"}};
    const std::vector<std::pair<std::string, std::string>> operational = {
        {"HeaderDigest", "None"},
        {"DataDigest", "None"},
        {"MaxRecvDataSegmentLength", std::to_string(o.mrdsl)},
        {"InitialR2T", "No"},
        {"ImmediateData", "Yes"},
        {"MaxBurstLength", "16776192"},
        {"FirstBurstLength", "262144"},
        {"MaxConnections", std::to_string(o.max_connections)},
        {"MaxOutstandingR2T", "1"},
        {"DataPDUInOrder", "Yes"},
        {"DataSequenceInOrder", "Yes"},
        {"DefaultTime2Wait", "0"},
        {"DefaultTime2Retain", "0"},
        {"ErrorRecoveryLevel", "0"}};

    unsigned csg = 0, nsg = 1;
    auto keys = security;
    uint16_t tsih = join ? join->tsih : 0;
    const uint32_t itt = join ? 0x11 : 0x10;
    const uint32_t cmd_sn = join ? join_cmd_sn : 1;
    const auto deadline = Clock::now() + std::chrono::milliseconds(o.io_timeout_ms);
    for (int step = 0; step < 8; ++step) {
        Bhs req;
        req.set_opcode(Opcode::LoginRequest, true);
        req.set_flags(uint8_t(0x80 | csg << 2 | nsg));  // T=1
        auto& raw = req.raw();
        raw[8] = 0x80;  // ISID type 0b10 (random), then 46 random bits
        raw[9] = uint8_t(isid_low >> 24);
        raw[10] = uint8_t(isid_low >> 16);
        raw[11] = uint8_t(isid_low >> 8);
        raw[12] = uint8_t(isid_low);
        raw[13] = uint8_t(getpid());
        raw[14] = uint8_t(tsih >> 8);
        raw[15] = uint8_t(tsih);
        raw[21] = join ? 1 : 0;  // CID
        const Bytes data = text_keys(keys);
        req.set_data_segment_length(uint32_t(data.size()));
        req.set_itt(itt).set_cmd_sn(cmd_sn).set_exp_stat_sn(s.exp_stat_sn);
        s.conn.send_or_throw(encode(req, data), "a login request (" + where + ")");

        auto [bhs, rdata] = s.conn.recv_pdu(deadline, "the login response (" + where + ")");
        BhsView v(bhs.data());
        if (v.opcode() != Opcode::LoginResponse)
            throw SetupError(where + ": expected a Login-Response, got " + describe_pdu(bhs.data(), rdata));
        if (bhs[36] != 0)
            throw SetupError(where + ": refused with status class " + hex(bhs[36]) + " detail " +
                             hex(bhs[37]));
        s.exp_stat_sn = v.stat_sn() + 1;
        s.cmd_sn = v.exp_cmd_sn();
        s.max_cmd_sn = v.max_cmd_sn();
        tsih = uint16_t(bhs[14] << 8 | bhs[15]);
        const auto answer = parse_keys(rdata);
        if (auto it = answer.find("MaxRecvDataSegmentLength"); it != answer.end())
            s.target_mrdsl = uint32_t(std::strtoul(it->second.c_str(), nullptr, 10));
        for (const auto& [k, val] : answer)
            if (val == "Reject" || val == "Irrelevant" || val == "NotUnderstood")
                throw SetupError(where + ": the target answered " + k + "=" + val);

        const bool transit = (v.flags() & 0x80) != 0;
        if (!transit) {
            keys.clear();  // the target wants another round in this stage
            continue;
        }
        csg = v.flags() & 0x03;  // the target's NSG is the stage we are now in
        if (csg == 3) {
            s.tsih = tsih;
            return s;
        }
        nsg = 3;
        keys = csg == 1 ? operational : decltype(keys){};
    }
    throw SetupError(where + ": no full feature phase after 8 login steps");
}

// Sends TEST UNIT READY and reads until its SCSI Response: it takes the
// unit attention a new I_T nexus starts with, and the response carries the
// full command window (a login response may grant only one or two CmdSNs).
void test_unit_ready(Session& s, const Options& o) {
    const std::array<uint8_t, 6> tur{};
    Bhs b(Opcode::ScsiCommand);
    b.set_flags(0x80 | 0x01).set_lun(uint64_t(o.lun & 0xff) << 48).set_itt(s.next_itt++);
    b.set_cmd_sn(s.cmd_sn++).set_exp_stat_sn(s.exp_stat_sn).set_cdb(tur);
    s.conn.send_or_throw(encode(b), "TEST UNIT READY");
    const auto deadline = Clock::now() + std::chrono::milliseconds(o.io_timeout_ms);
    for (;;) {
        auto [bhs, data] = s.conn.recv_pdu(deadline, "the response to TEST UNIT READY");
        BhsView v(bhs.data());
        if (v.opcode() == Opcode::Reject)
            throw SetupError("TEST UNIT READY was rejected: " + describe_pdu(bhs.data(), data));
        if (v.opcode() != Opcode::ScsiResponse) continue;
        s.exp_stat_sn = v.stat_sn() + 1;
        s.max_cmd_sn = v.max_cmd_sn();
        if (v.itt() == b.view().itt()) return;
    }
}

// A SCSI Command BHS for `cdb` on the session's next CmdSN and ITT.
Bhs scsi_command(Session& s, const Options& o, std::span<const uint8_t> cdb, bool read, bool write,
                 uint32_t edtl, uint32_t dsl) {
    Bhs b(Opcode::ScsiCommand);
    b.set_flags(uint8_t(0x80 | (read ? 0x40 : 0) | (write ? 0x20 : 0) | 0x01));  // F, R, W, ATTR simple
    b.set_lun(uint64_t(o.lun & 0xff) << 48);  // single-level LUN (SAM-2 peripheral addressing)
    b.set_itt(s.next_itt++).set_expected_data_transfer_length(edtl);
    b.set_cmd_sn(s.cmd_sn++).set_exp_stat_sn(s.exp_stat_sn);
    b.set_data_segment_length(dsl);
    b.set_cdb(cdb);
    return b;
}

std::array<uint8_t, 10> cdb10(uint8_t op, uint32_t lba, uint16_t blocks) {
    return {op,           0, uint8_t(lba >> 24),   uint8_t(lba >> 16), uint8_t(lba >> 8),
            uint8_t(lba), 0, uint8_t(blocks >> 8), uint8_t(blocks),    0};
}

std::array<uint8_t, 16> cdb16(uint8_t op, uint64_t lba, uint32_t blocks) {
    std::array<uint8_t, 16> c{};
    c[0] = op;
    for (size_t i = 0; i < 8; ++i) c[2 + i] = uint8_t(lba >> (56 - 8 * i));
    for (size_t i = 0; i < 4; ++i) c[10 + i] = uint8_t(blocks >> (24 - 8 * i));
    return c;
}

Bytes pattern(size_t n) {
    Bytes b(n);
    for (size_t i = 0; i < n; ++i) b[i] = uint8_t(i * 7 + 3);
    return b;
}

// Prints the reaction; returns the exit status --expect-close asks for.
int report(const Options& o, const std::string& what, const Reaction& r) {
    std::printf("%s: %s: %s\n", o.test_case.c_str(), what.c_str(), r.describe().c_str());
    if (o.expect_close && r.peer == Peer::Open) {
        std::printf("%s: FAIL: expected the target to close the connection within %d ms\n",
                    o.test_case.c_str(), o.wait_ms);
        return 1;
    }
    return 0;
}

int case_random(const Options& o) {
    std::mt19937_64 rng(o.seed);
    // Lengths around the BHS size first, then random ones up to 64 KiB.
    const size_t fixed[] = {1, 47, 48, 49, 52, 96, 8192, 65536};
    std::vector<Conn> conns;
    std::vector<size_t> lengths;
    size_t sent_bytes = 0, cut_short = 0;
    for (unsigned i = 0; i < o.connections; ++i) {
        size_t len = i < std::size(fixed) ? fixed[i] : 48 + rng() % 65536;
        Bytes junk(len);
        for (auto& b : junk) b = uint8_t(rng());
        Conn c(o.port);
        if (c.send_all(junk) != 0) ++cut_short;  // the target dropped us mid-way
        sent_bytes += len;
        lengths.push_back(len);
        conns.push_back(std::move(c));
    }
    // Watch them all until the deadline.
    const auto t0 = Clock::now();
    unsigned closed = 0, reset = 0;
    std::string open_lengths;
    for (size_t i = 0; i < conns.size(); ++i) {
        Reaction r = conns[i].watch(std::max(1, o.wait_ms - ms_since(t0)));
        if (r.peer == Peer::Closed) ++closed;
        else if (r.peer == Peer::Reset) ++reset;
        else {
            // Appended piecewise: `const char* + std::string&&` inserts at the
            // front, which GCC 12 at -O2 misreads as an overlapping memcpy
            // (-Werror=restrict, GCC PR 105329).
            if (!open_lengths.empty()) open_lengths += ',';
            open_lengths += std::to_string(lengths[i]);
        }
    }
    std::printf(
        "random: %zu connections, %zu random bytes (seed %llu), %zu cut short by the target; "
        "after %d ms: %u closed by the target, %u reset, still open: %s\n",
        conns.size(), sent_bytes, (unsigned long long)o.seed, cut_short, ms_since(t0), closed, reset,
        open_lengths.empty() ? "none" : ("those that sent " + open_lengths + " bytes").c_str());
    return 0;  // the target cannot tell short junk from a slow sender: no expectation
}

// Logged in, unit attention taken, command window open.
Session ready_session(const Options& o) {
    Session s = login(o);
    test_unit_ready(s, o);
    return s;
}

int case_bad_opcode(const Options& o) {
    Session s = ready_session(o);
    Bhs b;
    b.raw()[0] = 0x0b;  // not an opcode RFC 7143 §11.1.1 defines
    b.set_final(true).set_lun(uint64_t(o.lun) << 48).set_itt(s.next_itt++);
    b.set_cmd_sn(s.cmd_sn).set_exp_stat_sn(s.exp_stat_sn);
    s.conn.send_or_throw(encode(b), "the undefined-opcode PDU");
    return report(o, "opcode 0x0b after login", s.conn.watch(o.wait_ms));
}

int case_over_mrdsl(const Options& o) {
    Session s = ready_session(o);
    if (s.target_mrdsl > kMaxDataSegmentLength - 4096 - 511)
        throw SetupError("the target declared MaxRecvDataSegmentLength " + std::to_string(s.target_mrdsl) +
                         ": no longer data segment can be framed");
    const uint32_t dsl = (s.target_mrdsl + 4096 + 511) & ~511u;
    const auto cdb = cdb10(0x2a, 0, uint16_t(dsl / 512));  // WRITE(10)
    Bhs b = scsi_command(s, o, cdb, false, true, dsl, dsl);
    const Bytes data = pattern(dsl);
    s.conn.send_or_throw(encode(b, data), "the over-long WRITE(10)");
    return report(o,
                  "WRITE(10) with " + std::to_string(dsl) +
                      " bytes of immediate data, target's MaxRecvDataSegmentLength " +
                      std::to_string(s.target_mrdsl),
                  s.conn.watch(o.wait_ms));
}

int case_max_dsl(const Options& o) {
    Session s = ready_session(o);
    const auto cdb = cdb10(0x2a, 0, 32768);  // WRITE(10) of 16 MiB
    Bhs b = scsi_command(s, o, cdb, false, true, 16u << 20, kMaxDataSegmentLength);
    const Bytes data = pattern(64 * 1024);
    // The header and the first 64 KiB of a data segment that never completes.
    // The target may drop us as soon as it sees the header.
    int e = s.conn.send_all(b.bytes());
    if (e == 0) e = s.conn.send_all(data);
    const std::string sent = e == 0 ? "sent" : errno_text("cut short", e);
    return report(o, "WRITE(10) with DataSegmentLength 0xffffff, 64 KiB of it " + sent,
                  s.conn.watch(o.wait_ms));
}

int case_huge_edtl(const Options& o) {
    int status = 0;
    for (uint32_t edtl : {0xffffffffu, 0xfffffff0u, 0x80000000u}) {
        Session s = ready_session(o);
        const auto cdb = cdb10(0x28, 0, 8);  // READ(10) of 4 KiB
        Bhs b = scsi_command(s, o, cdb, true, false, edtl, 0);
        s.conn.send_or_throw(b.bytes(), "the READ(10)");
        status |= report(o, "READ(10) of 4 KiB with Expected Data Transfer Length " + hex(edtl, 8),
                         s.conn.watch(o.wait_ms));
    }
    return status;
}

// Unsolicited Data-Out whose BufferOffset lies beyond its WRITE's Expected
// Data Transfer Length: tgt's core writes a Data-Out's data at its task's
// buffer plus the offset, unchecked.
int case_data_out_beyond(const Options& o) {
    int status = 0;
    for (uint32_t offset : {4096u, 0x10000000u}) {
        Session s = ready_session(o);
        const auto cdb = cdb10(0x2a, 0, 1);  // WRITE(10) of one block
        Bhs cmd = scsi_command(s, o, cdb, false, true, 512, 0);
        cmd.set_final(false);  // unsolicited Data-Out follows (InitialR2T=No)
        Bhs out(Opcode::DataOut);
        out.set_final(true).set_lun(uint64_t(o.lun & 0xff) << 48).set_itt(cmd.view().itt());
        out.set_ttt(0xffffffffu).set_exp_stat_sn(s.exp_stat_sn).set_data_sn(0).set_buffer_offset(offset);
        const Bytes data = pattern(512);
        out.set_data_segment_length(uint32_t(data.size()));
        Bytes both(cmd.bytes().begin(), cmd.bytes().end());
        const Bytes second = encode(out, data);
        both.insert(both.end(), second.begin(), second.end());
        s.conn.send_or_throw(both, "the WRITE(10) and its Data-Out");
        status |= report(
            o, "WRITE(10) of 512 bytes, then a Data-Out of 512 bytes at offset " + std::to_string(offset),
            s.conn.watch(o.wait_ms));
    }
    return status;
}

// Data-Out the WRITE does not wait for, sent with the command: solicited
// data before the target's R2T, and unsolicited data after all of it came
// as immediate data. tgt's core would run the command a second time.
int case_data_out_unasked(const Options& o) {
    int status = 0;
    static const char* const what[] = {
        "WRITE(10) of 4096 bytes, then a solicited Data-Out of 4096 before any R2T",
        "WRITE(10) with all 512 bytes immediate, then an unsolicited Data-Out of 512",
        // The command runs at once (nothing left to receive); the empty
        // Data-Out ends the unsolicited burst it left open.
        "WRITE(10) with all 512 bytes immediate and F=0, then an empty unsolicited Data-Out with F=1",
    };
    for (int variant = 0; variant < 3; ++variant) {
        Session s = ready_session(o);
        const bool immediate = variant >= 1;
        const uint32_t len = immediate ? 512 : 4096;
        const uint32_t out_len = variant == 2 ? 0 : len;
        const auto cdb = cdb10(0x2a, 0, uint16_t(len / 512));  // WRITE(10)
        const Bytes data = pattern(len);
        Bhs cmd = scsi_command(s, o, cdb, false, true, len, immediate ? len : 0);
        if (variant == 2) cmd.set_final(false);
        Bytes both = immediate ? encode(cmd, data) : Bytes(cmd.bytes().begin(), cmd.bytes().end());
        Bhs out(Opcode::DataOut);
        out.set_final(true).set_lun(uint64_t(o.lun & 0xff) << 48).set_itt(cmd.view().itt());
        out.set_ttt(immediate ? 0xffffffffu : 0x12345678u).set_exp_stat_sn(s.exp_stat_sn).set_data_sn(0);
        out.set_buffer_offset(0).set_data_segment_length(out_len);
        const Bytes second = encode(out, std::span(data).first(out_len));
        both.insert(both.end(), second.begin(), second.end());
        s.conn.send_or_throw(both, "the WRITE(10) and its Data-Out");
        status |= report(o, what[variant], s.conn.watch(o.wait_ms));
    }
    return status;
}

// AHS that tgt's core trusts: on a request other than a SCSI Command it
// reads them into the last command's AHS buffer (freed, and too small); an
// Extended CDB AHS of AHSLength 0 makes it copy (size_t)-1 bytes; a Read
// Length near 4 GiB wraps in the read buffer's size (4 KiB for 1 MiB).
int case_bad_ahs(const Options& o) {
    int status = 0;
    static const char* const what[] = {
        "TEST UNIT READY with a vendor AHS, then a NOP-Out with 1020 bytes of AHS",
        "TEST UNIT READY with an Extended CDB AHS of AHSLength 0",
        "bidirectional READ(10) of 1 MiB with a Read Length AHS of 0xffffffff",
    };
    for (int variant = 0; variant < 3; ++variant) {
        Session s = ready_session(o);
        const std::array<uint8_t, 6> tur{};
        const auto read1m = cdb10(0x28, 0, 2048);
        Bytes pdu;
        auto append = [&pdu](std::span<const uint8_t> b) { pdu.insert(pdu.end(), b.begin(), b.end()); };
        if (variant == 0) {
            Bhs cmd = scsi_command(s, o, tur, false, false, 0, 0);
            cmd.set_total_ahs_words(1);
            append(cmd.bytes());
            append(std::array<uint8_t, 4>{0x00, 0x01, 0x3f, 0x00});  // AHSLength 1, type 63 (vendor)
            Bhs nop(Opcode::NopOut);
            nop.set_opcode(Opcode::NopOut, true).set_final(true).set_itt(s.next_itt++).set_ttt(0xffffffffu);
            nop.set_cmd_sn(s.cmd_sn).set_exp_stat_sn(s.exp_stat_sn).set_total_ahs_words(255);
            append(nop.bytes());
            append(Bytes(255 * 4, 0x41));
        } else if (variant == 1) {
            Bhs cmd = scsi_command(s, o, tur, false, false, 0, 0);
            cmd.set_total_ahs_words(1);
            append(cmd.bytes());
            append(std::array<uint8_t, 4>{0x00, 0x00, 0x01, 0x00});  // AHSLength 0, Extended CDB
        } else {
            Bhs cmd = scsi_command(s, o, read1m, true, true, 0, 0);
            cmd.set_total_ahs_words(2);
            append(cmd.bytes());
            // AHSLength 5 (reserved byte and the length), Bidirectional Read Length
            append(std::array<uint8_t, 8>{0x00, 0x05, 0x02, 0x00, 0xff, 0xff, 0xff, 0xff});
        }
        s.conn.send_or_throw(pdu, what[variant]);
        status |= report(o, what[variant], s.conn.watch(o.wait_ms));
    }
    return status;
}

// A TEST UNIT READY at CmdSN `cmd_sn`, without taking the next CmdSN.
Bytes tur_at(Session& s, const Options& o, uint32_t cmd_sn) {
    const std::array<uint8_t, 6> tur{};
    Bhs b = scsi_command(s, o, tur, false, false, 0, 0);
    b.set_cmd_sn(cmd_sn);
    --s.cmd_sn;
    return Bytes(b.bytes().begin(), b.bytes().end());
}

// CmdSN outside the window the target advertised (RFC 7143 4.2.2.1), or a
// duplicate within it: tgt's core parks each on the session's pending
// list, with its buffer, for ever. First the legal edge: the window's last
// CmdSN ahead of the rest must still be served.
int case_cmdsn_window(const Options& o) {
    int status = 0;
    {
        Session s = ready_session(o);
        const uint32_t exp = s.cmd_sn, max = s.max_cmd_sn;
        const uint32_t count = max - exp + 1;
        if (count < 2 || count > 4096)
            throw SetupError("the target advertised ExpCmdSN " + std::to_string(exp) + " and MaxCmdSN " +
                             std::to_string(max) + ": no window of 2 to 4096 commands to test");
        Bytes pdus = tur_at(s, o, max);
        for (uint32_t sn = exp; sn != max; ++sn) {
            const Bytes b = tur_at(s, o, sn);
            pdus.insert(pdus.end(), b.begin(), b.end());
        }
        s.conn.send_or_throw(pdus, "TEST UNIT READY at MaxCmdSN, then at ExpCmdSN onwards");
        const auto deadline = Clock::now() + std::chrono::milliseconds(o.io_timeout_ms);
        uint32_t good = 0, other = 0;
        std::string first_other;
        while (good + other < count) {
            auto [bhs, data] = s.conn.recv_pdu(deadline, "the responses to the window's TEST UNIT READYs");
            if (BhsView(bhs.data()).opcode() != Opcode::ScsiResponse || bhs[2] != 0 || bhs[3] != 0) {
                if (first_other.empty()) first_other = describe_pdu(bhs.data(), data);
                ++other;
            } else {
                ++good;
            }
        }
        const Reaction r = s.conn.watch(std::min(o.wait_ms, 300));
        std::printf(
            "%s: TEST UNIT READY at MaxCmdSN %u first, then ExpCmdSN %u to %u: %u GOOD, %u other%s; "
            "then the connection was %s\n",
            o.test_case.c_str(), max, exp, max - 1, good, other,
            first_other.empty() ? "" : (" (first: " + first_other + ")").c_str(), r.describe().c_str());
        if (good != count || r.peer != Peer::Open) {
            std::printf("%s: FAIL: expected %u GOOD responses on a connection that stays open\n",
                        o.test_case.c_str(), count);
            status = 1;
        }
    }
    static const char* const what[] = {
        "TEST UNIT READY at MaxCmdSN + 1",
        "TEST UNIT READY at ExpCmdSN + 1, twice",
        "TEST UNIT READY at ExpCmdSN - 1",
    };
    for (int variant = 0; variant < 3; ++variant) {
        Session s = ready_session(o);
        Bytes pdus;
        if (variant == 0) {
            pdus = tur_at(s, o, s.max_cmd_sn + 1);
        } else if (variant == 1) {
            pdus = tur_at(s, o, s.cmd_sn + 1);
            const Bytes again = tur_at(s, o, s.cmd_sn + 1);
            pdus.insert(pdus.end(), again.begin(), again.end());
        } else {
            pdus = tur_at(s, o, s.cmd_sn - 1);
        }
        s.conn.send_or_throw(pdus, what[variant]);
        status |= report(o, what[variant], s.conn.watch(o.wait_ms));
    }
    return status;
}

// Reads SCSI Responses on `s` until `count` came; returns how many were
// GOOD (at most `ms` for all).
uint32_t good_responses(Session& s, uint32_t count, int ms, const char* what) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(ms);
    uint32_t good = 0, seen = 0;
    while (seen < count) {
        auto [bhs, data] = s.conn.recv_pdu(deadline, what);
        if (BhsView(bhs.data()).opcode() != Opcode::ScsiResponse) continue;
        ++seen;
        if (bhs[2] == 0 && bhs[3] == 0) ++good;
    }
    return good;
}

// A session's second connection may advertise a MaxCmdSN beyond the one
// ExpCmdSN + the queue depth gives (its login's CmdSN + 1), and a command
// still being received on one connection holds its CmdSN as much as a
// parked one.
int case_cmdsn_connections(const Options& o) {
    int status = 0;
    {
        Session a = ready_session(o);
        const uint32_t exp = a.cmd_sn, max = a.max_cmd_sn;
        if (max - exp < 1 || max - exp > 4096)
            throw SetupError("the target advertised ExpCmdSN " + std::to_string(exp) + " and MaxCmdSN " +
                             std::to_string(max) + ": no window to test");
        Bytes parked;
        for (uint32_t sn = exp + 1; sn != max + 1; ++sn) {
            const Bytes b = tur_at(a, o, sn);
            parked.insert(parked.end(), b.begin(), b.end());
        }
        const auto cdb = cdb10(0x2a, 0, 1);  // WRITE(10) of one block, all of it immediate
        Bhs w = scsi_command(a, o, cdb, false, true, 512, 512);
        w.set_cmd_sn(exp);
        const Bytes write = encode(w, pattern(512));
        parked.insert(parked.end(), write.begin(), write.begin() + kBhsLength);
        a.conn.send_or_throw(parked, "the window past ExpCmdSN and a WRITE(10) header at it");
        Session b = login(o, &a, max + 1);
        b.conn.send_or_throw(tur_at(b, o, max + 1),
                             "TEST UNIT READY at the joined connection's MaxCmdSN - 1");
        const Reaction before = b.conn.watch(std::min(o.wait_ms, 300));
        a.conn.send_or_throw(std::span(write).subspan(kBhsLength), "the WRITE(10)'s data");
        const uint32_t count_a = max - exp + 1;
        const uint32_t good_a =
            good_responses(a, count_a, o.io_timeout_ms, "the first connection's responses");
        const uint32_t good_b = before.peer == Peer::Open ? good_responses(b, 1, o.io_timeout_ms,
                                                                           "the joined connection's response")
                                                          : 0;
        std::printf(
            "%s: WRITE(10) at ExpCmdSN %u held back, TEST UNIT READYs at %u to %u parked, a second "
            "connection's at %u (its login advertised MaxCmdSN %u): %u of %u and %u of 1 GOOD; the second "
            "connection was %s before the WRITE's data\n",
            o.test_case.c_str(), exp, exp + 1, max, max + 1, b.max_cmd_sn, good_a, count_a, good_b,
            before.describe().c_str());
        if (good_a != count_a || good_b != 1) {
            std::printf("%s: FAIL: expected every command answered GOOD on open connections\n",
                        o.test_case.c_str());
            status = 1;
        }
    }
    {
        Session a = ready_session(o);
        const uint32_t exp = a.cmd_sn;
        const auto cdb = cdb10(0x2a, 0, 1);
        Bhs w = scsi_command(a, o, cdb, false, true, 512, 512);
        w.set_cmd_sn(exp + 1);
        const Bytes write = encode(w, pattern(512));
        a.conn.send_or_throw(std::span(write).first(kBhsLength), "a WRITE(10) header at ExpCmdSN + 1");
        Session b = login(o, &a, exp);
        b.conn.send_or_throw(tur_at(b, o, exp + 1),
                             "TEST UNIT READY at ExpCmdSN + 1 on the joined connection");
        status |= report(o,
                         "a WRITE(10) at ExpCmdSN + 1 still being received, and a joined connection's TEST "
                         "UNIT READY at the same CmdSN",
                         b.conn.watch(o.wait_ms));
    }
    {
        // A login's CmdSN is the initiator's word: one far ahead must not
        // widen the window for the session's other connections.
        Session a = ready_session(o);
        const uint32_t exp = a.cmd_sn, max = a.max_cmd_sn;
        Session b = login(o, &a, exp + 0x40000000u);
        a.conn.send_or_throw(tur_at(a, o, max + 2), "TEST UNIT READY at MaxCmdSN + 2");
        status |=
            report(o,
                   "a joined connection whose login claimed CmdSN ExpCmdSN + 2^30, then a TEST UNIT READY "
                   "at MaxCmdSN + 2 on the first",
                   a.conn.watch(o.wait_ms));
    }
    return status;
}

int case_truncate(const Options& o, bool reset) {
    for (int variant = 0; variant < 2; ++variant) {
        Session s = ready_session(o);
        const auto cdb = cdb10(0x2a, 0, 8);  // WRITE(10) of 4 KiB, all immediate
        Bhs b = scsi_command(s, o, cdb, false, true, 4096, 4096);
        const Bytes pdu = encode(b, pattern(4096));
        const size_t cut = variant == 0 ? 20 : kBhsLength + 1000;
        s.conn.send_or_throw(std::span(pdu).first(cut), "a truncated PDU");
        // Let the target take in the part before the connection goes.
        Reaction r = s.conn.watch(std::min(o.wait_ms, 300));
        if (reset) s.conn.reset();
        else s.conn.close();
        std::printf(
            "%s: %zu of %zu bytes of a WRITE(10) PDU (cut inside the %s), then %s; before that the "
            "connection was %s\n",
            o.test_case.c_str(), cut, pdu.size(), variant == 0 ? "BHS" : "data segment",
            reset ? "a TCP reset" : "close", r.describe().c_str());
    }
    return 0;
}

// A Data-Out cut short by the connection's end, for a task on one of the
// lists tgt's conn_close frees first (then it freed the Data-Out's task a
// second time, and tgtd crashed): a WRITE(10) parked ahead of ExpCmdSN
// with its unsolicited data to come, part of that data, then a close or a
// reset. Then a Data-Out sent on a joined connection for a command of the
// first (the core looks ITTs up session-wide): reported, and with
// --expect-close that connection must be closed.
int case_data_out_cut(const Options& o) {
    const auto cdb = cdb10(0x2a, 0, 16);  // WRITE(10) of 8 KiB, no immediate data
    auto data_out = [&o](const Session& s, uint32_t itt) {
        Bhs out(Opcode::DataOut);
        out.set_final(false).set_lun(uint64_t(o.lun & 0xff) << 48).set_itt(itt).set_ttt(0xffffffffu);
        out.set_exp_stat_sn(s.exp_stat_sn).set_data_sn(0).set_buffer_offset(0).set_data_segment_length(4096);
        return encode(out, pattern(4096));
    };
    for (int variant = 0; variant < 2; ++variant) {
        Session s = ready_session(o);
        const uint32_t exp = s.cmd_sn;
        Bhs w = scsi_command(s, o, cdb, false, true, 8192, 0);
        w.set_cmd_sn(exp + 1).set_final(false);  // parked; unsolicited data follows (InitialR2T=No)
        Bytes pdus(w.bytes().begin(), w.bytes().end());
        const Bytes out = data_out(s, w.view().itt());
        pdus.insert(pdus.end(), out.begin(), out.begin() + kBhsLength + 100);
        s.conn.send_or_throw(pdus, "a parked WRITE(10) and part of its Data-Out");
        const Reaction r = s.conn.watch(std::min(o.wait_ms, 300));
        const bool reset = variant == 1;
        if (reset) s.conn.reset();
        else s.conn.close();
        std::printf(
            "%s: a WRITE(10) parked at ExpCmdSN + 1 and %zu of %zu bytes of its Data-Out, then %s; "
            "before that the connection was %s\n",
            o.test_case.c_str(), kBhsLength + 100, out.size(), reset ? "a TCP reset" : "close",
            r.describe().c_str());
    }
    Session a = ready_session(o);
    Bhs w = scsi_command(a, o, cdb, false, true, 8192, 0);
    w.set_final(false);
    a.conn.send_or_throw(w.bytes(), "a WRITE(10) waiting for its unsolicited data");
    Session b = login(o, &a, a.cmd_sn);
    b.conn.send_or_throw(data_out(b, w.view().itt()), "its Data-Out on the joined connection");
    return report(o, "a Data-Out on a joined connection for the first connection's WRITE(10)",
                  b.conn.watch(o.wait_ms));
}

// Holds for at least hold_ms, then until the release file exists.
void hold(const Options& o) {
    const auto t0 = Clock::now();
    for (;;) {
        int t = ms_since(t0);
        if (t >= o.max_hold_ms) {
            std::printf("%s: released after the longest hold, %d ms\n", o.test_case.c_str(), t);
            return;
        }
        if (t >= o.hold_ms && (o.release.empty() || std::filesystem::exists(o.release))) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
}

int case_idle(const Options& o) {
    Conn c(o.port);
    const auto t0 = Clock::now();
    std::printf("idle: connected, sending nothing; holding\n");
    std::fflush(stdout);
    hold(o);
    std::printf("idle: after %d ms the connection was %s; closing it\n", ms_since(t0),
                c.peer_gone() ? "closed by the target" : "still open");
    return 0;
}

int case_churn(const Options& o) {
    const auto t0 = Clock::now();
    unsigned long n = 0;
    while (ms_since(t0) < o.hold_ms) {
        Conn c(o.port);
        c.close();
        ++n;
    }
    std::printf("churn: %lu connections opened and closed at once in %d ms\n", n, ms_since(t0));
    return 0;
}

int case_flood(const Options& o) {
    Session s = ready_session(o);
    const uint32_t blocks = o.kib * 2;  // 512-byte blocks
    if (o.kib == 0 || o.kib > 2097151) throw SetupError("--kib must be 1..2097151 (under 2 GiB)");
    const bool read10 = blocks <= 0xffff;
    const uint32_t window = s.max_cmd_sn - s.cmd_sn + 1;
    const unsigned n = std::min<uint32_t>(o.count, window);
    Bytes burst;
    for (unsigned i = 0; i < n; ++i) {
        Bytes pdu = read10 ? encode(scsi_command(s, o, cdb10(0x28, i * blocks, uint16_t(blocks)), true, false,
                                                 blocks * 512, 0))
                           : encode(scsi_command(s, o, cdb16(0x88, uint64_t(i) * blocks, blocks), true, false,
                                                 blocks * 512, 0));
        burst.insert(burst.end(), pdu.begin(), pdu.end());
    }
    const char* read = read10 ? "READ(10)" : "READ(16)";
    s.conn.send_or_throw(burst, std::string("the ") + read + " burst");
    const auto t0 = Clock::now();
    std::printf("flood: from port %u\n", s.conn.local_port());
    std::printf("flood: %u %s of %u KiB sent (the target's window allowed %u), reading nothing; holding\n", n,
                read, o.kib, window);
    std::fflush(stdout);
    hold(o);
    // With --expect-close, up to --wait-ms more for the close to arrive:
    // the target logs it at once, but closes the socket only once the
    // commands it had in its store are done.
    for (const auto until = Clock::now() + std::chrono::milliseconds(o.wait_ms);
         o.expect_close && !s.conn.peer_gone() && Clock::now() < until;)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const int unread = s.conn.unread_bytes();
    const bool closed = s.conn.peer_gone();
    std::printf("flood: after %d ms: %d bytes of responses unread, connection %s; closing it unread\n",
                ms_since(t0), unread, closed ? "closed by the target" : "still open");
    std::printf("flood: unread=%d\n", unread);
    return o.expect_close && !closed ? 1 : 0;
}

// Requests from `next`, sent back to back on non-blocking `fd` without
// reading an answer, until the target takes nothing for `stall_ms`
// (stopped) or `limit` bytes have gone.
struct Flood {
    size_t sent = 0, requests = 0;
    bool stopped = false;
};
Flood flood_until_stopped(int fd, const std::function<Bytes()>& next, int stall_ms, size_t limit,
                          const char* what) {
    Flood f;
    Bytes pdu = next();
    size_t off = 0;
    while (f.sent < limit) {
        pollfd p{fd, POLLOUT, 0};
        if (::poll(&p, 1, stall_ms) == 0) {
            f.stopped = true;
            break;
        }
        ssize_t n = ::send(fd, pdu.data() + off, pdu.size() - off, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN) continue;
            throw SetupError(errno_text(std::string("sending ") + what, errno));
        }
        f.sent += size_t(n);
        off += size_t(n);
        if (off == pdu.size()) {
            off = 0;
            ++f.requests;
            pdu = next();
        }
    }
    return f;
}

int case_login_flood(const Options& o) {
    if (o.target.empty()) throw SetupError("--target is required for case " + o.test_case);
    Conn c(o.port);
    // A small receive window: the target's responses back up at once.
    const int small = 4096;
    ::setsockopt(c.fd(), SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    std::vector<std::pair<std::string, std::string>> first = {{"InitiatorName", kInitiatorName},
                                                              {"SessionType", "Normal"},
                                                              {"TargetName", o.target},
                                                              {"AuthMethod", "None"}};
    std::vector<std::pair<std::string, std::string>> padding;
    padding.reserve(200);
    for (int i = 0; i < 200; ++i) padding.emplace_back("X-io.rbio.hostile-padding-" + std::to_string(i), "1");
    auto request = [&](uint32_t exp_stat_sn, const std::vector<std::pair<std::string, std::string>>& keys) {
        Bhs req;
        req.set_opcode(Opcode::LoginRequest, true);
        req.set_flags(0x00 << 2 | 0x01);  // T=0, CSG 0 (security), NSG 1
        auto& raw = req.raw();
        raw[8] = 0x80;  // ISID type 0b10 (random)
        raw[13] = uint8_t(getpid());
        const Bytes data = text_keys(keys);
        req.set_data_segment_length(uint32_t(data.size()));
        req.set_itt(0x10).set_cmd_sn(1).set_exp_stat_sn(exp_stat_sn);
        return encode(req, data);
    };
    c.send_or_throw(request(0, first), "the first login request");
    // The rest without reading: sent until the target stops reading (the
    // socket takes nothing for 500 ms).
    const int flags = ::fcntl(c.fd(), F_GETFL);
    ::fcntl(c.fd(), F_SETFL, flags | O_NONBLOCK);
    const auto [sent, requests, stopped] = flood_until_stopped(
        c.fd(), [&] { return request(1, padding); }, 500, size_t(256) << 20, "login requests");
    if (!stopped) throw SetupError("the target read 256 MiB of login requests and kept reading");
    const auto t0 = Clock::now();
    std::printf(
        "login-flood: %zu login requests (%zu bytes) sent unanswered-read, the target stopped reading; "
        "holding\n",
        requests, sent);
    std::fflush(stdout);
    hold(o);
    std::printf("login-flood: after %d ms: %d bytes of responses unread, connection %s\n", ms_since(t0),
                c.unread_bytes(), c.peer_gone() ? "closed by the target" : "still open");
    return 0;
}

// TEST UNIT READYs in CmdSN order, sent without reading a response until
// the target stops reading (2 s without taking a byte) or takes
// --max-mib of them; then the connection is held. Each is a task in tgt's
// core whose response waits on the connection: a target that reads on
// grows by about 1 KiB per 48-byte request.
int case_request_flood(const Options& o) {
    Session s = ready_session(o);
    // Small socket buffers on this side: what the target reads is what it
    // takes, not what sits in our kernel.
    const int small = 4096;
    ::setsockopt(s.conn.fd(), SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    ::setsockopt(s.conn.fd(), SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
    const int flags = ::fcntl(s.conn.fd(), F_GETFL);
    ::fcntl(s.conn.fd(), F_SETFL, flags | O_NONBLOCK);
    const std::array<uint8_t, 6> tur{};
    // 2 s without progress: long enough not to take a pause of tgtd for a stop.
    const auto [sent, requests, stopped] = flood_until_stopped(
        s.conn.fd(), [&] { return encode(scsi_command(s, o, tur, false, false, 0, 0)); }, 2000,
        size_t(o.max_mib) << 20, "TEST UNIT READYs");
    std::printf(
        "request-flood: %zu TEST UNIT READYs (%zu bytes) sent without reading a response; %s; holding\n",
        requests, sent, stopped ? "the target stopped reading" : "the target read on to the limit");
    std::printf("request-flood: requests=%zu stopped=%d\n", requests, stopped ? 1 : 0);
    std::fflush(stdout);
    hold(o);
    std::printf("request-flood: connection %s\n", s.conn.peer_gone() ? "closed by the target" : "still open");
    return 0;
}

// A host that reads its responses slowly, then logs out: the target has
// its Logout Response queued behind megabytes of Data-In when it closes.
int case_logout_behind_reads(const Options& o) {
    Session s = ready_session(o);
    const uint32_t blocks = o.kib * 2;
    if (o.kib == 0 || blocks > 0xffff) throw SetupError("--kib must be 1..32767 (one READ(10))");
    const uint32_t window = s.max_cmd_sn - s.cmd_sn + 1;
    if (window < 2) throw SetupError("the target's command window has no room for a read and a logout");
    const unsigned n = std::min<uint32_t>(o.count, window - 1);
    Bytes burst;
    for (unsigned i = 0; i < n; ++i) {
        Bytes pdu = encode(
            scsi_command(s, o, cdb10(0x28, i * blocks, uint16_t(blocks)), true, false, blocks * 512, 0));
        burst.insert(burst.end(), pdu.begin(), pdu.end());
    }
    s.conn.send_or_throw(burst, "the READ(10) burst");
    std::printf("logout-behind-reads: %u READ(10) of %u KiB sent, reading nothing for %d ms\n", n, o.kib,
                o.hold_ms);
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::milliseconds(o.hold_ms));  // the slow host itself
    Bhs logout(Opcode::LogoutRequest);
    logout.set_flags(0x80);  // F, reason 0: close the session
    logout.set_itt(s.next_itt++).set_cmd_sn(s.cmd_sn++).set_exp_stat_sn(s.exp_stat_sn);
    s.conn.send_or_throw(encode(logout), "the Logout Request");
    size_t data_in = 0;
    bool answered = false;
    std::string ended = "the Logout Response came";
    const auto deadline = Clock::now() + std::chrono::milliseconds(o.io_timeout_ms);
    try {
        while (!answered) {
            // Still slow: the target's socket stays full while it drains
            // its queue, also when its Logout Response goes in.
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
            auto [bhs, data] = s.conn.recv_pdu(deadline, "the reads' data and the Logout Response");
            const BhsView v(bhs.data());
            if (v.opcode() == Opcode::DataIn) data_in += data.size();
            answered = v.opcode() == Opcode::LogoutResponse;
        }
    } catch (const SetupError& e) {
        ended = e.what();
    }
    std::printf("logout-behind-reads: %zu bytes of Data-In read; %s\n", data_in, ended.c_str());
    std::printf("logout-behind-reads: logout_response=%d data_in_bytes=%zu\n", answered ? 1 : 0, data_in);
    return answered ? 0 : 4;
}

// --count TEST UNIT READY in one send, then their responses.
void tur_burst(Session& s, const Options& o, unsigned n) {
    const std::array<uint8_t, 6> tur{};
    Bytes burst;
    uint32_t last_itt = 0;
    for (unsigned i = 0; i < n; ++i) {
        Bhs b = scsi_command(s, o, tur, false, false, 0, 0);
        last_itt = b.view().itt();
        Bytes pdu = encode(b);
        burst.insert(burst.end(), pdu.begin(), pdu.end());
    }
    s.conn.send_or_throw(burst, "the TEST UNIT READY burst");
    const auto deadline = Clock::now() + std::chrono::milliseconds(o.io_timeout_ms);
    for (unsigned answered = 0; answered < n;) {
        auto [bhs, data] = s.conn.recv_pdu(deadline, "the burst's responses");
        BhsView v(bhs.data());
        if (v.opcode() != Opcode::ScsiResponse)
            throw SetupError("unexpected PDU in the burst's responses: " + describe_pdu(bhs.data(), data));
        s.exp_stat_sn = v.stat_sn() + 1;
        s.max_cmd_sn = v.max_cmd_sn();
        ++answered;
        if (answered == n && v.itt() != last_itt)
            throw SetupError("the burst's last response is not its last");
    }
}

int case_ping_reply(const Options& o) {
    Session s = ready_session(o);
    int status = 0;
    for (int round = 1; round <= 3; ++round) {
        // The next ping: a NOP-In that asks for an answer (TTT not reserved).
        const auto deadline = Clock::now() + std::chrono::milliseconds(o.io_timeout_ms);
        uint32_t ttt = 0xffffffffu;
        while (ttt == 0xffffffffu) {
            auto [bhs, data] = s.conn.recv_pdu(deadline, "the target's NOP-In ping (is nop_interval set?)");
            const BhsView v(bhs.data());
            if (v.opcode() == Opcode::NopIn && v.ttt() != 0xffffffffu) ttt = v.ttt();
        }
        Bhs reply(Opcode::NopOut);
        reply.set_opcode(Opcode::NopOut, true).set_final(true).set_itt(0xffffffffu).set_ttt(ttt);
        reply.set_lun(uint64_t(o.lun & 0xff) << 48).set_cmd_sn(s.cmd_sn).set_exp_stat_sn(s.exp_stat_sn);
        const Bytes tur = tur_at(s, o, s.cmd_sn);
        const uint32_t itt = BhsView(tur.data()).itt();
        ++s.cmd_sn;
        Bytes both(reply.bytes().begin(), reply.bytes().end());
        both.insert(both.end(), tur.begin(), tur.end());
        const auto t0 = Clock::now();
        s.conn.send_or_throw(both, "a NOP-Out reply and a TEST UNIT READY");
        for (;;) {
            auto [bhs, data] = s.conn.recv_pdu(Clock::now() + std::chrono::milliseconds(o.io_timeout_ms),
                                               "the response to the TEST UNIT READY");
            const BhsView v(bhs.data());
            if (v.opcode() != Opcode::ScsiResponse || v.itt() != itt) continue;
            s.exp_stat_sn = v.stat_sn() + 1;
            break;
        }
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        std::printf("ping-reply: round %d: NOP-Out reply and TEST UNIT READY in one send: response_ms=%.1f\n",
                    round, ms);
        if (ms > o.wait_ms) {
            std::printf("ping-reply: FAIL: the response took longer than %d ms\n", o.wait_ms);
            status = 1;
        }
    }
    return status;
}

int case_lone_after_burst(const Options& o) {
    Session s = ready_session(o);
    const unsigned window = s.max_cmd_sn - s.cmd_sn + 1;
    if (o.count + 1 > window)
        throw SetupError("--count " + std::to_string(o.count) + " exceeds the command window (" +
                         std::to_string(window) + ")");
    for (int round = 0; round < 3; ++round) {
        for (int i = 0; i < 8; ++i) tur_burst(s, o, 1);
        tur_burst(s, o, o.count);
        const auto t0 = Clock::now();
        tur_burst(s, o, 1);
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        std::printf("lone-after-burst: round %d: %u commands at once, then one alone: lone_ms=%.3f\n",
                    round + 1, o.count, ms);
    }
    return 0;
}

[[noreturn]] void usage(int status) {
    std::fprintf(
        status ? stderr : stdout,
        "usage: iscsi_hostile "
        "random|bad-opcode|over-mrdsl|max-dsl|huge-edtl|data-out-beyond|data-out-unasked|\n"
        "         "
        "bad-ahs|cmdsn-window|cmdsn-connections|login-flood|data-out-cut|truncate-close|truncate-reset|\n"
        "         idle|churn|flood|lone-after-burst|ping-reply\n"
        "         --port N [--target IQN] [--lun N] [--seed N] [--connections N] [--wait-ms N]\n"
        "         [--expect-close] [--hold-ms N] [--release FILE] [--max-hold-ms N]\n"
        "         [--count N] [--kib N] [--mrdsl N] [--io-timeout-ms N] [--max-connections N]\n"
        "See the comment at the top of tests/integration/iscsi_hostile.cpp.\n");
    std::exit(status);
}

Options parse(int argc, char** argv) {
    Options o;
    if (argc < 2) usage(2);
    o.test_case = argv[1];
    if (o.test_case == "--help" || o.test_case == "-h") usage(0);
    auto number = [](const std::string& k, const char* v) {
        char* end = nullptr;
        errno = 0;
        unsigned long long n = std::strtoull(v, &end, 10);
        if (errno || end == v || *end) throw SetupError(k + " needs a number, not '" + v + "'");
        return n;
    };
    for (int i = 2; i < argc; ++i) {
        std::string k = argv[i];
        if (k == "--help") usage(0);
        if (k == "--expect-close") {
            o.expect_close = true;
            continue;
        }
        if (i + 1 >= argc) throw SetupError(k + " needs a value");
        const char* v = argv[++i];
        if (k == "--port") o.port = uint16_t(number(k, v));
        else if (k == "--target") o.target = v;
        else if (k == "--lun") o.lun = unsigned(number(k, v));
        else if (k == "--seed") o.seed = number(k, v);
        else if (k == "--connections") o.connections = unsigned(number(k, v));
        else if (k == "--wait-ms") o.wait_ms = int(number(k, v));
        else if (k == "--hold-ms") o.hold_ms = int(number(k, v));
        else if (k == "--release") o.release = v;
        else if (k == "--max-hold-ms") o.max_hold_ms = int(number(k, v));
        else if (k == "--count") o.count = unsigned(number(k, v));
        else if (k == "--kib") o.kib = unsigned(number(k, v));
        else if (k == "--max-mib") o.max_mib = unsigned(number(k, v));
        else if (k == "--io-timeout-ms") o.io_timeout_ms = int(number(k, v));
        else if (k == "--mrdsl") o.mrdsl = uint32_t(number(k, v));
        else if (k == "--max-connections") o.max_connections = unsigned(number(k, v));
        else throw SetupError("unknown option " + k);
    }
    if (o.port == 0) throw SetupError("--port is required");
    return o;
}

}  // namespace

int main(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    try {
        const Options o = parse(argc, argv);
        const std::string& c = o.test_case;
        if (c == "random") return case_random(o);
        if (c == "bad-opcode") return case_bad_opcode(o);
        if (c == "over-mrdsl") return case_over_mrdsl(o);
        if (c == "max-dsl") return case_max_dsl(o);
        if (c == "huge-edtl") return case_huge_edtl(o);
        if (c == "data-out-beyond") return case_data_out_beyond(o);
        if (c == "data-out-unasked") return case_data_out_unasked(o);
        if (c == "bad-ahs") return case_bad_ahs(o);
        if (c == "cmdsn-window") return case_cmdsn_window(o);
        if (c == "cmdsn-connections") return case_cmdsn_connections(o);
        if (c == "login-flood") return case_login_flood(o);
        if (c == "request-flood") return case_request_flood(o);
        if (c == "data-out-cut") return case_data_out_cut(o);
        if (c == "truncate-close") return case_truncate(o, false);
        if (c == "truncate-reset") return case_truncate(o, true);
        if (c == "idle") return case_idle(o);
        if (c == "churn") return case_churn(o);
        if (c == "flood") return case_flood(o);
        if (c == "lone-after-burst") return case_lone_after_burst(o);
        if (c == "logout-behind-reads") return case_logout_behind_reads(o);
        if (c == "ping-reply") return case_ping_reply(o);
        throw SetupError("unknown case '" + c + "'");
    } catch (const SetupError& e) {
        std::fprintf(stderr, "iscsi_hostile: error: %s\n", e.what());
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "iscsi_hostile: error: %s\n", e.what());
        return 2;
    }
}
