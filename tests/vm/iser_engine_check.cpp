// rbio's RDMA engine (iser-opt) end to end on a real verbs device - soft-RoCE
// in the VM test: an iSER "target" thread and an "initiator" thread, each
// with an IserEndpoint over rdma_cm, move SCSI-shaped traffic the iSER way.
// Reads: the command advertises a read STag, the target RDMA WRITEs the data
// and SENDs the response in the same post. Writes: the command advertises a
// write STag, the target RDMA READs the data, checks it and responds. Every
// byte is checked against a pattern tied to the command's sequence number,
// and the target's counters (work requests per post call, signalled sends
// and channel wake-ups per I/O, completions per poll) are printed and, with
// --expect-*, asserted.
//
//   iser_engine_check --addr 10.99.0.1 [--port 7471] [--ios N] [--depth D]
//       [--size BYTES] [--write] [--no-batch] [--signal-every N]
//       [--expect-wrs-per-post X] [--expect-signaled-per-io Y]
//
// With --hostile CASE it is only a client, for a real iSER target (tgtd):
// it connects, sends one malformed message and succeeds if the target then
// disconnects within 10 s. CASE: hello (an iSER Hello, never negotiated),
// opcode (an undefined iSCSI opcode), length (a DataSegmentLength of
// 0xffffff), truncated (a BHS that claims more data than the message has).
// The cases after a login (--target IQN, LUN 1, after one TEST UNIT READY
// that takes the new nexus's unit attention and learns the window):
// cmdsn-beyond (a TEST UNIT READY at MaxCmdSN + 1), cmdsn-twice (two at
// ExpCmdSN + 1), ahs-nop (an immediate NOP-Out with 4 bytes of AHS); and
// cmdsn-edge, which must NOT lose the connection: a TEST UNIT READY at
// MaxCmdSN, then one at each CmdSN from ExpCmdSN up to it, every one
// answered GOOD.
//
// With --hold SECONDS it is only a client too: it connects, prints
// "connected", sends nothing (not even a login) and keeps the connection
// for SECONDS, or until the target disconnects (exit 0 either way): a peer
// whose connection is established but has carried nothing yet.
#include <arpa/inet.h>
#include <poll.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "rbio/iser/rdma/iser_endpoint.hpp"

using namespace rbio::iser;
using namespace rbio::iser::rdma;

namespace {

struct Options {
    std::string addr;
    int port = 7471;
    uint32_t ios = 20000;
    uint32_t depth = 32;
    uint32_t size = 4096;
    bool write = false;
    bool batch = true;
    uint32_t signal_every = 16;
    double expect_wrs_per_post = 0;
    double expect_signaled_per_io = 0;
    std::string hostile;
    std::string target;
    int hold_s = -1;
};

[[noreturn]] void die(const std::string& m) {
    std::fprintf(stderr, "iser_engine_check: error: %s\n", m.c_str());
    std::exit(1);
}

uint64_t pattern_word(uint32_t seq, size_t i) { return (uint64_t(seq) << 32 | i) * 0x9e3779b97f4a7c15ull; }
void fill(uint8_t* p, uint32_t size, uint32_t seq) {
    for (size_t i = 0; i < size / 8; ++i) {
        const uint64_t w = pattern_word(seq, i);
        std::memcpy(p + i * 8, &w, 8);
    }
}
bool check(const uint8_t* p, uint32_t size, uint32_t seq) {
    for (size_t i = 0; i < size / 8; ++i) {
        uint64_t w = pattern_word(seq, i), got;
        std::memcpy(&got, p + i * 8, 8);
        if (got != w) return false;
    }
    return true;
}

sockaddr_in address(const Options& o) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(o.port));
    if (inet_pton(AF_INET, o.addr.c_str(), &a.sin_addr) != 1) die("bad address " + o.addr);
    return a;
}

CmEvent expect_event(rdma_event_channel* ch, rdma_cm_event_type want, int timeout_ms = 10000) {
    pollfd p{ch->fd, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) die(std::string("timed out waiting for ") + rdma_event_str(want));
    CmEvent e = next_cm_event(ch);
    if (!e || e->event != want)
        die(std::string("expected ") + rdma_event_str(want) + ", got " +
            (e ? rdma_event_str(e->event) : "nothing") + (e ? " status " + std::to_string(e->status) : ""));
    return e;
}

