// libFuzzer target for the backing store's command decode and execution:
// one SCSI command per input, as tgt's glue hands it over (CDB, buffers,
// offset, sizes), against a real 1 MiB file through the engine's C API --
// the same calls tgtd makes. Whatever the CDB and the data-out buffer hold
// (UNMAP descriptor lists, WRITE SAME, COMPARE AND WRITE halves, VERIFY
// with BYTCHK, ...), the command must complete exactly once with a status,
// and nothing may read or write outside the buffers it was given (ASan).
//
// Input: 16 bytes of CDB, 1 byte CDB length, 2 bytes each of in/out buffer
// length (capped at 64 KiB), 4 bytes of the byte offset's block, 1 byte of
// flags (write cache, thin), then the data-out bytes (repeated to fill).
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "rbio/bs/c_api.h"
#include "rbio/bs/scsi.hpp"

namespace {

constexpr uint64_t kLuBytes = 1u << 20;
constexpr uint32_t kMaxBuffer = 64 * 1024;

struct Harness {
    rbio_bs_lu* lu = nullptr;
    int completions = 0;
    std::string path;

    static void complete(void* ctx, void*, const rbio_bs_result* res) {
        auto* h = static_cast<Harness*>(ctx);
        ++h->completions;
        if (res->status != 0x00 && res->status != 0x02) {
            std::fprintf(stderr, "status 0x%02x is neither GOOD nor CHECK CONDITION\n", res->status);
            std::abort();
        }
    }
    static void request_flush(void*) {}
    static void log(void*, int, const char*) {}

    Harness() {
        char tmpl[] = "/tmp/rbio-cdb-fuzz-XXXXXX";
        int fd = ::mkstemp(tmpl);
        if (fd < 0 || ::ftruncate(fd, kLuBytes) != 0) std::abort();
        ::close(fd);
        path = tmpl;
        rbio_bs_hooks hooks{this, complete, request_flush, log, nullptr, nullptr, nullptr};
        char err[256];
        // Inline I/O: each command finishes within flush(), so one input is
        // one command, whatever its kind.
        if (rbio_bs_lu_create("inline_io=on:queue_depth=8", &hooks, &lu, err, sizeof err) != 0) {
            std::fprintf(stderr, "engine: %s\n", err);
            std::abort();
        }
        int lfd = -1, ro = 0;
        uint64_t size = 0;
        uint32_t blksize = 0;
        if (rbio_bs_lu_open(lu, path.c_str(), 0, &lfd, &size, &blksize, &ro, err, sizeof err) != 0) {
            std::fprintf(stderr, "open: %s\n", err);
            std::abort();
        }
    }
    ~Harness() {
        rbio_bs_lu_close(lu);
        rbio_bs_lu_destroy(lu);
        ::unlink(path.c_str());
    }

    // Runs the engine until the command has completed (io_uring steps such
    // as flushes and hole punches complete through the eventfd).
    void wait_for(int want) {
        rbio_bs_flush(lu);
        for (int spins = 0; completions < want; ++spins) {
            if (spins > 1000) {
                std::fprintf(stderr, "the command never completed\n");
                std::abort();
            }
            pollfd p{rbio_bs_lu_event_fd(lu), POLLIN, 0};
            ::poll(&p, 1, 10);
            rbio_bs_on_event(lu);
            rbio_bs_flush(lu);
        }
    }
};

uint32_t get16(const uint8_t* p) { return uint32_t(p[0]) << 8 | p[1]; }
uint32_t get32(const uint8_t* p) { return get16(p) << 16 | get16(p + 2); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static Harness h;
    constexpr size_t kHeader = 16 + 1 + 2 + 2 + 4 + 1;
    if (size < kHeader) return 0;
    uint8_t cdb[16];
    std::memcpy(cdb, data, 16);
    const uint32_t cdb_len = 6 + data[16] % 11;  // 6..16
    const uint32_t in_len = get16(data + 17) % (kMaxBuffer + 1);
    const uint32_t out_len = get16(data + 19) % (kMaxBuffer + 1);
    // tgt's SBC code sets the offset from the LBA and checks the range
    // before the store sees the command; here any block of the LU.
    const uint64_t offset = (uint64_t(get32(data + 21)) % (kLuBytes / 512)) * 512;
    const uint8_t flags = data[25];
    const uint8_t* payload = data + kHeader;
    const size_t payload_len = size - kHeader;

    // Exact-size heap buffers, so ASan sees any access past their ends.
    std::vector<uint8_t> in(in_len), out(out_len);
    for (size_t i = 0; i < out.size(); ++i) out[i] = payload_len ? payload[i % payload_len] : uint8_t(i);

    rbio_bs_cmd c{};
    c.cmd = &c;
    c.cdb = cdb;
    c.cdb_len = cdb_len;
    c.offset = offset;
    // As tgt's SBC code: a READ/WRITE/WRITE SAME's length from its CDB,
    // in bytes in 32 bits (wrapping); the buffers' for the rest.
    const uint32_t blocks = rbio::bs::scsi::rw_blocks(cdb);
    c.transfer = blocks ? uint32_t(uint64_t(blocks) << 9) : (in_len ? in_len : out_len);
    c.in_buf = in_len ? in.data() : nullptr;
    c.in_len = in_len;
    c.out_buf = out_len ? out.data() : nullptr;
    c.out_len = out_len;
    c.lu_size = kLuBytes;
    c.block_shift = 9;
    c.write_cache = flags & 1;
    c.thin = (flags >> 1) & 1;

    const int before = h.completions;
    if (rbio_bs_submit(h.lu, &c) != 0) return 0;  // refused: tgt fails it
    h.wait_for(before + 1);
    if (h.completions != before + 1) {
        std::fprintf(stderr, "one command completed %d times\n", h.completions - before);
        std::abort();
    }
    return 0;
}
