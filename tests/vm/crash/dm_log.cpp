#include "dm_log.hpp"

#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace rbio::crash {
namespace {

constexpr size_t kSuperBytes = 8 + 8 + 8 + 4;
constexpr size_t kHeaderBytes = 4 * 8;
// Larger than any bio the block layer builds; bounds a corrupt length
// before it becomes an allocation.
constexpr uint64_t kMaxEntryBytes = 64u << 20;

uint64_t le64(const uint8_t* p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
    return v;
}
uint32_t le32(const uint8_t* p) {
    return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

std::runtime_error sys_error(const std::string& what, int err) {
    return std::runtime_error(what + ": " + std::strerror(err));
}

uint64_t size_of(int fd, const char* what) {
    struct stat st {};
    if (::fstat(fd, &st) < 0) throw sys_error(std::string("stat ") + what, errno);
    if (S_ISBLK(st.st_mode)) {
        uint64_t n = 0;
        if (::ioctl(fd, BLKGETSIZE64, &n) < 0) throw sys_error(std::string("BLKGETSIZE64 ") + what, errno);
        return n;
    }
    if (!S_ISREG(st.st_mode))
        throw std::runtime_error(std::string(what) + " is neither a file nor a block device");
    return uint64_t(st.st_size);
}

void pwrite_all(int fd, const uint8_t* p, uint64_t len, uint64_t off) {
    while (len) {
        ssize_t n = ::pwrite(fd, p, len, off_t(off));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) throw sys_error("writing the image at byte " + std::to_string(off), n < 0 ? errno : EIO);
        p += n;
        len -= uint64_t(n);
        off += uint64_t(n);
    }
}

}  // namespace

std::string flags_string(uint64_t flags) {
    std::string s;
    auto add = [&](uint64_t bit, const char* name) {
        if (!(flags & bit)) return;
        if (!s.empty()) s += '+';
        s += name;
    };
    add(kFlush, "flush");
    add(kFua, "fua");
    add(kDiscard, "discard");
    add(kMark, "mark");
    return s.empty() ? "write" : s;
}

LogReader::LogReader(int fd) : fd_(fd) {
    log_bytes_ = size_of(fd, "the log");
    uint8_t super[kSuperBytes];
    if (log_bytes_ < 512) throw std::runtime_error("the log is too small for its super block");
    pread_all(super, sizeof super, 0, "the super block");
    if (le64(super) != kLogMagic)
        throw std::runtime_error("not a dm-log-writes log (magic " + std::to_string(le64(super)) + ")");
    if (le64(super + 8) != kLogVersion)
        throw std::runtime_error("dm-log-writes log version " + std::to_string(le64(super + 8)) +
                                 " (only 1 is known)");
    entries_ = le64(super + 16);
    sector_size_ = le32(super + 24);
    if (sector_size_ < 512 || sector_size_ > 4096 || (sector_size_ & (sector_size_ - 1)))
        throw std::runtime_error("log sector size " + std::to_string(sector_size_) +
                                 " is not a power of two from 512 to 4096");
    if (entries_ > log_bytes_ / sector_size_)
        throw std::runtime_error("the super block claims " + std::to_string(entries_) +
                                 " entries, more than the log has sectors");
    header_.resize(sector_size_);
    pos_ = sector_size_;
}

void LogReader::pread_all(void* buf, uint64_t len, uint64_t off, const char* what) const {
    if (off > log_bytes_ || len > log_bytes_ - off)
        throw std::runtime_error(std::string(what) + " at byte " + std::to_string(off) +
                                 " lies past the end of the log (" + std::to_string(log_bytes_) + " bytes)");
    auto* p = static_cast<uint8_t*>(buf);
    while (len) {
        ssize_t n = ::pread(fd_, p, len, off_t(off));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw sys_error(std::string("reading ") + what, errno);
        if (n == 0) throw std::runtime_error(std::string("the log ends inside ") + what);
        p += n;
        len -= uint64_t(n);
        off += uint64_t(n);
    }
}

