// The statistics file an admin (or the bench) reads: the totals of every
// connection, key=value per line, replaced atomically so a reader never sees
// half a file.
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <cstdio>
#include <string>

#include "rbio/bs/atomic_file.hpp"
#include "rbio/bs/config_file.hpp"
#include "rbio/bs/tcp_transport.h"
#include "tcp_connection.hpp"

namespace {

std::atomic<uint64_t> g_open{0};
std::atomic<uint64_t> g_total{0};
std::atomic<uint64_t> g_over_budget{0};

// The file is rewritten every second for tgtd's whole life: its text and
// names live here and keep their capacity, so from the second write on it
// allocates nothing (allocations per command are counted over whole runs,
// bench/cost.sh).
struct StatsBuffers {
    std::string path, tmp, text;
};

StatsBuffers& buffers() {
    static StatsBuffers b;
    return b;
}

void append_number(std::string& out, uint64_t v) {
    char digits[24];
    const auto res = std::to_chars(digits, digits + sizeof digits, v);  // 24 digits always fit
    out.append(digits, res.ptr);
}

// PATTERN with "%p" replaced by tgtd's pid, into OUT.
void expand(const char* pattern, std::string& out) {
    rbio::bs::expand_placeholder(pattern, 'p', uint64_t(getpid()), out);
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

uint64_t rbio_tp_stats_accepted(void) { return g_total.load(std::memory_order_relaxed); }

void rbio_tp_stats_over_budget(void) { g_over_budget.fetch_add(1, std::memory_order_relaxed); }

uint64_t rbio_tp_stats_over_budget_total(void) { return g_over_budget.load(std::memory_order_relaxed); }

int rbio_tp_stats_write(const char* pattern, const char* connections, char* err, size_t errlen) {
    using rbio::iser::Counter;
    try {
        auto c = rbio::tp::totals().snapshot();
        StatsBuffers& b = buffers();
        std::string& text = b.text;
        text.assign("# rbio TCP transport statistics of tgtd pid ");
        append_number(text, uint64_t(getpid()));
        text.append("\ntransport=rbio\n");
        auto line = [&](const char* key, uint64_t v) {
            text.append(key).append("=");
            append_number(text, v);
            text.append("\n");
        };
        line("connections_open", g_open.load());
        line("connections_total", g_total.load());
        line("connections_over_data_budget", g_over_budget.load());
        for (size_t i = 0; i < rbio::iser::kCounterCount; ++i)
            line(rbio::iser::counter_name(Counter(i)), c.values[i]);
        line("syscalls",
             c[Counter::RecvCalls] + c[Counter::SendCalls] + c[Counter::EventCtl] + c[Counter::RxWaitCalls]);
        char ratios[96];
        std::snprintf(ratios, sizeof ratios, "pdus_per_recv=%.2f\npdus_per_send=%.2f\n", c.pdus_per_recv(),
                      c.pdus_per_send());
        text += ratios;
        if (connections) text += connections;
        expand(pattern, b.path);
        b.tmp.assign(b.path).append(".tmp");
        rbio::bs::write_file_atomically(b.path, b.tmp, text);
        return 0;
    } catch (const std::exception& e) {
        std::snprintf(err, errlen, "%s", e.what());
    } catch (...) {
        std::snprintf(err, errlen, "unexpected error writing the statistics");
    }
    return -1;
}

void rbio_tp_stats_remove(const char* pattern) {
    std::string path;
    expand(pattern, path);
    ::unlink(path.c_str());
}

}  // extern "C"
