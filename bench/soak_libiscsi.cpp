// soak_libiscsi: libiscsi's share of bench/soak.sh. For SECONDS it sends
// WRITE(16), WRITE SAME(16), UNMAP and READ(16) at random to the first
// blocks of one LU, keeps a model of what each block must hold, and
// compares every read (and, at the end, every block) with it. The target
// is killed and restarted and its connections cut while it runs: a
// command that fails for want of a connection is sent again once the
// session is back (every command here is idempotent, one at a time, so a
// repeat cannot change the outcome).
//
//   soak_libiscsi URL --seconds S [--blocks N] [--seed N] [--retry-seconds S]
//                     [--status FILE]
//
// URL is libiscsi's iscsi://host:port/target-iqn/lun. --blocks: how many
// blocks from LBA 0 it uses (default 8192). --retry-seconds: how long a
// command may wait for the session to come back (default 120). --status
// FILE: rewritten after every 100 commands with one line of counts, for
// the soak's progress line. Exit 0: every read matched; 1: a mismatch or a
// command the target failed (printed); 2: bad arguments or no session;
// 3: no command completed for --retry-seconds + 60 s (a blocked call).
#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>

#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

// For the watchdog: what the soak is doing, and when a command last
// completed. A libiscsi call that blocks past every timeout must end the
// run with a line that says where, not hang the soak.
std::atomic<const char*> g_phase{"logging in"};
std::atomic<int64_t> g_last_progress_s{0};
int64_t now_s() {
    return std::chrono::duration_cast<std::chrono::seconds>(Clock::now().time_since_epoch()).count();
}
void progress(const char* phase) {
    g_phase.store(phase, std::memory_order_relaxed);
    g_last_progress_s.store(now_s(), std::memory_order_relaxed);
}

[[noreturn]] void die(const std::string& msg) {
    std::fprintf(stderr, "soak_libiscsi: error: %s\n", msg.c_str());
    std::exit(2);
}

// No logout here: a context is dropped when its connection broke, where a
// logout would only wait on a dead socket; run() logs out at the end.
struct ContextDeleter {
    void operator()(iscsi_context* c) const { iscsi_destroy_context(c); }
};
struct UrlDeleter {
    void operator()(iscsi_url* u) const { iscsi_destroy_url(u); }
};
struct TaskDeleter {
    void operator()(scsi_task* t) const { scsi_free_scsi_task(t); }
};
using Task = std::unique_ptr<scsi_task, TaskDeleter>;

// What a block must hold: a token, 0 for zeros (never written, or
// unmapped on an LU that reads unmapped blocks as zeros), kUnknown after an
// UNMAP on one that does not promise zeros. Every other token fills the
// block with a pattern derived from it alone, so WRITE SAME (one block
// repeated) and WRITE (a block per token) are checked alike.
constexpr uint64_t kUnknown = ~0ULL;

void fill(uint64_t token, unsigned char* block, uint32_t size) {
    if (token == 0) {
        std::memset(block, 0, size);
        return;
    }
    uint64_t x = token;
    for (uint32_t i = 0; i + 8 <= size; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        std::memcpy(block + i, &x, 8);
    }
    std::memcpy(block, &token, 8);  // the token itself first: a mismatch names it
}

struct Counts {
    uint64_t writes = 0, write_sames = 0, unmaps = 0, reads = 0, blocks_checked = 0;
    uint64_t retries = 0, reconnects = 0, unit_attentions = 0;
};

class Soak {
public:
    Soak(const std::string& url, uint32_t blocks, uint64_t seed, int retry_seconds)
        : blocks_(blocks), rng_(seed), retry_seconds_(retry_seconds) {
        url_text_ = url;
        if (!connect()) die(std::string("login to ") + url + " failed: " + error_);
        probe();
        model_.assign(blocks_, 0);
    }

    // Runs until the deadline; false on the first mismatch or failure.
    bool run(Clock::time_point deadline, const char* status_file) {
        // The model starts from zeros, whatever an earlier run left.
        std::memset(buf_.data(), 0, block_size_);
        for (uint64_t lba = 0; lba < blocks_; lba += 1024) {
            const auto len = static_cast<uint32_t>(std::min<uint64_t>(1024, blocks_ - lba));
            if (!send("WRITE SAME(16) of zeros", lba, [&] {
                    return iscsi_writesame16_sync(ctx_.get(), lun_, lba, buf_.data(), block_size_, len, 0, 0,
                                                  0, 0);
                }))
                return false;
        }
        uint64_t n = 0;
        while (Clock::now() < deadline) {
            const unsigned pick = rng_() % 100;
            bool ok = pick < 45   ? write()
                      : pick < 60 ? write_same()
                      : pick < 70 ? unmap()
                                  : read_check(random_lba(16), random_len(16));
            if (!ok) return false;
            if (++n % 100 == 0 && status_file) write_status(status_file);
        }
        if (status_file) write_status(status_file);
        // Everything it wrote, read back once more.
        for (uint64_t lba = 0; lba < blocks_; lba += 64)
            if (!read_check(lba, static_cast<uint32_t>(std::min<uint64_t>(64, blocks_ - lba)))) return false;
        if (status_file) write_status(status_file);
        g_phase.store("logging out", std::memory_order_relaxed);
        iscsi_logout_sync(ctx_.get());
        return true;
    }

