// Settings of the TCP transport: defaults, /etc/rbio/tgtd.conf (or
// $RBIO_CONFIG), then environment overrides -- an admin can switch the
// takeover off for one tgtd run without editing the file.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <string_view>

#include "rbio/bs/alua_settings.hpp"
#include "rbio/bs/config_file.hpp"
#include "rbio/bs/metrics_settings.hpp"
#include "rbio/bs/tcp_transport.h"

namespace {

using SettingsError = rbio::bs::ConfigError;
using rbio::bs::trim;

bool parse_switch(std::string_view v, const std::string& where) {
    if (v == "on" || v == "yes" || v == "true" || v == "1" || v == "rbio") return true;
    if (v == "off" || v == "no" || v == "false" || v == "0" || v == "stock") return false;
    throw SettingsError(where + ": '" + std::string(v) + "' is not on or off");
}

uint32_t parse_uint(std::string_view v, uint32_t min, uint32_t max, const std::string& where) {
    // Digits only (from_chars takes no blank and no sign, as bsopts' parser).
    uint64_t n = 0;
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (ec != std::errc() || p != v.data() + v.size() || n < min || n > max)
        throw SettingsError(where + ": '" + std::string(v) + "' is not a number from " + std::to_string(min) +
                            " to " + std::to_string(max));
    return uint32_t(n);
}

// A pool block's size: a power of two (the pool's size classes), so the
// memory a setting names is the memory it takes.
uint32_t parse_power_of_two(std::string_view v, uint32_t min, uint32_t max, const std::string& where) {
    const uint32_t n = parse_uint(v, min, max, where);
    if ((n & (n - 1)) != 0)
        throw SettingsError(where + ": '" + std::string(v) + "' is not a power of two (" +
                            std::to_string(min) + ", " + std::to_string(min * 2) + ", ... " +
                            std::to_string(max) + ")");
    return n;
}

// 0 (`zero` says what it means), or a number from min to max.
uint32_t parse_zero_or_uint(std::string_view v, uint32_t min, uint32_t max, const char* zero,
                            const std::string& where) {
    if (v == "0") return 0;
    try {
        return parse_uint(v, min, max, where);
    } catch (const SettingsError&) {
        throw SettingsError(where + ": '" + std::string(v) + "' is not 0 (" + zero + ") or a number from " +
                            std::to_string(min) + " to " + std::to_string(max));
    }
}

// 0 (no budget), or 64 MiB to 1 TiB: below 64 a host at its default I/O
// size and queue depth (32 x 1280 KiB) would lose its connection.
uint32_t parse_budget_mib(std::string_view v, const std::string& where) {
    return parse_zero_or_uint(v, 64, 1048576, "no budget", where);
}

// 0 (no limit), or 8 to 1048576: below 8 a pass would yield before it
// reaped one command's completions (its receive, its sends).
uint32_t parse_pass_completions(std::string_view v, const std::string& where) {
    return parse_zero_or_uint(v, 8, 1048576, "no limit", where);
}

// "auto" (half the memory tgtd may use), 0 (none), or 64 MiB to 1 TiB.
void parse_total_mib(rbio_tp_settings& s, std::string_view v, const std::string& where) {
    s.data_budget_total_auto = v == "auto";
    if (s.data_budget_total_auto) return;
    try {
        s.data_budget_total_mib = parse_budget_mib(v, where);
    } catch (const SettingsError&) {
        throw SettingsError(where + ": '" + std::string(v) +
                            "' is not auto (half of memory), 0 (no limit) or a number from 64 to 1048576");
    }
}

// The lowest memory limit in `file` of cgroup `dir` of the hierarchy
// mounted at `mount` and of its ancestors, if below `bytes`. Up to the root
// tgtd sees, which in a container's cgroup namespace is the container's
// own cgroup (the host's root has no limit file).
uint64_t lowest_limit(const std::string& mount, std::string dir, const char* file, uint64_t bytes) {
    for (;;) {
        std::ifstream in(mount + (dir == "/" ? std::string() : dir) + "/" + file);
        uint64_t limit = 0;  // "max" reads as no number: no limit there
        if (in >> limit && limit > 0 && (bytes == 0 || limit < bytes)) bytes = limit;
        if (dir.size() <= 1) return bytes;
        const size_t up = dir.rfind('/');
        dir.resize(up == 0 ? 1 : up);
    }
}

// The memory tgtd may use: the machine's, or its cgroup's limit when that
// is lower (rbio_tp_cgroup_memory_limit).
uint64_t usable_memory() {
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    const uint64_t bytes = pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
    return rbio_tp_cgroup_memory_limit("/proc/self/cgroup", "/sys/fs/cgroup", bytes);
}

void copy_to(char* dst, size_t len, std::string_view v, const std::string& where) {
    if (v.size() >= len) throw SettingsError(where + ": value too long");
    std::memcpy(dst, v.data(), v.size());
    dst[v.size()] = '\0';
}

// One item of `portals`: ADDR:PORT, [V6ADDR]:PORT or *:PORT. An item that
// names no portal tgtd could have would take nothing over, silently:
// tgtd would stay stock.
void check_portal(std::string_view item, const std::string& where) {
    const std::string text(item);
    const auto bad = [&](const std::string& why) {
        return SettingsError(where + ": '" + text + "' " + why + " (ADDR:PORT, [V6ADDR]:PORT or *:PORT)");
    };
    const size_t colon = item.rfind(':');
    if (colon == item.npos) throw bad("has no port");
    std::string_view addr = item.substr(0, colon), port = item.substr(colon + 1);
    uint32_t n = 0;
    auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), n);
    if (port.empty() || ec != std::errc() || p != port.data() + port.size() || n < 1 || n > 65535)
        throw bad("has no port from 1 to 65535");
    // Matched as text against the portal as tgt writes it (canonical
    // numbers): "03260" or "[0:0:0:0:0:0:0:1]" would parse and never match.
    if (port != std::to_string(n)) throw bad("writes its port as " + std::to_string(n) + " would not");
    if (addr == "*") return;
    unsigned char buf[sizeof(in6_addr)];
    char canonical[INET6_ADDRSTRLEN];
    if (addr.size() > 2 && addr.front() == '[' && addr.back() == ']') {
        const std::string v6(addr.substr(1, addr.size() - 2));
        if (::inet_pton(AF_INET6, v6.c_str(), buf) != 1) throw bad("has no IPv6 address in its brackets");
        if (!::inet_ntop(AF_INET6, buf, canonical, sizeof canonical) || v6 != canonical)
            throw bad("is not written as tgt writes it: [" + std::string(canonical) + "]");
        return;
    }
    const std::string v4(addr);
    if (::inet_pton(AF_INET, v4.c_str(), buf) != 1) throw bad("has no IPv4 address");
    if (!::inet_ntop(AF_INET, buf, canonical, sizeof canonical) || v4 != canonical)
        throw bad("is not written as tgt writes it: " + std::string(canonical));
}

