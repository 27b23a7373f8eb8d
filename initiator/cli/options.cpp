#include "options.hpp"

#include <algorithm>
#include <charconv>
#include <cstdlib>

#include "open_iscsi.hpp"

namespace rbio::cli {

const std::vector<std::string> kSessionKeys = {"--initiator-name",
                                               "--chap-user",
                                               "--chap-secret",
                                               "--header-digest",
                                               "--data-digest",
                                               "--connect-timeout",
                                               "--login-timeout",
                                               "--log-level",
                                               "--chap-user-in",
                                               "--chap-secret-in",
                                               "--replacement-timeout",
                                               "--abort-timeout",
                                               "--lu-reset-timeout",
                                               "--noop-out-interval",
                                               "--noop-out-timeout",
                                               "--transport",
                                               "--fence"};

Args::Args(int argc, char** argv, int first, const std::vector<std::string>& flags) {
    static const std::map<std::string, std::string> kShort = {{"-p", "--portal"}, {"-T", "--target"}};
    for (int i = first; i < argc; ++i) {
        std::string a = argv[i];
        if (auto s = kShort.find(a); s != kShort.end()) a = s->second;
        if (a.rfind("--", 0) != 0) throw UsageError("unexpected argument '" + a + "'");
        std::string key = a, value;
        if (size_t eq = a.find('='); eq != std::string::npos) {
            key = a.substr(0, eq);
            value = a.substr(eq + 1);
            // A flag is on by being there: --verify=0 would turn it on.
            if (std::find(flags.begin(), flags.end(), key) != flags.end())
                throw UsageError(key + " takes no value (got '" + a + "')");
        } else if (std::find(flags.begin(), flags.end(), a) != flags.end()) {
            value = "1";
        } else {
            if (i + 1 >= argc) throw UsageError(a + " needs a value");
            value = argv[++i];
        }
        values_[key].push_back(value);
    }
}

std::string Args::get(const std::string& key, const std::string& fallback) const {
    auto it = values_.find(key);
    return it == values_.end() ? fallback : it->second.back();
}

std::vector<std::string> Args::get_all(const std::string& key) const {
    auto it = values_.find(key);
    return it == values_.end() ? std::vector<std::string>{} : it->second;
}

void Args::allow_only(const std::vector<std::string>& known, Login logs_in) const {
    for (const auto& [k, v] : values_) {
        if (std::find(known.begin(), known.end(), k) != known.end()) continue;
        const bool session_key = std::find(kSessionKeys.begin(), kSessionKeys.end(), k) != kSessionKeys.end();
        if (!session_key) throw UsageError("unknown option " + k);
        // Taken and ignored, it would look as if it had changed something.
        if (logs_in == Login::No && k != "--log-level")
            throw UsageError(k + " is a login option: this command does not log in");
    }
}

uint64_t parse_uint(const std::string& key, const std::string& text, uint64_t lo, uint64_t hi) {
    // Digits only: from_chars takes no blank and no sign (strtoull skips
    // blanks and wraps a minus sign).
    uint64_t v = 0;
    auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || p != text.data() + text.size() || v < lo || v > hi)
        throw UsageError(key + " " + text + ": expected a number from " + std::to_string(lo) + " to " +
                         std::to_string(hi));
    return v;
}

uint64_t parse_size(const std::string& key, const std::string& text, uint64_t min) {
    if (text.empty()) throw UsageError(key + ": empty size");
    uint64_t mult = 1;
    std::string digits = text;
    switch (text.back()) {
        case 'k':
        case 'K': mult = 1ull << 10; break;
        case 'm':
        case 'M': mult = 1ull << 20; break;
        case 'g':
        case 'G': mult = 1ull << 30; break;
        default: break;
    }
    if (mult != 1) digits.pop_back();
    // Rounded up: "0k" is under a minimum of 1 byte too.
    return parse_uint(key, digits, (min + mult - 1) / mult, (1ull << 50) / mult) * mult;
}

initiator::Portal portal_option(const Args& args, const std::string& command) {
    // Only the last would be used, with no word about the others.
    if (const size_t n = args.get_all("--portal").size(); n > 1)
        throw UsageError("-p given " + std::to_string(n) + " times: " + command + " talks to one portal");
    try {
        return initiator::Portal::parse(args.get("--portal"));
    } catch (const std::invalid_argument& e) {
        throw UsageError(e.what());
    }
}