    void write_status(const char* path) const {
        std::string tmp = std::string(path) + ".new";
        if (FILE* f = std::fopen(tmp.c_str(), "w")) {
            std::fprintf(f,
                         "writes=%llu write_sames=%llu unmaps=%llu reads=%llu blocks_checked=%llu "
                         "retries=%llu reconnects=%llu unit_attentions=%llu\n",
                         ull(c_.writes), ull(c_.write_sames), ull(c_.unmaps), ull(c_.reads),
                         ull(c_.blocks_checked), ull(c_.retries), ull(c_.reconnects),
                         ull(c_.unit_attentions));
            std::fclose(f);
            std::rename(tmp.c_str(), path);
        }
    }

    const Counts& counts() const { return c_; }
    bool zeroes_unmapped() const { return lbprz_; }

private:
    static unsigned long long ull(uint64_t v) { return v; }

    void probe() {
        Task t(iscsi_readcapacity16_sync(ctx_.get(), lun_));
        if (!t || t->status != SCSI_STATUS_GOOD) die("READ CAPACITY(16) failed");
        auto* rc = static_cast<scsi_readcapacity16*>(scsi_datain_unmarshall(t.get()));
        if (!rc) die("READ CAPACITY(16): cannot decode the answer");
        block_size_ = rc->block_length;
        if (block_size_ < 512 || block_size_ > 65536) die("READ CAPACITY(16): odd block size");
        if (rc->returned_lba + 1 < blocks_)
            die("the LU has only " + std::to_string(rc->returned_lba + 1) + " blocks");
        lbprz_ = rc->lbprz != 0;
        lbpme_ = rc->lbpme != 0;
        buf_.resize(static_cast<size_t>(block_size_) * 64);
        expect_.resize(buf_.size());
    }

    // libiscsi takes the block size as an int; probe() bounds it to 64 KiB.
    int block_int() const { return static_cast<int>(block_size_); }
    uint64_t random_lba(uint32_t max_len) { return rng_() % (blocks_ - max_len + 1); }
    uint32_t random_len(uint32_t max_len) { return 1 + static_cast<uint32_t>(rng_() % max_len); }
    uint64_t new_token() { return (++token_ << 16) | (rng_() & 0xffff); }

    // send(MAKE): MAKE() sends the command and returns its task. A task
    // that never got an answer (no connection, a timeout) is sent again
    // after a reconnect, for up to retry_seconds; a UNIT ATTENTION
    // (tgtd restarted, an LU changed) is taken and the command repeated.
    // Returns the GOOD task, or null (with a message) for anything else.
    template <typename Make>
    Task send(const char* what, uint64_t lba, Make make) {
        const auto give_up = Clock::now() + std::chrono::seconds(retry_seconds_);
        for (;;) {
            g_phase.store(what, std::memory_order_relaxed);
            Task t(make());
            if (t && t->status == SCSI_STATUS_GOOD) {
                progress("between commands");
                return t;
            }
            if (t && t->status == SCSI_STATUS_CHECK_CONDITION && t->sense.key == SCSI_SENSE_UNIT_ATTENTION) {
                ++c_.unit_attentions;
                if (Clock::now() < give_up) continue;
                std::fprintf(stderr, "soak_libiscsi: %s at LBA %llu: unit attentions for %d s\n", what,
                             ull(lba), retry_seconds_);
                return nullptr;
            }
            if (t && t->status == SCSI_STATUS_CHECK_CONDITION) {
                std::fprintf(stderr, "soak_libiscsi: %s at LBA %llu failed: %s (%s, ASCQ 0x%04x)\n", what,
                             ull(lba), scsi_sense_key_str(t->sense.key), scsi_sense_ascq_str(t->sense.ascq),
                             t->sense.ascq);
                return nullptr;
            }
            if (t && t->status != SCSI_STATUS_ERROR && t->status != SCSI_STATUS_CANCELLED &&
                t->status != SCSI_STATUS_TIMEOUT && t->status != SCSI_STATUS_BUSY &&
                t->status != SCSI_STATUS_TASK_SET_FULL) {
                std::fprintf(stderr, "soak_libiscsi: %s at LBA %llu: status 0x%02x\n", what, ull(lba),
                             static_cast<unsigned>(t->status));
                return nullptr;
            }
            if (Clock::now() >= give_up) {
                std::fprintf(stderr, "soak_libiscsi: %s at LBA %llu: no answer within %d s: %s\n", what,
                             ull(lba), retry_seconds_, error_.c_str());
                return nullptr;
            }
            ++c_.retries;
            error_ = iscsi_get_error(ctx_.get());
            reconnect(give_up);
        }
    }

