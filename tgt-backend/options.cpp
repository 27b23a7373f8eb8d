#include "rbio/bs/options.hpp"

#include <algorithm>
#include <charconv>
#include <vector>

#include "rbio/bs/error.hpp"

namespace rbio::bs {
namespace {

constexpr std::string_view kKnownKeys =
    "queue_depth, batch, coalesce, coalesce_max_kib, inline_reap, inline_io, inline_max_kib, thin, "
    "rbd_conf, rbd_id, rbd_keyring, rbd_cluster, rbd_timeout, rbd_lock, rbd_quiet_s, rbd_reopen, "
    "debug_unsafe_fua";

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

bool parse_bool(std::string_view key, std::string_view v) {
    if (v == "on" || v == "1" || v == "yes" || v == "true") return true;
    if (v == "off" || v == "0" || v == "no" || v == "false") return false;
    throw Error("bsopts: " + std::string(key) + "=" + std::string(v) +
                (key == "inline_io" ? ": expected auto, on or off" : ": expected on or off"));
}

uint32_t parse_uint(std::string_view key, std::string_view v, uint32_t lo, uint32_t hi) {
    uint32_t out = 0;
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
    if (ec != std::errc() || p != v.data() + v.size() || out < lo || out > hi)
        throw Error("bsopts: " + std::string(key) + "=" + std::string(v) + ": expected a whole number from " +
                    std::to_string(lo) + " to " + std::to_string(hi));
    return out;
}

std::string parse_path(std::string_view key, std::string_view v) {
    if (v.empty() || v.front() != '/')
        throw Error("bsopts: " + std::string(key) + "=" + std::string(v) + ": expected an absolute path");
    return std::string(v);
}

// Ceph entity and cluster names: letters, digits, '.', '_', '-'.
std::string parse_name(std::string_view key, std::string_view v) {
    bool ok = !v.empty() && v.size() <= 64;
    for (char ch : v)
        ok = ok && ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                    ch == '.' || ch == '_' || ch == '-');
    if (!ok)
        throw Error("bsopts: " + std::string(key) + "=" + std::string(v) +
                    ": expected 1-64 letters, digits, '.', '_' or '-'");
    return std::string(v);
}

}  // namespace

