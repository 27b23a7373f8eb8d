#pragma once
// Command-line parsing shared by the rbio subcommands.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "rbio/initiator/session.hpp"

namespace rbio::cli {

// Exit codes besides InitiatorError's (see `rbio --help`).
inline constexpr int kExitOk = 0;
inline constexpr int kExitInternal = 1;
inline constexpr int kExitUsage = 2;

// Thrown for bad command lines; main prints it with a hint and exits 2.
struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// --key value / --key=value / -k value pairs and bare flags, in order.
class Args {
public:
    // `flags` are options without a value (e.g. "--verify").
    Args(int argc, char** argv, int first, const std::vector<std::string>& flags);
    bool has(const std::string& key) const { return values_.count(key) > 0; }
    // The last value given for `key`.
    std::string get(const std::string& key, const std::string& fallback = "") const;
    // Every value given for `key`, in order (e.g. several --portal).
    std::vector<std::string> get_all(const std::string& key) const;
    // Keys given that are not in `known` (nor, for a command that logs in,
    // in kSessionKeys) make a UsageError.
    enum class Login { Yes, No };
    void allow_only(const std::vector<std::string>& known, Login logs_in = Login::Yes) const;

private:
    std::map<std::string, std::vector<std::string>> values_;
};

// "4096", "4k", "4K", "1m", "1M", "1g" (powers of 1024), at least `min`.
uint64_t parse_size(const std::string& key, const std::string& text, uint64_t min = 1);
uint64_t parse_uint(const std::string& key, const std::string& text, uint64_t lo, uint64_t hi);

// Options every subcommand that logs in understands: --initiator-name,
// --chap-user, --chap-secret (or RBIO_CHAP_SECRET), --header-digest,
// --data-digest, --connect-timeout, --login-timeout, --replacement-timeout,
// --noop-out-interval, --noop-out-timeout, --abort-timeout, --lu-reset-timeout,
// --chap-user-in, --chap-secret-in (or RBIO_CHAP_SECRET_IN).
initiator::SessionOptions session_options(const Args& args);
// --portal HOST[:PORT] of a command that talks to one portal; a malformed
// one, or several, is a UsageError naming `command`.
initiator::Portal portal_option(const Args& args, const std::string& command);
// Every --portal given, in order; a malformed one, or one given twice, is a
// UsageError.
std::vector<initiator::Portal> portal_options(const Args& args);
extern const std::vector<std::string> kSessionKeys;

}  // namespace rbio::cli
