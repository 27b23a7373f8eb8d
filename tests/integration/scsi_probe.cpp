// scsi_probe: single SCSI commands to one LU through libiscsi, printing what
// a test needs to assert on (identity, ALUA state, sense codes), and a
// writer that records every acknowledged write so a test can prove none is
// lost after a gateway dies.
//
//   scsi_probe URL inquiry               tpgs=N vendor=... product=...
//   scsi_probe URL serial                the VPD 0x80 serial number
//   scsi_probe URL designators           one VPD 0x83 designator per line:
//                                        "lu|port|target TYPE HEX"
//   scsi_probe URL rtpg [--extended]     "group ID STATE" per port group
//   scsi_probe URL cdb HEXBYTES [LEN [--resid|--hex]]
//                                        one command (data-in of LEN bytes);
//                                        prints "GOOD" or "CHECK key=K asc=AAAA",
//                                        with --resid followed by " underflow=N",
//                                        the residual count of an underflow, with
//                                        --hex by " HEX", the data-in
//   scsi_probe URL cdb-out HEXBYTES HEXDATA [--resid|--info]
//                                        one command with HEXDATA as data-out;
//                                        --info adds " info=N", a CHECK
//                                        CONDITION's valid INFORMATION field
//   scsi_probe URL wait-ua ASC SECONDS   prints "ready", then waits for a unit
//                                        attention with ASC (hex)
//   scsi_probe URL count-ua ASC GO_FILE SECONDS
//                                        prints "ready", idles until GO_FILE
//                                        exists, then sends TEST UNIT READY until
//                                        one reports no unit attention; prints
//                                        "ua=N", the unit attentions with ASC
//
// Unit attentions pending at login (power on, LUNs changed) are cleared
// with TEST UNIT READY before the request.
//   scsi_probe URL write-log FIRST COUNT FILE
//                                        writes blocks FIRST.. one by one, each
//                                        with data naming its LBA, appending the
//                                        LBA to FILE once acknowledged; exits 1
//                                        at the first failure
//   scsi_probe URL verify-log FILE       reads back every LBA in FILE
//   scsi_probe URL write|verify LBA COUNT SEED   a pattern of SEED at LBA
//   scsi_probe URL cdb-tmf HEXBYTES lun-reset|abort-task
//                                        the command (no data) sent, then a
//                                        LOGICAL UNIT RESET, or an ABORT TASK
//                                        of it, while it runs: "tmf=R ms=M",
//                                        R the response (0: function
//                                        complete), M how long it took to
//                                        come; exits 1 without one within 15 s
//   scsi_probe URL cdb-ms HEXBYTES       the command (no data): "RESULT ms=M",
//                                        M its round trip alone
//   scsi_probe URL write-after GO_FILE LBA COUNT SEED [--tur-first]
//                                        logs in, says "ready", waits until
//                                        GO_FILE exists, then writes blocks
//                                        as `write` does: "LBA RESULT" per
//                                        command, stopping at a failure;
//                                        --tur-first: a TEST UNIT READY
//                                        before them (a response read)
//   scsi_probe URL reads|writes|fua-writes LBA COUNT
//                                        COUNT one-block commands at once (the
//                                        target may merge them); "LBA RESULT"
//                                        per command
//
// Exit 0 on success, 1 when the command or check failed, 2 on usage errors.
#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace {

[[noreturn]] void die(const std::string& msg, int code = 2) {
    std::fprintf(stderr, "scsi_probe: error: %s\n", msg.c_str());
    std::exit(code);
}

struct Session {
    iscsi_context* ctx = nullptr;
    iscsi_url* url = nullptr;
    int lun = 0;
    ~Session() {
        if (url) iscsi_destroy_url(url);
        if (ctx) {
            iscsi_logout_sync(ctx);
            iscsi_destroy_context(ctx);
        }
    }
};

struct Result {
    int status = -1;  // SCSI status, or -1 when the transport failed
    int key = 0;
    int asc = 0;
    std::vector<unsigned char> data;
    long underflow = 0;  // the response's residual count when it says underflow
    std::string error;
};