void wait_fd(int fd, const char* who) {
    pollfd p{fd, POLLIN, 0};
    int n = poll(&p, 1, 10000);
    if (n == 0) die(std::string(who) + ": no completion for 10 s");
    if (n < 0 && errno != EINTR) die(std::string(who) + ": poll failed");
}

EndpointConfig endpoint_config(const Options& o, PduSender peer) {
    EndpointConfig c;
    c.peer = peer;
    c.send.batch = o.batch;
    c.send.signal_every = o.signal_every;
    c.batch_recv = o.batch;
    if (!o.batch) c.poll.spin_us = 0;  // the unoptimised run: arm at once, as stock does
    c.recv_depth = 2 * o.depth + 8;
    c.send_slots = 2 * o.depth + 2 * o.signal_every + 8;
    c.send.depth = 4 * o.depth + 2 * o.signal_every + 16;
    // No timer here: covered at the end of each pass that leaves a tail.
    c.cover_every_pass = true;
    return c;
}

// The initiator's side before its endpoint: the target's address and route
// resolved, and a protection domain on the device that reaches it.
struct Resolved {
    EventChannelPtr ch;
    CmIdPtr id;
    PdPtr pd;
};

Resolved resolve_target(const Options& o) {
    Resolved r;
    r.ch.reset(rdma_create_event_channel());
    if (!r.ch) throw_rdma("rdma_create_event_channel");
    rdma_cm_id* raw = nullptr;
    if (rdma_create_id(r.ch.get(), &raw, nullptr, RDMA_PS_TCP)) throw_rdma("rdma_create_id");
    r.id.reset(raw);
    sockaddr_in a = address(o);
    if (rdma_resolve_addr(r.id.get(), nullptr, reinterpret_cast<sockaddr*>(&a), 5000))
        throw_rdma("rdma_resolve_addr");
    expect_event(r.ch.get(), RDMA_CM_EVENT_ADDR_RESOLVED);
    if (rdma_resolve_route(r.id.get(), 5000)) throw_rdma("rdma_resolve_route");
    expect_event(r.ch.get(), RDMA_CM_EVENT_ROUTE_RESOLVED);
    r.pd.reset(ibv_alloc_pd(r.id->verbs));
    if (!r.pd) throw_rdma("ibv_alloc_pd");
    return r;
}

// Posts the endpoint's receives and connects with iSER's CM private data.
void connect_endpoint(IserEndpoint& ep, rdma_event_channel* ch) {
    ep.post_receives();
    std::array<uint8_t, kIserCmPrivateLength> priv{};
    IserCmRequest{}.encode(priv);
    rdma_conn_param p{};
    p.private_data = priv.data();
    p.private_data_len = uint8_t(priv.size());
    p.responder_resources = 4;
    p.initiator_depth = 4;
    p.retry_count = 7;
    p.rnr_retry_count = 7;
    if (rdma_connect(ep.id(), &p)) throw_rdma("rdma_connect");
    expect_event(ch, RDMA_CM_EVENT_ESTABLISHED);
}

Bhs scsi_response(uint32_t itt, uint8_t status) {
    Bhs r(Opcode::ScsiResponse);
    r.set_final(true).set_itt(itt);
    r.raw()[3] = status;
    return r;
}

std::atomic<bool> target_ready{false};
ConnectionCounters target_counters;

