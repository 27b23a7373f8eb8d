#include "lun_io.hpp"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>

#include "rbio/initiator/error.hpp"
#include "rbio/initiator/log.hpp"
#include "rbio/initiator/scsi.hpp"

namespace rbio::fuse {

using initiator::ScsiCommand;
using initiator::ScsiOutcome;

namespace {

constexpr std::chrono::milliseconds kCommandTimeout{30000};
// The I/O thread wakes at least this often to answer the target's NOP-In
// pings and to refresh the snapshot.
constexpr std::chrono::milliseconds kIdleWait{1000};

bool overlap(size_t ia, uint64_t a0, uint64_t a1, size_t ib, uint64_t b0, uint64_t b1) {
    return ia == ib && a0 < b1 && b0 < a1;
}

}  // namespace

initiator::UniqueFd LunIo::make_wake_fd() { return WakeSignal::make_fd(); }

LunIo::LunIo(std::unique_ptr<initiator::IoSession> session, initiator::UniqueFd wake_fd,
             std::vector<LunInfo> luns, std::function<std::vector<std::string>()> describe_paths)
    : session_(std::move(session)),
      wake_(std::move(wake_fd)),
      describe_paths_(std::move(describe_paths)),
      luns_(std::move(luns)) {
    snapshot_.params = session_->params();
    snapshot_.session = session_->stats();
}

LunIo::~LunIo() {
    if (thread_.joinable()) shutdown();
}

void LunIo::start() {
    thread_ = std::thread([this] { thread_main(); });
}

void LunIo::wake() { wake_.notify(); }

// ---------------------------------------------------------------- callers' side

void LunIo::read(size_t index, uint64_t offset, size_t size, ReadDone done) {
    auto op = std::make_unique<Op>();
    op->kind = Kind::Read;
    op->index = index;
    op->offset = offset;
    op->size = size;
    op->read_done = std::move(done);
    if (!enqueue(op)) op->read_done(ESHUTDOWN, {});
}

bool LunIo::enqueue(std::unique_ptr<Op>& op) {
    {
        std::lock_guard lock(mu_);
        if (stopping_) return false;
        incoming_.push_back(std::move(op));
    }
    wake();
    return true;
}

void LunIo::write(size_t index, uint64_t offset, std::vector<uint8_t> data, bool fua, Done done) {
    auto op = std::make_unique<Op>();
    op->kind = Kind::Write;
    op->fua = fua;
    op->index = index;
    op->offset = offset;
    op->size = data.size();
    op->data = std::move(data);
    op->done = std::move(done);
    if (!enqueue(op)) op->done(ESHUTDOWN);
}

void LunIo::sync(size_t index, Done done) {
    auto op = std::make_unique<Op>();
    op->kind = Kind::Sync;
    op->index = index;
    op->done = std::move(done);
    if (!enqueue(op)) op->done(ESHUTDOWN);
}

bool LunIo::answering() const {
    std::lock_guard lock(mu_);
    return thread_.joinable() && !stopped_;
}

bool LunIo::ended() const {
    std::lock_guard lock(mu_);
    return stopped_;
}

std::string LunIo::shutdown() {
    {
        std::lock_guard lock(mu_);
        stopping_ = true;
    }
    wake();
    if (thread_.joinable()) thread_.join();
    std::lock_guard lock(mu_);
    return shutdown_result_;
}

IoSnapshot LunIo::snapshot() const {
    std::lock_guard lock(mu_);
    return snapshot_;
}

// ---------------------------------------------------------------- the I/O thread

void LunIo::publish(const std::string& state) {
    std::vector<std::string> paths;
    const auto now = std::chrono::steady_clock::now();
    const bool refresh_paths =
        describe_paths_ && session_ && now - paths_published_ >= std::chrono::milliseconds(500);
    if (refresh_paths) {
        paths = describe_paths_();
        paths_published_ = now;
    }
    std::lock_guard lock(mu_);
    if (refresh_paths) snapshot_.paths = std::move(paths);
    snapshot_.state = state;
    if (session_) {
        snapshot_.params = session_->params();
        snapshot_.session = session_->stats();
    }
    snapshot_.io = counters_;
    snapshot_.in_flight = ops_.size();
}

// The session has thrown: its end, its commands failed (EIO), and whether
// a new one may come (try_reconnect).
void LunIo::session_ended(const std::string& why) {
    failed_ = why;
    RBIO_LOG(Error,
             "session ended: " << failed_ << "; failing " << ops_.size() << " requests in flight with EIO");
    if (session_->left_unfenced_writes() && reconnect_) {
        unfenced_ = true;
        failed_ +=
            "; not logging in again by itself: a gateway that was not fenced may "
            "still apply those writes over newer ones. Once it cannot (its tgtd "
            "stopped, or its sessions ended), rbio logout and rbio login again";
        RBIO_LOG(Error,
                 "not logging in again by itself: a gateway that was not fenced may still "
                 "apply the writes given up on over newer ones; every request fails "
                 "until an admin has seen to it and logged out and in again");
    }
    publish("failed: " + failed_);
    // Outstanding commands never complete now; their buffers are
    // ours, so the Session goes first.
    session_.reset();
    fail_all(EIO);
}

void LunIo::thread_main() {
    publish("up");
    for (;;) {
        // Drain the eventfd before taking the queue: a request queued after
        // the swap signals again, so the poll below wakes.
        wake_.consume();
        std::deque<std::unique_ptr<Op>> batch;
        bool stopping;
        {
            std::lock_guard lock(mu_);
            batch.swap(incoming_);
            stopping = stopping_;
        }
        for (auto& op : batch) start_op(std::move(op));
        if (stopping && ops_.empty()) break;
        if (session_) {
            try {
                session_->run_once(kIdleWait);
            } catch (const std::exception& e) {
                session_ended(e.what());
            }
        } else {
            if (!stopping) try_reconnect();
            if (!session_) {
                pollfd p{wake_.fd(), POLLIN, 0};
                ::poll(&p, 1, int(kIdleWait.count()));
            }
        }
        publish(failed_.empty() ? "up" : "failed: " + failed_);
    }
    std::string result;
    if (session_) {
        try {
            for (const LunInfo& l : luns_) initiator::synchronize_cache10(*session_, l.lun);
            session_->logout();
        } catch (const std::exception& e) {
            result = e.what();
        }
    } else {
        result = "the session had ended before: " + failed_;
    }
    publish(result.empty() ? "logged out" : "failed: " + result);
    std::lock_guard lock(mu_);
    stopped_ = true;
    shutdown_result_ = result;
}

void LunIo::start_op(std::unique_ptr<Op> op) {
    Op& o = *op;
    o.id = next_id_++;
    if (!session_) {
        counters_.errors++;
        if (o.kind == Kind::Read) o.read_done(EIO, {});
        else o.done(EIO);
        return;
    }
    const LunInfo& lun = luns_.at(o.index);
    const uint64_t bs = lun.block_size;
    if (o.kind == Kind::Sync) {
        ops_.emplace(o.id, std::move(op));
        issue(o, initiator::make_synchronize_cache10(lun.lun), [this](Op& x, int err) { finish(x.id, err); });
        return;
    }
    if (o.kind == Kind::Read) {
        if (o.offset >= lun.bytes() || o.size == 0) return o.read_done(0, {});
        o.size = size_t(std::min<uint64_t>(o.size, lun.bytes() - o.offset));
    } else {
        if (o.size == 0) return o.done(0);
        if (o.offset > lun.bytes() || o.size > lun.bytes() - o.offset) {
            counters_.errors++;
            return o.done(ENOSPC);
        }
    }
    o.first_lba = o.offset / bs;
    o.end_lba = (o.offset + o.size + bs - 1) / bs;
    ops_.emplace(o.id, std::move(op));
    counters_.max_in_flight = std::max<uint64_t>(counters_.max_in_flight, ops_.size());

    if (o.kind == Kind::Read) {
        if (o.offset % bs || o.size % bs) counters_.unaligned_reads++;
        o.buf.resize((o.end_lba - o.first_lba) * bs);
        issue(o, initiator::make_read16(lun.lun, o.first_lba, uint32_t(o.end_lba - o.first_lba), o.buf),
              [this](Op& x, int err) { finish(x.id, err); });
        return;
    }
    // Writes wait for every earlier write they overlap, running or waiting.
    bool wait = overlaps_active(o);
    for (uint64_t w : waiting_writes_) {
        const Op& p = *ops_.at(w);
        wait = wait || overlap(o.index, o.first_lba, o.end_lba, p.index, p.first_lba, p.end_lba);
    }
    if (wait) {
        counters_.ordered_waits++;
        waiting_writes_.push_back(o.id);
        return;
    }
    begin_write(o);
}

bool LunIo::overlaps_active(const Op& op) const {
    for (uint64_t a : active_writes_) {
        const Op& p = *ops_.at(a);
        if (overlap(op.index, op.first_lba, op.end_lba, p.index, p.first_lba, p.end_lba)) return true;
    }
    return false;
}

void LunIo::begin_write(Op& o) {
    active_writes_.push_back(o.id);
    const LunInfo& lun = luns_.at(o.index);
    const uint64_t bs = lun.block_size;
    const uint32_t blocks = uint32_t(o.end_lba - o.first_lba);
    auto write_all = [this](Op& x, int err) {
        if (err) return finish(x.id, err);
        const LunInfo& l = luns_.at(x.index);
        if (x.fua) counters_.fua_writes++;
        issue(x, initiator::make_write16(l.lun, x.first_lba, uint32_t(x.end_lba - x.first_lba), x.buf, x.fua),
              [this](Op& y, int e) { finish(y.id, e); });
    };
    if (o.offset % bs == 0 && o.size % bs == 0) {
        o.buf = std::move(o.data);
        return write_all(o, 0);
    }
    // Read-modify-write: read the partial first and last blocks, lay the new
    // bytes over them, write the whole range.
    counters_.rmw++;
    o.buf.resize(size_t(blocks) * bs);
    const bool head = o.offset % bs != 0;
    const bool tail = (o.offset + o.size) % bs != 0;
    const uint64_t last = o.end_lba - 1;
    std::vector<uint64_t> edges;
    if (head) edges.push_back(o.first_lba);
    if (tail && (last != o.first_lba || !head)) edges.push_back(last);
    o.pending = int(edges.size());
    auto merged = [this, write_all](Op& x, int err) {
        if (err && !x.err) x.err = err;
        if (--x.pending > 0) return;
        if (!x.err)
            std::memcpy(x.buf.data() + (x.offset - x.first_lba * luns_.at(x.index).block_size), x.data.data(),
                        x.size);
        write_all(x, x.err);
    };
    for (uint64_t lba : edges) {
        std::span<uint8_t> dst(o.buf.data() + (lba - o.first_lba) * bs, bs);
        issue(o, initiator::make_read16(lun.lun, lba, 1, dst), merged);
    }
}

void LunIo::issue(Op& op, ScsiCommand cmd, std::function<void(Op&, int)> then, int retries) {
    if (!session_) return then(op, EIO);  // the session is being torn down
    cmd.timeout = kCommandTimeout;
    ScsiCommand again = cmd;
    uint64_t id = op.id;
    cmd.done = [this, id, again = std::move(again), then = std::move(then), retries](const ScsiOutcome& o) {
        auto it = ops_.find(id);
        if (it == ops_.end()) return;
        Op& x = *it->second;
        // GOOD with a residual: part of a read buffer holds no data, part
        // of a write was not taken. Never a success (the RMW of an
        // unaligned write would write the unread part back as zeros).
        if (initiator::good_and_whole(o, again.buffer.size())) return then(x, 0);
        initiator::SenseInfo sense = initiator::decode_sense(o.sense);
        if (o.response == 0 && o.status == initiator::kStatusCheckCondition && sense.valid &&
            sense.key == initiator::kSenseUnitAttention && retries > 0)
            return issue(x, again, then, retries - 1);
        RBIO_LOG(Warning, "LUN " << luns_.at(x.index).lun << ": SCSI command 0x" << std::hex
                                 << int(again.cdb[0]) << std::dec
                                 << " failed: " << initiator::describe(o, again.buffer.size()));
        // DATA PROTECT / SPACE ALLOCATION FAILED (27/07): the thin target is full.
        bool full = sense.valid && sense.key == 0x07 && sense.asc == 0x27 && sense.ascq == 0x07;
        then(x, full ? ENOSPC : EIO);
    };
    session_->submit(std::move(cmd));
}

void LunIo::finish(uint64_t id, int err) {
    auto it = ops_.find(id);
    if (it == ops_.end()) return;
    std::unique_ptr<Op> op = std::move(it->second);
    ops_.erase(it);
    if (err) counters_.errors++;
    switch (op->kind) {
        case Kind::Read:
            if (!err) {
                counters_.reads++;
                counters_.read_bytes += op->size;
            }
            op->read_done(err,
                          err ? std::span<const uint8_t>()
                              : std::span<const uint8_t>(op->buf).subspan(
                                    op->offset - op->first_lba * luns_.at(op->index).block_size, op->size));
            return;
        case Kind::Write:
            if (!err) {
                counters_.writes++;
                counters_.written_bytes += op->size;
            }
            op->done(err);
            release_writes(*op);
            return;
        case Kind::Sync:
            if (!err) counters_.syncs++;
            op->done(err);
            return;
    }
}

void LunIo::release_writes(const Op& done) {
    std::erase(active_writes_, done.id);
    // Start every waiting write that overlaps neither a running one nor an
    // earlier waiting one (arrival order is kept between overlapping writes).
    // Collected first and started after: starting one may finish it at once
    // (a failing session), which comes back here.
    std::vector<const Op*> still_waiting;
    std::vector<uint64_t> ready;
    for (auto it = waiting_writes_.begin(); it != waiting_writes_.end();) {
        Op& o = *ops_.at(*it);
        bool blocked = overlaps_active(o);
        for (const Op* p : still_waiting)
            blocked = blocked || overlap(o.index, o.first_lba, o.end_lba, p->index, p->first_lba, p->end_lba);
        for (uint64_t r : ready) {
            const Op& p = *ops_.at(r);
            blocked = blocked || overlap(o.index, o.first_lba, o.end_lba, p.index, p.first_lba, p.end_lba);
        }
        if (blocked) {
            still_waiting.push_back(&o);
            ++it;
        } else {
            ready.push_back(*it);
            it = waiting_writes_.erase(it);
        }
    }
    for (uint64_t r : ready)
        if (auto it = ops_.find(r); it != ops_.end()) begin_write(*it->second);
}

void LunIo::set_reconnect(Reconnect reconnect, std::chrono::milliseconds interval) {
    reconnect_ = std::move(reconnect);
    reconnect_interval_ = interval;
}

// Blocks the I/O thread for a login at most; requests that come meanwhile
// wait in `incoming_` and fail with EIO if it does not work.
void LunIo::try_reconnect() {
    const auto now = std::chrono::steady_clock::now();
    if (!reconnect_ || unfenced_ || failed_.empty() || now < next_reconnect_) return;
    next_reconnect_ = now + reconnect_interval_;
    try {
        NewSession n = reconnect_();
        session_ = std::move(n.session);
        describe_paths_ = std::move(n.describe_paths);
        RBIO_LOG(Info, "session established again (it had ended: " << failed_ << ")");
        failed_.clear();
        reconnect_error_.clear();
    } catch (const std::exception& e) {
        if (reconnect_error_ != e.what())
            RBIO_LOG(Warning, "no session yet (trying every " << reconnect_interval_.count() / 1000
                                                              << " s): " << e.what());
        reconnect_error_ = e.what();
    }
}

void LunIo::fail_all(int err) {
    auto ops = std::move(ops_);
    ops_.clear();
    active_writes_.clear();
    waiting_writes_.clear();
    for (auto& [id, op] : ops) {
        counters_.errors++;
        if (op->kind == Kind::Read) op->read_done(err, {});
        else op->done(err);
    }
}

}  // namespace rbio::fuse
