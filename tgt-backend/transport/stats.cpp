// The statistics file an admin (or the bench) reads: the totals of every
// connection, key=value per line, replaced atomically so a reader never sees
// half a file.
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "rbio/bs/tcp_transport.h"
#include "tcp_connection.hpp"

namespace {

std::atomic<uint64_t> g_open{0};
std::atomic<uint64_t> g_total{0};

std::string expand(const char* pattern) {
    std::string out;
    for (const char* p = pattern; *p; ++p) {
        if (p[0] == '%' && p[1] == 'p') {
            out += std::to_string(getpid());
            ++p;
        } else {
            out += *p;
        }
    }
    return out;
}

}  // namespace

extern "C" {

void rbio_tp_stats_connection(int opened) {
    if (opened) {
        g_open.fetch_add(1, std::memory_order_relaxed);
        g_total.fetch_add(1, std::memory_order_relaxed);
    } else {
        g_open.fetch_sub(1, std::memory_order_relaxed);
    }
}

int rbio_tp_stats_write(const char* pattern, const char* connections, char* err,
                        size_t errlen) {
    using rbio::iser::Counter;
    std::string path = expand(pattern);
    std::string tmp = path + ".tmp";
    FILE* f = std::fopen(tmp.c_str(), "w");
    if (!f && errno == ENOENT) {
        // Create the folder (one level, e.g. /run/rbio) on first use.
        auto slash = path.rfind('/');
        if (slash != std::string::npos && slash > 0)
            ::mkdir(path.substr(0, slash).c_str(), 0755);
        f = std::fopen(tmp.c_str(), "w");
    }
    if (!f) {
        std::snprintf(err, errlen, "%s: %s", tmp.c_str(), std::strerror(errno));
        return -1;
    }
    auto c = rbio::tp::totals().snapshot();
    std::fprintf(f, "# rbio TCP transport statistics of tgtd pid %d\ntransport=rbio\n",
                 int(getpid()));
    std::fprintf(f, "connections_open=%llu\nconnections_total=%llu\n",
                 (unsigned long long)g_open.load(), (unsigned long long)g_total.load());
    for (size_t i = 0; i < rbio::iser::kCounterCount; ++i)
        std::fprintf(f, "%s=%llu\n", rbio::iser::counter_name(Counter(i)),
                     (unsigned long long)c.values[i]);
    std::fprintf(f, "syscalls=%llu\npdus_per_recv=%.2f\npdus_per_send=%.2f\n",
                 (unsigned long long)(c[Counter::RecvCalls] + c[Counter::SendCalls] +
                                      c[Counter::EventCtl]),
                 c.pdus_per_recv(), c.pdus_per_send());
    if (connections) std::fputs(connections, f);
    bool ok = std::fflush(f) == 0 && !std::ferror(f);
    ok = (std::fclose(f) == 0) && ok;
    if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
        std::snprintf(err, errlen, "%s: %s", path.c_str(), std::strerror(errno));
        ::unlink(tmp.c_str());
        return -1;
    }
    return 0;
}

void rbio_tp_stats_remove(const char* pattern) { ::unlink(expand(pattern).c_str()); }

}  // extern "C"