// "all", or a comma-separated list of portals. Empty is refused: an
// unfilled RBIO_PORTALS= would otherwise mean all of them.
void parse_portals(rbio_tp_settings& s, std::string_view v, const std::string& where) {
    if (v == "all") {
        s.portals[0] = '\0';
        return;
    }
    if (v.empty()) throw SettingsError(where + ": empty (all, or ADDR:PORT,...)");
    for (std::string_view rest = v;;) {
        const size_t comma = rest.find(',');
        const std::string_view item = trim(rest.substr(0, comma));
        if (item.empty()) throw SettingsError(where + ": an empty item in '" + std::string(v) + "'");
        check_portal(item, where);
        if (comma == rest.npos) break;
        rest.remove_prefix(comma + 1);
    }
    copy_to(s.portals, sizeof(s.portals), v, where);
}

// "none", or an absolute file path (%p: tgtd's pid). Empty is refused:
// an unfilled RBIO_STATS_FILE= would otherwise mean none.
void parse_stats_file(rbio_tp_settings& s, std::string_view v, const std::string& where) {
    if (v == "none") {
        s.stats_file[0] = '\0';
        return;
    }
    if (v.empty() || v.front() != '/')
        throw SettingsError(where + ": '" + std::string(v) + "' is not an absolute path (or none)");
    if (v.back() == '/') throw SettingsError(where + ": '" + std::string(v) + "' names a folder, not a file");
    copy_to(s.stats_file, sizeof(s.stats_file), v, where);
}