// The target side: one connection, answers until the initiator disconnects.
void run_target(const Options& o) {
    EventChannelPtr ch(rdma_create_event_channel());
    if (!ch) throw_rdma("rdma_create_event_channel");
    rdma_cm_id* raw = nullptr;
    if (rdma_create_id(ch.get(), &raw, nullptr, RDMA_PS_TCP)) throw_rdma("rdma_create_id");
    CmIdPtr listen_id(raw);
    sockaddr_in a = address(o);
    if (rdma_bind_addr(listen_id.get(), reinterpret_cast<sockaddr*>(&a)))
        throw_rdma("rdma_bind_addr " + o.addr);
    if (rdma_listen(listen_id.get(), 4)) throw_rdma("rdma_listen");
    target_ready = true;

    CmEvent req = expect_event(ch.get(), RDMA_CM_EVENT_CONNECT_REQUEST);
    CmIdPtr id(req->id);
    auto cm = IserCmRequest::decode(
        {static_cast<const uint8_t*>(req->param.conn.private_data), req->param.conn.private_data_len});
    if (!cm.zbva_not_supported) die("target: the initiator did not send its iSER CM flags");
    PdPtr pd(ibv_alloc_pd(id->verbs));
    if (!pd) throw_rdma("ibv_alloc_pd");
    // A data buffer comes back when the send that used it is known complete,
    // which selective signalling defers by up to a signalling interval (and
    // the depth bound of the send queue): the pool covers that tail.
    const uint32_t buffers = 2 * o.depth + 2 * o.signal_every;
    RegisteredPool data(pd.get(), o.size, buffers, IBV_ACCESS_LOCAL_WRITE);
    std::vector<uint32_t> seq_of(buffers);
    std::vector<uint32_t> itt_of(buffers);
    IserEndpoint* self = nullptr;
    uint64_t bad = 0;
    // Tokens: data slot + 1; an RDMA READ's token additionally has bit 32.
    auto release = [&](uint64_t token, int status) {
        const uint32_t slot = uint32_t(token) - 1;
        if (token >> 32) {  // the write data arrived: check it, answer
            const bool ok = status == 0 && check(data.data(slot), o.size, seq_of[slot]);
            if (!ok) ++bad;
            Bhs r = scsi_response(itt_of[slot], ok ? 0 : 2);
            if (!self->send_pdu({}, r.bytes(), {}, slot + 1)) die("target: no room for a response");
            return;
        }
        data.release(slot);
    };
    IserEndpoint ep(std::move(id), pd.get(), endpoint_config(o, PduSender::Initiator), target_counters,
                    release);
    self = &ep;
    ep.post_receives();
    rdma_conn_param p{};
    p.responder_resources = 4;
    p.initiator_depth = 4;
    if (rdma_accept(ep.id(), &p)) throw_rdma("rdma_accept");
    expect_event(ch.get(), RDMA_CM_EVENT_ESTABLISHED);

    auto handle = [&](const IserRx& rx) {
        if (rx.bhs.opcode() != Opcode::ScsiCommand) die("target: unexpected opcode");
        const uint32_t slot = data.acquire();
        if (slot == RegisteredPool::kNone) die("target: more commands than the depth");
        seq_of[slot] = rx.bhs.cmd_sn();
        itt_of[slot] = rx.bhs.itt();
        ibv_sge sge{reinterpret_cast<uintptr_t>(data.data(slot)), o.size, data.lkey()};
        if (o.write) {
            if (!rx.iser.write_stag_valid) die("target: write command without a write STag");
            if (!ep.rdma_read(sge, rx.iser.write_va, rx.iser.write_stag, uint64_t(1) << 32 | (slot + 1)))
                die("target: no room for an RDMA READ");
        } else {
            if (!rx.iser.read_stag_valid) die("target: read command without a read STag");
            fill(data.data(slot), o.size, seq_of[slot]);
            Bhs r = scsi_response(itt_of[slot], 0);
            if (!ep.rdma_write(sge, rx.iser.read_va, rx.iser.read_stag, 0) ||
                !ep.send_pdu({}, r.bytes(), {}, slot + 1))
                die("target: no room for data and response");
        }
    };
    pollfd fds[2] = {{ep.fd(), POLLIN, 0}, {ch->fd, POLLIN, 0}};
    for (;;) {
        if (poll(fds, 2, 15000) <= 0) die("target: idle for 15 s");
        if (fds[1].revents) {
            CmEvent e = next_cm_event(ch.get());
            if (e && e->event == RDMA_CM_EVENT_DISCONNECTED) break;
        }
        if (fds[0].revents && !ep.run_pass(handle)) die("target: " + ep.error());
    }
    if (bad) die("target: " + std::to_string(bad) + " writes arrived with wrong data");
}