std::optional<LogEntry> LogReader::next() {
    if (next_index_ >= entries_) return std::nullopt;
    LogEntry e;
    e.index = next_index_;
    const std::string what = "entry " + std::to_string(e.index);
    pread_all(header_.data(), sector_size_, pos_, what.c_str());
    e.sector = le64(&header_[0]);
    e.nr_sectors = le64(&header_[8]);
    e.flags = le64(&header_[16]);
    const uint64_t data_len = le64(&header_[24]);
    if (e.flags & ~kKnownFlags) throw std::runtime_error(what + ": unknown flags " + std::to_string(e.flags));
    if (e.flags & kMark) {
        if (data_len >= sector_size_ - kHeaderBytes || e.nr_sectors)
            throw std::runtime_error(what + ": a mark of " + std::to_string(data_len) + " bytes and " +
                                     std::to_string(e.nr_sectors) + " sectors");
        e.mark.assign(reinterpret_cast<const char*>(&header_[kHeaderBytes]), data_len);
    } else if (data_len) {
        throw std::runtime_error(what + ": private data on an entry that is not a mark");
    }
    if (e.nr_sectors > kMaxEntryBytes / sector_size_)
        throw std::runtime_error(what + ": " + std::to_string(e.nr_sectors) + " sectors");
    pos_ += sector_size_;
    e.data_offset = pos_;
    if (e.has_data()) {
        const uint64_t bytes = e.nr_sectors * sector_size_;
        if (pos_ > log_bytes_ || bytes > log_bytes_ - pos_)
            throw std::runtime_error(what + ": its data runs past the end of the log");
        pos_ += bytes;
    }
    ++next_index_;
    return e;
}

void LogReader::read_data(const LogEntry& e, std::vector<uint8_t>& buf) const {
    buf.resize(e.has_data() ? e.nr_sectors * sector_size_ : 0);
    if (!buf.empty()) pread_all(buf.data(), buf.size(), e.data_offset, "entry data");
}

Replayer::Replayer(const LogReader& log, int image_fd, uint64_t image_bytes)
    : log_(log), image_fd_(image_fd), image_bytes_(image_bytes) {}

void Replayer::apply(const LogEntry& e) {
    if (!e.nr_sectors || (e.flags & kMark)) return;  // a flush or a mark: no data
    const uint64_t ss = log_.sector_size();
    if (e.sector > image_bytes_ / ss || e.nr_sectors > image_bytes_ / ss - e.sector)
        throw std::runtime_error("entry " + std::to_string(e.index) + " writes sectors " +
                                 std::to_string(e.sector) + "+" + std::to_string(e.nr_sectors) +
                                 ", past the image's " + std::to_string(image_bytes_ / ss));
    const uint64_t off = e.sector * ss, len = e.nr_sectors * ss;
    if (e.flags & kDiscard) {
        // The data device reads zeros after a discard (loop on tmpfs punches
        // a hole); so does the image.
        if (::fallocate(image_fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off_t(off), off_t(len)) == 0)
            return;
        if (errno != EOPNOTSUPP) throw sys_error("punching the image", errno);
        buf_.assign(len, 0);
    } else {
        log_.read_data(e, buf_);
    }
    pwrite_all(image_fd_, buf_.data(), len, off);
}

void sparse_copy(int from, int to) {
    const uint64_t size = size_of(from, "the image");
    if (::ftruncate(to, 0) < 0 || ::ftruncate(to, off_t(size)) < 0)
        throw sys_error("truncating the copy", errno);
    off_t pos = 0;
    for (;;) {
        off_t data = ::lseek(from, pos, SEEK_DATA);
        if (data < 0 && errno == ENXIO) return;  // nothing but holes left
        if (data < 0) throw sys_error("SEEK_DATA", errno);
        off_t hole = ::lseek(from, data, SEEK_HOLE);
        if (hole < 0) throw sys_error("SEEK_HOLE", errno);
        loff_t in = data, out = data;
        size_t left = size_t(hole - data);
        while (left) {
            ssize_t n = ::copy_file_range(from, &in, to, &out, left, 0);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) throw sys_error("copying the image", n < 0 ? errno : EIO);
            left -= size_t(n);
        }
        pos = hole;
    }
}

}  // namespace rbio::crash
