// The dm-log-writes reader and replayer of the crash-consistency test
// (tests/vm/crash/dm_log.hpp) against logs laid out as the kernel's target
// writes them; the VM test (vm.crash-durability) reads real ones.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "dm_log.hpp"
#include "rbio/common/unique_fd.hpp"

using namespace rbio::crash;
namespace fs = std::filesystem;

namespace {

constexpr uint32_t kSector = 512;

void put_le(std::vector<uint8_t>& b, size_t at, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) b[at + size_t(i)] = uint8_t(v >> (8 * i));
}

// A log as dm-log-writes lays it out: super, then header sector + data per entry.
class LogBuilder {
public:
    LogBuilder() : bytes_(kSector, 0) {}
    LogBuilder& entry(uint64_t sector, uint64_t nr, uint64_t flags, uint8_t fill = 0, std::string mark = {}) {
        std::vector<uint8_t> h(kSector, 0);
        put_le(h, 0, sector, 8);
        put_le(h, 8, nr, 8);
        put_le(h, 16, flags, 8);
        put_le(h, 24, mark.size(), 8);
        std::memcpy(&h[32], mark.data(), mark.size());
        bytes_.insert(bytes_.end(), h.begin(), h.end());
        if (!(flags & (kDiscard | kMark))) bytes_.insert(bytes_.end(), nr * kSector, fill);
        ++count_;
        return *this;
    }
    std::vector<uint8_t> build(uint64_t magic = kLogMagic, uint64_t claimed = UINT64_MAX) const {
        std::vector<uint8_t> b = bytes_;
        put_le(b, 0, magic, 8);
        put_le(b, 8, kLogVersion, 8);
        put_le(b, 16, claimed == UINT64_MAX ? count_ : claimed, 8);
        put_le(b, 24, kSector, 4);
        return b;
    }

private:
    std::vector<uint8_t> bytes_;
    uint64_t count_ = 0;
};

class DmLogTest : public ::testing::Test {
protected:
    void SetUp() override {
        char tmpl[] = "/tmp/rbio-dmlog-XXXXXX";
        ASSERT_NE(::mkdtemp(tmpl), nullptr);
        dir_ = tmpl;
    }
    void TearDown() override { fs::remove_all(dir_); }

    rbio::UniqueFd file(const std::string& name, const std::vector<uint8_t>& content, uint64_t size = 0) {
        std::string p = dir_ + "/" + name;
        rbio::UniqueFd fd(::open(p.c_str(), O_CREAT | O_RDWR | O_TRUNC, 0600));
        EXPECT_TRUE(fd);
        EXPECT_EQ(::pwrite(fd.get(), content.data(), content.size(), 0), ssize_t(content.size()));
        if (size) {
            EXPECT_EQ(::ftruncate(fd.get(), off_t(size)), 0);
        }
        return fd;
    }
    static std::vector<uint8_t> bytes_of(int fd, uint64_t off, size_t n) {
        std::vector<uint8_t> v(n);
        EXPECT_EQ(::pread(fd, v.data(), n, off_t(off)), ssize_t(n));
        return v;
    }
    std::string error_of(const std::vector<uint8_t>& log) {
        auto fd = file("bad.log", log);
        try {
            LogReader r(fd.get());
            while (r.next()) {
            }
        } catch (const std::runtime_error& e) {
            return e.what();
        }
        return "";
    }

    std::string dir_;
};

}  // namespace

TEST_F(DmLogTest, ListsEntriesWithTheirFlagsAndMarks) {
    auto log = file("a.log", LogBuilder()
                                 .entry(8, 2, 0, 0xaa)
                                 .entry(0, 0, kFlush)
                                 .entry(16, 1, kFua | kMetadata, 0xbb)
                                 .entry(0, 0, kMark, 0, "step:0")
                                 .entry(8, 4, kDiscard)
                                 .build());
    LogReader r(log.get());
    EXPECT_EQ(r.sector_size(), kSector);
    EXPECT_EQ(r.entry_count(), 5u);
    std::vector<LogEntry> es;
    while (auto e = r.next()) es.push_back(*e);
    ASSERT_EQ(es.size(), 5u);
    EXPECT_EQ(flags_string(es[0].flags), "write");
    EXPECT_FALSE(es[0].durability_point());
    EXPECT_TRUE(es[1].durability_point());
    EXPECT_EQ(flags_string(es[1].flags), "flush");
    EXPECT_EQ(flags_string(es[2].flags), "fua");
    EXPECT_EQ(es[3].mark, "step:0");
    EXPECT_FALSE(es[3].has_data());
    EXPECT_FALSE(es[4].has_data());
    EXPECT_EQ(es[4].index, 4u);
}

