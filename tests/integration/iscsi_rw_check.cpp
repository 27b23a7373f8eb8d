// iscsi_rw_check: writes known data to an iSCSI LUN through libiscsi at many
// sizes and alignments with many commands in flight, reads it all back and
// compares byte for byte against a shadow copy. Exits 0 only if every byte
// matches; prints the first mismatches otherwise.
//
//   iscsi_rw_check URL [--inflight N] [--rounds N] [--seed N] [--max-blocks N]
//   iscsi_rw_check URL --scan   read every block; report the first failure
//   iscsi_rw_check URL --fill   write every block; report the first failure
//
// URL is libiscsi's iscsi://host:port/target-iqn/lun.
#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>
#include <poll.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

struct Io {
    Io(uint64_t l, uint32_t b, bool w, std::vector<unsigned char> d)
        : lba(l), blocks(b), write(w), data(std::move(d)) {}
    uint64_t lba;
    uint32_t blocks;
    bool write;
    std::vector<unsigned char> data;
    bool done = false;
    int status = -1;
    std::string error;
};

struct Session {
    iscsi_context* ctx = nullptr;
    iscsi_url* url = nullptr;
    ~Session() {
        if (url) iscsi_destroy_url(url);
        if (ctx) {
            iscsi_logout_sync(ctx);
            iscsi_destroy_context(ctx);
        }
    }
};

[[noreturn]] void die(const std::string& msg) {
    std::fprintf(stderr, "iscsi_rw_check: error: %s\n", msg.c_str());
    std::exit(2);
}

void on_done(iscsi_context* ctx, int status, void* command_data, void* priv) {
    auto* io = static_cast<Io*>(priv);
    auto* task = static_cast<scsi_task*>(command_data);
    io->done = true;
    io->status = status;
    if (status == SCSI_STATUS_CHECK_CONDITION && task) {
        char codes[64];
        std::snprintf(codes, sizeof codes, "sense key 0x%02x ASC/ASCQ 0x%04x", unsigned(task->sense.key),
                      unsigned(task->sense.ascq));
        // libiscsi names only the sense codes it knows; the others are NULL.
        const char* key = scsi_sense_key_str(task->sense.key);
        const char* what = scsi_sense_ascq_str(task->sense.ascq);
        io->error = std::string("CHECK CONDITION, ") + codes + " (" + (key ? key : "?") + ", " +
                    (what ? what : "?") + ")";
    } else if (status != SCSI_STATUS_GOOD) {
        io->error = iscsi_get_error(ctx);
    } else if (!io->write) {
        size_t want = io->data.size();
        if (!task || size_t(task->datain.size) != want) {
            io->status = -1;
            io->error = "short read: got " + std::to_string(task ? task->datain.size : 0) + " of " +
                        std::to_string(want) + " bytes";
        } else {
            std::memcpy(io->data.data(), task->datain.data, want);
        }
    }
    if (task) scsi_free_scsi_task(task);
}

