// The engine against a real file and a real io_uring: what tgtd would see
// through the glue, without tgtd.
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "rbio/bs/engine.hpp"
#include "rbio/bs/error.hpp"
#include "rbio/bs/scsi.hpp"

namespace fs = std::filesystem;
using namespace rbio::bs;
using namespace rbio::bs::scsi;

namespace {

constexpr uint32_t kShift = 9;
constexpr uint32_t kBs = 1u << kShift;
constexpr uint64_t kSize = 16u << 20;

struct Cdb {
    std::array<uint8_t, 16> b{};
    uint32_t len = 10;
};

Cdb cdb10(uint8_t op, uint32_t lba, uint16_t blocks, uint8_t flags = 0) {
    Cdb c;
    c.b[0] = op;
    c.b[1] = flags;
    put_be32(&c.b[2], lba);
    c.b[7] = uint8_t(blocks >> 8);
    c.b[8] = uint8_t(blocks);
    return c;
}

Cdb cdb16(uint8_t op, uint64_t lba, uint32_t blocks, uint8_t flags = 0) {
    Cdb c;
    c.len = 16;
    c.b[0] = op;
    c.b[1] = flags;
    put_be64(&c.b[2], lba);
    put_be32(&c.b[10], blocks);
    return c;
}

std::vector<uint8_t> pattern(size_t n, unsigned seed) {
    std::vector<uint8_t> v(n);
    std::mt19937 rng(seed);
    for (auto& x : v) x = uint8_t(rng());
    return v;
}

class EngineTest : public ::testing::Test {
protected:
    void SetUp() override {
        char tmpl[] = "/tmp/rbio-engine-XXXXXX";
        ASSERT_NE(::mkdtemp(tmpl), nullptr);
        dir_ = tmpl;
        path_ = dir_ + "/lu.img";
        int fd = ::open(path_.c_str(), O_CREAT | O_RDWR, 0600);
        ASSERT_GE(fd, 0);
        ASSERT_EQ(::ftruncate(fd, off_t(kSize)), 0);
        ::close(fd);
    }
    void TearDown() override {
        engine_.reset();
        fs::remove_all(dir_);
    }

    void make(const Options& o = Options{}, uint64_t size = kSize) {
        lu_size_ = size;
        rbio_bs_hooks h{};
        h.ctx = this;
        h.complete = [](void* ctx, void* cmd, const rbio_bs_result* r) {
            auto* t = static_cast<EngineTest*>(ctx);
            t->done_.push_back({cmd, *r});
            if (t->on_complete_) t->on_complete_();
        };
        h.request_flush = [](void* ctx) { ++static_cast<EngineTest*>(ctx)->flush_requests_; };
        h.log = [](void* ctx, int, const char* msg) { static_cast<EngineTest*>(ctx)->logs_.push_back(msg); };
        h.aborting = [](void* ctx, void* cmd) {
            auto* t = static_cast<EngineTest*>(ctx);
            return int(t->aborting_ && cmd == t->aborting_);
        };
        engine_ = std::make_unique<Engine>(o, h);
        OpenedFile f = engine_->open(path_, 0);
        EXPECT_EQ(f.size, size);
        EXPECT_FALSE(f.readonly);
    }

    // Queues one command the way the glue would after tgt's SBC layer set
    // offset and transfer length.
    void submit(const Cdb& cdb, uint64_t lba, uint64_t blocks, uint8_t* in, uint32_t in_len, uint8_t* out,
                uint32_t out_len, bool wce = true) {
        auto keep = std::make_unique<Cdb>(cdb);
        rbio_bs_cmd c{};
        c.cmd = reinterpret_cast<void*>(uintptr_t(++next_id_));
        c.cdb = keep->b.data();
        c.cdb_len = keep->len;
        c.offset = lba << kShift;
        c.transfer = uint32_t(blocks << kShift);
        c.in_buf = in;
        c.in_len = in_len;
        c.out_buf = out;
        c.out_len = out_len;
        c.lu_size = lu_size_;
        c.block_shift = kShift;
        c.write_cache = wce;
        c.thin = 1;
        cdbs_.push_back(std::move(keep));
        ASSERT_EQ(engine_->submit(c), 0);
    }
    void read(uint64_t lba, uint8_t* buf, uint32_t blocks) {
        submit(cdb10(kRead10, uint32_t(lba), uint16_t(blocks)), lba, blocks, buf, blocks * kBs, nullptr, 0);
    }
    void write(uint64_t lba, uint8_t* buf, uint32_t blocks, uint8_t flags = 0) {
        submit(cdb10(kWrite10, uint32_t(lba), uint16_t(blocks), flags), lba, blocks, nullptr, 0, buf,
               blocks * kBs);
    }

    // Ends the event-loop pass, then serves eventfd wake-ups until `n`
    // commands are complete, as tgtd's level-triggered watch does: on_event()
    // itself resets the eventfd.
    void complete_all(size_t n) {
        engine_->flush();
        while (done_.size() < n) {
            ASSERT_TRUE(event_readable(5000)) << "timed out with " << done_.size() << " of " << n << " done";
            engine_->on_event();
        }
    }
    bool event_readable(int timeout_ms) {
        pollfd p{engine_->event_fd(), POLLIN, 0};
        return ::poll(&p, 1, timeout_ms) == 1;
    }
    const rbio_bs_result& result_of(uintptr_t id) {
        for (auto& d : done_)
            if (reinterpret_cast<uintptr_t>(d.cmd) == id) return d.r;
        static rbio_bs_result none{0xff, 0, 0, 0, 0};
        ADD_FAILURE() << "command " << id << " never completed";
        return none;
    }
    std::vector<uint8_t> file_bytes(uint64_t off, size_t n) {
        std::vector<uint8_t> v(n);
        int fd = ::open(path_.c_str(), O_RDONLY);
        EXPECT_EQ(::pread(fd, v.data(), n, off_t(off)), ssize_t(n));
        ::close(fd);
        return v;
    }
    void all_good() {
        for (auto& d : done_)
            EXPECT_EQ(d.r.status, kGood) << "cmd " << d.cmd << " asc " << std::hex << d.r.asc;
    }

    struct Done {
        void* cmd;
        rbio_bs_result r;
    };
    std::string dir_, path_;
    std::unique_ptr<Engine> engine_;
    std::vector<Done> done_;
    // Runs inside each completion, as tgt's post_cmd_done may perform (and
    // so submit) a command queued behind the one completed.
    std::function<void()> on_complete_;
    std::vector<std::string> logs_;
    std::vector<std::unique_ptr<Cdb>> cdbs_;
    uintptr_t next_id_ = 0;
    void* aborting_ = nullptr;  // the command hooks.aborting says task management waits for
    uint64_t lu_size_ = kSize;
    int flush_requests_ = 0;
};

}  // namespace