std::vector<initiator::Portal> portal_options(const Args& args) {
    std::vector<initiator::Portal> out;
    for (const std::string& v : args.get_all("--portal")) {
        try {
            out.push_back(initiator::Portal::parse(v));
        } catch (const std::invalid_argument& e) {
            throw UsageError(e.what());
        }
        for (size_t j = 0; j + 1 < out.size(); ++j)
            if (out[j].to_string() == out.back().to_string())
                throw UsageError("--portal " + out.back().to_string() + " given twice");
    }
    return out;
}

namespace {

// A CHAP name and its secret, from the options or, for the secret (kept out
// of process listings), from the environment.
std::optional<initiator::ChapCredentials> chap_option(const Args& args, const std::string& user_key,
                                                      const std::string& secret_key, const char* env_key) {
    if (!args.has(user_key)) {
        // A secret alone would log in without CHAP, unlike what was asked.
        if (args.has(secret_key)) throw UsageError(secret_key + " needs " + user_key);
        return std::nullopt;
    }
    std::string secret = args.get(secret_key);
    if (const char* env = std::getenv(env_key); secret.empty() && env) secret = env;
    if (secret.empty()) throw UsageError(user_key + " needs " + secret_key + " or " + env_key);
    return initiator::ChapCredentials{args.get(user_key), secret};
}

}  // namespace

initiator::SessionOptions session_options(const Args& args) {
    initiator::SessionOptions o;
    // As open-iscsi does: the host's name from /etc/iscsi/initiatorname.iscsi.
    if (args.has("--initiator-name")) o.initiator_name = args.get("--initiator-name");
    else if (std::string n = initiator_name_from_file(); !n.empty()) o.initiator_name = n;
    o.chap = chap_option(args, "--chap-user", "--chap-secret", "RBIO_CHAP_SECRET");
    o.chap_in = chap_option(args, "--chap-user-in", "--chap-secret-in", "RBIO_CHAP_SECRET_IN");
    if (o.chap_in && !o.chap) throw UsageError("--chap-user-in (mutual CHAP) needs --chap-user as well");
    if (o.chap_in && o.chap->secret == o.chap_in->secret)
        throw UsageError(
            "--chap-secret-in must differ from --chap-secret (RFC 7143: with one secret both "
            "ways, a false target answers the host's challenge with the host's own answer)");
    if (args.has("--transport")) {
        std::string t = args.get("--transport");
        if (t == "tcp") o.transport = initiator::Transport::Tcp;
        else if (t == "iser") o.transport = initiator::Transport::Iser;
        else throw UsageError("--transport: tcp or iser");
    }
    if (o.transport == initiator::Transport::Iser &&
        ((args.has("--header-digest") && args.get("--header-digest") != "none") ||
         (args.has("--data-digest") && args.get("--data-digest") != "none")))
        throw UsageError("--transport iser has no digests (RFC 7145): drop --header-digest/--data-digest");
    if (args.has("--header-digest") &&
        !initiator::parse_digest_policy(args.get("--header-digest"), o.offer.header_digest))
        throw UsageError("--header-digest: none, accept, prefer or crc32c");
    if (args.has("--data-digest") &&
        !initiator::parse_digest_policy(args.get("--data-digest"), o.offer.data_digest))
        throw UsageError("--data-digest: none, accept, prefer or crc32c");
    if (args.has("--connect-timeout"))
        o.connect_timeout = std::chrono::milliseconds(
            parse_uint("--connect-timeout", args.get("--connect-timeout"), 1, 3600) * 1000);
    if (args.has("--login-timeout"))
        o.login_timeout = std::chrono::milliseconds(
            parse_uint("--login-timeout", args.get("--login-timeout"), 1, 3600) * 1000);
    auto seconds = [&](const char* key, uint64_t lo, std::chrono::milliseconds& out) {
        if (args.has(key)) out = std::chrono::milliseconds(parse_uint(key, args.get(key), lo, 86400) * 1000);
    };
    seconds("--replacement-timeout", 0, o.replacement_timeout);
    seconds("--noop-out-interval", 0, o.noop_out_interval);
    seconds("--noop-out-timeout", 1, o.noop_out_timeout);
    seconds("--abort-timeout", 0, o.abort_timeout);
    seconds("--lu-reset-timeout", 1, o.lu_reset_timeout);
    if (args.has("--fence")) {
        const std::string f = args.get("--fence");
        if (f == "lu-reset") o.fence = initiator::Fence::LuReset;
        else if (f == "none") o.fence = initiator::Fence::None;
        else throw UsageError("--fence: lu-reset or none (got '" + f + "')");
    }
    return o;
}

}  // namespace rbio::cli