// Runs ios with at most `inflight` outstanding; returns failures. With
// `announce`, prints (and flushes) "<announce>: I/O in flight" once the first
// command has completed while others are still outstanding, so a caller can
// act while the target is busy.
int run(iscsi_context* ctx, int lun, uint32_t bs, std::vector<Io>& ios, size_t inflight,
        const char* announce = nullptr) {
    size_t next = 0, outstanding = 0, finished = 0;
    bool announced = false;
    while (finished < ios.size()) {
        if (announce && !announced && finished > 0 && outstanding > 0) {
            std::printf("%s: I/O in flight\n", announce);
            std::fflush(stdout);
            announced = true;
        }
        while (next < ios.size() && outstanding < inflight) {
            Io& io = ios[next++];
            scsi_task* t;
            if (io.write)
                t = iscsi_write16_task(ctx, lun, io.lba, io.data.data(), uint32_t(io.data.size()), int(bs), 0,
                                       0, 0, 0, 0, on_done, &io);
            else
                t = iscsi_read16_task(ctx, lun, io.lba, uint32_t(io.data.size()), int(bs), 0, 0, 0, 0, 0,
                                      on_done, &io);
            if (!t) die(std::string("cannot queue command: ") + iscsi_get_error(ctx));
            ++outstanding;
        }
        pollfd p{iscsi_get_fd(ctx), short(iscsi_which_events(ctx)), 0};
        int rc = poll(&p, 1, 30000);
        if (rc == 0) die("no progress for 30 s (" + std::to_string(outstanding) + " commands outstanding)");
        if (rc < 0) die(std::string("poll: ") + std::strerror(errno));
        if (iscsi_service(ctx, p.revents) < 0) die(std::string("iscsi_service: ") + iscsi_get_error(ctx));
        size_t f = 0;
        for (size_t i = 0; i < next; ++i) f += ios[i].done;
        outstanding -= (f - finished);
        finished = f;
    }
    int failures = 0;
    for (auto& io : ios)
        if (io.status != SCSI_STATUS_GOOD) {
            if (failures++ < 5)
                std::fprintf(stderr, "%s of %u blocks at LBA %llu failed: %s\n", io.write ? "write" : "read",
                             io.blocks, (unsigned long long)io.lba, io.error.c_str());
        }
    return failures;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) die("usage: iscsi_rw_check URL [--inflight N] [--rounds N] [--seed N] [--max-blocks N]");
    std::string url_s = argv[1];
    std::string mode =
        argc > 2 && (std::string(argv[2]) == "--scan" || std::string(argv[2]) == "--fill") ? argv[2] : "";
    size_t inflight = 32;
    unsigned rounds = 4, seed = 1;
    uint32_t max_blocks = 2048;
    for (int i = mode.empty() ? 2 : 3; i + 1 < argc; i += 2) {
        std::string k = argv[i];
        unsigned long v = std::strtoul(argv[i + 1], nullptr, 10);
        if (k == "--inflight") inflight = std::max(1ul, v);
        else if (k == "--rounds") rounds = unsigned(v);
        else if (k == "--seed") seed = unsigned(v);
        else if (k == "--max-blocks") max_blocks = uint32_t(std::max(1ul, v));
        else die("unknown option " + k);
    }

    Session s;
    s.ctx = iscsi_create_context("iqn.2026-11.io.rbio:rw-check");
    if (!s.ctx) die("cannot create an iSCSI context");
    s.url = iscsi_parse_full_url(s.ctx, url_s.c_str());
    if (!s.url) die("bad URL " + url_s + ": " + iscsi_get_error(s.ctx));
    iscsi_set_targetname(s.ctx, s.url->target);
    iscsi_set_session_type(s.ctx, ISCSI_SESSION_NORMAL);
    iscsi_set_header_digest(s.ctx, ISCSI_HEADER_DIGEST_NONE_CRC32C);
    if (iscsi_full_connect_sync(s.ctx, s.url->portal, s.url->lun) != 0)
        die("login to " + url_s + " failed: " + iscsi_get_error(s.ctx));
    const int lun = s.url->lun;

    scsi_task* cap = iscsi_readcapacity16_sync(s.ctx, lun);
    if (!cap || cap->status != SCSI_STATUS_GOOD)
        die(std::string("READ CAPACITY(16) failed: ") + iscsi_get_error(s.ctx));
    auto* rc16 = static_cast<scsi_readcapacity16*>(scsi_datain_unmarshall(cap));
    if (!rc16) die("cannot decode READ CAPACITY(16)");
    const uint32_t bs = rc16->block_length;
    const uint64_t nblocks = rc16->returned_lba + 1;
    scsi_free_scsi_task(cap);
    if (uint64_t(nblocks) * bs > (1ull << 31))
        die("LUN larger than 2 GiB: the shadow copy would not fit; use a smaller LUN");
    std::printf("LUN: %llu blocks of %u bytes, %zu in flight, %u rounds\n", (unsigned long long)nblocks, bs,
                inflight, rounds);

    if (!mode.empty()) {
        // Whole-LUN pass in 1 MiB commands; the caller checks the message
        // (sense key and ASC) of the first failure.
        std::vector<Io> ios;
        const uint32_t chunk = std::max<uint32_t>(1, (1u << 20) / bs);
        for (uint64_t lba = 0; lba < nblocks; lba += chunk) {
            uint32_t n = uint32_t(std::min<uint64_t>(chunk, nblocks - lba));
            ios.emplace_back(lba, n, mode == "--fill", std::vector<unsigned char>(size_t(n) * bs, 0xa5));
        }
        int f = run(s.ctx, lun, bs, ios, inflight, mode.c_str() + 2);
        std::printf("%s: %zu commands, %d failed\n", mode.c_str() + 2, ios.size(), f);
        return f ? 1 : 0;
    }

    // What the LUN must contain: it starts as whatever is there now.
    std::vector<unsigned char> shadow(nblocks * bs);
    {
        std::vector<Io> ios;
        const uint32_t chunk = 2048;
        for (uint64_t lba = 0; lba < nblocks; lba += chunk) {
            uint32_t n = uint32_t(std::min<uint64_t>(chunk, nblocks - lba));
            ios.emplace_back(lba, n, false, std::vector<unsigned char>(size_t(n) * bs));
        }
        if (run(s.ctx, lun, bs, ios, inflight)) die("reading the initial contents failed");
        for (auto& io : ios) std::memcpy(&shadow[io.lba * bs], io.data.data(), io.data.size());
    }

    std::mt19937_64 rng(seed);
    const uint32_t sizes[] = {1, 2, 3, 7, 8, 9, 15, 16, 17, 64, 127, 128, 255, 256, 1024, 2048};
    uint64_t bytes_checked = 0;
    int failures = 0;
    for (unsigned r = 0; r < rounds; ++r) {
        // Writes of one round never overlap (their order on the wire is not
        // their order on the media), so the shadow is exact.
        std::vector<Io> writes;
        std::vector<char> taken(nblocks, 0);
        for (int k = 0; k < 400; ++k) {
            uint32_t n = std::min<uint32_t>(sizes[rng() % std::size(sizes)], max_blocks);
            uint64_t lba;
            switch (k % 4) {
                case 0: lba = rng() % (nblocks - n + 1); break;                    // anywhere
                case 1: lba = (rng() % (nblocks / 8 - n / 8 - 1)) * 8; break;      // 4 KiB aligned
                case 2: lba = (rng() % (nblocks / 8 - n / 8 - 1)) * 8 + 1; break;  // just off
                default: lba = nblocks - n - (rng() % 4); break;                   // near the end
            }
            if (lba + n > nblocks) continue;
            if (std::any_of(taken.begin() + long(lba), taken.begin() + long(lba + n),
                            [](char c) { return c; }))
                continue;
            std::fill(taken.begin() + long(lba), taken.begin() + long(lba + n), 1);
            Io io(lba, n, true, std::vector<unsigned char>(size_t(n) * bs));
            for (auto& b : io.data) b = (unsigned char)rng();
            std::memcpy(&shadow[lba * bs], io.data.data(), io.data.size());
            writes.push_back(std::move(io));
        }
        // Also runs of adjacent writes, the case a coalescing target merges.
        uint64_t base = (rng() % (nblocks / 2)) & ~uint64_t(7);
        for (uint32_t j = 0; j < 32 && base + (j + 1) * 8 <= nblocks; ++j) {
            uint64_t lba = base + j * 8;
            if (std::any_of(taken.begin() + long(lba), taken.begin() + long(lba + 8),
                            [](char c) { return c; }))
                continue;
            std::fill(taken.begin() + long(lba), taken.begin() + long(lba + 8), 1);
            Io io(lba, 8, true, std::vector<unsigned char>(8 * bs));
            for (auto& b : io.data) b = (unsigned char)rng();
            std::memcpy(&shadow[lba * bs], io.data.data(), io.data.size());
            writes.push_back(std::move(io));
        }
        failures += run(s.ctx, lun, bs, writes, inflight);

        // Read back every write, plus random ranges that cross written and
        // unwritten blocks.
        std::vector<Io> reads;
        reads.reserve(writes.size());
        for (auto& w : writes)
            reads.emplace_back(w.lba, w.blocks, false, std::vector<unsigned char>(w.data.size()));
        for (int k = 0; k < 200; ++k) {
            uint32_t n = std::min<uint32_t>(sizes[rng() % std::size(sizes)], max_blocks);
            uint64_t lba = rng() % (nblocks - n + 1);
            reads.emplace_back(lba, n, false, std::vector<unsigned char>(size_t(n) * bs));
        }
        failures += run(s.ctx, lun, bs, reads, inflight);
        for (auto& rd : reads) {
            if (rd.status != SCSI_STATUS_GOOD) continue;
            bytes_checked += rd.data.size();
            if (std::memcmp(rd.data.data(), &shadow[rd.lba * bs], rd.data.size()) != 0) {
                size_t i = 0;
                while (rd.data[i] == shadow[rd.lba * bs + i]) ++i;
                if (failures++ < 5)
                    std::fprintf(
                        stderr, "mismatch: read of %u blocks at LBA %llu differs at byte %zu (LBA %llu)\n",
                        rd.blocks, (unsigned long long)rd.lba, i, (unsigned long long)rd.lba + i / bs);
            }
        }
        std::printf("round %u: %zu writes, %zu reads, %d failures so far\n", r + 1, writes.size(),
                    reads.size(), failures);
    }
    std::printf("%llu bytes compared, %d failures\n", (unsigned long long)bytes_checked, failures);
    return failures ? 1 : 0;
}