TEST_F(EngineTest, WrittenDataReadsBackAtManySizesAndAlignments) {
    make();
    const uint32_t sizes[] = {1, 7, 8, 64, 255, 2048};
    const uint64_t lbas[] = {0, 1, 3, 4096, 9999, kSize / kBs - 2048};
    std::vector<std::vector<uint8_t>> bufs;
    unsigned seed = 1;
    for (uint32_t s : sizes)
        for (uint64_t lba : lbas) {
            bufs.push_back(pattern(s * kBs, seed++));
            write(lba, bufs.back().data(), s);
            complete_all(done_.size() + 1);
            std::vector<uint8_t> back(s * kBs);
            read(lba, back.data(), s);
            complete_all(done_.size() + 1);
            EXPECT_EQ(back, bufs.back()) << "size " << s << " lba " << lba;
            EXPECT_EQ(file_bytes(lba * kBs, s * kBs), bufs.back());
        }
    all_good();
}

TEST_F(EngineTest, OnePassIsOneSubmitCall) {
    make();
    std::vector<std::vector<uint8_t>> bufs(32, std::vector<uint8_t>(4096));
    for (uint32_t i = 0; i < 32; ++i) read(i * 100, bufs[i].data(), 8);  // not adjacent
    EXPECT_EQ(engine_->counters().submit_calls, 0u) << "nothing may be submitted before the pass ends";
    EXPECT_EQ(flush_requests_, 1) << "one flush request per pass";
    complete_all(32);
    all_good();
    EXPECT_EQ(engine_->counters().submit_calls, 1u);
    EXPECT_EQ(engine_->counters().ios, 32u);
}

TEST_F(EngineTest, BatchOffSubmitsEachCommand) {
    Options o;
    o.batch = false;
    make(o);
    std::vector<std::vector<uint8_t>> bufs(8, std::vector<uint8_t>(4096));
    for (uint32_t i = 0; i < 8; ++i) read(i * 100, bufs[i].data(), 8);
    EXPECT_EQ(engine_->counters().submit_calls, 8u);
    complete_all(8);
    all_good();
}

TEST_F(EngineTest, AdjacentRequestsOfAPassAreCoalesced) {
    make();
    std::vector<std::vector<uint8_t>> bufs;
    for (uint32_t i = 0; i < 16; ++i) bufs.push_back(pattern(4096, 100 + i));
    for (uint32_t i = 0; i < 16; ++i) write(64 + i * 8, bufs[i].data(), 8);
    complete_all(16);
    all_good();
    EXPECT_EQ(engine_->counters().ios, 1u);
    EXPECT_EQ(engine_->counters().merged, 15u);
    for (uint32_t i = 0; i < 16; ++i) EXPECT_EQ(file_bytes((64 + i * 8) * kBs, 4096), bufs[i]);

    // And reads of the same range come back split correctly.
    std::vector<std::vector<uint8_t>> back(16, std::vector<uint8_t>(4096));
    for (uint32_t i = 0; i < 16; ++i) read(64 + i * 8, back[i].data(), 8);
    complete_all(32);
    all_good();
    EXPECT_EQ(engine_->counters().ios, 2u);
    for (uint32_t i = 0; i < 16; ++i) EXPECT_EQ(back[i], bufs[i]);
}

TEST_F(EngineTest, ReadsAndWritesAreCountedWithTheBytesTheyAddress) {
    make();
    auto a = pattern(8 * kBs, 1), b = pattern(16 * kBs, 2), v = pattern(4 * kBs, 3);
    write(0, a.data(), 8);
    write(100, b.data(), 16);
    submit(cdb10(kWriteVerify10, 200, 4), 200, 4, nullptr, 0, v.data(), 4 * kBs);
    std::vector<uint8_t> back(8 * kBs);
    read(0, back.data(), 8);
    submit(cdb10(kPreFetch10, 0, 64), 0, 64, nullptr, 0, nullptr, 0);  // neither
    complete_all(5);
    all_good();
    const Counters& k = engine_->counters();
    EXPECT_EQ(k.commands, 5u);
    EXPECT_EQ(k.writes, 3u);
    EXPECT_EQ(k.written_bytes, 28u * kBs);
    EXPECT_EQ(k.reads, 1u);
    EXPECT_EQ(k.read_bytes, 8u * kBs);
}

TEST_F(EngineTest, CountersReachTheCAbi) {
    rbio_bs_hooks h{};
    rbio_bs_lu* lu = nullptr;
    char err[256] = "";
    ASSERT_EQ(rbio_bs_lu_create("", &h, &lu, err, sizeof err), 0) << err;
    int fd = -1, ro = 0;
    uint64_t size = 0;
    uint32_t blksize = 0;
    ASSERT_EQ(rbio_bs_lu_open(lu, path_.c_str(), 0, &fd, &size, &blksize, &ro, err, sizeof err), 0) << err;
    std::vector<uint8_t> buf(8 * kBs);
    Cdb cdb = cdb10(kRead10, 0, 8);
    rbio_bs_cmd c{};
    c.cmd = &buf;
    c.cdb = cdb.b.data();
    c.cdb_len = cdb.len;
    c.transfer = 8 * kBs;
    c.in_buf = buf.data();
    c.in_len = 8 * kBs;
    c.lu_size = kSize;
    c.block_shift = kShift;
    c.write_cache = 1;
    ASSERT_EQ(rbio_bs_submit(lu, &c), 0);
    rbio_bs_counters k{};
    rbio_bs_lu_counters(lu, &k);
    EXPECT_EQ(k.commands, 1u);
    EXPECT_EQ(k.reads, 1u);
    EXPECT_EQ(k.read_bytes, 8u * kBs);
    EXPECT_EQ(k.writes, 0u);
    rbio_bs_lu_close(lu);
    rbio_bs_lu_destroy(lu);
}

TEST_F(EngineTest, CoalescingStopsAtDirectionFuaAndSizeLimit) {
    Options o;
    o.coalesce_max_kib = 8;
    make(o);
    std::vector<uint8_t> a(4096), b(4096), c(4096), d(4096);
    write(0, a.data(), 8);
    write(8, b.data(), 8);         // merges with a (8 KiB total)
    write(16, c.data(), 8);        // over the 8 KiB limit
    write(24, d.data(), 8, 0x08);  // FUA: never rides with non-FUA
    std::vector<uint8_t> r(4096);
    read(32, r.data(), 8);  // other direction
    complete_all(5);
    all_good();
    EXPECT_EQ(engine_->counters().ios, 4u);
    EXPECT_EQ(engine_->counters().merged, 1u);
}

TEST_F(EngineTest, CoalesceOffKeepsEveryRequestSeparate) {
    Options o;
    o.coalesce = false;
    make(o);
    std::vector<std::vector<uint8_t>> bufs(8, std::vector<uint8_t>(4096));
    for (uint32_t i = 0; i < 8; ++i) write(i * 8, bufs[i].data(), 8);
    complete_all(8);
    all_good();
    EXPECT_EQ(engine_->counters().ios, 8u);
}

TEST_F(EngineTest, MoreCommandsThanQueueDepthAllComplete) {
    Options o;
    o.queue_depth = 4;
    o.coalesce = false;
    make(o);
    std::vector<std::vector<uint8_t>> bufs;
    for (uint32_t i = 0; i < 50; ++i) bufs.push_back(pattern(kBs, 500 + i));
    for (uint32_t i = 0; i < 50; ++i) write(i * 3, bufs[i].data(), 1);
    complete_all(50);
    all_good();
    EXPECT_EQ(engine_->counters().ios, 50u);
    for (uint32_t i = 0; i < 50; ++i) EXPECT_EQ(file_bytes(i * 3 * kBs, kBs), bufs[i]);
}