// Whether the target disconnects within `seconds` (other CM events are
// taken and ignored).
bool disconnected_within(rdma_event_channel* ch, int seconds) {
    pollfd f{ch->fd, POLLIN, 0};
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    while (std::chrono::steady_clock::now() < until) {
        if (poll(&f, 1, 200) > 0) {
            CmEvent e = next_cm_event(ch);
            if (e && e->event == RDMA_CM_EVENT_DISCONNECTED) return true;
        }
    }
    return false;
}

// A PDU a real target sent: its BHS and data segment, copied out of the
// receive.
struct TargetPdu {
    std::array<uint8_t, kBhsLength> bhs{};
    std::vector<uint8_t> data;
    BhsView view() const { return BhsView(bhs.data()); }
};

// A logged-in iSER connection to a real target (full feature phase).
struct LoggedIn {
    Resolved r;
    ConnectionCounters counters;
    IserEndpoint ep;
    uint32_t cmd_sn = 0, exp_stat_sn = 0, max_cmd_sn = 0, next_itt = 0x100;
    std::deque<TargetPdu> got;
    bool disconnected = false;

    LoggedIn(const Options& o, Resolved res)
        : r(std::move(res)),
          ep(std::move(r.id), r.pd.get(), endpoint_config(o, PduSender::Target), counters, nullptr) {}

    void send(std::span<const uint8_t> header, std::span<const uint8_t> data, const char* what) {
        if (!ep.send_pdu({}, header, data, 0)) die(std::string("no room to send ") + what);
        ep.flush();
    }
    // One wait of up to `ms` for completions or a CM event: received PDUs
    // are appended to `got`, finished sends free their room.
    void pump(int ms) {
        pollfd fds[2] = {{ep.fd(), POLLIN, 0}, {r.ch->fd, POLLIN, 0}};
        if (poll(fds, 2, ms) <= 0) return;
        if (fds[1].revents) {
            CmEvent e = next_cm_event(r.ch.get());
            if (e && e->event == RDMA_CM_EVENT_DISCONNECTED) disconnected = true;
        }
        if (fds[0].revents && !ep.run_pass([this](const IserRx& rx) {
                TargetPdu p;
                std::copy(rx.bhs.bytes().begin(), rx.bhs.bytes().end(), p.bhs.begin());
                p.data.assign(rx.data.begin(), rx.data.end());
                got.push_back(std::move(p));
            }))
            disconnected = true;  // the connection failed under us
    }
    // Waits up to `ms` for a PDU or the target's disconnect; nullopt on
    // either end.
    std::optional<TargetPdu> next(int ms) {
        const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
        while (got.empty() && !disconnected) {
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                until - std::chrono::steady_clock::now());
            if (left.count() <= 0) break;
            pump(int(left.count()));
        }
        if (got.empty()) return std::nullopt;
        TargetPdu p = std::move(got.front());
        got.pop_front();
        return p;
    }
};

std::vector<uint8_t> text_keys(const std::vector<std::pair<std::string, std::string>>& keys) {
    std::vector<uint8_t> out;
    for (const auto& [k, v] : keys) {
        const std::string kv = k + "=" + v;
        out.insert(out.end(), kv.begin(), kv.end());
        out.push_back(0);
    }
    return out;
}