Result run(Session& s, std::vector<unsigned char> cdb, int dir, std::vector<unsigned char> out = {},
           int in_len = 0) {
    Result r;
    scsi_task* t =
        scsi_create_task(int(cdb.size()), cdb.data(), dir, dir == SCSI_XFER_WRITE ? int(out.size()) : in_len);
    if (!t) die("cannot create a SCSI task");
    iscsi_data d{out.size(), out.data()};
    scsi_task* done = iscsi_scsi_command_sync(s.ctx, s.lun, t, dir == SCSI_XFER_WRITE ? &d : nullptr);
    if (!done) {
        r.error = iscsi_get_error(s.ctx);
        scsi_free_scsi_task(t);
        return r;
    }
    r.status = done->status;
    if (done->status == SCSI_STATUS_CHECK_CONDITION) {
        r.key = int(done->sense.key);
        r.asc = done->sense.ascq;
    }
    if (done->datain.size > 0) r.data.assign(done->datain.data, done->datain.data + done->datain.size);
    if (done->residual_status == SCSI_RESIDUAL_UNDERFLOW) r.underflow = long(done->residual);
    scsi_free_scsi_task(done);
    return r;
}

std::string describe(const Result& r) {
    char buf[96];
    if (r.status == SCSI_STATUS_GOOD) return "GOOD";
    if (r.status == SCSI_STATUS_CHECK_CONDITION) {
        std::snprintf(buf, sizeof buf, "CHECK key=%x asc=%04x", unsigned(r.key), unsigned(r.asc));
        return buf;
    }
    if (r.status < 0) return "FAILED " + r.error;
    std::snprintf(buf, sizeof buf, "STATUS %02x", unsigned(r.status));
    return buf;
}

// " info=N" when a CHECK CONDITION's sense (fixed format, after the
// data segment's 2-byte SenseLength) has its INFORMATION field valid.
std::string sense_info(const Result& r) {
    if (r.status != SCSI_STATUS_CHECK_CONDITION || r.data.size() < 2 + 7) return "";
    const unsigned char* sense = r.data.data() + 2;
    if (!(sense[0] & 0x80) || ((sense[0] & 0x7f) != 0x70 && (sense[0] & 0x7f) != 0x71)) return "";
    const unsigned long info = (unsigned long)sense[3] << 24 | (unsigned long)sense[4] << 16 |
                               (unsigned long)sense[5] << 8 | sense[6];
    return " info=" + std::to_string(info);
}

Result inquiry(Session& s, bool evpd, uint8_t page) {
    return run(s, {0x12, uint8_t(evpd ? 1 : 0), page, 0x04, 0x00, 0}, SCSI_XFER_READ, {}, 1024);
}

void must_be_good(const Result& r, const char* what) {
    if (r.status != SCSI_STATUS_GOOD) die(std::string(what) + ": " + describe(r), 1);
}

std::string hex(const unsigned char* p, size_t n) {
    std::string s;
    char b[3];
    for (size_t i = 0; i < n; ++i) {
        std::snprintf(b, sizeof b, "%02x", p[i]);
        s += b;
    }
    return s;
}

constexpr uint32_t block = 512;

// Block contents that name the LBA and a seed, so a block landing in the
// wrong place or an old version reading back is told apart.
std::vector<unsigned char> pattern(uint64_t lba, uint32_t seed) {
    std::vector<unsigned char> b(block);
    for (uint32_t i = 0; i < block; i += 16)
        std::snprintf(reinterpret_cast<char*>(&b[i]), 16, "%08llx%07x", (unsigned long long)lba,
                      seed & 0xfffffff);
    return b;
}

std::vector<unsigned char> rw16(uint8_t op, uint64_t lba, uint32_t blocks) {
    std::vector<unsigned char> c(16, 0);
    c[0] = op;
    for (int i = 0; i < 8; ++i) c[2 + i] = uint8_t(lba >> (56 - 8 * i));
    for (int i = 0; i < 4; ++i) c[10 + i] = uint8_t(blocks >> (24 - 8 * i));
    return c;
}

Result write_block(Session& s, uint64_t lba, uint32_t seed) {
    return run(s, rw16(0x8a, lba, 1), SCSI_XFER_WRITE, pattern(lba, seed));
}

