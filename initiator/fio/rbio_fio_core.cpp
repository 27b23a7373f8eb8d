// The fio engine's session side: one rbio initiator Session per fio job
// (thread or process), commands queued by fio's ->queue and sent together
// by ->commit (one TxQueue flush, one sendmsg), completions collected by the
// Session's done callbacks and handed to fio in batches by ->getevents.
// With several portals the session is a MultipathSession (one Session per
// portal, ALUA states, failover and fail back).
#include "rbio_fio_core.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "rbio/initiator/error.hpp"
#include "rbio/initiator/multipath.hpp"
#include "rbio/initiator/scsi.hpp"
#include "rbio/initiator/session.hpp"

namespace {

using namespace rbio::initiator;
using Clock = std::chrono::steady_clock;

void put_error(char* err, size_t errlen, const std::string& msg) {
    if (err && errlen) std::snprintf(err, errlen, "%s", msg.c_str());
}

struct Completion {
    void* cookie;
    int error;
    uint64_t resid;
};

constexpr int kUnitAttentionRetries = 5;

// "A,B C": the portals, split at commas and blanks.
std::vector<Portal> parse_portals(const std::string& text) {
    std::vector<Portal> out;
    size_t i = 0;
    while (i < text.size()) {
        size_t end = text.find_first_of(", \t", i);
        if (end == std::string::npos) end = text.size();
        if (end > i) out.push_back(Portal::parse(text.substr(i, end - i)));
        i = end + 1;
    }
    if (out.empty()) throw std::invalid_argument("option 'portal' names no portal");
    return out;
}

}  // namespace

struct rbio_fio_conn {
    std::unique_ptr<IoSession> session;
    MultipathSession* multipath = nullptr;  // session, when several portals
    std::string where;                      // "target IQN at HOST:PORT lun N"
    uint64_t lun = 0;
    Capacity capacity;
    std::chrono::milliseconds timeout{30000};
    std::unordered_set<void*> in_flight;
    std::deque<Completion> done;    // completed, not handed to fio yet
    std::vector<Completion> batch;  // the last reap's
    std::string failure;            // why the session ended

    // Drops the session after an error: every command in flight completes
    // with EIO, so fio sees each one end.
    void end_session(const std::string& why) {
        if (failure.empty()) failure = why;
        multipath = nullptr;
        session.reset();
        for (void* cookie : in_flight) done.push_back({cookie, EIO, 0});
        in_flight.clear();
    }

    void submit(rbio_fio_op op, std::span<uint8_t> buf, uint64_t lba, void* cookie, int retries) {
        uint32_t bs = capacity.block_size;
        ScsiCommand cmd;
        switch (op) {
            case RBIO_FIO_READ: cmd = make_read16(lun, lba, uint32_t(buf.size() / bs), buf); break;
            case RBIO_FIO_WRITE:
            case RBIO_FIO_WRITE_FUA:
                cmd = make_write16(lun, lba, uint32_t(buf.size() / bs), buf, op == RBIO_FIO_WRITE_FUA);
                break;
            case RBIO_FIO_SYNC: cmd = make_synchronize_cache10(lun); break;
        }
        cmd.timeout = timeout;
        cmd.done = [this, op, buf, lba, cookie, retries](const ScsiOutcome& o) {
            if (!o.good() && o.status == kStatusCheckCondition && retries > 0 &&
                decode_sense(o.sense).key == kSenseUnitAttention) {
                submit(op, buf, lba, cookie, retries - 1);  // leaves with the next pass
                return;
            }
            in_flight.erase(cookie);
            const uint64_t resid = o.good() && o.underflow ? o.residual : 0;
            // GOOD with no byte moved fails too: fio requeues the rest of a
            // short transfer only when some bytes moved, and would count
            // this one done, a write unwritten or a read's buffer stale.
            if (!o.good() || (!buf.empty() && resid >= buf.size())) {
                std::fprintf(
                    stderr, "rbio fio engine: %s: %s at LBA %llu failed: %s\n", where.c_str(),
                    op == RBIO_FIO_READ        ? "read"
                    : op == RBIO_FIO_WRITE     ? "write"
                    : op == RBIO_FIO_WRITE_FUA ? "write (FUA)"
                                               : "sync",
                    (unsigned long long)lba,
                    o.good() ? ("GOOD, but no data moved (residual " + std::to_string(resid) + ")").c_str()
                             : describe(o).c_str());
                done.push_back({cookie, EIO, 0});
                return;
            }
            done.push_back({cookie, 0, resid});
        };
        session->submit(std::move(cmd));
    }
};

