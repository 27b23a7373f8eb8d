// The GNU build-id of the running executable, read from its own program
// headers in memory: which tgtd binary loaded the module, without trusting a
// path on disk (the binary may have been replaced since it started).
#include <elf.h>
#include <link.h>

#include <cstdio>
#include <cstring>

#include "rbio/bs/tcp_transport.h"

namespace {

struct Found {
    char* hex;
    size_t len;
    bool ok = false;
};

int visit(dl_phdr_info* info, size_t, void* data) {
    auto* f = static_cast<Found*>(data);
    // The first object dl_iterate_phdr reports is the executable.
    for (int i = 0; i < info->dlpi_phnum; ++i) {
        const ElfW(Phdr)& ph = info->dlpi_phdr[i];
        if (ph.p_type != PT_NOTE) continue;
        auto* p = reinterpret_cast<const unsigned char*>(info->dlpi_addr + ph.p_vaddr);
        const unsigned char* end = p + ph.p_memsz;
        while (p + sizeof(ElfW(Nhdr)) <= end) {
            ElfW(Nhdr) n;
            std::memcpy(&n, p, sizeof n);
            const unsigned char* name = p + sizeof n;
            const unsigned char* desc = name + ((n.n_namesz + 3) & ~3u);
            const unsigned char* next = desc + ((n.n_descsz + 3) & ~3u);
            if (next > end) break;
            if (n.n_type == NT_GNU_BUILD_ID && n.n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0 &&
                f->len > 2 * n.n_descsz) {
                for (unsigned j = 0; j < n.n_descsz; ++j) std::snprintf(f->hex + 2 * j, 3, "%02x", desc[j]);
                f->ok = true;
                return 1;
            }
            p = next;
        }
    }
    return 1;  // only the executable
}

}  // namespace

extern "C" int rbio_tp_running_build_id(char* hex, size_t len) {
    Found f{hex, len};
    dl_iterate_phdr(visit, &f);
    return f.ok ? 0 : -1;
}