TEST_F(DmLogTest, ReplayWritesDataAndZeroesDiscards) {
    auto log = file("a.log", LogBuilder()
                                 .entry(2, 3, 0, 0x11)
                                 .entry(0, 0, kFlush)
                                 .entry(3, 1, kDiscard)
                                 .entry(7, 1, kFua, 0x22)
                                 .build());
    auto image = file("img", {}, 16 * kSector);
    LogReader r(log.get());
    Replayer rep(r, image.get(), 16 * kSector);
    auto e0 = r.next();
    rep.apply(*e0);
    EXPECT_EQ(bytes_of(image.get(), 2 * kSector, 3 * kSector), std::vector<uint8_t>(3 * kSector, 0x11));
    while (auto e = r.next()) rep.apply(*e);
    EXPECT_EQ(bytes_of(image.get(), 2 * kSector, kSector), std::vector<uint8_t>(kSector, 0x11));
    EXPECT_EQ(bytes_of(image.get(), 3 * kSector, kSector), std::vector<uint8_t>(kSector, 0));
    EXPECT_EQ(bytes_of(image.get(), 4 * kSector, kSector), std::vector<uint8_t>(kSector, 0x11));
    EXPECT_EQ(bytes_of(image.get(), 7 * kSector, kSector), std::vector<uint8_t>(kSector, 0x22));

    auto copy = file("copy", std::vector<uint8_t>(64 * kSector, 0xff));
    sparse_copy(image.get(), copy.get());
    EXPECT_EQ(::lseek(copy.get(), 0, SEEK_END), off_t(16 * kSector));
    EXPECT_EQ(bytes_of(copy.get(), 0, 16 * kSector), bytes_of(image.get(), 0, 16 * kSector));
}

TEST_F(DmLogTest, EntriesPastTheSuperBlocksCountAreIgnored) {
    auto log = file("a.log", LogBuilder().entry(0, 1, 0).entry(0, 0, kFlush).build(kLogMagic, 1));
    LogReader r(log.get());
    EXPECT_TRUE(r.next());
    EXPECT_FALSE(r.next());
}

TEST_F(DmLogTest, AWriteOutsideTheImageIsRefused) {
    auto log = file("a.log", LogBuilder().entry(15, 2, 0).build());
    auto image = file("img", {}, 16 * kSector);
    LogReader r(log.get());
    Replayer rep(r, image.get(), 16 * kSector);
    EXPECT_THROW(rep.apply(*r.next()), std::runtime_error);
}

TEST_F(DmLogTest, MalformedLogsAreRefusedWithTheReason) {
    EXPECT_NE(error_of(LogBuilder().entry(0, 1, 0).build(0x1234)).find("not a dm-log-writes log"),
              std::string::npos);
    EXPECT_NE(error_of(LogBuilder().entry(0, 1, 0).build(kLogMagic, 1000)).find("claims 1000 entries"),
              std::string::npos);
    EXPECT_NE(error_of(LogBuilder().entry(0, 1, 1u << 9).build()).find("unknown flags"), std::string::npos);
    EXPECT_NE(error_of(LogBuilder().entry(0, 1, kMark, 0, "x").build()).find("a mark of"), std::string::npos);
    auto truncated = LogBuilder().entry(0, 4, 0).entry(0, 0, kFlush).build();
    truncated.resize(truncated.size() - 100);  // entry 1's header cut short
    EXPECT_NE(error_of(truncated).find("entry 1"), std::string::npos) << error_of(truncated);
    auto short_data = LogBuilder().entry(0, 4, 0).build();
    short_data.resize(short_data.size() - 1);
    EXPECT_NE(error_of(short_data).find("entry 0: its data runs past the end"), std::string::npos)
        << error_of(short_data);
}