TEST_F(EngineTest, ReadPastTheEndOfAShrunkFileIsAMediumError) {
    make();
    ASSERT_EQ(::truncate(path_.c_str(), 1 << 20), 0);
    std::vector<uint8_t> buf(8192);
    read((2u << 20) / kBs, buf.data(), 16);
    complete_all(1);
    const auto& r = done_[0].r;
    EXPECT_EQ(r.status, kCheckCondition);
    EXPECT_EQ(r.sense_key, kMediumError);
    EXPECT_EQ(r.asc, kAscUnrecoveredReadError);
    EXPECT_EQ(engine_->counters().errors, 1u);
    ASSERT_FALSE(logs_.empty());
    EXPECT_NE(logs_.back().find("read of 8192 bytes"), std::string::npos) << logs_.back();
}

TEST_F(EngineTest, ShortReadAcrossTheEndFailsOnlyTheAffectedCommand) {
    make();
    ASSERT_EQ(::truncate(path_.c_str(), 8192), 0);
    std::vector<uint8_t> a(4096), b(4096), c(4096);
    read(0, a.data(), 8);
    read(8, b.data(), 8);
    read(16, c.data(), 8);  // beyond the new end
    complete_all(3);
    EXPECT_EQ(result_of(1).status, kGood);
    EXPECT_EQ(result_of(2).status, kGood);
    EXPECT_EQ(result_of(3).sense_key, kMediumError);
}

// A completion may submit another command at once (tgt performs the next
// command of an LU queue from it). That command takes the slot just freed;
// the rest of a short merged I/O must still be settled by the sizes it had.
TEST_F(EngineTest, ShortMergedReadSettlesRightWhenACompletionSubmits) {
    make();
    ASSERT_EQ(::truncate(path_.c_str(), 12288), 0);
    std::vector<uint8_t> a(8192), b(8192), c(4096);
    bool resubmitted = false;
    on_complete_ = [&] {
        if (resubmitted) return;
        resubmitted = true;
        read(0, c.data(), 8);
    };
    read(0, a.data(), 16);
    read(16, b.data(), 16);  // its second half lies past the end
    complete_all(3);
    EXPECT_EQ(engine_->counters().merged, 1u);
    EXPECT_EQ(result_of(1).status, kGood);
    EXPECT_EQ(result_of(2).sense_key, kMediumError) << "a read of 8192 bytes with 4096 past the end";
    EXPECT_EQ(result_of(3).status, kGood);
}

TEST_F(EngineTest, FuaAndWriteCacheOffWritesComplete) {
    make();
    auto a = pattern(4096, 7), b = pattern(4096, 8);
    write(0, a.data(), 8, 0x08);
    submit(cdb10(kWrite10, 8, 8), 8, 8, nullptr, 0, b.data(), 4096, /*wce=*/false);
    complete_all(2);
    all_good();
    EXPECT_EQ(file_bytes(0, 4096), a);
    EXPECT_EQ(file_bytes(4096, 4096), b);
}

TEST_F(EngineTest, SyncCacheCompletesAndImmedIsRefused) {
    make();
    submit(cdb10(kSyncCache10, 0, 0), 0, 0, nullptr, 0, nullptr, 0);
    submit(cdb10(kSyncCache10, 0, 0, 0x02), 0, 0, nullptr, 0, nullptr, 0);
    complete_all(2);
    EXPECT_EQ(result_of(1).status, kGood);
    EXPECT_EQ(result_of(2).sense_key, kIllegalRequest);
    EXPECT_EQ(result_of(2).asc, kAscInvalidFieldInCdb);
}

// The test-only switch of vm.crash-durability's control run: FUA and
// SYNCHRONIZE CACHE are still GOOD, but nothing makes them durable. Seen
// here by what it changes: a FUA write merges with a plain one (no
// RWF_DSYNC to keep apart), and the flush issues no I/O at all.
TEST_F(EngineTest, DebugUnsafeFuaAcknowledgesWithoutDurability) {
    for (bool unsafe : {false, true}) {
        SCOPED_TRACE(unsafe ? "debug_unsafe_fua=on" : "default");
        Options o;
        o.debug_unsafe_fua = unsafe;
        make(o);
        done_.clear();
        auto a = pattern(4096, 1), b = pattern(4096, 2);
        write(0, a.data(), 8);
        write(8, b.data(), 8, 0x08);
        submit(cdb10(kSyncCache10, 0, 0), 0, 0, nullptr, 0, nullptr, 0);
        complete_all(3);
        all_good();
        EXPECT_EQ(engine_->counters().merged, unsafe ? 1u : 0u);
        EXPECT_EQ(engine_->counters().ios, unsafe ? 1u : 3u) << "writes (merged or not) plus the flush";
        EXPECT_EQ(file_bytes(0, 4096), a);
        EXPECT_EQ(file_bytes(4096, 4096), b);
        bool warned = false;
        for (auto& l : logs_) warned |= l.find("debug_unsafe_fua=on: FUA writes") != std::string::npos;
        EXPECT_EQ(warned, unsafe);
        engine_.reset();
        logs_.clear();
    }
}

// Ceph settings in a file LU's bsopts do nothing there: said, not
// silently ignored (a mistyped path is likelier than a wish for defaults).
TEST_F(EngineTest, CephSettingsOnAFileAreLoggedAsIgnored) {
    for (bool given : {false, true}) {
        SCOPED_TRACE(given ? "rbd_timeout=5" : "default");
        Options o;
        if (given) o.rbd.timeout_s = 5;
        make(o);
        bool said = false;
        for (auto& l : logs_)
            said |= l.find("Ceph settings (rbd_timeout=5) are for rbd:POOL/IMAGE paths and ignored") !=
                    std::string::npos;
        EXPECT_EQ(said, given);
        engine_.reset();
        logs_.clear();
    }
}

namespace {

bool is_hole(const std::string& path, uint64_t off, uint64_t len) {
    int fd = ::open(path.c_str(), O_RDONLY);
    off_t data = ::lseek(fd, off_t(off), SEEK_DATA);
    ::close(fd);
    return data < 0 || uint64_t(data) >= off + len;
}

std::vector<uint8_t> unmap_list(std::initializer_list<std::pair<uint64_t, uint32_t>> ranges) {
    std::vector<uint8_t> p(8 + 16 * ranges.size(), 0);
    uint16_t bd = uint16_t(16 * ranges.size());
    p[2] = uint8_t(bd >> 8);
    p[3] = uint8_t(bd);
    size_t i = 8;
    for (auto [lba, n] : ranges) {
        put_be64(&p[i], lba);
        put_be32(&p[i + 8], n);
        i += 16;
    }
    return p;
}

}  // namespace