    // A new session on a new context: what libiscsi's own reconnect
    // would do inside a blocked call, retrying for ever past
    // --retry-seconds, so it is off (iscsi_set_noautoreconnect).
    bool connect() {
        ctx_.reset(iscsi_create_context("iqn.2026-11.io.rbio:soak-libiscsi"));
        if (!ctx_) {
            error_ = "cannot create an iSCSI context";
            return false;
        }
        url_.reset(iscsi_parse_full_url(ctx_.get(), url_text_.c_str()));
        if (!url_) die("bad URL " + url_text_ + ": " + iscsi_get_error(ctx_.get()));
        iscsi_set_targetname(ctx_.get(), url_->target);
        iscsi_set_session_type(ctx_.get(), ISCSI_SESSION_NORMAL);
        iscsi_set_header_digest(ctx_.get(), ISCSI_HEADER_DIGEST_NONE_CRC32C);
        iscsi_set_noautoreconnect(ctx_.get(), 1);
        // A command with no answer in this time fails and is sent again on
        // a new session, as a host's SCSI timeout would.
        iscsi_set_timeout(ctx_.get(), 30);
        lun_ = url_->lun;
        if (iscsi_full_connect_sync(ctx_.get(), url_->portal, lun_) != 0) {
            error_ = iscsi_get_error(ctx_.get());
            return false;
        }
        return true;
    }

    void reconnect(Clock::time_point give_up) {
        while (Clock::now() < give_up) {
            g_phase.store("logging in again", std::memory_order_relaxed);
            url_.reset();  // belongs to the old context
            if (connect()) {
                ++c_.reconnects;
                return;
            }
            struct timespec pause {
                0, 200'000'000
            };
            nanosleep(&pause, nullptr);
        }
    }

    bool write() {
        const uint32_t len = random_len(16);
        const uint64_t lba = random_lba(16);
        std::vector<uint64_t> tokens(len);
        for (uint32_t i = 0; i < len; ++i) {
            tokens[i] = new_token();
            fill(tokens[i], buf_.data() + static_cast<size_t>(i) * block_size_, block_size_);
        }
        if (!send("WRITE(16)", lba, [&] {
                return iscsi_write16_sync(ctx_.get(), lun_, lba, buf_.data(), len * block_size_, block_int(),
                                          0, 0, 0, 0, 0);
            }))
            return false;
        for (uint32_t i = 0; i < len; ++i) model_[lba + i] = tokens[i];
        ++c_.writes;
        return true;
    }

    bool write_same() {
        const uint32_t len = random_len(64);
        const uint64_t lba = random_lba(64);
        const uint64_t token = new_token();
        fill(token, buf_.data(), block_size_);
        if (!send("WRITE SAME(16)", lba, [&] {
                return iscsi_writesame16_sync(ctx_.get(), lun_, lba, buf_.data(), block_size_, len, 0, 0, 0,
                                              0);
            }))
            return false;
        for (uint32_t i = 0; i < len; ++i) model_[lba + i] = token;
        ++c_.write_sames;
        return true;
    }

    bool unmap() {
        if (!lbpme_) return write_same();  // an LU without thin provisioning
        const uint32_t len = random_len(64);
        const uint64_t lba = random_lba(64);
        unmap_list range{lba, len};
        if (!send("UNMAP", lba, [&] { return iscsi_unmap_sync(ctx_.get(), lun_, 0, 0, &range, 1); }))
            return false;
        for (uint32_t i = 0; i < len; ++i) model_[lba + i] = lbprz_ ? 0 : kUnknown;
        ++c_.unmaps;
        return true;
    }