bool verify_block(Session& s, uint64_t lba, uint32_t seed) {
    Result r = run(s, rw16(0x88, lba, 1), SCSI_XFER_READ, {}, block);
    if (r.status != SCSI_STATUS_GOOD) {
        std::fprintf(stderr, "read of LBA %llu: %s\n", (unsigned long long)lba, describe(r).c_str());
        return false;
    }
    if (r.data != pattern(lba, seed)) {
        std::fprintf(stderr, "LBA %llu does not hold what was written (seed %u)\n", (unsigned long long)lba,
                     seed);
        return false;
    }
    return true;
}

struct Pending {
    uint64_t lba = 0;
    bool done = false;
    Result result;
};

void on_pending(iscsi_context*, int status, void* command_data, void* priv) {
    auto* p = static_cast<Pending*>(priv);
    auto* task = static_cast<scsi_task*>(command_data);
    p->done = true;
    p->result.status = status;
    if (status == SCSI_STATUS_CHECK_CONDITION && task) {
        p->result.key = int(task->sense.key);
        p->result.asc = task->sense.ascq;
    }
    if (task) scsi_free_scsi_task(task);
}

// One wait of up to 15 s for `events` on the session's socket, then
// libiscsi's work on what came; exits 1 with `timeout` if nothing did.
void serve(Session& s, short events, const char* timeout) {
    pollfd pfd{iscsi_get_fd(s.ctx), events, 0};
    if (::poll(&pfd, 1, 15000) <= 0) die(timeout, 1);
    if (iscsi_service(s.ctx, pfd.revents) < 0)
        die(std::string("iscsi_service: ") + iscsi_get_error(s.ctx), 1);
}

// Holds back partial segments on the socket while it lives, so that PDUs
// written one by one leave as one burst when it ends.
class Cork {
public:
    explicit Cork(int fd) : fd_(fd) { set(1); }
    ~Cork() { set(0); }
    Cork(const Cork&) = delete;
    Cork& operator=(const Cork&) = delete;

private:
    void set(int on) {
        if (::setsockopt(fd_, IPPROTO_TCP, TCP_CORK, &on, sizeof on) != 0)
            die(std::string("TCP_CORK: ") + std::strerror(errno), 1);
    }
    int fd_;
};

// COUNT one-block commands in flight together. libiscsi writes each PDU
// with its own system call, and a target woken by the first would see them
// in several passes (nothing to merge); corked, they arrive in one segment
// and the target sees them in one pass, where it may merge adjacent ones.
int at_once(Session& s, bool write, bool fua, uint64_t lba, uint64_t count) {
    std::vector<Pending> p(count);
    std::vector<std::vector<unsigned char>> data(count);
    for (uint64_t i = 0; i < count; ++i) {
        p[i].lba = lba + i;
        data[i] = pattern(lba + i, 2);
        scsi_task* t =
            write ? iscsi_write16_task(s.ctx, s.lun, lba + i, data[i].data(), block, block, 0, 0, fua ? 1 : 0,
                                       0, 0, on_pending, &p[i])
                  : iscsi_read16_task(s.ctx, s.lun, lba + i, block, block, 0, 0, 0, 0, 0, on_pending, &p[i]);
        if (!t) die(std::string("cannot queue a command: ") + iscsi_get_error(s.ctx));
    }
    {
        Cork cork(iscsi_get_fd(s.ctx));
        while (iscsi_which_events(s.ctx) & POLLOUT) serve(s, POLLOUT, "cannot send within 15 s");
    }
    for (;;) {
        bool all = true;
        for (const auto& x : p) all = all && x.done;
        if (all) break;
        serve(s, short(iscsi_which_events(s.ctx)), "no answer within 15 s");
    }
    for (const auto& x : p) std::printf("%llu %s\n", (unsigned long long)x.lba, describe(x.result).c_str());
    return 0;
}

struct TaskManagement {
    bool done = false;
    int status = -1;
    uint32_t response = 0xff;
};

void on_task_management(iscsi_context*, int status, void* command_data, void* priv) {
    auto* t = static_cast<TaskManagement*>(priv);
    t->done = true;
    t->status = status;
    if (status == SCSI_STATUS_GOOD && command_data) t->response = *static_cast<uint32_t*>(command_data);
}