// Logs in as a Normal session with RDMAExtensions=Yes: the security stage
// (AuthMethod=None), then the operational one, then full feature phase.
std::unique_ptr<LoggedIn> login_session(const Options& o) {
    if (o.target.empty()) die("--hostile " + o.hostile + " needs --target");
    auto s = std::make_unique<LoggedIn>(o, resolve_target(o));
    connect_endpoint(s->ep, s->r.ch.get());
    const std::vector<std::pair<std::string, std::string>> security = {
        {"InitiatorName", "iqn.2026-11.io.rbio:hostile"},
        {"SessionType", "Normal"},
        {"TargetName", o.target},
        {"AuthMethod", "None"}};
    const std::vector<std::pair<std::string, std::string>> operational = {
        {"RDMAExtensions", "Yes"},
        {"HeaderDigest", "None"},
        {"DataDigest", "None"},
        {"MaxRecvDataSegmentLength", "8192"},
        {"InitiatorRecvDataSegmentLength", "8192"},
        {"TargetRecvDataSegmentLength", "8192"},
        {"ImmediateData", "Yes"},
        {"InitialR2T", "Yes"},
        {"MaxConnections", "1"},
        {"ErrorRecoveryLevel", "0"}};
    unsigned csg = 0, nsg = 1;
    auto keys = security;
    uint16_t tsih = 0;
    for (int step = 0; step < 8; ++step) {
        Bhs req;
        req.set_opcode(Opcode::LoginRequest, true).set_flags(uint8_t(0x80 | csg << 2 | nsg));
        auto& raw = req.raw();
        raw[8] = 0x80;  // ISID of the random type, different per process
        raw[12] = uint8_t(getpid() >> 8);
        raw[13] = uint8_t(getpid());
        raw[14] = uint8_t(tsih >> 8);
        raw[15] = uint8_t(tsih);
        const auto data = text_keys(keys);
        req.set_data_segment_length(uint32_t(data.size()))
            .set_itt(1)
            .set_cmd_sn(1)
            .set_exp_stat_sn(s->exp_stat_sn);
        s->send(req.bytes(), data, "a login request");
        auto rsp = s->next(10000);
        if (!rsp) die("login to " + o.target + ": no response (or disconnected)");
        const BhsView v = rsp->view();
        if (v.opcode() != Opcode::LoginResponse || rsp->bhs[36] != 0)
            die("login to " + o.target + ": refused (opcode " + std::to_string(v.opcode_byte()) +
                ", status " + std::to_string(rsp->bhs[36]) + "/" + std::to_string(rsp->bhs[37]) + ")");
        s->exp_stat_sn = v.stat_sn() + 1;
        s->cmd_sn = v.exp_cmd_sn();
        s->max_cmd_sn = v.max_cmd_sn();
        tsih = uint16_t(rsp->bhs[14] << 8 | rsp->bhs[15]);
        if (!(v.flags() & 0x80)) {  // the target wants another round in this stage
            keys.clear();
            continue;
        }
        csg = v.flags() & 0x03;
        if (csg == 3) return s;
        nsg = 3;
        keys = csg == 1 ? operational : decltype(keys){};
    }
    die("login to " + o.target + ": no full feature phase after 8 steps");
}

// A TEST UNIT READY BHS for LUN 1 at `cmd_sn` (the session's next ITT).
Bhs tur_at(LoggedIn& s, uint32_t cmd_sn) {
    Bhs b(Opcode::ScsiCommand);
    b.set_flags(0x80 | 0x01).set_lun(uint64_t(1) << 48).set_itt(s.next_itt++);
    b.set_cmd_sn(cmd_sn).set_exp_stat_sn(s.exp_stat_sn);
    return b;
}

// Reads until the SCSI Response to `itt`; returns its status.
uint8_t response_to(LoggedIn& s, uint32_t itt, const char* what) {
    for (;;) {
        auto p = s.next(10000);
        if (!p)
            die(std::string("no response to ") + what + (s.disconnected ? ": the target disconnected" : ""));
        const BhsView v = p->view();
        if (v.opcode() != Opcode::ScsiResponse) continue;
        s.exp_stat_sn = v.stat_sn() + 1;
        s.max_cmd_sn = v.max_cmd_sn();
        if (v.itt() == itt) return p->bhs[3];
    }
}

// Logged in, unit attention taken, the full command window known.
std::unique_ptr<LoggedIn> ready_session(const Options& o) {
    auto s = login_session(o);
    Bhs b = tur_at(*s, s->cmd_sn++);
    s->send(b.bytes(), {}, "TEST UNIT READY");
    response_to(*s, b.view().itt(), "the first TEST UNIT READY");
    return s;
}

