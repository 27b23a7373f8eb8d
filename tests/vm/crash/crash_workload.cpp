// The file-system side of the crash-consistency test
// (tests/vm/crash-durability.sh), run on an ext4 file system of the kernel
// initiator's iSCSI disk while dm-log-writes records what reaches the
// target's device:
//
//   crash_workload write DIR --steps N --seed S --dm NAME
//       N steps; step i writes file f<i> (its size and bytes follow from S
//       and i), fsyncs it and DIR, appends record i (4000 bytes) to
//       DIR/journal.log and fdatasyncs it, makes and removes files it never
//       syncs (so the journal carries unsynced changes too), and then puts
//       the mark "step:<i>" into the log of the dm-log-writes device NAME:
//       everything of steps 0..i returned from fsync before that mark.
//   crash_workload check DIR --upto I --seed S [--same NAME=COPY]...
//       checks f0..f<I> byte for byte and the first I+1 records of
//       journal.log (I = -1 checks nothing), and that DIR/NAME has exactly
//       the bytes of the file COPY (a file saved once it was synced, e.g.
//       fio's); one line names the first difference, exit 1.
//   crash_workload mark NAME TEXT
//       puts the mark TEXT (no blanks) into NAME's log.
//
// Marks go through the device-mapper ioctl (DM_TARGET_MSG, as `dmsetup
// message NAME 0 mark TEXT` sends them), which costs no process start.
#include <fcntl.h>
#include <linux/dm-ioctl.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "rbio/common/unique_fd.hpp"

