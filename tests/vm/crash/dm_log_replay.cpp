// Replays a dm-log-writes log (see dm_log.hpp) for the crash-consistency
// test, in steps, so that each step costs only the entries it adds:
//
//   dm_log_replay list LOG
//       one line per flush, FUA or mark entry: "INDEX FLAGS [MARK]"
//       (FLAGS e.g. flush, fua, flush+fua, mark), then
//       "end ENTRIES writes=W discards=D flushes=F fuas=U marks=M"
//   dm_log_replay replay LOG IMAGE --from A --to B [--copy OUT]
//       applies entries A..B (inclusive, 0-based) to IMAGE, the data
//       device's image so far (an existing file or block device; start from
//       a zeroed one of the data device's size and replay from 0), then,
//       with --copy, copies the image to OUT (data extents only), where a
//       check may mount it and replay the file system's journal without
//       touching IMAGE.
//
// Exit status 0, or 1 with one line on stderr naming what is wrong (a
// malformed log, an entry past the image, an I/O error).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "dm_log.hpp"
#include "rbio/common/unique_fd.hpp"

using namespace rbio::crash;

namespace {

[[noreturn]] void usage() {
    std::fprintf(stderr,
                 "usage: dm_log_replay list LOG\n"
                 "       dm_log_replay replay LOG IMAGE --from A --to B [--copy OUT]\n");
    std::exit(2);
}

rbio::UniqueFd open_or_throw(const std::string& path, int flags) {
    rbio::UniqueFd fd(::open(path.c_str(), flags | O_CLOEXEC, 0644));
    if (!fd) throw std::runtime_error("open " + path + ": " + std::strerror(errno));
    return fd;
}

uint64_t number(std::string_view s) {
    uint64_t v = 0;
    if (s.empty()) usage();
    for (char c : s) {
        if (c < '0' || c > '9' || v > (UINT64_MAX - 9) / 10) usage();
        v = v * 10 + uint64_t(c - '0');
    }
    return v;
}

int list(const std::string& log_path) {
    rbio::UniqueFd fd = open_or_throw(log_path, O_RDONLY);
    LogReader log(fd.get());
    uint64_t writes = 0, discards = 0, flushes = 0, fuas = 0, marks = 0;
    while (auto e = log.next()) {
        if (e->flags & kDiscard) ++discards;
        else if (e->has_data()) ++writes;
        if (e->flags & kFlush) ++flushes;
        if (e->flags & kFua) ++fuas;
        if (e->flags & kMark) ++marks;
        if (e->durability_point() || (e->flags & kMark))
            std::printf("%llu %s%s%s\n", (unsigned long long)e->index, flags_string(e->flags).c_str(),
                        e->mark.empty() ? "" : " ", e->mark.c_str());
    }
    std::printf("end %llu writes=%llu discards=%llu flushes=%llu fuas=%llu marks=%llu\n",
                (unsigned long long)log.entry_count(), (unsigned long long)writes,
                (unsigned long long)discards, (unsigned long long)flushes, (unsigned long long)fuas,
                (unsigned long long)marks);
    return 0;
}

int replay(const std::string& log_path, const std::string& image_path, uint64_t from, uint64_t to,
           const std::string& copy_path) {
    if (to < from)
        throw std::runtime_error("--to " + std::to_string(to) + " is before --from " + std::to_string(from));
    rbio::UniqueFd log_fd = open_or_throw(log_path, O_RDONLY);
    rbio::UniqueFd image = open_or_throw(image_path, O_RDWR);
    LogReader log(log_fd.get());
    if (to >= log.entry_count())
        throw std::runtime_error("--to " + std::to_string(to) + ": the log has " +
                                 std::to_string(log.entry_count()) + " entries");
    const off_t image_bytes = ::lseek(image.get(), 0, SEEK_END);
    if (image_bytes < 0) throw std::runtime_error(std::string("sizing the image: ") + std::strerror(errno));
    Replayer replayer(log, image.get(), uint64_t(image_bytes));
    while (auto e = log.next()) {
        if (e->index > to) break;
        if (e->index >= from) replayer.apply(*e);
    }
    if (!copy_path.empty()) {
        rbio::UniqueFd out = open_or_throw(copy_path, O_RDWR | O_CREAT);
        sparse_copy(image.get(), out.get());
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        if (argc == 3 && std::string_view(argv[1]) == "list") return list(argv[2]);
        if (argc >= 4 && std::string_view(argv[1]) == "replay") {
            std::optional<uint64_t> from, to;
            std::string copy;
            for (int i = 4; i < argc; i += 2) {
                if (i + 1 >= argc) usage();
                std::string_view k = argv[i];
                if (k == "--from") from = number(argv[i + 1]);
                else if (k == "--to") to = number(argv[i + 1]);
                else if (k == "--copy") copy = argv[i + 1];
                else usage();
            }
            if (!from || !to) usage();
            return replay(argv[2], argv[3], *from, *to, copy);
        }
        usage();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "dm_log_replay: error: %s\n", e.what());
        return 1;
    }
}
