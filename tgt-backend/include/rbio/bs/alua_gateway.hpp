#pragma once
// This gateway's view of the LU set's ALUA states: its settings and the
// last good contents of the groups file, acted on when they change.
// Lives in tgtd's event-loop thread; poll() is called from a timer, and
// the file is read in a thread of its own (alua_groups_reader.hpp).
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "rbio/bs/alua.hpp"
#include "rbio/bs/alua_groups_reader.hpp"
#include "rbio/bs/alua_settings.hpp"

namespace rbio::bs::alua {

class Gateway {
public:
    static constexpr std::chrono::milliseconds kReadStall{5000};
    // Until the groups file has been read, this gateway's group is
    // transitioning: it serves no I/O on a state it does not know. Without
    // a groups file it is active/optimized, alone. A read of the groups
    // file that has not returned for `read_stall` is reported (once), and
    // the file counts as not in use until it does.
    explicit Gateway(Settings s, std::chrono::milliseconds read_stall = kReadStall);

    enum class Poll {
        unchanged,  // nothing new
        changed,    // states changed: raise ASYMMETRIC ACCESS STATE CHANGED
        bad,        // the file is missing, wrong or not answering: states
                    // kept, message() says why
        answering,  // a file that did not answer does again, states as
                    // they were: message() says so
    };
    // Reads the groups file, waiting up to `wait` for the read, and acts on
    // it if its text changed since the last poll. A bad or missing file is
    // reported once per text; a read that has not returned, once.
    Poll poll(std::chrono::milliseconds wait);
    const std::string& message() const { return message_; }

    const Settings& settings() const { return settings_; }
    uint16_t port_group() const { return settings_.port_group; }
    State own_state() const { return own_state_; }
    const GroupTable& groups() const { return groups_; }
    // Whether states have changed since start (RTPG status code 02h).
    bool changed_implicitly() const { return changed_; }
    // Whether the groups file's current version was read and used: false
    // while it is missing, unreadable or wrong (states kept), and before
    // its first read (transitioning). True without a groups file.
    bool file_ok() const { return file_ok_; }
    // "port group 2: standby (groups 1 active/optimized, 2 standby; from FILE)"
    std::string describe() const;

private:
    Poll reject(const std::string& why);

    Settings settings_;
    std::chrono::milliseconds read_stall_;
    std::unique_ptr<GroupsFileReader> reader_;  // none without a groups file
    GroupTable groups_;
    State own_state_;
    bool changed_ = false;
    bool file_ok_;
    bool have_text_ = false;
    bool unreadable_reported_ = false;
    bool stall_reported_ = false;
    std::string text_;  // the groups file as last read
    std::string message_;
};

}  // namespace rbio::bs::alua
