#include "rbio/bs/alua_gateway.hpp"

#include <cerrno>
#include <cstring>
#include <utility>

#include "rbio/bs/config_file.hpp"

namespace rbio::bs::alua {

Gateway::Gateway(Settings s, std::chrono::milliseconds read_stall)
    : settings_(std::move(s)), read_stall_(read_stall), file_ok_(settings_.groups_file.empty()) {
    if (!settings_.groups_file.empty()) reader_ = std::make_unique<GroupsFileReader>(settings_.groups_file);
    own_state_ = settings_.groups_file.empty() ? State::active_optimized : State::transitioning;
    groups_ = {{settings_.port_group, own_state_}};
}

Gateway::Poll Gateway::reject(const std::string& why) {
    file_ok_ = false;
    message_ = why + "; port group " + std::to_string(settings_.port_group) + " stays " +
               std::string(state_name(own_state_));
    return Poll::bad;
}

Gateway::Poll Gateway::poll(std::chrono::milliseconds wait) {
    message_.clear();
    if (!reader_) return Poll::unchanged;
    const std::string& path = settings_.groups_file;

    // Read every time rather than when stat() says the file changed: on a
    // network file system stat() may answer from a cache for up to a
    // minute where open() revalidates (close-to-open), and an edit in
    // place within one timestamp tick leaves size and times as they were.
    // A few hundred bytes once a second.
    auto read = reader_->read(wait);
    if (!read) {
        const auto waited = reader_->waiting();
        if (stall_reported_ || waited < read_stall_) return Poll::unchanged;
        stall_reported_ = true;
        // Whatever comes back is acted on and reported, an error seen
        // before the stall too.
        have_text_ = false;
        unreadable_reported_ = false;
        return reject("ALUA groups file " + path + ": a read has not returned for " +
                      std::to_string(std::chrono::duration_cast<std::chrono::seconds>(waited).count()) +
                      " s (is its file system answering?)");
    }
    const bool was_stalled = std::exchange(stall_reported_, false);
    if (read->err) {
        // A file being replaced (rename over it) is never missing; one that
        // is gone or unreadable is reported once, not every second.
        if (unreadable_reported_) return Poll::unchanged;
        unreadable_reported_ = true;
        have_text_ = false;
        return reject("ALUA groups file " + path + ": " +
                      (read->err == EFBIG
                           ? "larger than " + std::to_string(GroupsFileReader::kMaxBytes / 1024) +
                                 " KiB, not a groups file"
                           : std::string(std::strerror(read->err))));
    }
    unreadable_reported_ = false;
    std::string& text = read->text;
    if (have_text_ && text == text_) return Poll::unchanged;

    GroupTable next;
    std::string wrong;
    try {
        next = parse_groups(text, path);
    } catch (const ConfigError& e) {
        wrong = e.what();
    }
    // Only now is this version known to be acted on (or reported): one
    // that failed for want of memory is read and tried again.
    text_ = std::move(text);
    have_text_ = true;
    if (!wrong.empty()) return reject(wrong);
    auto own = state_of(next, settings_.port_group);
    if (!own)
        return reject("ALUA groups file " + path + " does not list this gateway's port group " +
                      std::to_string(settings_.port_group));
    file_ok_ = true;  // also when a good version comes back unchanged
    if (next == groups_) {
        if (!was_stalled) return Poll::unchanged;
        message_ = "ALUA groups file " + path + " answers again; port group " +
                   std::to_string(settings_.port_group) + " stays " + std::string(state_name(own_state_));
        return Poll::answering;
    }
    groups_ = std::move(next);
    own_state_ = *own;
    changed_ = true;
    return Poll::changed;
}

std::string Gateway::describe() const {
    std::string s = "port group " + std::to_string(settings_.port_group) + ": " +
                    std::string(state_name(own_state_)) + " (groups";
    const char* sep = " ";
    for (const auto& g : groups_) {
        s += sep + std::to_string(g.id) + " " + std::string(state_name(g.state));
        sep = ", ";
    }
    s += settings_.groups_file.empty() ? "; no groups file" : "; from " + settings_.groups_file;
    return s + "; settings from " + settings_.source + ")";
}

}  // namespace rbio::bs::alua