extern "C" {

struct rbio_fio_conn* rbio_fio_connect(const struct rbio_fio_settings* s, char* err, size_t errlen) {
    try {
        if (!s->portal || !*s->portal) throw std::invalid_argument("option 'portal' is not set");
        if (!s->target || !*s->target) throw std::invalid_argument("option 'target' is not set");
        std::vector<Portal> portals = parse_portals(s->portal);
        SessionOptions opts;
        opts.target_name = s->target;
        if (s->initiator_name && *s->initiator_name) opts.initiator_name = s->initiator_name;
        if (s->chap_user && *s->chap_user)
            opts.chap = ChapCredentials{s->chap_user, s->chap_secret ? s->chap_secret : ""};
        else if (s->chap_secret && *s->chap_secret)  // else a typo logs in without CHAP
            throw std::invalid_argument("option 'chap_secret' is set without 'chap_user'");
        if (s->header_digest && *s->header_digest &&
            !parse_digest_policy(s->header_digest, opts.offer.header_digest))
            throw std::invalid_argument("header_digest: none, accept, prefer or crc32c");
        if (s->data_digest && *s->data_digest && !parse_digest_policy(s->data_digest, opts.offer.data_digest))
            throw std::invalid_argument("data_digest: none, accept, prefer or crc32c");
        opts.offer.max_recv_data_segment_length = std::clamp<uint32_t>(s->max_io_bytes, 65536, 256u << 10);
        opts.rx_buffer_bytes =
            std::max<size_t>(1u << 20, 4 * size_t(opts.offer.max_recv_data_segment_length));
        opts.replacement_timeout = std::chrono::milliseconds(s->replacement_timeout_ms);
        if (s->fence && *s->fence) {
            if (std::string_view(s->fence) == "lu-reset") opts.fence = Fence::LuReset;
            else if (std::string_view(s->fence) == "none") opts.fence = Fence::None;
            else throw std::invalid_argument("fence: lu-reset or none");
        }

        auto c = std::make_unique<rbio_fio_conn>();
        c->lun = s->lun;
        std::string at;
        for (const Portal& p : portals) at += (at.empty() ? "" : ",") + p.to_string();
        c->where = std::string("target ") + s->target + " at " + at + " LUN " + std::to_string(s->lun);
        if (s->timeout_ms) c->timeout = std::chrono::milliseconds(s->timeout_ms);
        if (portals.size() == 1) {
            c->session = Session::login(portals.front(), opts);
        } else {
            MultipathOptions mo;
            mo.session = opts;
            mo.lun = s->lun;
            mo.no_path_timeout = opts.replacement_timeout;
            auto mp = MultipathSession::open(portals, mo);
            c->multipath = mp.get();
            c->session = std::move(mp);
        }
        test_unit_ready(*c->session, c->lun);
        c->capacity = read_capacity16(*c->session, c->lun);
        if (c->capacity.block_size == 0 || c->capacity.blocks == 0)
            fail(ErrorKind::Io, c->where + ": READ CAPACITY(16) reports an empty LU");
        if (c->capacity.blocks > UINT64_MAX / c->capacity.block_size)
            fail(ErrorKind::Io, c->where + ": READ CAPACITY(16) reports " +
                                    std::to_string(c->capacity.blocks) + " blocks of " +
                                    std::to_string(c->capacity.block_size) +
                                    " bytes: over 16 EiB, not a size fio can address");
        return c.release();
    } catch (const std::exception& e) {
        put_error(err, errlen, e.what());
    } catch (...) {
        put_error(err, errlen, "unknown error");
    }
    return nullptr;
}

void rbio_fio_disconnect(struct rbio_fio_conn* c) {
    if (!c) return;
    std::unique_ptr<rbio_fio_conn> owned(c);
    try {
        if (owned->session && owned->session->outstanding() == 0) owned->session->logout();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "rbio fio engine: %s: logout: %s\n", owned->where.c_str(), e.what());
    } catch (...) {
    }
}

uint64_t rbio_fio_capacity_bytes(const struct rbio_fio_conn* c) { return c->capacity.bytes(); }
uint32_t rbio_fio_block_size(const struct rbio_fio_conn* c) { return c->capacity.block_size; }