long long ms_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start)
        .count();
}

// The task management request goes out once the command has left (the
// target reads them in that order, so the command has reached the LU
// first); how long its answer takes is how long the LU took to end the
// command.
int tmf_during(Session& s, std::vector<unsigned char> cdb, const std::string& function) {
    if (function != "lun-reset" && function != "abort-task")
        die("cdb-tmf: '" + function + "' is not lun-reset or abort-task");
    Pending command;
    scsi_task* t = scsi_create_task(int(cdb.size()), cdb.data(), SCSI_XFER_NONE, 0);
    if (!t) die("cannot create a SCSI task");
    if (iscsi_scsi_command_async(s.ctx, s.lun, t, on_pending, nullptr, &command) != 0)
        die(std::string("cannot queue the command: ") + iscsi_get_error(s.ctx));
    while (iscsi_which_events(s.ctx) & POLLOUT) serve(s, POLLOUT, "cannot send within 15 s");
    if (command.done)
        die("the command ended before the task management request: " + describe(command.result), 1);
    const auto start = std::chrono::steady_clock::now();
    TaskManagement tm;
    // Either cancels the command in libiscsi (its callback, which frees t,
    // runs with SCSI_STATUS_CANCELLED) once the answer is in.
    const int queued = function == "lun-reset"
                           ? iscsi_task_mgmt_lun_reset_async(s.ctx, uint32_t(s.lun), on_task_management, &tm)
                           : iscsi_task_mgmt_abort_task_async(s.ctx, t, on_task_management, &tm);
    if (queued != 0) die("cannot queue the " + function + ": " + iscsi_get_error(s.ctx));
    while (!tm.done)
        serve(s, short(iscsi_which_events(s.ctx)), ("no answer to the " + function + " within 15 s").c_str());
    const long long ms = ms_since(start);
    if (tm.status != SCSI_STATUS_GOOD) die(function + ": " + iscsi_get_error(s.ctx), 1);
    std::printf("tmf=%u ms=%lld\n", unsigned(tm.response), ms);
    return 0;
}

// One command without data, timed from its send to its answer.
int timed(Session& s, std::vector<unsigned char> cdb) {
    const auto start = std::chrono::steady_clock::now();
    Result r = run(s, std::move(cdb), SCSI_XFER_NONE);
    const long long ms = ms_since(start);
    std::printf("%s ms=%lld\n", describe(r).c_str(), ms);
    return 0;
}

unsigned long number(const char* s, int base = 10) {
    char* end = nullptr;
    unsigned long v = std::strtoul(s, &end, base);
    if (!*s || *end) die(std::string("not a number: ") + s);
    return v;
}

std::vector<unsigned char> hex_bytes(const std::string& h) {
    if (h.size() % 2 || h.empty()) die("hex bytes must be an even number of digits, got '" + h + "'");
    std::vector<unsigned char> v;
    for (size_t i = 0; i < h.size(); i += 2) v.push_back(uint8_t(number(h.substr(i, 2).c_str(), 16)));
    return v;
}

}  // namespace