TEST_F(EngineTest, UnmapPunchesHolesThatReadAsZeros) {
    make();
    auto data = pattern(1 << 20, 3);
    write(0, data.data(), 2048);
    complete_all(1);
    ASSERT_FALSE(is_hole(path_, 0, 1 << 20));
    auto list = unmap_list({{0, 256}, {1024, 0}, {1024, 512}});
    Cdb c;
    c.b[0] = kUnmap;
    submit(c, 0, 0, nullptr, 0, list.data(), uint32_t(list.size()));
    complete_all(2);
    all_good();
    EXPECT_TRUE(is_hole(path_, 0, 256 * kBs));
    EXPECT_TRUE(is_hole(path_, 1024 * kBs, 512 * kBs));
    EXPECT_FALSE(is_hole(path_, 256 * kBs, 768 * kBs));
    EXPECT_EQ(file_bytes(0, 4096), std::vector<uint8_t>(4096, 0));
    EXPECT_EQ(file_bytes(300 * kBs, 4096),
              std::vector<uint8_t>(data.begin() + 300 * kBs, data.begin() + 300 * kBs + 4096));
}

TEST_F(EngineTest, UnmapBeyondTheEndIsRefusedBeforeAnythingIsPunched) {
    make();
    auto data = pattern(4096, 4);
    write(0, data.data(), 8);
    complete_all(1);
    auto list = unmap_list({{0, 8}, {kSize / kBs - 1, 2}});
    Cdb c;
    c.b[0] = kUnmap;
    submit(c, 0, 0, nullptr, 0, list.data(), uint32_t(list.size()));
    complete_all(2);
    EXPECT_EQ(result_of(2).sense_key, kIllegalRequest);
    EXPECT_EQ(result_of(2).asc, kAscLbaOutOfRange);
    EXPECT_EQ(file_bytes(0, 4096), data);
}

// With batch off a command is started inside tgt's submit call, and tgt
// still writes to it after that call: none may complete there, not even
// one with nothing to do (an UNMAP of empty descriptors).
TEST_F(EngineTest, BatchOffCompletesNothingInsideSubmit) {
    Options o;
    o.batch = false;
    make(o);
    auto list = unmap_list({{0, 0}, {8, 0}});
    Cdb c;
    c.b[0] = kUnmap;
    submit(c, 0, 0, nullptr, 0, list.data(), uint32_t(list.size()));
    EXPECT_TRUE(done_.empty()) << "completed inside the submit call";
    complete_all(1);
    all_good();
}

TEST_F(EngineTest, WriteSameRepeatsTheBlockWithLbdata) {
    make();
    auto blk = pattern(kBs, 9);
    submit(cdb16(kWriteSame16, 100, 3000), 100, 3000, nullptr, 0, blk.data(), kBs);
    submit(cdb16(kWriteSame16, 5000, 4, 0x02), 5000, 4, nullptr, 0, blk.data(), kBs);
    complete_all(2);
    all_good();
    for (uint64_t lba : {100ull, 101ull, 2047ull, 3099ull}) EXPECT_EQ(file_bytes(lba * kBs, kBs), blk) << lba;
    EXPECT_NE(file_bytes(3100 * kBs, kBs), blk);
    for (uint32_t i = 0; i < 4; ++i) {
        auto got = file_bytes((5000 + i) * kBs, kBs);
        EXPECT_EQ(be32(got.data()), 5000 + i);
        EXPECT_TRUE(std::equal(got.begin() + 4, got.end(), blk.begin() + 4));
    }
}

// NUMBER OF LOGICAL BLOCKS 0 runs to the last whole block: a file (or
// RBD image, whose writesame refuses a length that is not a whole number
// of blocks) may end in a part block no LBA addresses.
TEST_F(EngineTest, WriteSameToTheEndStopsAtTheLastWholeBlock) {
    const uint64_t size = kSize + 256;
    ASSERT_EQ(::truncate(path_.c_str(), off_t(size)), 0);
    auto tail = pattern(256, 11);
    {
        int fd = ::open(path_.c_str(), O_WRONLY);
        ASSERT_GE(fd, 0);
        ASSERT_EQ(::pwrite(fd, tail.data(), tail.size(), off_t(kSize)), ssize_t(tail.size()));
        ::close(fd);
    }
    make(Options{}, size);
    auto blk = pattern(kBs, 12);
    const uint64_t lba = kSize / kBs - 4;
    submit(cdb16(kWriteSame16, lba, 0), lba, 0, nullptr, 0, blk.data(), kBs);
    complete_all(1);
    all_good();
    for (uint64_t b = lba; b < kSize / kBs; ++b) EXPECT_EQ(file_bytes(b * kBs, kBs), blk) << b;
    EXPECT_EQ(file_bytes(kSize, 256), tail) << "the part block past the last LBA was written";
}

TEST_F(EngineTest, WriteSameUnmapPunchesWhateverTheData) {
    make();
    auto data = pattern(1 << 20, 5);
    write(0, data.data(), 2048);
    complete_all(1);
    std::vector<uint8_t> zeros(kBs, 0);
    auto ones = pattern(kBs, 6);
    submit(cdb16(kWriteSame16, 0, 512, 0x08), 0, 512, nullptr, 0, zeros.data(), kBs);
    submit(cdb10(kWriteSame10, 1024, 8, 0x08), 1024, 8, nullptr, 0, ones.data(), kBs);
    complete_all(3);
    all_good();
    EXPECT_TRUE(is_hole(path_, 0, 512 * kBs));
    EXPECT_EQ(file_bytes(1024 * kBs, 8 * kBs), std::vector<uint8_t>(8 * kBs, 0));
    EXPECT_EQ(file_bytes(1032 * kBs, kBs),
              std::vector<uint8_t>(data.begin() + 1032 * kBs, data.begin() + 1033 * kBs));
}

// tgt hands the store a command's length in 32 bits (cmd->tl), from 4 GiB
// on wrapped: a WRITE SAME to the end of an 8 GiB LU arrives as 0 bytes.
TEST_F(EngineTest, WriteSameOf4GibOrMoreCoversItsWholeRange) {
    constexpr uint64_t kBig = 8ull << 30;  // sparse
    ASSERT_EQ(::truncate(path_.c_str(), off_t(kBig)), 0);
    make(Options{}, kBig);
    auto data = pattern(kBs, 3);
    constexpr uint64_t kLast = kBig / kBs - 1, k4G = (4ull << 30) / kBs;
    write(0, data.data(), 1);
    write(k4G, data.data(), 1);
    write(kLast, data.data(), 1);
    complete_all(3);
    std::vector<uint8_t> zeros(kBs, 0);
    // 2^23 + 1 blocks from LBA 1, with UNMAP: tgt's transfer wraps to one block.
    submit(cdb16(kWriteSame16, 1, (1u << 23) + 1, 0x08), 1, (1u << 23) + 1, nullptr, 0, zeros.data(), kBs);
    complete_all(4);
    // (A hole would be whole pages: the range ends 1 KiB into one.)
    EXPECT_EQ(file_bytes(k4G * kBs, kBs), zeros) << "the block at 4 GiB is inside the range";
    EXPECT_EQ(file_bytes(0, kBs), data);
    EXPECT_EQ(file_bytes(kLast * kBs, kBs), data);
    // NUMBER OF LOGICAL BLOCKS 0 (to the end): tgt's transfer is 2^24
    // blocks << 9, wrapped to 0.
    submit(cdb16(kWriteSame16, 0, 0, 0x08), 0, 0, nullptr, 0, zeros.data(), kBs);
    complete_all(5);
    all_good();
    EXPECT_TRUE(is_hole(path_, 0, kBs));
    EXPECT_TRUE(is_hole(path_, kLast * kBs, kBs));
    EXPECT_EQ(file_bytes(kLast * kBs, kBs), zeros);
}