namespace {

using rbio::UniqueFd;

constexpr uint64_t kRecordBytes = 4000;  // not a block multiple: records straddle blocks
constexpr uint64_t kNoiseBytes = 20000;
// Odd and even sizes, below, at and across block and extent boundaries.
constexpr uint64_t kFileSizes[] = {1536, 4096, 10000, 65536, 131072 + 777, 300000};

std::runtime_error sys_error(const std::string& what) {
    return std::runtime_error(what + ": " + std::strerror(errno));
}

// The bytes of stream `stream` under `seed` (splitmix64).
std::vector<uint8_t> pattern(uint64_t seed, uint64_t stream, uint64_t len) {
    std::vector<uint8_t> v(len);
    uint64_t x = seed * 0x9e3779b97f4a7c15ULL + stream;
    for (uint64_t i = 0; i < len; i += 8) {
        uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        z ^= z >> 31;
        std::memcpy(&v[i], &z, std::min<uint64_t>(8, len - i));
    }
    return v;
}

uint64_t file_size(uint64_t i) { return kFileSizes[i % std::size(kFileSizes)]; }
std::vector<uint8_t> file_bytes(uint64_t seed, uint64_t i) { return pattern(seed, i, file_size(i)); }
std::vector<uint8_t> record_bytes(uint64_t seed, uint64_t i) {
    return pattern(seed, 1'000'000 + i, kRecordBytes);
}

void write_all(int fd, const std::vector<uint8_t>& b, const std::string& what) {
    size_t done = 0;
    while (done < b.size()) {
        ssize_t n = ::write(fd, b.data() + done, b.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) throw sys_error("writing " + what);
        done += size_t(n);
    }
}

// Reads up to `len` bytes; fewer only at the end of the file.
std::vector<uint8_t> read_up_to(int fd, uint64_t len, const std::string& what) {
    std::vector<uint8_t> b(len);
    size_t done = 0;
    while (done < len) {
        ssize_t n = ::read(fd, b.data() + done, len - done);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw sys_error("reading " + what);
        if (n == 0) break;
        done += size_t(n);
    }
    b.resize(done);
    return b;
}

void dm_mark(const std::string& name, const std::string& text) {
    if (name.empty() || name.size() >= DM_NAME_LEN)
        throw std::runtime_error("bad device-mapper name '" + name + "'");
    if (text.empty() || text.find_first_of(" \t\n") != std::string::npos)
        throw std::runtime_error("a mark is one word: '" + text + "'");
    const std::string msg = "mark " + text;
    // dm_ioctl, then dm_target_msg with the message; 8-byte aligned.
    std::vector<uint64_t> buf((sizeof(dm_ioctl) + sizeof(dm_target_msg) + msg.size() + 1 + 7) / 8 + 512);
    auto* io = reinterpret_cast<dm_ioctl*>(buf.data());
    io->version[0] = DM_VERSION_MAJOR;
    io->data_size = uint32_t(buf.size() * 8);
    io->data_start = sizeof(dm_ioctl);
    std::memcpy(io->name, name.c_str(), name.size() + 1);
    auto* m = reinterpret_cast<dm_target_msg*>(reinterpret_cast<char*>(buf.data()) + sizeof(dm_ioctl));
    m->sector = 0;
    std::memcpy(m->message, msg.c_str(), msg.size() + 1);
    UniqueFd ctl(::open("/dev/mapper/control", O_RDWR | O_CLOEXEC));
    if (!ctl) throw sys_error("open /dev/mapper/control");
    if (::ioctl(ctl.get(), DM_TARGET_MSG, io) < 0) throw sys_error("mark " + text + " on " + name);
}

void fsync_or_throw(int fd, const std::string& what) {
    if (::fsync(fd) < 0) throw sys_error("fsync " + what);
}

void write_steps(const std::string& dir, uint64_t steps, uint64_t seed, const std::string& dm) {
    UniqueFd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dfd) throw sys_error("open " + dir);
    UniqueFd journal(
        ::openat(dfd.get(), "journal.log", O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644));
    if (!journal) throw sys_error("create journal.log");
    for (uint64_t i = 0; i < steps; ++i) {
        const std::string f = "f" + std::to_string(i);
        {
            UniqueFd fd(::openat(dfd.get(), f.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
            if (!fd) throw sys_error("create " + f);
            write_all(fd.get(), file_bytes(seed, i), f);
            fsync_or_throw(fd.get(), f);
        }
        fsync_or_throw(dfd.get(), dir);  // the new name, as POSIX asks
        write_all(journal.get(), record_bytes(seed, i), "journal.log");
        if (::fdatasync(journal.get()) < 0) throw sys_error("fdatasync journal.log");

        // Changes never synced: a new file, a rename, a removal, a directory.
        const std::string noise = "noise" + std::to_string(i);
        {
            UniqueFd fd(::openat(dfd.get(), noise.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
            if (!fd) throw sys_error("create " + noise);
            write_all(fd.get(), pattern(seed, 2'000'000 + i, kNoiseBytes), noise);
        }
        if (i >= 1) {
            const std::string prev = "noise" + std::to_string(i - 1), moved = "moved" + std::to_string(i - 1);
            if (::renameat(dfd.get(), prev.c_str(), dfd.get(), moved.c_str()) < 0)
                throw sys_error("rename " + prev);
        }
        if (i >= 3) {
            const std::string old = "moved" + std::to_string(i - 3);
            if (::unlinkat(dfd.get(), old.c_str(), 0) < 0) throw sys_error("unlink " + old);
        }
        if (i % 4 == 0) {
            const std::string d = "dir" + std::to_string(i);
            if (::mkdirat(dfd.get(), d.c_str(), 0755) < 0) throw sys_error("mkdir " + d);
        }
        dm_mark(dm, "step:" + std::to_string(i));
    }
}

// Prints where the bytes of `what` differ from `want` and returns 1, or 0.
int compare(const std::string& what, const std::vector<uint8_t>& got, const std::vector<uint8_t>& want) {
    if (got == want) return 0;
    size_t at = 0;
    while (at < got.size() && at < want.size() && got[at] == want[at]) ++at;
    std::printf("%s: %zu bytes, expected %zu; first difference at byte %zu\n", what.c_str(), got.size(),
                want.size(), at);
    return 1;
}

std::vector<uint8_t> whole_file(const std::string& path, int& err) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) {
        err = errno;
        return {};
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) < 0) throw sys_error("stat " + path);
    err = 0;
    return read_up_to(fd.get(), uint64_t(st.st_size) + 1, path);
}

int check_same(const std::string& dir, const std::string& spec) {
    const size_t eq = spec.find('=');
    const std::string name = spec.substr(0, eq), copy = spec.substr(eq + 1);
    int err = 0;
    const auto want = whole_file(copy, err);
    if (err) throw std::runtime_error("the saved copy " + copy + ": " + std::strerror(err));
    const auto got = whole_file(dir + "/" + name, err);
    if (err) {
        std::printf("%s: missing (%s)\n", name.c_str(), std::strerror(err));
        return 1;
    }
    return compare(name, got, want);
}

int check_steps(const std::string& dir, int64_t upto, uint64_t seed) {
    for (int64_t i = 0; i <= upto; ++i) {
        const std::string f = dir + "/f" + std::to_string(i);
        UniqueFd fd(::open(f.c_str(), O_RDONLY | O_CLOEXEC));
        if (!fd) {
            std::printf("f%lld: missing (%s), fsynced at step %lld\n", (long long)i, std::strerror(errno),
                        (long long)i);
            return 1;
        }
        const auto want = file_bytes(seed, uint64_t(i));
        if (compare("f" + std::to_string(i), read_up_to(fd.get(), want.size() + 1, f), want)) return 1;
    }
    if (upto >= 0) {
        const std::string j = dir + "/journal.log";
        UniqueFd fd(::open(j.c_str(), O_RDONLY | O_CLOEXEC));
        if (!fd) {
            std::printf("journal.log: missing (%s)\n", std::strerror(errno));
            return 1;
        }
        for (int64_t i = 0; i <= upto; ++i) {
            const auto got = read_up_to(fd.get(), kRecordBytes, j);
            if (got != record_bytes(seed, uint64_t(i))) {
                std::printf("journal.log: record %lld (fdatasynced at step %lld) is %s\n", (long long)i,
                            (long long)i, got.size() < kRecordBytes ? "missing or short" : "wrong");
                return 1;
            }
        }
    }
    return 0;
}

[[noreturn]] void usage() {
    std::fprintf(stderr,
                 "usage: crash_workload write DIR --steps N --seed S --dm NAME\n"
                 "       crash_workload check DIR --upto I --seed S [--same NAME=COPY]...\n"
                 "       crash_workload mark NAME TEXT\n");
    std::exit(2);
}

int64_t number(std::string_view s, int64_t lo, int64_t hi) {
    char* end = nullptr;
    const std::string str(s);
    errno = 0;
    long long v = std::strtoll(str.c_str(), &end, 10);
    if (str.empty() || *end || errno || v < lo || v > hi) usage();
    return v;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        if (argc < 3) usage();
        const std::string_view cmd = argv[1];
        if (cmd == "mark" && argc == 4) {
            dm_mark(argv[2], argv[3]);
            return 0;
        }
        int64_t steps = -1, seed = -1, upto = -2;
        std::string dm;
        std::vector<std::string> same;
        for (int i = 3; i < argc; i += 2) {
            if (i + 1 >= argc) usage();
            const std::string_view k = argv[i];
            if (k == "--steps") steps = number(argv[i + 1], 1, 100000);
            else if (k == "--seed") seed = number(argv[i + 1], 0, INT64_MAX);
            else if (k == "--upto") upto = number(argv[i + 1], -1, 100000);
            else if (k == "--dm") dm = argv[i + 1];
            else if (k == "--same") {
                const std::string_view v = argv[i + 1];
                const size_t eq = v.find('=');
                if (eq == std::string_view::npos || eq == 0 || eq + 1 == v.size()) usage();
                same.emplace_back(v);
            } else usage();
        }
        if (cmd == "write" && steps > 0 && seed >= 0 && !dm.empty()) {
            write_steps(argv[2], uint64_t(steps), uint64_t(seed), dm);
            return 0;
        }
        if (cmd == "check" && upto >= -1 && seed >= 0) {
            if (int rc = check_steps(argv[2], upto, uint64_t(seed))) return rc;
            for (const auto& spec : same)
                if (int rc = check_same(argv[2], spec)) return rc;
            return 0;
        }
        usage();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "crash_workload: error: %s\n", e.what());
        return 1;
    }
}