    bool read_check(uint64_t lba, uint32_t len) {
        Task t = send("READ(16)", lba, [&] {
            return iscsi_read16_sync(ctx_.get(), lun_, lba, len * block_size_, block_int(), 0, 0, 0, 0, 0);
        });
        if (!t) return false;
        if (t->datain.size != static_cast<int>(len * block_size_)) {
            std::fprintf(stderr, "soak_libiscsi: READ(16) at LBA %llu returned %d bytes, not %u\n", ull(lba),
                         t->datain.size, len * block_size_);
            return false;
        }
        ++c_.reads;
        for (uint32_t i = 0; i < len; ++i) {
            const uint64_t want = model_[lba + i];
            if (want == kUnknown) continue;
            fill(want, expect_.data(), block_size_);
            const unsigned char* got = t->datain.data + static_cast<size_t>(i) * block_size_;
            if (std::memcmp(got, expect_.data(), block_size_) != 0) {
                uint64_t found = 0;
                std::memcpy(&found, got, 8);
                std::fprintf(stderr,
                             "soak_libiscsi: block %llu differs: expected token %016llx, the block "
                             "starts with %016llx\n",
                             ull(lba + i), ull(want), ull(found));
                return false;
            }
            ++c_.blocks_checked;
        }
        return true;
    }

    std::string url_text_, error_;
    std::unique_ptr<iscsi_context, ContextDeleter> ctx_;
    std::unique_ptr<iscsi_url, UrlDeleter> url_;
    int lun_ = 0;
    uint32_t blocks_;
    uint32_t block_size_ = 0;
    bool lbprz_ = false, lbpme_ = false;
    std::mt19937_64 rng_;
    int retry_seconds_;
    uint64_t token_ = 0;
    std::vector<uint64_t> model_;
    std::vector<unsigned char> buf_, expect_;
    Counts c_;
};

long number(const char* opt, const char* v, long min, long max) {
    char* end = nullptr;
    errno = 0;
    const long n = std::strtol(v, &end, 10);
    if (errno || !end || *end || n < min || n > max)
        die(std::string(opt) + " wants a number from " + std::to_string(min) + " to " + std::to_string(max));
    return n;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2)
        die("usage: soak_libiscsi URL --seconds S [--blocks N] [--seed N] [--retry-seconds S] [--status "
            "FILE]");
    std::string url = argv[1];
    long seconds = -1, blocks = 8192, seed = 1, retry = 120;
    const char* status = nullptr;
    for (int i = 2; i < argc; ++i) {
        std::string a = argv[i];
        if (i + 1 >= argc) die("option " + a + " needs a value");
        const char* v = argv[++i];
        if (a == "--seconds") seconds = number("--seconds", v, 1, 7 * 24 * 3600);
        else if (a == "--blocks") blocks = number("--blocks", v, 128, 1 << 24);
        else if (a == "--seed") seed = number("--seed", v, 0, 1L << 40);
        else if (a == "--retry-seconds") retry = number("--retry-seconds", v, 1, 3600);
        else if (a == "--status") status = v;
        else die("unknown option " + a);
    }
    if (seconds < 0) die("--seconds is required");
    // A write to a connection the target closed must fail, not end us
    // (the first 30-minute soak lost its libiscsi share to a SIGPIPE).
    std::signal(SIGPIPE, SIG_IGN);
    std::setvbuf(stdout, nullptr, _IOLBF, 0);  // lines reach the soak's log as they are printed
    progress("logging in");
    std::thread([limit = retry + 60] {
        for (;;) {
            std::this_thread::sleep_for(std::chrono::seconds(1));
            const int64_t idle = now_s() - g_last_progress_s.load(std::memory_order_relaxed);
            if (idle > limit) {
                std::fprintf(stderr, "soak_libiscsi: no command completed for %lld s (%s): giving up\n",
                             static_cast<long long>(idle), g_phase.load(std::memory_order_relaxed));
                std::fflush(stderr);
                _exit(3);
            }
        }
    }).detach();
    Soak soak(url, static_cast<uint32_t>(blocks), static_cast<uint64_t>(seed), static_cast<int>(retry));
    std::printf("soak_libiscsi: %ld blocks, unmapped blocks read as %s\n", blocks,
                soak.zeroes_unmapped() ? "zeros (LBPRZ)" : "anything");
    const bool ok = soak.run(Clock::now() + std::chrono::seconds(seconds), status);
    const Counts& c = soak.counts();
    std::printf(
        "soak_libiscsi: %s: %llu WRITE, %llu WRITE SAME, %llu UNMAP, %llu READ; %llu blocks compared; "
        "%llu commands sent again, %llu reconnects, %llu unit attentions\n",
        ok ? "ok" : "FAILED", static_cast<unsigned long long>(c.writes),
        static_cast<unsigned long long>(c.write_sames), static_cast<unsigned long long>(c.unmaps),
        static_cast<unsigned long long>(c.reads), static_cast<unsigned long long>(c.blocks_checked),
        static_cast<unsigned long long>(c.retries), static_cast<unsigned long long>(c.reconnects),
        static_cast<unsigned long long>(c.unit_attentions));
    return ok ? 0 : 1;
}
