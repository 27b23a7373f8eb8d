#include "rbio/bs/config_file.hpp"

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "rbio/bs/tcp_transport.h"

namespace rbio::bs {

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
    return s;
}

void expand_placeholder(std::string_view pattern, char letter, uint64_t value, std::string& out) {
    out.clear();
    for (size_t i = 0; i < pattern.size(); ++i) {
        if (pattern[i] == '%' && i + 1 < pattern.size() && pattern[i + 1] == letter) {
            char digits[24];  // any uint64_t fits
            out.append(digits, std::to_chars(digits, digits + sizeof digits, value).ptr);
            ++i;
        } else {
            out += pattern[i];
        }
    }
}

namespace {

// A '#' starts a comment at the start of a line or after a blank; inside a
// value it is the value's ("metrics_file = /srv/prom/rbio#1.prom"), as it
// is in the environment's, which has no comments.
size_t comment_start(std::string_view l) {
    for (size_t i = 0; i < l.size(); ++i)
        if (l[i] == '#' && (i == 0 || l[i - 1] == ' ' || l[i - 1] == '\t')) return i;
    return l.size();
}

}  // namespace

bool read_config(const std::string& path, bool must_exist,
                 const std::function<void(std::string_view, std::string_view, const std::string&)>& apply) {
    // A folder opens as an ifstream and then reads as an empty file: the
    // gateway would run on defaults (no ALUA, no metrics) without a word.
    std::error_code ec;
    const auto type = std::filesystem::status(path, ec).type();
    if (type == std::filesystem::file_type::not_found && !must_exist) return false;
    if (!ec && type == std::filesystem::file_type::directory)
        throw ConfigError(path + ": a folder, not a file");
    std::ifstream in(path);
    if (!in) {
        if (!must_exist && errno == ENOENT) return false;
        throw ConfigError(path + ": " + std::strerror(errno));
    }
    // Each key once: with two lines for one key, which one an admin meant
    // is a guess (the last used to win, silently).
    std::map<std::string, int, std::less<>> first_line;
    std::string line;
    int no = 1;
    for (; std::getline(in, line); ++no) {
        std::string_view l = line;
        l = l.substr(0, comment_start(l));
        l = trim(l);
        if (l.empty()) continue;
        std::string where = path + ":" + std::to_string(no);
        auto eq = l.find('=');
        if (eq == l.npos) throw ConfigError(where + ": expected key = value");
        const std::string_view key = trim(l.substr(0, eq));
        if (auto [it, fresh] = first_line.try_emplace(std::string(key), no); !fresh)
            throw ConfigError(where + ": " + std::string(key) + ": set again (first on line " +
                              std::to_string(it->second) + ")");
        apply(key, trim(l.substr(eq + 1)), where);
    }
    // getline fails at the end and on a read error alike.
    if (in.bad()) throw ConfigError(path + ": read error after line " + std::to_string(no - 1));
    return true;
}

std::string apply_environment(
    std::initializer_list<EnvOverride> overrides,
    const std::function<void(std::string_view, std::string_view, const std::string&)>& apply) {
    std::string used;
    for (const auto& o : overrides) {
        if (const char* v = std::getenv(o.variable)) {
            apply(o.key, trim(v), std::string("environment ") + o.variable);
            used += std::string(used.empty() ? "" : ",") + o.variable;
        }
    }
    return used;
}

ConfigSource config_source() {
    const char* config = std::getenv("RBIO_CONFIG");
    if (config && *config) return {config, true};
    return {RBIO_TP_DEFAULT_CONFIG, false};
}

}  // namespace rbio::bs