void apply(rbio_tp_settings& s, std::string_view key, std::string_view value, const std::string& where) {
    std::string w = where + ": " + std::string(key);
    if (key == "transport") s.enabled = parse_switch(value, w);
    else if (key == "iser") s.iser = parse_switch(value, w);
    else if (key == "portals") parse_portals(s, value, w);
    else if (key == "stats_file") parse_stats_file(s, value, w);
    else if (key == "batch_reads") s.batch_reads = parse_switch(value, w);
    else if (key == "coalesce") s.coalesce = parse_switch(value, w);
    else if (key == "send_inline") s.send_inline = parse_switch(value, w);
    else if (key == "write_in_place") s.write_in_place = parse_switch(value, w);
    else if (key == "direct_read_kib") s.direct_read_kib = parse_uint(value, 4, 16384, w);
    else if (key == "rx_buffer_kib") s.rx_buffer_kib = parse_uint(value, 16, 65536, w);
    else if (key == "max_queued_kib") s.max_queued_kib = parse_uint(value, 64, 1048576, w);
    else if (key == "rx_wait_pdus") s.rx_wait_pdus = parse_uint(value, 0, 256, w);
    else if (key == "rx_wait_us") s.rx_wait_us = parse_uint(value, 10, 100000, w);
    else if (key == "iser_spin_us") s.iser_spin_us = parse_uint(value, 0, 1000, w);
    else if (key == "iser_srq_depth") s.iser_srq_depth = parse_uint(value, 0, 16384, w);
    else if (key == "iser_receive_kib") s.iser_receive_kib = parse_power_of_two(value, 16, 1024, w);
    else if (key == "iser_pass_completions") s.iser_pass_completions = parse_pass_completions(value, w);
    else if (key == "direct_commands") s.direct_commands = parse_switch(value, w);
    else if (key == "data_budget_mib") s.data_budget_mib = parse_budget_mib(value, w);
    else if (key == "data_budget_total_mib") parse_total_mib(s, value, w);
    else if (rbio::bs::alua::is_setting(key) || rbio::bs::metrics::is_setting(key))
        ;  // ALUA's and the metrics' own: read and checked by alua_settings.cpp
           // and metrics/settings.cpp
    else
        throw SettingsError(where + ": unknown key '" + std::string(key) +
                            "' (known: transport, iser, portals, stats_file, batch_reads, coalesce, "
                            "send_inline, write_in_place, direct_read_kib, rx_buffer_kib, max_queued_kib, "
                            "rx_wait_pdus, rx_wait_us, iser_spin_us, iser_srq_depth, iser_receive_kib, "
                            "iser_pass_completions, direct_commands, data_budget_mib, data_budget_total_mib, "
                            "port_group, alua_groups_file, metrics_file)");
}

void load_file(rbio_tp_settings& s, const std::string& path, bool must_exist) {
    bool read = rbio::bs::read_config(
        path, must_exist, [&](std::string_view key, std::string_view value, const std::string& where) {
            apply(s, key, value, where);
        });
    if (read) std::snprintf(s.source, sizeof(s.source), "%s", path.c_str());
}

void load(rbio_tp_settings& s) {
    s = rbio_tp_settings{};
    s.enabled = 1;
    s.iser = 1;
    s.batch_reads = 1;
    s.coalesce = 1;
    s.send_inline = 1;
    s.write_in_place = 1;
    s.direct_read_kib = 64;
    s.rx_buffer_kib = 256;
    s.max_queued_kib = 4096;
    s.rx_wait_pdus = 16;
    s.rx_wait_us = 300;
    s.iser_spin_us = 16;
    s.iser_srq_depth = 1024;
    s.iser_receive_kib = 64;
    s.iser_pass_completions = 1024;
    s.direct_commands = 1;
    s.data_budget_mib = 2048;
    s.data_budget_total_auto = 1;
    std::snprintf(s.stats_file, sizeof(s.stats_file), "/run/rbio/tgtd-%%p.stats");
    std::snprintf(s.source, sizeof(s.source), "defaults");

    auto [path, must_exist] = rbio::bs::config_source();
    load_file(s, path, must_exist);

    std::string env_used =
        rbio::bs::apply_environment({{"RBIO_TRANSPORT", "transport"},
                                     {"RBIO_ISER", "iser"},
                                     {"RBIO_PORTALS", "portals"},
                                     {"RBIO_STATS_FILE", "stats_file"}},
                                    [&](std::string_view key, std::string_view value,
                                        const std::string& where) { apply(s, key, value, where); });
    if (!env_used.empty()) {
        std::string src = std::string(s.source) + " + " + env_used;
        std::snprintf(s.source, sizeof(s.source), "%s", src.c_str());
    }
    if (s.data_budget_total_auto) s.data_budget_total_mib = rbio_tp_auto_total_mib(usable_memory());
}

}  // namespace