int rbio_fio_queue(struct rbio_fio_conn* c, enum rbio_fio_op op, void* buf, uint64_t len, uint64_t offset,
                   void* cookie, char* err, size_t errlen) {
    if (!c->session) {
        put_error(err, errlen, c->where + ": session ended: " + c->failure);
        return EIO;
    }
    uint32_t bs = c->capacity.block_size;
    if (op != RBIO_FIO_SYNC &&
        (offset % bs || len % bs || len == 0 || len > UINT32_MAX || offset + len > c->capacity.bytes())) {
        put_error(err, errlen,
                  c->where + ": I/O of " + std::to_string(len) + " bytes at offset " +
                      std::to_string(offset) + " is not whole blocks of " + std::to_string(bs) +
                      " bytes inside the LU (" + std::to_string(c->capacity.bytes()) + " bytes)");
        return EINVAL;
    }
    try {
        c->in_flight.insert(cookie);
        c->submit(op, std::span<uint8_t>(static_cast<uint8_t*>(buf), op == RBIO_FIO_SYNC ? 0 : len),
                  offset / bs, cookie, kUnitAttentionRetries);
        return 0;
    } catch (const std::exception& e) {
        c->in_flight.erase(cookie);
        put_error(err, errlen, c->where + ": " + e.what());
        return EINVAL;
    }
}

int rbio_fio_commit(struct rbio_fio_conn* c, char* err, size_t errlen) {
    if (!c->session) return 0;  // queued commands already completed with EIO
    try {
        c->session->run_nowait();
        return 0;
    } catch (const std::exception& e) {
        c->end_session(e.what());
        put_error(err, errlen, c->where + ": " + e.what());
        return EIO;
    }
}

int rbio_fio_reap(struct rbio_fio_conn* c, unsigned int min, unsigned int max, int64_t timeout_ns, char* err,
                  size_t errlen) {
    c->batch.clear();
    int rc = 0;
    try {
        auto start = Clock::now();
        bool first = true;
        while (c->session && (first || c->done.size() < min)) {
            std::chrono::milliseconds wait(0);
            if (c->done.size() < min) {
                wait = std::chrono::milliseconds(1000);
                if (timeout_ns >= 0) {
                    auto left = std::chrono::nanoseconds(timeout_ns) - (Clock::now() - start);
                    if (left <= std::chrono::nanoseconds(0) && !first) break;
                    wait = std::min(wait, std::chrono::ceil<std::chrono::milliseconds>(
                                              std::max(left, std::chrono::nanoseconds(0))));
                }
            }
            if (wait.count() == 0) c->session->run_nowait();
            else c->session->run_once(wait);
            first = false;
        }
    } catch (const std::exception& e) {
        c->end_session(e.what());
        put_error(err, errlen, c->where + ": " + e.what());
        rc = -EIO;
    }
    while (!c->done.empty() && c->batch.size() < max) {
        c->batch.push_back(c->done.front());
        c->done.pop_front();
    }
    if (rc && c->batch.empty()) return rc;
    return int(c->batch.size());
}

void* rbio_fio_completion(struct rbio_fio_conn* c, unsigned int i, int* error, uint64_t* resid) {
    if (i >= c->batch.size()) return nullptr;
    *error = c->batch[i].error;
    *resid = c->batch[i].resid;
    return c->batch[i].cookie;
}

void rbio_fio_describe_stats(const struct rbio_fio_conn* c, char* out, size_t outlen) {
    if (!c->session) {
        std::snprintf(out, outlen, "session ended: %s", c->failure.c_str());
        return;
    }
    SessionStats s = c->session->stats();
    using rbio::iser::Counter;
    uint64_t sends = s.transport[Counter::SendCalls], recvs = s.transport[Counter::RecvCalls];
    std::snprintf(
        out, outlen, "commands=%llu send_calls=%llu recv_calls=%llu poll_calls=%llu syscalls_per_cmd=%.2f",
        (unsigned long long)s.commands, (unsigned long long)sends, (unsigned long long)recvs,
        (unsigned long long)s.poll_calls, s.commands ? double(s.syscalls()) / double(s.commands) : 0.0);
    if (c->multipath) {
        MultipathStats m = c->multipath->multipath_stats();
        std::string more = " multipath: failovers=" + std::to_string(m.failovers) +
                           " commands_moved=" + std::to_string(m.commands_moved) +
                           " last_failover_ms=" + std::to_string(m.last_failover_ms);
        for (const std::string& line : c->multipath->describe_paths()) more += "\n  path " + line;
        size_t used = std::strlen(out);
        if (used < outlen) std::snprintf(out + used, outlen - used, "%s", more.c_str());
    }
}

}  // extern "C"