TEST_F(EngineTest, AReadOrWriteOf4GibOrMoreIsRefusedNotCut) {
    make();
    std::vector<uint8_t> buf(kBs, 0xee);
    const uint32_t blocks = (1u << 23) + 1;  // 4 GiB + 512: tgt's transfer is 512
    submit(cdb16(kRead16, 0, blocks), 0, blocks, buf.data(), kBs, nullptr, 0);
    submit(cdb16(kWrite16, 0, blocks), 0, blocks, nullptr, 0, buf.data(), kBs);
    complete_all(2);
    for (uintptr_t id : {1u, 2u}) {
        EXPECT_EQ(result_of(id).sense_key, kIllegalRequest) << id;
        EXPECT_EQ(result_of(id).asc, kAscInvalidFieldInCdb) << id;
    }
    EXPECT_EQ(buf, std::vector<uint8_t>(kBs, 0xee)) << "nothing read into the buffer";
    EXPECT_EQ(file_bytes(0, kBs), std::vector<uint8_t>(kBs, 0)) << "nothing written";
}

TEST_F(EngineTest, WriteSameUnmapWritesWhenNotThin) {
    make();
    auto ones = pattern(kBs, 7);
    rbio_bs_cmd c{};
    Cdb cdb = cdb16(kWriteSame16, 64, 4, 0x08);
    c.cmd = reinterpret_cast<void*>(uintptr_t(++next_id_));
    c.cdb = cdb.b.data();
    c.cdb_len = cdb.len;
    c.offset = 64 * kBs;
    c.transfer = 4 * kBs;
    c.out_buf = ones.data();
    c.out_len = kBs;
    c.lu_size = kSize;
    c.block_shift = kShift;
    c.write_cache = 1;
    c.thin = 0;
    ASSERT_EQ(engine_->submit(c), 0);
    complete_all(1);
    all_good();
    for (uint32_t i = 0; i < 4; ++i) EXPECT_EQ(file_bytes((64 + i) * kBs, kBs), ones);
}

TEST_F(EngineTest, CompareAndWriteWritesOnlyOnMatch) {
    make();
    auto old = pattern(kBs, 10), neu = pattern(kBs, 11);
    write(7, old.data(), 1);
    complete_all(1);
    std::vector<uint8_t> buf(old);
    buf.insert(buf.end(), neu.begin(), neu.end());
    submit(cdb16(kCompareAndWrite, 7, 1), 7, 1, nullptr, 0, buf.data(), 2 * kBs);
    complete_all(2);
    EXPECT_EQ(result_of(2).status, kGood);
    EXPECT_EQ(file_bytes(7 * kBs, kBs), neu);

    std::vector<uint8_t> wrong(old);  // compare data no longer matches
    wrong[100] ^= 1;
    std::vector<uint8_t> buf2(wrong);
    buf2.insert(buf2.end(), old.begin(), old.end());
    submit(cdb16(kCompareAndWrite, 7, 1), 7, 1, nullptr, 0, buf2.data(), 2 * kBs);
    complete_all(3);
    const auto& r = result_of(3);
    EXPECT_EQ(r.sense_key, kMiscompare);
    EXPECT_EQ(r.asc, kAscMiscompareDuringVerify);
    EXPECT_TRUE(r.has_info);
    EXPECT_EQ(file_bytes(7 * kBs, kBs), neu);
    // Counted apart: ATS locking makes miscompares in normal use, and the
    // alert on errors must not fire on them.
    EXPECT_EQ(engine_->counters().miscompares, 1u);
    EXPECT_EQ(engine_->counters().errors, 0u);
}

// The Block Limits page advertises RBIO_BS_MAX_COMPARE_AND_WRITE_BLOCKS;
// one block more is refused before anything is read or written.
TEST_F(EngineTest, CompareAndWriteLongerThanAdvertisedIsRefused) {
    make();
    const uint32_t n = RBIO_BS_MAX_COMPARE_AND_WRITE_BLOCKS;
    std::vector<uint8_t> zeros(size_t(2) * (n + 1) * kBs, 0);
    submit(cdb16(kCompareAndWrite, 0, 0), 0, n + 1, nullptr, 0, zeros.data(), uint32_t(zeros.size()));
    submit(cdb16(kCompareAndWrite, 0, 0), 0, n, nullptr, 0, zeros.data(), uint32_t(2 * n * kBs));
    complete_all(2);
    EXPECT_EQ(result_of(1).sense_key, kIllegalRequest);
    EXPECT_EQ(result_of(1).asc, kAscInvalidFieldInCdb);
    EXPECT_EQ(result_of(2).status, kGood);
    EXPECT_EQ(engine_->counters().errors, 1u);
    EXPECT_EQ(engine_->counters().miscompares, 0u);
}

// Data-out one byte longer than the two halves: the halves would be taken
// and the last byte ignored. Refused, as any other length but two halves.
TEST_F(EngineTest, CompareAndWriteOfAnOddLengthIsRefused) {
    make();
    std::vector<uint8_t> zeros(size_t(2) * kBs + 1, 0);
    submit(cdb16(kCompareAndWrite, 0, 1), 0, 1, nullptr, 0, zeros.data(), uint32_t(zeros.size()));
    complete_all(1);
    EXPECT_EQ(result_of(1).sense_key, kIllegalRequest);
    EXPECT_EQ(result_of(1).asc, kAscInvalidFieldInCdb);
}

// NUMBER OF LOGICAL BLOCKS 0: nothing transferred, compared or written,
// and GOOD (SBC: not an error). With data-out it is refused: 256 blocks
// wrap to 0 in the one-byte field (libiscsi's CompareAndWrite.Simple
// sends that and wants INVALID FIELD IN CDB).
TEST_F(EngineTest, CompareAndWriteOfNoBlocksIsGood) {
    make();
    std::vector<uint8_t> data(size_t(2) * 256 * kBs, 0);
    submit(cdb16(kCompareAndWrite, 0, 0), 0, 0, nullptr, 0, nullptr, 0);
    submit(cdb16(kCompareAndWrite, 0, 0), 0, 0, nullptr, 0, data.data(), uint32_t(data.size()));
    complete_all(2);
    EXPECT_EQ(result_of(1).status, kGood);
    EXPECT_EQ(result_of(2).sense_key, kIllegalRequest);
    EXPECT_EQ(result_of(2).asc, kAscInvalidFieldInCdb);
}