extern "C" {

int rbio_tp_load_settings(rbio_tp_settings* s, char* err, size_t errlen) {
    try {
        load(*s);
        return 0;
    } catch (const std::exception& e) {
        if (err && errlen) std::snprintf(err, errlen, "%s", e.what());
    } catch (...) {
        if (err && errlen) std::snprintf(err, errlen, "unexpected error reading settings");
    }
    return -1;
}

void rbio_tp_describe_settings(const rbio_tp_settings* s, char* out, size_t len) {
    std::snprintf(
        out, len,
        "transport=%s iser=%s portals=%s stats_file=%s batch_reads=%s coalesce=%s send_inline=%s "
        "write_in_place=%s direct_read_kib=%u rx_buffer_kib=%u max_queued_kib=%u rx_wait_pdus=%u "
        "rx_wait_us=%u iser_spin_us=%u iser_srq_depth=%u iser_receive_kib=%u iser_pass_completions=%u "
        "direct_commands=%s "
        "data_budget_mib=%u data_budget_total_mib=%u%s (from %s)",
        s->enabled ? "on" : "off", s->iser ? "on" : "off", s->portals[0] ? s->portals : "all",
        s->stats_file[0] ? s->stats_file : "none", s->batch_reads ? "on" : "off", s->coalesce ? "on" : "off",
        s->send_inline ? "on" : "off", s->write_in_place ? "on" : "off", s->direct_read_kib, s->rx_buffer_kib,
        s->max_queued_kib, s->rx_wait_pdus, s->rx_wait_us, s->iser_spin_us, s->iser_srq_depth,
        s->iser_receive_kib, s->iser_pass_completions, s->direct_commands ? "on" : "off", s->data_budget_mib,
        s->data_budget_total_mib, s->data_budget_total_auto ? " (auto)" : "", s->source);
}

uint64_t rbio_tp_cgroup_memory_limit(const char* proc_cgroup, const char* root, uint64_t bytes) {
    try {
        std::ifstream self(proc_cgroup);
        std::string line;
        while (std::getline(self, line)) {
            // ID:CONTROLLERS:PATH; v2's is 0::PATH
            const size_t a = line.find(':'), b = a == line.npos ? a : line.find(':', a + 1);
            if (b == line.npos || b + 1 >= line.size() || line[b + 1] != '/') continue;
            const std::string controllers = line.substr(a + 1, b - a - 1), dir = line.substr(b + 1);
            if (line.compare(0, b + 1, "0::") == 0) bytes = lowest_limit(root, dir, "memory.max", bytes);
            else if (("," + controllers + ",").find(",memory,") != std::string::npos)
                bytes = lowest_limit(std::string(root) + "/memory", dir, "memory.limit_in_bytes", bytes);
        }
    } catch (const std::exception&) {
        // unreadable: the machine's memory stands
    }
    return bytes;
}

uint32_t rbio_tp_auto_total_mib(uint64_t bytes) {
    const uint64_t mib = bytes / 2 >> 20;
    return uint32_t(mib < 64 ? 64 : mib > 1048576 ? 1048576 : mib);
}

int rbio_tp_portal_selected(const rbio_tp_settings* s, const char* addr, int port) {
    std::string_view list = s->portals;
    if (trim(list).empty()) return 1;
    // Built by appending: `"[" + std::string(...)` inserts at the front,
    // which GCC 12 at -O2 misreads as an overlapping memcpy (-Werror=restrict
    // in Release builds, GCC PR 105329).
    const std::string port_text = std::to_string(port);
    std::string plain(addr), bracketed("["), any("*:");
    plain.append(":").append(port_text);
    bracketed.append(addr).append("]:").append(port_text);
    any.append(port_text);
    while (!list.empty()) {
        auto comma = list.find(',');
        std::string_view item = trim(list.substr(0, comma));
        if (item == plain || item == bracketed || item == any) return 1;
        if (comma == list.npos) break;
        list.remove_prefix(comma + 1);
    }
    return 0;
}

}  // extern "C"
