#pragma once
// Reading the log device of the kernel's dm-log-writes target, for the
// crash-consistency test (tests/vm/crash-durability.sh): dm-log-writes sits
// under a backing store and records every write, flush, FUA and discard in
// the order they became durable; replaying the log up to a flush or FUA
// entry onto a zeroed device gives what the disk could hold had the power
// gone right after it (the worst case: every write not yet flushed lost).
//
// The format, from the kernel's description of the target
// (Documentation/admin-guide/device-mapper/log-writes.rst and the comments of
// drivers/md/dm-log-writes.c), all integers little-endian:
//
//   sector 0          super: magic (u64, 0x6a736677736872), version (u64, 1),
//                     number of entries (u64), sector size (u32: the data
//                     device's logical block size, which is the unit of
//                     every sector number below)
//   then per entry    one sector of header: the data device sector written
//                     (u64), how many sectors (u64), flags (u64: flush 1,
//                     FUA 2, discard 4, mark 8, metadata 16), the length of
//                     the entry's private data (u64; a mark's text, which
//                     follows the header in the same sector);
//                     then the data written (sectors x sector size), except
//                     for discards and marks, which carry none.
//
// The super's entry count is rewritten at every FUA and mark and when the
// target is removed; entries past it are ignored.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace rbio::crash {

inline constexpr uint64_t kLogMagic = 0x6a736677736872ULL;
inline constexpr uint64_t kLogVersion = 1;

enum EntryFlag : uint64_t {
    kFlush = 1u << 0,
    kFua = 1u << 1,
    kDiscard = 1u << 2,
    kMark = 1u << 3,
    kMetadata = 1u << 4,
};
inline constexpr uint64_t kKnownFlags = kFlush | kFua | kDiscard | kMark | kMetadata;

struct LogEntry {
    uint64_t index = 0;   // 0 for the first entry after the super
    uint64_t sector = 0;  // on the data device, in log sectors
    uint64_t nr_sectors = 0;
    uint64_t flags = 0;
    uint64_t data_offset = 0;  // byte offset of the written data in the log
    std::string mark;          // the text of a mark entry

    bool has_data() const { return nr_sectors && !(flags & (kDiscard | kMark)); }
    // A point where the device's cache was emptied or a write bypassed it:
    // the states worth checking after a crash.
    bool durability_point() const { return flags & (kFlush | kFua); }
};

// "flush+fua", "mark", "discard", "write" (metadata is left out).
std::string flags_string(uint64_t flags);

// Walks a log device (or a copy of it in a file) entry by entry. Every field
// is checked against the format and the log's size before it is used; a
// malformed or truncated log throws std::runtime_error naming the entry.
class LogReader {
public:
    // `fd` stays owned by the caller.
    explicit LogReader(int fd);

    uint32_t sector_size() const { return sector_size_; }
    uint64_t entry_count() const { return entries_; }

    // The next entry, or nothing after the last.
    std::optional<LogEntry> next();
    // The entry's data (nr_sectors x sector size bytes) into `buf`.
    void read_data(const LogEntry& e, std::vector<uint8_t>& buf) const;

private:
    void pread_all(void* buf, uint64_t len, uint64_t off, const char* what) const;

    int fd_;
    uint64_t log_bytes_ = 0;
    uint32_t sector_size_ = 0;
    uint64_t entries_ = 0;
    uint64_t next_index_ = 0;
    uint64_t pos_ = 0;  // byte offset of the next entry's header
    std::vector<uint8_t> header_;
};

// Replays entries onto an image of the data device (a file or a block device
// of `image_bytes`): writes their data, zeroes discarded ranges (a hole where
// the image can have one); flushes and marks change nothing. Throws when an
// entry reaches past the image.
class Replayer {
public:
    Replayer(const LogReader& log, int image_fd, uint64_t image_bytes);
    void apply(const LogEntry& e);

private:
    const LogReader& log_;
    int image_fd_;
    uint64_t image_bytes_;
    std::vector<uint8_t> buf_;
};

// Copies the file `from` to `to` (truncated first), data extents only, so a
// mostly empty image costs what it holds.
void sparse_copy(int from, int to);

}  // namespace rbio::crash