// The cases in full feature phase (see the top of the file).
int run_session_hostile(const Options& given) {
    // Receives for a whole window of responses (tgt's default queue
    // depth, 128), so none waits for a repost.
    Options o = given;
    o.depth = std::max(o.depth, 160u);
    auto s = ready_session(o);
    const uint32_t exp = s->cmd_sn, max = s->max_cmd_sn;
    if (o.hostile == "cmdsn-edge") {
        const uint32_t count = max - exp + 1;
        if (count < 2 || count > 512)
            die("a window of " + std::to_string(count) + " CmdSNs: nothing to test");
        std::vector<uint32_t> itts;
        auto send_at = [&](uint32_t sn) {
            Bhs b = tur_at(*s, sn);
            itts.push_back(b.view().itt());
            // The send slots are fewer than a window: take responses meanwhile.
            while (!s->ep.send_pdu({}, b.bytes(), {}, 0)) {
                s->ep.flush();
                s->pump(1000);
                if (s->disconnected)
                    die("cmdsn-edge: the target disconnected at CmdSN " + std::to_string(sn));
            }
        };
        send_at(max);
        for (uint32_t sn = exp; sn != max; ++sn) send_at(sn);
        s->ep.flush();
        uint32_t good = 0;
        for (uint32_t i = 0; i < count; ++i) {
            auto p = s->next(10000);
            if (!p)
                die("cmdsn-edge: " + std::to_string(good) + " of " + std::to_string(count) +
                    " answered, then " + (s->disconnected ? "the target disconnected" : "nothing for 10 s"));
            if (p->view().opcode() != Opcode::ScsiResponse) {
                --i;
                continue;
            }
            if (p->bhs[2] == 0 && p->bhs[3] == 0) ++good;
        }
        if (good != count)
            die("cmdsn-edge: " + std::to_string(count - good) + " of " + std::to_string(count) + " not GOOD");
        if (s->next(300) || s->disconnected)
            die("cmdsn-edge: the target disconnected (or sent more) after them");
        std::printf(
            "hostile cmdsn-edge: TEST UNIT READY at MaxCmdSN %u first, then ExpCmdSN %u to %u: %u GOOD, "
            "the connection open\n",
            max, exp, max - 1, good);
        return 0;
    }
    if (o.hostile == "cmdsn-beyond") {
        Bhs b = tur_at(*s, max + 1);
        s->send(b.bytes(), {}, "TEST UNIT READY at MaxCmdSN + 1");
    } else if (o.hostile == "cmdsn-twice") {
        Bhs a = tur_at(*s, exp + 1), b = tur_at(*s, exp + 1);
        s->send(a.bytes(), {}, "TEST UNIT READY at ExpCmdSN + 1");
        s->send(b.bytes(), {}, "TEST UNIT READY at ExpCmdSN + 1 again");
    } else if (o.hostile == "ahs-nop") {
        Bhs nop(Opcode::NopOut);
        nop.set_opcode(Opcode::NopOut, true).set_final(true).set_itt(s->next_itt++).set_ttt(0xffffffffu);
        nop.set_cmd_sn(exp).set_exp_stat_sn(s->exp_stat_sn).set_total_ahs_words(1);
        std::vector<uint8_t> header(nop.bytes().begin(), nop.bytes().end());
        header.insert(header.end(), {0x00, 0x01, 0x3f, 0x00});  // AHSLength 1, type 63 (vendor)
        s->send(header, {}, "a NOP-Out with AHS");
    } else {
        die("unknown --hostile case " + o.hostile);
    }
    while (!s->disconnected) {
        if (!s->next(10000) && !s->disconnected)
            die("hostile " + o.hostile + ": the target kept the connection for 10 s");
    }
    std::printf("hostile %s: the target disconnected\n", o.hostile.c_str());
    return 0;
}