TEST_F(EngineTest, CompareAndWriteRunsAloneBetweenOtherWrites) {
    make();
    auto a = pattern(kBs, 20), b = pattern(kBs, 21), c = pattern(kBs, 22);
    write(0, a.data(), 1);
    std::vector<uint8_t> caw(a);
    caw.insert(caw.end(), b.begin(), b.end());
    submit(cdb16(kCompareAndWrite, 0, 1), 0, 1, nullptr, 0, caw.data(), 2 * kBs);
    write(0, c.data(), 1);
    complete_all(3);
    all_good();
    // In arrival order: a, then CAW (a -> b), then c.
    EXPECT_EQ(file_bytes(0, kBs), c);
}

// With bsoflags direct (O_DIRECT) the commands that stage data in the
// engine's own buffer (WRITE SAME's pattern, VERIFY's and COMPARE AND
// WRITE's read-back) must use memory the kernel accepts for direct I/O; an
// ordinary heap buffer failed WRITE SAME with EINVAL (found by
// vm.crash-durability: ext4's lazy inode-table zeroing).
TEST_F(EngineTest, CommandsWithTheirOwnBufferWorkWithODirect) {
    make();
    engine_->close();
    engine_->open(path_, O_DIRECT);
    auto blk = pattern(kBs, 12);
    submit(cdb16(kWriteSame16, 64, 300), 64, 300, nullptr, 0, blk.data(), kBs);
    complete_all(1);
    std::vector<uint8_t> want;
    for (int i = 0; i < 300; ++i) want.insert(want.end(), blk.begin(), blk.end());
    EXPECT_EQ(file_bytes(64 * kBs, 300 * kBs), want);
    submit(cdb10(kVerify10, 64, 300, 0x06), 64, 300, nullptr, 0, blk.data(), kBs);  // BYTCHK=3
    // tgt's data-out buffers are page aligned; so is this one.
    std::unique_ptr<uint8_t, decltype(&std::free)> caw(static_cast<uint8_t*>(std::aligned_alloc(4096, 4096)),
                                                       &std::free);
    ASSERT_TRUE(caw);
    std::copy(blk.begin(), blk.end(), caw.get());
    std::fill(caw.get() + kBs, caw.get() + 2 * kBs, 0x5a);
    submit(cdb16(kCompareAndWrite, 64, 1), 64, 1, nullptr, 0, caw.get(), 2 * kBs);
    complete_all(3);
    all_good();
    EXPECT_EQ(file_bytes(64 * kBs, kBs), std::vector<uint8_t>(kBs, 0x5a));
}

TEST_F(EngineTest, OrWriteOrsIntoTheMedia) {
    make();
    std::vector<uint8_t> media(kBs, 0x0f), mask(kBs, 0xf0);
    write(3, media.data(), 1);
    submit(cdb16(kOrWrite16, 3, 1), 3, 1, nullptr, 0, mask.data(), kBs);
    complete_all(2);
    all_good();
    EXPECT_EQ(file_bytes(3 * kBs, kBs), std::vector<uint8_t>(kBs, 0xff));
}

TEST_F(EngineTest, VerifyComparesAndReportsTheFirstDifference) {
    make();
    auto data = pattern(4 * kBs, 30);
    write(40, data.data(), 4);
    complete_all(1);
    auto same = data;
    submit(cdb10(kVerify10, 40, 4, 0x02), 40, 4, nullptr, 0, same.data(), 4 * kBs);
    auto diff = data;
    diff[kBs + 5] ^= 0x80;
    submit(cdb10(kVerify10, 40, 4, 0x02), 40, 4, nullptr, 0, diff.data(), 4 * kBs);
    complete_all(3);
    EXPECT_EQ(result_of(2).status, kGood);
    EXPECT_EQ(result_of(3).sense_key, kMiscompare);
    EXPECT_EQ(result_of(3).info, kBs + 5u);
}

// BYTCHK=0 reads the medium back (GOOD here; a bad block's MEDIUM ERROR is
// checked by integration.disk-errors); BYTCHK=1 needs data for every block
// it compares; 10b is reserved.
TEST_F(EngineTest, VerifyChecksItsDataLength) {
    make();
    auto data = pattern(4 * kBs, 32);
    write(40, data.data(), 4);
    complete_all(1);
    submit(cdb10(kVerify10, 40, 4, 0x00), 40, 4, nullptr, 0, nullptr, 0);
    submit(cdb10(kVerify10, 40, 4, 0x02), 40, 4, nullptr, 0, data.data(), 2 * kBs);
    submit(cdb10(kVerify10, 40, 4, 0x04), 40, 4, nullptr, 0, data.data(), 4 * kBs);
    submit(cdb10(kVerify10, 40, 4, 0x02), 40, 4, nullptr, 0, nullptr, 0);
    // No block to compare, and no data: GOOD, as SBC has it.
    submit(cdb10(kVerify10, 40, 0, 0x02), 40, 0, nullptr, 0, nullptr, 0);
    submit(cdb10(kVerify10, 40, 0, 0x06), 40, 0, nullptr, 0, nullptr, 0);
    complete_all(7);
    EXPECT_EQ(result_of(2).status, kGood);
    EXPECT_EQ(result_of(3).sense_key, kIllegalRequest);
    EXPECT_EQ(result_of(3).asc, kAscParameterListLength);
    EXPECT_EQ(result_of(4).sense_key, kIllegalRequest);
    EXPECT_EQ(result_of(4).asc, kAscInvalidFieldInCdb);
    EXPECT_EQ(result_of(5).asc, kAscParameterListLength);
    EXPECT_EQ(result_of(6).status, kGood);
    EXPECT_EQ(result_of(7).status, kGood);
}

// A VERIFY or WRITE SAME over many chunks that task management waits for
// ends between two chunks with TASK ABORTED, without the rest (tgt's abort
// of a command the store has waits for it: hours on a large LU).
TEST_F(EngineTest, LongCommandsEndWhenAborted) {
    make();
    const uint32_t blocks = uint32_t(kSize / kBs);  // 16 chunks of 1 MiB
    submit(cdb16(kVerify16, 0, blocks), 0, blocks, nullptr, 0, nullptr, 0);
    aborting_ = reinterpret_cast<void*>(uintptr_t(next_id_));
    complete_all(1);
    EXPECT_EQ(result_of(1).status, kTaskAborted);
    auto blk = pattern(kBs, 33);
    submit(cdb16(kWriteSame16, 0, blocks), 0, blocks, nullptr, 0, blk.data(), kBs);
    aborting_ = reinterpret_cast<void*>(uintptr_t(next_id_));
    complete_all(2);
    EXPECT_EQ(result_of(2).status, kTaskAborted);
    // Only the first 1 MiB chunk was written.
    EXPECT_EQ(file_bytes(0, kBs), blk);
    EXPECT_EQ(file_bytes(2u << 20, kBs), std::vector<uint8_t>(kBs, 0));
}

