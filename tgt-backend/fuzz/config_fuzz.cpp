// libFuzzer target for what an admin types: an LU's --bsopts, its backing
// path (a file or rbd:POOL/IMAGE) and /etc/rbio/tgtd.conf, which every
// part of the module reads (the transports, ALUA, the metrics) and whose
// `portals` list is matched against each portal tgtd opens. Whatever the
// text, a parser must refuse it with its own error type (rbio::bs::Error,
// ConfigError, or -1 and a message from the C API) or return values inside
// the documented ranges; accepted bsopts must come back the same through
// their canonical form (tgtd logs it, and an admin copies it from there).
//
// Input: byte 0 picks the parser, bytes 1-2 a port for the portal match,
// then the text.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "rbio/bs/alua_settings.hpp"
#include "rbio/bs/config_file.hpp"
#include "rbio/bs/error.hpp"
#include "rbio/bs/metrics_settings.hpp"
#include "rbio/bs/options.hpp"
#include "rbio/bs/rbd_image.hpp"
#include "rbio/bs/tcp_transport.h"

#include "rbio/common/fuzz_check.hpp"

namespace {

using namespace rbio::bs;

[[noreturn]] void fail(const char* what) {
    std::fprintf(stderr, "config_fuzz: %s: %s\n", what, std::strerror(errno));
    std::abort();
}

// The file $RBIO_CONFIG names, in a folder of its own, removed at exit.
struct ConfigFile {
    std::string dir, path;
    ConfigFile() {
        char tmpl[] = "/tmp/rbio-config-fuzz.XXXXXX";
        if (!::mkdtemp(tmpl)) fail("mkdtemp");
        dir = tmpl;
        path = dir + "/tgtd.conf";
    }
    ~ConfigFile() {
        ::unlink(path.c_str());
        ::rmdir(dir.c_str());
    }
    void write(std::string_view text) const {
        int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0 || ::write(fd, text.data(), text.size()) != ssize_t(text.size()) || ::close(fd) != 0)
            fail("writing the config file");
    }
};

const ConfigFile& config() {
    static const ConfigFile f;
    return f;
}

bool power_of_two(uint32_t v) { return v && !(v & (v - 1)); }

void bsopts(std::string_view text) {
    Options o;
    try {
        o = parse_options(text);
    } catch (const Error&) {
        return;
    }
    FUZZ_CHECK(power_of_two(o.queue_depth) && o.queue_depth <= 4096);
    FUZZ_CHECK(o.coalesce_max_kib >= 4 && o.coalesce_max_kib <= 16384);
    FUZZ_CHECK(o.inline_max_kib >= 1 && o.inline_max_kib <= 16384);
    FUZZ_CHECK(o.rbd.timeout_s >= 1 && o.rbd.timeout_s <= 300);
    FUZZ_CHECK(o.rbd.conf.empty() || o.rbd.conf.front() == '/');
    FUZZ_CHECK(o.rbd.keyring.empty() || o.rbd.keyring.front() == '/');
    FUZZ_CHECK(!o.rbd.id.empty() && o.rbd.id.size() <= 64);
    FUZZ_CHECK(!o.rbd.cluster.empty() && o.rbd.cluster.size() <= 64);
    const std::string canonical = to_string(o);
    Options again;
    try {
        again = parse_options(canonical);
    } catch (const Error& e) {
        std::fprintf(stderr, "config_fuzz: the canonical form '%s' is refused: %s\n", canonical.c_str(),
                     e.what());
        std::abort();
    }
    FUZZ_CHECK(to_string(again) == canonical);
    FUZZ_CHECK(again.rbd == o.rbd);
}

void lu_path(std::string_view text) {
    if (!is_rbd_path(text)) return;  // a file: open(2) judges it
    RbdLocation loc;
    try {
        loc = parse_rbd_path(text);
    } catch (const Error&) {
        return;
    }
    FUZZ_CHECK(!loc.pool.empty() && !loc.image.empty());
    // What the log and errors show must name the same image.
    const RbdLocation again = parse_rbd_path("rbd:" + loc.describe());
    FUZZ_CHECK(again.pool == loc.pool && again.ns == loc.ns && again.image == loc.image);
}

void config_file(std::string_view text, int port) {
    config().write(text);
    rbio_tp_settings s;
    char err[512];
    std::memset(err, 0x5a, sizeof err);
    if (rbio_tp_load_settings(&s, err, sizeof err) != 0) {
        FUZZ_CHECK(std::memchr(err, 0, sizeof err) != nullptr);
    } else {
        FUZZ_CHECK(s.direct_read_kib >= 4 && s.direct_read_kib <= 16384);
        FUZZ_CHECK(s.rx_buffer_kib >= 16 && s.rx_buffer_kib <= 65536);
        FUZZ_CHECK(s.max_queued_kib >= 64 && s.max_queued_kib <= 1048576);
        FUZZ_CHECK(s.rx_wait_pdus <= 256);
        FUZZ_CHECK(s.rx_wait_us >= 10 && s.rx_wait_us <= 100000);
        FUZZ_CHECK(s.iser_spin_us <= 1000 && s.iser_pass_completions <= 1048576 && s.iser_srq_depth <= 16384);
        FUZZ_CHECK(s.iser_receive_kib >= 16 && s.iser_receive_kib <= 1024 &&
                   (s.iser_receive_kib & (s.iser_receive_kib - 1)) == 0);
        FUZZ_CHECK(std::memchr(s.portals, 0, sizeof s.portals) != nullptr);
        FUZZ_CHECK(std::memchr(s.stats_file, 0, sizeof s.stats_file) != nullptr);
        const char* addrs[] = {"127.0.0.1", "::1", "10.0.0.1", "fe80::1%eth0", ""};
        for (const char* a : addrs) {
            int r = rbio_tp_portal_selected(&s, a, port);
            FUZZ_CHECK(r == 0 || r == 1);
        }
        char line[64];  // cut short on purpose: must stay terminated
        rbio_tp_describe_settings(&s, line, sizeof line);
        FUZZ_CHECK(std::memchr(line, 0, sizeof line) != nullptr);
    }
    try {
        const alua::Settings a = alua::load_settings();
        FUZZ_CHECK(a.groups_file.empty() || (a.enabled() && a.groups_file.front() == '/'));
    } catch (const ConfigError&) {
    }
    try {
        (void)metrics::load_settings(0);
    } catch (const ConfigError&) {
    }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    // The settings come from the environment too: only the file may vary.
    for (const char* v : {"RBIO_TRANSPORT", "RBIO_ISER", "RBIO_PORTALS", "RBIO_STATS_FILE", "RBIO_PORT_GROUP",
                          "RBIO_ALUA_GROUPS", "RBIO_METRICS_FILE"})
        ::unsetenv(v);
    config().write("");
    ::setenv("RBIO_CONFIG", config().path.c_str(), 1);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 3) return 0;
    const std::string_view text(reinterpret_cast<const char*>(data + 3), size - 3);
    switch (data[0] % 3) {
        case 0: bsopts(text); break;
        case 1: lu_path(text); break;
        default: config_file(text, int(data[1]) << 8 | data[2]); break;
    }
    return 0;
}