// Says "ready" (logged in), then idles, as a host's unused path does, while
// the test changes things, until `go` exists.
void ready_until(const char* go, std::chrono::seconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    std::printf("ready\n");
    std::fflush(stdout);
    while (::access(go, F_OK) != 0) {
        if (std::chrono::steady_clock::now() >= deadline) die(std::string("no ") + go + " in time", 1);
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
}

// write-after: COUNT blocks from LBA, one command each, on a session that
// logged in before the test changed things: "LBA RESULT" per command until
// the first that is not GOOD.
int write_blocks(Session& s, uint64_t lba, uint64_t count, uint32_t seed) {
    for (uint64_t b = lba; b < lba + count; ++b) {
        Result r = write_block(s, b, seed);
        std::printf("%llu %s\n", (unsigned long long)b, describe(r).c_str());
        if (r.status != SCSI_STATUS_GOOD) return 1;
    }
    return 0;
}

// `write-after GO_FILE LBA COUNT SEED [--tur-first]`: see the top.
int write_after(Session& s, int argc, char** argv) {
    if (argc < 7) die("usage: scsi_probe URL write-after GO_FILE LBA COUNT SEED [--tur-first]");
    if (argc > 7 && std::string(argv[7]) != "--tur-first")
        die(std::string("write-after: unknown option ") + argv[7]);
    ready_until(argv[3], std::chrono::seconds(120));
    if (argc > 7) {
        Result r = run(s, std::vector<unsigned char>(6, 0), SCSI_XFER_NONE);
        std::printf("TEST UNIT READY %s\n", describe(r).c_str());
        if (r.status != SCSI_STATUS_GOOD) return 1;
    }
    return write_blocks(s, number(argv[4]), number(argv[5]), uint32_t(number(argv[6])));
}

// count-ua: the unit attentions with `asc` pending once `go` exists.
void count_unit_attentions(Session& s, int asc, const char* go, std::chrono::seconds limit) {
    ready_until(go, limit);
    const std::vector<unsigned char> tur(6, 0);
    int n = 0;
    for (int i = 0; i < 64; ++i) {
        Result r = run(s, tur, SCSI_XFER_NONE);
        if (r.status < 0) die("TEST UNIT READY: " + r.error, 1);
        if (r.key != SCSI_SENSE_UNIT_ATTENTION) break;
        if (r.asc == asc) ++n;
    }
    std::printf("ua=%d\n", n);
}

// `cdb HEXBYTES [LEN [--resid|--hex]]`: one command, data-in of LEN bytes.
void print_cdb(Session& s, int argc, char** argv) {
    if (argc < 4) die("usage: scsi_probe URL cdb HEXBYTES [LEN [--resid|--hex]]");
    std::vector<unsigned char> cdb = hex_bytes(argv[3]);
    int len = argc > 4 ? int(number(argv[4])) : 0;
    Result r = run(s, cdb, len ? SCSI_XFER_READ : SCSI_XFER_NONE, {}, len);
    const std::string mode = argc > 5 ? argv[5] : "";
    if (mode == "--resid") {
        std::printf("%s underflow=%ld\n", describe(r).c_str(), r.underflow);
    } else if (mode == "--hex") {
        std::printf("%s ", describe(r).c_str());
        for (unsigned char b : r.data) std::printf("%02x", b);
        std::printf("\n");
    } else {
        std::printf("%s\n", describe(r).c_str());
    }
}

int main(int argc, char** argv) {
    if (argc < 3)
        die("usage: scsi_probe URL "
            "inquiry|serial|designators|rtpg|cdb|cdb-tmf|cdb-ms|wait-ua|count-ua|write-log|verify-log|write|"
            "verify ...");
    const std::string what = argv[2];
    Session s;
    s.ctx = iscsi_create_context("iqn.2026-11.io.rbio:scsi-probe");
    if (!s.ctx) die("cannot create an iSCSI context");
    s.url = iscsi_parse_full_url(s.ctx, argv[1]);
    if (!s.url) die(std::string("bad URL ") + argv[1] + ": " + iscsi_get_error(s.ctx));
    iscsi_set_targetname(s.ctx, s.url->target);
    iscsi_set_session_type(s.ctx, ISCSI_SESSION_NORMAL);
    // LUN -1: libiscsi's own TEST UNIT READY after login would fail the
    // login on a standby path; pending unit attentions are cleared below.
    if (iscsi_full_connect_sync(s.ctx, s.url->portal, -1) != 0)
        die(std::string("login to ") + argv[1] + " failed: " + iscsi_get_error(s.ctx), 1);
    s.lun = s.url->lun;
    // A dead gateway is an answer here, not something to wait out:
    // libiscsi would otherwise reconnect forever.
    iscsi_set_noautoreconnect(s.ctx, 1);
    iscsi_set_reconnect_max_retries(s.ctx, 0);
    // SCSI_PROBE_TIMEOUT: seconds a command may take (default 15), longer
    // where a test stalls the store on purpose (an OSD restarting).
    const char* tmo = std::getenv("SCSI_PROBE_TIMEOUT");
    iscsi_set_timeout(s.ctx, tmo && std::atoi(tmo) > 0 ? std::atoi(tmo) : 15);
    const std::vector<unsigned char> tur(6, 0);
    for (int i = 0; i < 16 && run(s, tur, SCSI_XFER_NONE).key == SCSI_SENSE_UNIT_ATTENTION; ++i) {
    }

    if (what == "inquiry") {
        Result r = inquiry(s, false, 0);
        must_be_good(r, "INQUIRY");
        if (r.data.size() < 36) die("short INQUIRY data", 1);
        std::printf("tpgs=%u vendor=%.8s product=%.16s\n", unsigned((r.data[5] >> 4) & 3), &r.data[8],
                    &r.data[16]);
    } else if (what == "serial") {
        Result r = inquiry(s, true, 0x80);
        must_be_good(r, "INQUIRY VPD 0x80");
        size_t n = r.data.size() >= 4 ? std::min<size_t>(r.data.size() - 4, (r.data[2] << 8) | r.data[3]) : 0;
        std::string sn(r.data.begin() + 4, r.data.begin() + 4 + long(n));
        std::printf("%s\n", sn.c_str());
    } else if (what == "designators") {
        Result r = inquiry(s, true, 0x83);
        must_be_good(r, "INQUIRY VPD 0x83");
        if (r.data.size() < 4) die("short VPD 0x83", 1);
        size_t end = std::min<size_t>(r.data.size(), 4 + ((r.data[2] << 8) | r.data[3]));
        static const char* assoc[] = {"lu", "port", "target", "reserved"};
        for (size_t p = 4; p + 4 <= end;) {
            size_t len = r.data[p + 3];
            if (p + 4 + len > end) die("a VPD 0x83 designator runs past the page", 1);
            std::printf("%s %u %s\n", assoc[(r.data[p + 1] >> 4) & 3], unsigned(r.data[p + 1] & 0xf),
                        hex(&r.data[p + 4], len).c_str());
            p += 4 + len;
        }
    } else if (what == "rtpg") {
        const bool ext = argc > 3 && std::string(argv[3]) == "--extended";
        Result r = run(s, {0xa3, uint8_t(0x0a | (ext ? 0x20 : 0)), 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0},
                       SCSI_XFER_READ, {}, 4096);
        must_be_good(r, "REPORT TARGET PORT GROUPS");
        if (r.data.size() < 4) die("short RTPG data", 1);
        size_t len = 4 + ((size_t(r.data[0]) << 24) | (r.data[1] << 16) | (r.data[2] << 8) | r.data[3]);
        size_t p = 4;
        if (ext) {
            if (r.data.size() < 8 || (r.data[4] & 0x70) != 0x10)
                die("no extended header in the RTPG data", 1);
            std::printf("transition_time=%u\n", unsigned(r.data[5]));
            p = 8;
        }
        if (len > r.data.size()) die("RTPG data longer than returned", 1);
        static const char* names[16] = {"active/optimized",
                                        "active/non-optimized",
                                        "standby",
                                        "unavailable",
                                        "lba-dependent",
                                        "5",
                                        "6",
                                        "7",
                                        "8",
                                        "9",
                                        "a",
                                        "b",
                                        "c",
                                        "d",
                                        "offline",
                                        "transitioning"};
        while (p + 8 <= len) {
            unsigned ports = r.data[p + 7];
            std::printf("group %u %s ports", unsigned((r.data[p + 2] << 8) | r.data[p + 3]),
                        names[r.data[p] & 0xf]);
            for (unsigned i = 0; i < ports && p + 8 + 4 * i + 4 <= len; ++i)
                std::printf(" %u", unsigned((r.data[p + 8 + 4 * i + 2] << 8) | r.data[p + 8 + 4 * i + 3]));
            std::printf("\n");
            p += 8 + 4 * ports;
        }
    } else if (what == "cdb") {
        print_cdb(s, argc, argv);
    } else if (what == "cdb-tmf") {
        if (argc < 5) die("usage: scsi_probe URL cdb-tmf HEXBYTES lun-reset|abort-task");
        return tmf_during(s, hex_bytes(argv[3]), argv[4]);
    } else if (what == "cdb-ms") {
        if (argc < 4) die("usage: scsi_probe URL cdb-ms HEXBYTES");
        return timed(s, hex_bytes(argv[3]));
    } else if (what == "cdb-out") {
        if (argc < 5) die("usage: scsi_probe URL cdb-out HEXBYTES HEXDATA [--resid|--info]");
        Result r = run(s, hex_bytes(argv[3]), SCSI_XFER_WRITE, hex_bytes(argv[4]));
        const std::string mode = argc > 5 ? argv[5] : "";
        if (mode == "--resid") std::printf("%s underflow=%ld\n", describe(r).c_str(), r.underflow);
        else if (mode == "--info") std::printf("%s%s\n", describe(r).c_str(), sense_info(r).c_str());
        else std::printf("%s\n", describe(r).c_str());
    } else if (what == "wait-ua") {
        if (argc < 5) die("usage: scsi_probe URL wait-ua ASC SECONDS");
        const int want = int(number(argv[3], 16));
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(number(argv[4]));
        std::printf("ready\n");
        std::fflush(stdout);
        while (std::chrono::steady_clock::now() < deadline) {
            Result r = run(s, tur, SCSI_XFER_NONE);
            if (r.status < 0) die("TEST UNIT READY: " + r.error, 1);
            if (r.key == SCSI_SENSE_UNIT_ATTENTION) {
                std::printf("%s\n", describe(r).c_str());
                if (r.asc == want) return 0;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        die("no unit attention with ASC " + std::string(argv[3]) + " in time", 1);
    } else if (what == "count-ua") {
        if (argc < 6) die("usage: scsi_probe URL count-ua ASC GO_FILE SECONDS");
        count_unit_attentions(s, int(number(argv[3], 16)), argv[4], std::chrono::seconds(number(argv[5])));
    } else if (what == "write-after") {
        return write_after(s, argc, argv);
    } else if (what == "write-log") {
        if (argc < 6) die("usage: scsi_probe URL write-log FIRST COUNT FILE");
        const uint64_t first = number(argv[3]), count = number(argv[4]);
        std::FILE* log = std::fopen(argv[5], "a");
        if (!log) die(std::string("cannot open ") + argv[5] + ": " + std::strerror(errno));
        for (uint64_t lba = first; lba < first + count; ++lba) {
            Result r = write_block(s, lba, 1);
            if (r.status != SCSI_STATUS_GOOD) {
                std::fprintf(stderr, "write of LBA %llu: %s\n", (unsigned long long)lba, describe(r).c_str());
                std::fclose(log);
                return 1;
            }
            std::fprintf(log, "%llu\n", (unsigned long long)lba);
            std::fflush(log);  // acknowledged: a test kill must not lose the record
        }
        std::fclose(log);
    } else if (what == "verify-log") {
        if (argc < 4) die("usage: scsi_probe URL verify-log FILE");
        std::ifstream in(argv[3]);
        if (!in) die(std::string("cannot read ") + argv[3]);
        unsigned long long lba;
        size_t n = 0, bad = 0;
        while (in >> lba) {
            ++n;
            if (!verify_block(s, lba, 1) && ++bad > 10) break;
        }
        std::printf("%zu acknowledged blocks, %zu lost\n", n, bad);
        return bad ? 1 : 0;
    } else if (what == "write" || what == "verify") {
        if (argc < 6) die("usage: scsi_probe URL write|verify LBA COUNT SEED");
        const uint64_t lba = number(argv[3]), count = number(argv[4]);
        const uint32_t seed = uint32_t(number(argv[5]));
        for (uint64_t b = lba; b < lba + count; ++b) {
            if (what == "write") {
                Result r = write_block(s, b, seed);
                if (r.status != SCSI_STATUS_GOOD)
                    die("write of LBA " + std::to_string(b) + ": " + describe(r), 1);
            } else if (!verify_block(s, b, seed)) {
                return 1;
            }
        }
    } else if (what == "reads" || what == "writes" || what == "fua-writes") {
        if (argc < 5) die("usage: scsi_probe URL reads|writes|fua-writes LBA COUNT");
        return at_once(s, what != "reads", what == "fua-writes", number(argv[3]), number(argv[4]));
    } else {
        die("unknown request " + what);
    }
    return 0;
}
