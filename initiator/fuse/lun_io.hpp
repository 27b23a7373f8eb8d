#pragma once
// Byte-addressed I/O on the LUs of one iSCSI session (or of one
// MultipathSession over several gateways), for the FUSE export.
//
// One I/O thread owns the Session and runs its event loop. Other threads
// (FUSE's workers) hand it requests through a queue and wake it through an
// eventfd that the Session polls next to its socket (SessionOptions::wake_fd);
// every request becomes SCSI commands at once, so as many are in flight as
// FUSE sends. Completions run on the I/O thread.
//
// Byte ranges that do not fall on block boundaries are served with
// read-modify-write: the partial first and last blocks are read, the new
// bytes laid over them, the whole block range written. Writes whose block
// ranges overlap run one after another in arrival order, so an RMW never
// reads a block that an earlier write is still changing, and a later write
// never lands before an earlier one.
#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "rbio/initiator/session.hpp"
#include "socket.hpp"  // UniqueFd
#include "wake_signal.hpp"

namespace rbio::fuse {

// One LU exported as a file.
struct LunInfo {
    uint64_t lun = 0;
    uint32_t block_size = 512;
    uint64_t blocks = 0;
    std::string name;  // file name, "lun<N>"
    uint64_t bytes() const { return blocks * block_size; }
};

// Counters of the export (all LUs together).
struct IoCounters {
    uint64_t reads = 0, writes = 0, syncs = 0;
    uint64_t read_bytes = 0, written_bytes = 0;
    uint64_t rmw = 0;         // writes that needed read-modify-write
    uint64_t fua_writes = 0;  // writes sent with FUA (the file opened O_SYNC / O_DSYNC)
    uint64_t unaligned_reads = 0;
    uint64_t ordered_waits = 0;  // writes that waited for an overlapping one
    uint64_t errors = 0;         // requests answered with an error
    uint64_t max_in_flight = 0;
};

// What `rbio session` shows; refreshed by the I/O thread every loop pass.
struct IoSnapshot {
    std::string state = "starting";  // "up", "failed: ...", "logged out"
    initiator::NegotiatedParams params;
    initiator::SessionStats session;
    IoCounters io;
    uint64_t in_flight = 0;
    std::vector<std::string> paths;  // multipath: one line per path
};

class LunIo {
public:
    // Completions: `err` is 0 or a positive errno (EIO, ENOSPC, ...).
    using ReadDone = std::function<void(int err, std::span<const uint8_t> data)>;
    using Done = std::function<void(int err)>;

    // `session` must have been logged in with options.wake_fd = wake_fd.get()
    // (an eventfd from make_wake_fd()); LunIo owns both from here on.
    // `describe_paths` (optional, called on the I/O thread about once a
    // second) fills IoSnapshot::paths.
    LunIo(std::unique_ptr<initiator::IoSession> session, initiator::UniqueFd wake_fd,
          std::vector<LunInfo> luns, std::function<std::vector<std::string>()> describe_paths = {});
    ~LunIo();  // stops the thread; outstanding requests get ESHUTDOWN
    LunIo(const LunIo&) = delete;
    LunIo& operator=(const LunIo&) = delete;

    // A non-blocking eventfd for SessionOptions::wake_fd; throws std::system_error.
    static initiator::UniqueFd make_wake_fd();

    // A new session for the same LUs, logged in with the same wake_fd
    // (and its describe_paths), or an exception saying why not.
    struct NewSession {
        std::unique_ptr<initiator::IoSession> session;
        std::function<std::vector<std::string>()> describe_paths;
    };
    using Reconnect = std::function<NewSession()>;
    // Before start(): once the session has failed for good (not reinstated
    // within its replacement timeout), requests fail with EIO and this is
    // called every `interval` until a session is back, as open-iscsi keeps
    // trying after its replacement timeout. Without it the export stays
    // failed; so it does after a session that left writes unfenced
    // (IoSession::left_unfenced_writes): a gateway may still apply them
    // over what a new session would write, and only an admin can tell when
    // it no longer can.
    void set_reconnect(Reconnect reconnect, std::chrono::milliseconds interval);

    void start();
    bool started() const { return thread_.joinable(); }
    // Started and not yet through shutdown(): it may still answer requests.
    bool answering() const;
    // Its thread has flushed, logged out and ended.
    bool ended() const;
    const std::vector<LunInfo>& luns() const { return luns_; }

    // Reads up to `size` bytes at `offset` of LU `index` (short at the end of
    // the LU, empty beyond it).
    void read(size_t index, uint64_t offset, size_t size, ReadDone done);
    // Writes `data` at `offset`; beyond the end of the LU: ENOSPC. `fua`:
    // answered only once the data is on stable storage (WRITE with FUA),
    // for a file opened O_SYNC or O_DSYNC.
    void write(size_t index, uint64_t offset, std::vector<uint8_t> data, bool fua, Done done);
    // SYNCHRONIZE CACHE on the LU.
    void sync(size_t index, Done done);

    // Takes no more requests, waits for those in flight, synchronizes every
    // LU's cache and logs out. Returns "" or what failed. Idempotent.
    std::string shutdown();

    IoSnapshot snapshot() const;

private:
    enum class Kind : uint8_t { Read, Write, Sync };
    struct Op {
        uint64_t id = 0;
        Kind kind = Kind::Read;
        size_t index = 0;
        uint64_t offset = 0;
        size_t size = 0;
        uint64_t first_lba = 0, end_lba = 0;  // the blocks covered
        std::vector<uint8_t> buf;             // the covered blocks
        std::vector<uint8_t> data;            // a write's bytes (unaligned writes)
        int pending = 0;                      // RMW reads outstanding
        bool fua = false;                     // a write: durable before it is answered
        int err = 0;
        ReadDone read_done;
        Done done;
    };

    void thread_main();
    void start_op(std::unique_ptr<Op> op);  // I/O thread
    void begin_write(Op& op);
    void issue(Op& op, initiator::ScsiCommand cmd, std::function<void(Op&, int)> then, int retries = 5);
    void finish(uint64_t id, int err);
    void release_writes(const Op& done);
    bool overlaps_active(const Op& op) const;
    void fail_all(int err);
    void session_ended(const std::string& why);
    void try_reconnect();
    void publish(const std::string& state);

    void wake();
    // Hands op to the session thread; false (op kept) once shutting down.
    bool enqueue(std::unique_ptr<Op>& op);

    std::unique_ptr<initiator::IoSession> session_;
    WakeSignal wake_;
    std::function<std::vector<std::string>()> describe_paths_;
    std::chrono::steady_clock::time_point paths_published_{};
    std::vector<LunInfo> luns_;
    std::thread thread_;

    // Shared with the submitting threads.
    mutable std::mutex mu_;
    std::deque<std::unique_ptr<Op>> incoming_;
    bool stopping_ = false;
    bool stopped_ = false;
    std::string shutdown_result_;
    IoSnapshot snapshot_;
    uint64_t next_id_ = 1;

    // I/O thread only.
    std::unordered_map<uint64_t, std::unique_ptr<Op>> ops_;
    std::vector<uint64_t> active_writes_;
    std::list<uint64_t> waiting_writes_;  // in arrival order
    IoCounters counters_;
    std::string failed_;  // the session's end, once it failed
    Reconnect reconnect_;
    std::chrono::milliseconds reconnect_interval_{5000};
    std::chrono::steady_clock::time_point next_reconnect_{};
    std::string reconnect_error_;  // the last attempt's, logged once
    bool unfenced_ = false;        // the session left writes unfenced: no reconnect
};

}  // namespace rbio::fuse