// Connects to a real target, sends one malformed message, and waits for the
// target to drop the connection.
int run_hostile(const Options& o) {
    if (o.hostile != "hello" && o.hostile != "opcode" && o.hostile != "length" && o.hostile != "truncated")
        return run_session_hostile(o);
    Resolved r = resolve_target(o);
    ConnectionCounters counters;
    IserEndpoint ep(std::move(r.id), r.pd.get(), endpoint_config(o, PduSender::Target), counters, nullptr);
    connect_endpoint(ep, r.ch.get());

    IserHeader ih;
    Bhs login;
    login.set_opcode(Opcode::LoginRequest, true);
    login.set_itt(1);
    static const uint8_t text[] = "InitiatorName=iqn.2026-11.io.rbio:hostile";
    std::span<const uint8_t> data(text, sizeof text);
    if (o.hostile == "hello") {
        ih.opcode = IserOpcode::Hello;
    } else if (o.hostile == "opcode") {
        login.set_opcode(Opcode(0x3e));
    } else if (o.hostile == "length") {
        login.set_data_segment_length(0xffffff);
        data = {};
    } else if (o.hostile == "truncated") {
        login.set_data_segment_length(4096);
    } else {
        die("unknown --hostile case " + o.hostile);
    }
    if (o.hostile != "length" && o.hostile != "truncated")
        login.set_data_segment_length(uint32_t(data.size()));
    if (!ep.send_pdu(ih, login.bytes(), data, 0)) die("hostile: cannot queue the message");
    ep.flush();
    // The target's answer is to disconnect; nothing else is acceptable.
    if (!disconnected_within(r.ch.get(), 10))
        die("hostile " + o.hostile + ": the target kept the connection for 10 s");
    std::printf("hostile %s: the target disconnected\n", o.hostile.c_str());
    return 0;
}