Options parse_options(std::string_view bsopts) {
    Options o;
    // Each key once: "queue_depth=256:queue_depth=64" is a typo or a
    // merge gone wrong, not a request for 64.
    std::vector<std::string_view> seen;
    while (!bsopts.empty()) {
        // ':' or ';' between items. ':' is the one to use in targets.conf:
        // tgt-admin hands bsopts to a shell unquoted, where ';' ends the
        // command; ',' is taken by tgtadm itself.
        size_t sep = bsopts.find_first_of(";:");
        std::string_view item = trim(bsopts.substr(0, sep));
        bsopts = sep == std::string_view::npos ? std::string_view{} : bsopts.substr(sep + 1);
        if (item.empty()) continue;
        size_t eq = item.find('=');
        if (eq == std::string_view::npos)
            throw Error("bsopts: '" + std::string(item) +
                        "' is not key=value (items are separated by ':' or ';'; keys: " +
                        std::string(kKnownKeys) + ")");
        std::string_view key = trim(item.substr(0, eq));
        std::string_view val = trim(item.substr(eq + 1));
        if (std::find(seen.begin(), seen.end(), key) != seen.end())
            throw Error("bsopts: " + std::string(key) + " given twice");
        seen.push_back(key);
        if (key == "queue_depth") {
            // io_uring wants a power of two; anything else is rounded up by
            // the kernel, so accept only what we really get.
            o.queue_depth = parse_uint(key, val, 1, 4096);
            if (o.queue_depth & (o.queue_depth - 1))
                throw Error("bsopts: queue_depth=" + std::string(val) +
                            ": must be a power of two (1 to 4096)");
        } else if (key == "batch") {
            o.batch = parse_bool(key, val);
        } else if (key == "coalesce") {
            o.coalesce = parse_bool(key, val);
        } else if (key == "coalesce_max_kib") {
            o.coalesce_max_kib = parse_uint(key, val, 4, 16384);
        } else if (key == "inline_reap") {
            o.inline_reap = parse_bool(key, val);
        } else if (key == "inline_io") {
            if (val == "auto") o.inline_io = Options::Inline::Auto;
            else o.inline_io = parse_bool(key, val) ? Options::Inline::On : Options::Inline::Off;
        } else if (key == "inline_max_kib") {
            o.inline_max_kib = parse_uint(key, val, 1, 16384);
        } else if (key == "thin") {
            o.thin = parse_bool(key, val);
        } else if (key == "rbd_conf") {
            o.rbd.conf = parse_path(key, val);
        } else if (key == "rbd_keyring") {
            o.rbd.keyring = parse_path(key, val);
        } else if (key == "rbd_id") {
            o.rbd.id = parse_name(key, val);
        } else if (key == "rbd_cluster") {
            o.rbd.cluster = parse_name(key, val);
        } else if (key == "rbd_timeout") {
            o.rbd.timeout_s = parse_uint(key, val, 1, 300);
        } else if (key == "rbd_lock") {
            if (val == "cooperative") o.rbd.lock = RbdSettings::Lock::Cooperative;
            else if (val == "takeover") o.rbd.lock = RbdSettings::Lock::Takeover;
            else throw Error("bsopts: rbd_lock=" + std::string(val) + ": expected cooperative or takeover");
        } else if (key == "rbd_quiet_s") {
            o.rbd.quiet_s = parse_uint(key, val, 0, 3600);
        } else if (key == "rbd_reopen") {
            if (val == "auto") o.rbd.reopen = RbdSettings::Reopen::Auto;
            else if (val == "manual") o.rbd.reopen = RbdSettings::Reopen::Manual;
            else throw Error("bsopts: rbd_reopen=" + std::string(val) + ": expected auto or manual");
        } else if (key == "debug_unsafe_fua") {
            o.debug_unsafe_fua = parse_bool(key, val);
        } else {
            throw Error("bsopts: unknown key '" + std::string(key) + "' (known: " + std::string(kKnownKeys) +
                        ")");
        }
    }
    if (o.rbd.lock == RbdSettings::Lock::Takeover && o.rbd.reopen == RbdSettings::Reopen::Manual)
        throw Error(
            "bsopts: rbd_reopen=manual with rbd_lock=takeover: every change of the writing gateway fences "
            "the old one, which would then stay fenced; use rbd_reopen=auto (the default)");
    return o;
}

// Only what differs from the defaults: file LUs show no Ceph settings.
std::string rbd_to_string(const RbdSettings& r) {
    const RbdSettings d;
    std::string out;
    if (r.conf != d.conf) out += ":rbd_conf=" + r.conf;
    if (r.id != d.id) out += ":rbd_id=" + r.id;
    if (r.keyring != d.keyring) out += ":rbd_keyring=" + r.keyring;
    if (r.cluster != d.cluster) out += ":rbd_cluster=" + r.cluster;
    if (r.timeout_s != d.timeout_s) out += ":rbd_timeout=" + std::to_string(r.timeout_s);
    if (r.lock != d.lock) out += ":rbd_lock=takeover";
    if (r.quiet_s) out += ":rbd_quiet_s=" + std::to_string(*r.quiet_s);
    if (r.reopen != d.reopen) out += ":rbd_reopen=manual";
    return out;
}

std::string to_string(const Options& o) {
    auto b = [](bool v) { return v ? "on" : "off"; };
    return "queue_depth=" + std::to_string(o.queue_depth) + ":batch=" + b(o.batch) +
           ":coalesce=" + b(o.coalesce) + ":coalesce_max_kib=" + std::to_string(o.coalesce_max_kib) +
           ":inline_reap=" + b(o.inline_reap) + ":inline_io=" +
           (o.inline_io == Options::Inline::Auto ? "auto" : b(o.inline_io == Options::Inline::On)) +
           ":inline_max_kib=" + std::to_string(o.inline_max_kib) + ":thin=" + b(o.thin) +
           rbd_to_string(o.rbd) +
           // Named only when on: the test-only switch stays out of every
           // normal LU's line.
           (o.debug_unsafe_fua ? ":debug_unsafe_fua=on" : "");
}

}  // namespace rbio::bs