TEST_F(EngineTest, VerifyBytchk3ComparesOneBlockAgainstEach) {
    make();
    auto blk = pattern(kBs, 31);
    submit(cdb16(kWriteSame16, 10, 6), 10, 6, nullptr, 0, blk.data(), kBs);
    complete_all(1);
    submit(cdb10(kVerify10, 10, 6, 0x06), 10, 6, nullptr, 0, blk.data(), kBs);
    submit(cdb10(kVerify10, 10, 7, 0x06), 10, 7, nullptr, 0, blk.data(), kBs);
    complete_all(3);
    EXPECT_EQ(result_of(2).status, kGood);
    EXPECT_EQ(result_of(3).sense_key, kMiscompare);
    EXPECT_EQ(result_of(3).info, 6u * kBs);
}

TEST_F(EngineTest, WriteAndVerifyWritesThenChecks) {
    make();
    auto data = pattern(8 * kBs, 40);
    submit(cdb10(kWriteVerify10, 80, 8), 80, 8, nullptr, 0, data.data(), 8 * kBs);
    complete_all(1);
    all_good();
    EXPECT_EQ(file_bytes(80 * kBs, 8 * kBs), data);
}

TEST_F(EngineTest, PrefetchAndUnknownOpcodesComplete) {
    make();
    submit(cdb10(kPreFetch10, 0, 64), 0, 64, nullptr, 0, nullptr, 0);
    Cdb tur;  // TEST UNIT READY reaches a backing store only by mistake
    submit(tur, 0, 0, nullptr, 0, nullptr, 0);
    complete_all(2);
    all_good();
}

TEST_F(EngineTest, CloseWaitsForInFlightIo) {
    make();
    std::vector<std::vector<uint8_t>> bufs;
    for (uint32_t i = 0; i < 20; ++i) bufs.push_back(pattern(64 * kBs, 60 + i));
    for (uint32_t i = 0; i < 20; ++i) write(i * 128, bufs[i].data(), 64);
    engine_->flush();
    engine_->close();
    EXPECT_EQ(done_.size(), 20u);
    EXPECT_EQ(engine_->in_flight(), 0u);
    all_good();
    for (uint32_t i = 0; i < 20; ++i) EXPECT_EQ(file_bytes(i * 128 * kBs, 64 * kBs), bufs[i]);
}

// tgtd watches the eventfd level-triggered, because its event loop drops the
// rest of an epoll_wait batch when a handler removes a watched fd: a wake-up
// must then come back on the next epoll_wait. That needs on_event() to reset
// the eventfd (else tgtd would spin on it) and the eventfd to stay readable
// until on_event() runs.
TEST_F(EngineTest, EventFdStaysReadableUntilOnEventResetsIt) {
    Options o;
    o.inline_io = Options::Inline::Off;
    o.inline_reap = false;  // completions wait for the wake-up
    make(o);
    auto a = pattern(64 * kBs, 91), b = pattern(64 * kBs, 92);
    write(0, a.data(), 64);
    engine_->flush();
    ASSERT_TRUE(event_readable(5000)) << "the completion never signalled the eventfd";
    // A wake-up tgtd skipped is reported again.
    EXPECT_TRUE(event_readable(0));
    EXPECT_TRUE(done_.empty());
    engine_->on_event();
    ASSERT_EQ(done_.size(), 1u);
    EXPECT_FALSE(event_readable(0))
        << "on_event() left the eventfd readable: a level-triggered watch would spin";
    // A completion posted after the reset makes it readable again.
    write(128, b.data(), 64);
    engine_->flush();
    ASSERT_TRUE(event_readable(5000));
    engine_->on_event();
    ASSERT_EQ(done_.size(), 2u);
    EXPECT_FALSE(event_readable(0));
    all_good();
    EXPECT_EQ(file_bytes(128 * kBs, 64 * kBs), b);
}

// A pass that reaps what it submitted (inline_reap, the default) turns the
// eventfd's signal off meanwhile: a page-cache I/O complete when
// io_uring_enter returns must not wake tgtd again (one more epoll_wait
// return and a read() of the eventfd per I/O at 1 in flight). Whatever
// completes after the pass must still signal it.
TEST_F(EngineTest, APassLeavesNoWakeUpForWhatItReapedItself) {
    Options o;
    o.inline_io = Options::Inline::Off;
    make(o);
    auto a = pattern(8 * kBs, 93);
    std::vector<uint8_t> back(8 * kBs);
    for (int i = 0; i < 16; ++i) {
        const size_t before = done_.size();
        if (i % 2) read(uint64_t(i) * 8, back.data(), 8);
        else write(uint64_t(i) * 8, a.data(), 8);
        engine_->flush();
        if (done_.size() == before) {
            // Not complete when io_uring_enter returned (an io-wq worker
            // has it): its completion must wake tgtd.
            ASSERT_TRUE(event_readable(5000)) << "command " << i << " never signalled the eventfd";
            engine_->on_event();
            ASSERT_EQ(done_.size(), before + 1);
        }
        EXPECT_FALSE(event_readable(0)) << "command " << i << " left a wake-up behind";
    }
    all_good();
    if (engine_->counters().reaped_inline == 0)
        GTEST_SKIP() << "no I/O completed inside io_uring_enter on this file system";
}

TEST_F(EngineTest, OpenErrorsNameThePathAndTheReason) {
    rbio_bs_hooks h{};
    Engine e(Options{}, h);
    auto msg = [&](const std::string& p) {
        try {
            e.open(p, 0);
        } catch (const Error& err) {
            return std::string(err.what());
        }
        return std::string();
    };
    EXPECT_NE(msg(dir_ + "/missing.img").find("No such file or directory"), std::string::npos);
    EXPECT_NE(msg(dir_).find("is a directory"), std::string::npos);
    std::string small = dir_ + "/small.img";
    ::close(::open(small.c_str(), O_CREAT | O_RDWR, 0600));
    EXPECT_NE(msg(small).find("too small"), std::string::npos);
}

TEST_F(EngineTest, InlineIoServesSmallRequestsWithoutTheRing) {
    Options o;
    o.inline_io = Options::Inline::On;
    o.inline_max_kib = 64;
    make(o);
    ASSERT_TRUE(engine_->inline_io());
    std::vector<std::vector<uint8_t>> bufs;
    for (uint32_t i = 0; i < 8; ++i) bufs.push_back(pattern(4096, 200 + i));
    for (uint32_t i = 0; i < 8; ++i) write(i * 8, bufs[i].data(), 8);  // one coalesced pwritev
    auto big = pattern(128 * 1024, 300);
    write(4096, big.data(), 256);  // over the limit: io_uring
    complete_all(9);
    all_good();
    EXPECT_EQ(engine_->counters().inline_ios, 1u);
    EXPECT_EQ(engine_->counters().ios, 2u);
    EXPECT_EQ(engine_->counters().submit_calls, 1u);
    std::vector<std::vector<uint8_t>> back(8, std::vector<uint8_t>(4096));
    for (uint32_t i = 0; i < 8; ++i) read(i * 8, back[i].data(), 8);
    complete_all(17);
    all_good();
    for (uint32_t i = 0; i < 8; ++i) EXPECT_EQ(back[i], bufs[i]);
    EXPECT_EQ(file_bytes(4096 * kBs, big.size()), big);
}