// Connects to a real target and sends nothing until the time is up or the
// target disconnects.
int run_hold(const Options& o) {
    Resolved r = resolve_target(o);
    ConnectionCounters counters;
    IserEndpoint ep(std::move(r.id), r.pd.get(), endpoint_config(o, PduSender::Target), counters, nullptr);
    connect_endpoint(ep, r.ch.get());
    std::printf("connected\n");
    std::fflush(stdout);
    if (disconnected_within(r.ch.get(), o.hold_s)) std::printf("the target disconnected\n");
    else std::printf("held for %d s\n", o.hold_s);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto val = [&]() -> std::string {
            if (i + 1 >= argc) die(a + " needs a value");
            return argv[++i];
        };
        if (a == "--addr") o.addr = val();
        else if (a == "--port") o.port = std::stoi(val());
        else if (a == "--ios") o.ios = uint32_t(std::stoul(val()));
        else if (a == "--depth") o.depth = uint32_t(std::stoul(val()));
        else if (a == "--size") o.size = uint32_t(std::stoul(val()));
        else if (a == "--write") o.write = true;
        else if (a == "--no-batch") o.batch = false;
        else if (a == "--signal-every") o.signal_every = uint32_t(std::stoul(val()));
        else if (a == "--expect-wrs-per-post") o.expect_wrs_per_post = std::stod(val());
        else if (a == "--expect-signaled-per-io") o.expect_signaled_per_io = std::stod(val());
        else if (a == "--hostile") o.hostile = val();
        else if (a == "--target") o.target = val();
        else if (a == "--hold") o.hold_s = std::stoi(val());
        else die("unknown option " + a);
    }
    if (o.addr.empty() || o.depth == 0 || o.size % 8 != 0 || o.size == 0) die("usage: see the source");

    if (!o.hostile.empty() || o.hold_s >= 0) {
        try {
            return o.hold_s >= 0 ? run_hold(o) : run_hostile(o);
        } catch (const std::exception& e) {
            die(e.what());
        }
    }
    try {
        std::thread target([&] {
            try {
                run_target(o);
            } catch (const std::exception& e) {
                die(std::string("target: ") + e.what());
            }
        });
        while (!target_ready) std::this_thread::sleep_for(std::chrono::milliseconds(1));

        // The initiator side.
        Resolved r = resolve_target(o);
        RegisteredPool data(r.pd.get(), o.size, o.depth,
                            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
        ConnectionCounters counters;
        IserEndpoint ep(std::move(r.id), r.pd.get(), endpoint_config(o, PduSender::Target), counters,
                        nullptr);
        connect_endpoint(ep, r.ch.get());

        std::vector<uint32_t> seq_of(o.depth);
        uint32_t issued = 0, done = 0, bad = 0;
        auto issue = [&](uint32_t slot) {
            const uint32_t seq = issued++;
            seq_of[slot] = seq;
            IserHeader ih;
            if (o.write) {
                fill(data.data(slot), o.size, seq);
                ih.write_stag_valid = true;
                ih.write_stag = data.rkey();
                ih.write_va = reinterpret_cast<uintptr_t>(data.data(slot));
            } else {
                std::memset(data.data(slot), 0, o.size);
                ih.read_stag_valid = true;
                ih.read_stag = data.rkey();
                ih.read_va = reinterpret_cast<uintptr_t>(data.data(slot));
            }
            Bhs cmd(Opcode::ScsiCommand);
            cmd.set_final(true).set_itt(slot).set_cmd_sn(seq).set_expected_data_transfer_length(o.size);
            if (!ep.send_pdu(ih, cmd.bytes(), {}, 0)) die("initiator: no room for a command");
        };
        const auto t0 = std::chrono::steady_clock::now();
        for (uint32_t s = 0; s < o.depth && issued < o.ios; ++s) issue(s);
        ep.flush();
        auto handle = [&](const IserRx& rx) {
            if (rx.bhs.opcode() != Opcode::ScsiResponse) die("initiator: unexpected opcode");
            const uint32_t slot = rx.bhs.itt();
            if (slot >= o.depth) die("initiator: response with a foreign ITT");
            const uint8_t status = rx.bhs.bytes()[3];
            if (status != 0 || (!o.write && !check(data.data(slot), o.size, seq_of[slot]))) ++bad;
            ++done;
            if (issued < o.ios) issue(slot);
        };
        while (done < o.ios) {
            wait_fd(ep.fd(), "initiator");
            if (!ep.run_pass(handle)) die("initiator: " + ep.error());
        }
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        rdma_disconnect(ep.id());
        target.join();

        const ConnectionCounters& t = target_counters;
        const double ios = double(o.ios);
        std::printf("%s %u x %u B, depth %u, batch %s, signal_every %u: %.0f IOPS, %.1f MB/s\n",
                    o.write ? "write" : "read", o.ios, o.size, o.depth, o.batch ? "on" : "off",
                    o.signal_every, ios / secs, ios * o.size / secs / 1e6);
        std::printf(
            "target: wrs_per_post=%.2f signaled_per_io=%.3f completions_per_poll=%.2f "
            "wakeups_per_io=%.3f recv_per_post=%.2f\n",
            t.wrs_per_post(), double(t[Counter::Signaled]) / ios, t.completions_per_poll(),
            double(t[Counter::ChannelWakeups]) / ios,
            t[Counter::RecvPostCalls] ? double(t[Counter::RecvRequests]) / double(t[Counter::RecvPostCalls])
                                      : 0.0);
        std::printf(
            "initiator: wrs_per_post=%.2f signaled_per_io=%.3f completions_per_poll=%.2f "
            "wakeups_per_io=%.3f\n",
            counters.wrs_per_post(), double(counters[Counter::Signaled]) / ios,
            counters.completions_per_poll(), double(counters[Counter::ChannelWakeups]) / ios);
        if (bad) die(std::to_string(bad) + " of " + std::to_string(o.ios) + " I/Os had wrong data or status");
        if (o.expect_wrs_per_post > 0 && t.wrs_per_post() < o.expect_wrs_per_post)
            die("target posted " + std::to_string(t.wrs_per_post()) +
                " work requests per call, expected >= " + std::to_string(o.expect_wrs_per_post));
        if (o.expect_signaled_per_io > 0 && double(t[Counter::Signaled]) / ios > o.expect_signaled_per_io)
            die("target signalled " + std::to_string(double(t[Counter::Signaled]) / ios) +
                " sends per I/O, expected <= " + std::to_string(o.expect_signaled_per_io));
        std::printf("ok: every byte verified\n");
        return 0;
    } catch (const std::exception& e) {
        die(e.what());
    }
}