TEST_F(EngineTest, InlineShortReadFailsOnlyPastTheEnd) {
    Options o;
    o.inline_io = Options::Inline::On;
    make(o);
    ASSERT_EQ(::truncate(path_.c_str(), 8192), 0);
    std::vector<uint8_t> a(4096), b(4096), c(4096);
    read(0, a.data(), 8);
    read(8, b.data(), 8);
    read(16, c.data(), 8);
    complete_all(3);
    EXPECT_EQ(result_of(1).status, kGood);
    EXPECT_EQ(result_of(2).status, kGood);
    EXPECT_EQ(result_of(3).sense_key, kMediumError);
}

// Uncoalesced inline I/O takes pread/pwrite (one buffer) or, for a FUA
// write, pwritev2 with RWF_DSYNC: each still lands where it should, and a
// read past the end still fails alone.
TEST_F(EngineTest, InlineSingleBufferIoReadsWritesAndFailsPastTheEnd) {
    Options o;
    o.inline_io = Options::Inline::On;
    o.coalesce = false;
    make(o);
    ASSERT_TRUE(engine_->inline_io());
    auto a = pattern(4096, 11), b = pattern(4096, 12);
    write(8, a.data(), 8);
    write(16, b.data(), 8, 0x08);  // FUA
    complete_all(2);
    all_good();
    EXPECT_EQ(file_bytes(8 * kBs, 4096), a);
    EXPECT_EQ(file_bytes(16 * kBs, 4096), b);
    EXPECT_EQ(engine_->counters().inline_ios, 2u);
    EXPECT_EQ(engine_->counters().submit_calls, 0u);
    ASSERT_EQ(::truncate(path_.c_str(), 16 * kBs + 2048), 0);
    std::vector<uint8_t> x(4096), y(4096), z(4096);
    read(8, x.data(), 8);
    read(16, y.data(), 8);  // half past the end: short, then EOF
    read(32, z.data(), 8);  // wholly past it
    complete_all(5);
    EXPECT_EQ(result_of(3).status, kGood);
    EXPECT_EQ(x, a);
    EXPECT_EQ(result_of(4).sense_key, kMediumError);
    EXPECT_EQ(result_of(5).sense_key, kMediumError);
    EXPECT_EQ(engine_->counters().inline_ios, 5u);
}

TEST_F(EngineTest, InlineAutoIsOnForTmpfsOnly) {
    make();
    struct statfs sfs {};
    ASSERT_EQ(::statfs(dir_.c_str(), &sfs), 0);
    EXPECT_EQ(engine_->inline_io(), sfs.f_type == 0x01021994 /*TMPFS_MAGIC*/);
    engine_->close();
    std::string shm = "/dev/shm/rbio-engine-test-" + std::to_string(::getpid()) + ".img";
    int fd = ::open(shm.c_str(), O_CREAT | O_RDWR, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, 1 << 20), 0);
    ::close(fd);
    engine_->open(shm, 0);
    EXPECT_TRUE(engine_->inline_io());
    engine_->close();
    ::unlink(shm.c_str());
}

TEST_F(EngineTest, UnmapWithMoreDescriptorsThanAdvertisedIsRefused) {
    make();
    std::vector<uint8_t> p(8 + 16 * (RBIO_BS_MAX_UNMAP_DESCRIPTORS + 1), 0);
    uint16_t bd = uint16_t(16 * (RBIO_BS_MAX_UNMAP_DESCRIPTORS + 1));
    p[2] = uint8_t(bd >> 8);
    p[3] = uint8_t(bd);
    Cdb c;
    c.b[0] = kUnmap;
    submit(c, 0, 0, nullptr, 0, p.data(), uint32_t(p.size()));
    auto ok = unmap_list({{0, 0}, {kSize / kBs, 0}});  // zero blocks, even at the end: fine
    submit(c, 0, 0, nullptr, 0, ok.data(), uint32_t(ok.size()));
    complete_all(2);
    EXPECT_EQ(result_of(1).sense_key, kIllegalRequest);
    EXPECT_EQ(result_of(1).asc, kAscInvalidFieldInParameterList);
    EXPECT_EQ(result_of(2).status, kGood);
}

// A full file system under a thin file: io_uring finishes the failing
// writes in ways that the "async only" eventfd never signalled, which hung
// commands. Every command must complete, woken by the eventfd alone, with
// DATA PROTECT / SPACE ALLOCATION FAILED for the ones that found no space.
// Runs in a child with its own mount namespace for a 1 MiB tmpfs.
TEST_F(EngineTest, EveryWriteToAFullFileSystemCompletesThroughTheEventfd) {
    std::string mnt = dir_ + "/small";
    ASSERT_EQ(::mkdir(mnt.c_str(), 0700), 0);
    auto scenario = [&] {
        if (::unshare(CLONE_NEWNS) != 0 ||
            ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
            ::mount("rbio-unit", mnt.c_str(), "tmpfs", 0, "size=4m") != 0)
            ::_exit(10);
        path_ = mnt + "/thin.img";
        int fd = ::open(path_.c_str(), O_CREAT | O_RDWR, 0600);
        if (fd < 0 || ::ftruncate(fd, off_t(kSize)) != 0) ::_exit(11);
        ::close(fd);
        Options o;
        o.inline_io = Options::Inline::Off;
        make(o);
        // As tgtd delivers them over TCP: one 1 MiB write per pass.
        std::vector<std::vector<uint8_t>> bufs(16, pattern(1 << 20, 77));
        for (uint32_t i = 0; i < 16; ++i) {
            write(i * 2048, bufs[i].data(), 2048);
            engine_->flush();
        }
        while (done_.size() < 16) {
            if (!event_readable(5000)) ::_exit(12);  // a command hung
            engine_->on_event();
        }
        int nospace = 0;
        for (auto& d : done_)
            if (d.r.sense_key == kDataProtect && d.r.asc == kAscSpaceAllocationFailedWriteProtect) ++nospace;
        ::_exit(nospace > 0 ? 0 : 14);
    };
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(scenario(), ::testing::ExitedWithCode(0), "");
}

// The mapping of errors to sense, shared by files and RBD images.
TEST(IoFailure, AFencedRbdClientIsAnUnavailablePortNotBadMedia) {
    // librbd's EBLOCKLISTED (ESHUTDOWN), and EROFS when another client keeps
    // the exclusive lock: hosts must retry on another path.
    for (int err : {ESHUTDOWN, EROFS})
        for (bool write : {false, true}) {
            auto r = io_failure(write, err, Backing::Rbd);
            EXPECT_EQ(r.status, kCheckCondition);
            EXPECT_EQ(r.sense_key, kNotReady);
            EXPECT_EQ(r.asc, kAscTargetPortUnavailable);
        }
    // A file's errors are its media's.
    EXPECT_EQ(io_failure(true, EROFS, Backing::File).sense_key, kMediumError);
    EXPECT_EQ(io_failure(false, EIO, Backing::Rbd).sense_key, kMediumError);
    EXPECT_EQ(io_failure(false, EIO, Backing::File).sense_key, kMediumError);
    EXPECT_EQ(io_failure(true, EIO, Backing::File).asc, kAscWriteError);
    EXPECT_EQ(io_failure(true, ENOSPC, Backing::File).sense_key, kDataProtect);
}
