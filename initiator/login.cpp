// Login (security and operational negotiation, RFC 7143 §6, §12, §13),
// SendTargets discovery (Appendix C) and logout (§11.14).
#include <algorithm>
#include <stdexcept>

#include "iser_connection.hpp"
#include "rbio/initiator/error.hpp"
#include "rbio/initiator/log.hpp"
#include "session_impl.hpp"
#include "socket.hpp"
#include "tcp_connection.hpp"

namespace rbio::initiator {

using iser::BhsView;
using iser::Opcode;

namespace {

enum class Stage : uint8_t { Security = 0, Operational = 1, FullFeature = 3 };

// Login request flags (RFC 7143 §11.12.1): T, C, CSG, NSG.
constexpr uint8_t kTransit = 0x80;
constexpr uint8_t kContinue = 0x40;

// One login step's answer: the final response header and all text keys
// (continued over several PDUs if the target set C).
struct LoginStep {
    bool transit = false;
    Stage next = Stage::Security;
    KeyValues keys;
};

[[noreturn]] void login_status_error(const Portal& portal, const std::string& target, uint8_t cls,
                                     uint8_t detail) {
    char code[8];
    std::snprintf(code, sizeof code, "%02x%02x", cls, detail);
    std::string where = "login to " + (target.empty() ? std::string("discovery") : target) + " at " +
                        portal.to_string() + " refused (status 0x" + code + "): ";
    if (cls == 2 && (detail == 1 || detail == 2))
        fail(ErrorKind::AuthFailure,
             where + (detail == 1 ? "authentication failure" : "initiator not authorized"));
    if (cls == 2 && (detail == 3 || detail == 4))
        fail(ErrorKind::UnknownTarget, where + (detail == 3 ? "target not found" : "target removed"));
    if (cls == 1) fail(ErrorKind::LoginRefused, where + "target redirects with an unknown detail");
    if (cls == 2) fail(ErrorKind::LoginRefused, where + "initiator error");
    fail(ErrorKind::LoginRefused, where + "target error");
}

std::span<const uint8_t> as_bytes(const std::string& s) {
    return std::span(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

}  // namespace

void Session::Impl::verify_target_chap(const KeyValues& keys, const ChapChallenge& mine,
                                       const std::string& target) {
    const ChapCredentials& in = *options_.chap_in;
    auto name = find_key(keys, "CHAP_N");
    auto response = find_key(keys, "CHAP_R");
    std::string where = "login to " + target + " at " + portal_.to_string() + ": mutual CHAP: ";
    if (!name || !response)
        fail(ErrorKind::AuthFailure, where +
                                         "the target did not answer the initiator's challenge "
                                         "(no CHAP_N/CHAP_R; is an outgoing account bound to it?)");
    if (*name != in.username)
        fail(ErrorKind::AuthFailure,
             where + "the target calls itself '" + printable(*name) + "', expected '" + in.username + "'");
    if (!chap_md5_matches(mine.id, as_bytes(in.secret), mine.challenge, decode_binary_value(*response)))
        fail(ErrorKind::AuthFailure, where + "the target's CHAP_R is wrong: it does not know the secret");
    RBIO_LOG(Info, "target " << target << " authenticated itself as " << in.username);
}

Session::Impl::Captured Session::Impl::exchange(const iser::Bhs& request, std::vector<uint8_t> data,
                                                Opcode expect, Clock::time_point deadline, const char* what) {
    awaiting_ = expect;
    captured_.reset();
    queue_pdu(request, std::move(data), kNoTag);
    while (!captured_) {
        if (Clock::now() >= deadline)
            fail(ErrorKind::Timeout, "target " + portal_.to_string() + ": no answer to " + what);
        pass(deadline);
    }
    awaiting_.reset();
    Captured c = std::move(*captured_);
    captured_.reset();
    return c;
}

void Session::Impl::connect_and_login(const Portal& start, std::chrono::milliseconds connect_timeout) {
    constexpr int kMaxHops = 5;  // a loop of redirects must end
    Portal p = start;
    for (int hop = 0;; ++hop) {
        portal_ = p;
        // Where a session connects, and so picks the backend (a session
        // handed a connected fd wraps it in Impl's constructor); the old
        // connection goes first.
        conn_.reset();
        if (options_.transport == Transport::Iser)
            conn_ = IserConnection::connect(p, connect_timeout, options_.iser_regions, counters_, events());
        else
            conn_ = std::make_unique<TcpConnection>(connect_tcp(p, connect_timeout), p, options_, counters_,
                                                    events());
        tsih_ = 0;
        exp_stat_sn_ = 0;
        try {
            login();
            return;
        } catch (const LoginRedirect& r) {
            conn_.reset();
            RBIO_LOG(Info, "login to " << options_.target_name << " at " << p.to_string() << " redirected "
                                       << (r.permanent ? "permanently" : "temporarily") << " to "
                                       << r.to.to_string());
            if (hop + 1 >= kMaxHops)
                fail(ErrorKind::LoginRefused,
                     "login to " + options_.target_name + " at " + start.to_string() + ": more than " +
                         std::to_string(kMaxHops - 1) + " redirects (the last to " + r.to.to_string() + ")");
            if (r.permanent) home_portal_ = r.to;
            p = r.to;
        }
    }
}

void Session::Impl::login() {
    const Clock::time_point deadline = Clock::now() + options_.login_timeout;
    const uint32_t itt = allocate_itt();
    const bool discovery = options_.discovery;
    const std::string& target = options_.target_name;
    if (!discovery && target.empty()) throw std::invalid_argument("login: no target name");
    bool first_response = true;

    // Sends one login request and collects the response (with continuations).
    auto step = [&](Stage csg, Stage nsg, bool transit, const KeyValues& keys) {
        LoginStep out;
        std::vector<uint8_t> text;
        std::vector<uint8_t> payload = encode_text(keys);
        if (payload.size() > 8192) throw std::logic_error("login: request text beyond 8192 bytes");
        for (int round = 0;; ++round) {
            if (round > 64) protocol_error("login response text continues for more than 64 PDUs");
            iser::Bhs b;
            b.set_opcode(Opcode::LoginRequest, true)
                .set_flags(
                    uint8_t((transit ? kTransit : 0) | uint8_t(csg) << 2 | (transit ? uint8_t(nsg) : 0)))
                .set_data_segment_length(uint32_t(payload.size()))
                .set_itt(itt)
                .set_cmd_sn(cmd_sn_)
                .set_exp_stat_sn(exp_stat_sn_);
            std::copy(isid_.begin(), isid_.end(), b.raw().begin() + 8);  // ISID; TSIH 0
            Captured c = exchange(b, std::move(payload), Opcode::LoginResponse, deadline, "login request");
            payload.clear();
            BhsView h = c.header();
            const uint8_t* r = h.bytes().data();
            if (h.itt() != itt) protocol_error("login response for another ITT");
            // A refusal may not echo the ISID (tgt zeroes it): status first.
            if (r[36] == 1 && (r[37] == 1 || r[37] == 2)) {
                // Target moved temporarily (1) or permanently (2): TargetAddress says where.
                auto to = find_key(parse_text(c.data), "TargetAddress");
                if (!to) protocol_error("login redirect without a TargetAddress");
                std::string_view a = *to;
                // ",TPGT" after the port, or right after an IPv6 address's
                // ']' (the port is optional): "[2001:db8::1],1".
                const size_t bracket = a.rfind(']');
                if (size_t comma = a.rfind(',');
                    comma != std::string_view::npos && (bracket == std::string_view::npos || comma > bracket))
                    a = a.substr(0, comma);  // ",TPGT"
                try {
                    throw LoginRedirect{Portal::parse(a), r[37] == 2};
                } catch (const std::invalid_argument& e) {
                    // (the message quotes the target's text)
                    protocol_error("login redirect to a bad TargetAddress: " + printable(e.what(), 200));
                }
            }
            if (r[36] != 0) login_status_error(portal_, target, r[36], r[37]);
            if (!std::equal(isid_.begin(), isid_.end(), r + 8))
                protocol_error("login response carries another ISID");
            if (r[3] != 0) protocol_error("login response with version-active " + std::to_string(r[3]));
            if (!first_response && h.stat_sn() != exp_stat_sn_)
                protocol_error("login response with StatSN " + std::to_string(h.stat_sn()) + ", expected " +
                               std::to_string(exp_stat_sn_));
            first_response = false;
            exp_stat_sn_ = h.stat_sn() + 1;
            // tgt 1.0.85's own iSER login counts each (immediate) Login
            // Request into ExpCmdSN (iSER only; see after the login).
            const bool counted = options_.transport == Transport::Iser && h.exp_cmd_sn() == cmd_sn_ + 1;
            if ((sn_gt(h.exp_cmd_sn(), cmd_sn_) && !counted) || sn_lt(h.max_cmd_sn(), h.exp_cmd_sn() - 1))
                protocol_error("login response with ExpCmdSN " + std::to_string(h.exp_cmd_sn()) +
                               " MaxCmdSN " + std::to_string(h.max_cmd_sn()) + " for CmdSN " +
                               std::to_string(cmd_sn_));
            exp_cmd_sn_ = h.exp_cmd_sn();
            max_cmd_sn_ = h.max_cmd_sn();
            uint8_t f = h.flags();
            bool t = f & kTransit, cont = f & kContinue;
            if (t && cont) protocol_error("login response with both T and C set");
            if (Stage((f >> 2) & 3) != csg) protocol_error("login response for another stage");
            text.insert(text.end(), c.data.begin(), c.data.end());
            if (cont) continue;  // more text follows: ask with an empty request
            if (t) {
                Stage n = Stage(f & 3);
                if (!transit || uint8_t(n) <= uint8_t(csg) || uint8_t(n) > uint8_t(nsg) || uint8_t(n) == 2)
                    protocol_error("login response moves to stage " + std::to_string(int(n)) + " from " +
                                   std::to_string(int(csg)));
                out.transit = true;
                out.next = n;
                tsih_ = uint16_t(r[14] << 8 | r[15]);
            }
            out.keys = parse_text(text);
            return out;
        }
    };

    KeyValues first = {{"InitiatorName", options_.initiator_name},
                       {"SessionType", discovery ? "Discovery" : "Normal"}};
    if (!discovery) first.emplace_back("TargetName", target);

    // ---- security negotiation
    LoginStep s;
    auto transit_security = [&](KeyValues keys) {
        for (int i = 0; i < 4; ++i) {
            s = step(Stage::Security, Stage::Operational, true, keys);
            keys.clear();
            if (s.transit) return;
        }
        protocol_error("target does not leave the security stage");
    };
    if (!options_.chap) {
        first.emplace_back("AuthMethod", "None");
        s = step(Stage::Security, Stage::Operational, true, first);
        auto method = find_key(s.keys, "AuthMethod");
        if (method && *method != "None")
            fail(ErrorKind::AuthFailure, "login to " + target + " at " + portal_.to_string() +
                                             ": target requires authentication (AuthMethod=" +
                                             printable(*method) + "); give --chap-user/--chap-secret");
        if (!s.transit) transit_security({});
    } else {
        first.emplace_back("AuthMethod", "CHAP,None");
        s = step(Stage::Security, Stage::Operational, false, first);
        auto method = find_key(s.keys, "AuthMethod");
        if (!method || *method == "Reject")
            fail(ErrorKind::AuthFailure,
                 "login at " + portal_.to_string() + ": target accepts neither CHAP nor None");
        if (*method == "None") {
            if (options_.chap_in)
                fail(ErrorKind::AuthFailure, "login to " + target + " at " + portal_.to_string() +
                                                 ": mutual CHAP asked for, but the target chose "
                                                 "AuthMethod=None and cannot be authenticated");
            RBIO_LOG(Info, "target needs no authentication; CHAP not used");
            if (!s.transit) transit_security({});
        } else if (*method == "CHAP") {
            s = step(Stage::Security, Stage::Operational, false, {{"CHAP_A", std::to_string(kChapMd5)}});
            auto alg = find_key(s.keys, "CHAP_A");
            auto id = find_key(s.keys, "CHAP_I");
            auto challenge = find_key(s.keys, "CHAP_C");
            if (!alg || *alg != std::to_string(kChapMd5) || !id || !challenge)
                protocol_error("CHAP: target sent no MD5 identifier and challenge");
            uint32_t ident = parse_number("CHAP_I", *id, 0, 255);
            std::vector<uint8_t> c = decode_binary_value(*challenge);
            if (c.size() > 1024) protocol_error("CHAP: challenge of " + std::to_string(c.size()) + " bytes");
            const auto& cred = *options_.chap;
            // Mutual CHAP with no secret, or the initiator's own, is no
            // check of the target: MD5 over no secret is anyone's, and with
            // one secret both ways a false target answers our challenge
            // with our answer to it, got from another login (RFC 7143
            // §12.1.3). Refused before anything goes out.
            if (options_.chap_in &&
                (options_.chap_in->secret.empty() || options_.chap_in->secret == cred.secret))
                fail(ErrorKind::AuthFailure,
                     "login to " + target + " at " + portal_.to_string() +
                         ": mutual CHAP: the target's secret is " +
                         (options_.chap_in->secret.empty() ? "empty" : "the initiator's") +
                         "; give it a secret of its own");
            auto resp = chap_md5_response(uint8_t(ident), as_bytes(cred.secret), c);
            KeyValues answer = {{"CHAP_N", cred.username}, {"CHAP_R", encode_hex_value(resp)}};
            if (!options_.chap_in) {
                transit_security(std::move(answer));
            } else {
                // Mutual CHAP (RFC 7143 §12.1.3): our challenge goes with our
                // answer; the target's answer comes with the next response.
                // A challenge equal to the target's would let it reflect ours.
                ChapChallenge mine = make_chap_challenge();
                while (mine.challenge == c) mine = make_chap_challenge();
                answer.emplace_back("CHAP_I", std::to_string(mine.id));
                answer.emplace_back("CHAP_C", encode_hex_value(mine.challenge));
                s = step(Stage::Security, Stage::Operational, true, answer);
                verify_target_chap(s.keys, mine, target);
                if (!s.transit) transit_security({});
            }
        } else {
            protocol_error("target chose AuthMethod=" + printable(*method) + ", which was not offered");
        }
    }

    // ---- operational negotiation
    Negotiation neg(options_.offer, discovery);
    KeyValues keys = operational_offer(options_.offer, discovery);
    if (s.next != Stage::Operational) protocol_error("target skipped the operational stage");
    for (int round = 0;; ++round) {
        if (round > 8) protocol_error("operational negotiation does not end");
        LoginStep o = step(Stage::Operational, Stage::FullFeature, true, keys);
        keys.clear();
        neg.apply(o.keys, keys);
        if (o.transit) break;
    }
    if (tsih_ == 0) protocol_error("final login response with TSIH 0");
    if (exp_cmd_sn_ == cmd_sn_ + 1) {
        // The quirk above: the target's login counted the Login Request, but
        // its session was made before that and expects CmdSN cmd_sn_ (tgt
        // 1.0.85's iser_login_finish); its MaxCmdSN lags behind. Send from
        // cmd_sn_ with a window of one: the first response opens it for real.
        RBIO_LOG(Info, "target " << portal_.to_string() << " answered the login with ExpCmdSN " << exp_cmd_sn_
                                 << " MaxCmdSN " << max_cmd_sn_ << "; starting at CmdSN " << cmd_sn_);
        exp_cmd_sn_ = cmd_sn_;
        if (sn_lt(max_cmd_sn_, cmd_sn_)) max_cmd_sn_ = cmd_sn_;
    }
    params_ = neg.finish();
    enter_full_feature();
    RBIO_LOG(Info, "logged in to " << (discovery ? std::string("discovery") : target) << " at "
                                   << portal_.to_string() << " (TSIH " << tsih_
                                   << "): " << describe(params_));
}

std::vector<DiscoveredTarget> Session::Impl::send_targets() {
    const Clock::time_point deadline = Clock::now() + options_.login_timeout;
    const uint32_t itt = allocate_itt();
    uint32_t ttt = kNoTag;
    std::vector<uint8_t> payload = encode_text({{"SendTargets", "All"}});
    std::vector<uint8_t> text;
    for (int round = 0;; ++round) {
        if (round > 256) protocol_error("SendTargets response continues for more than 256 PDUs");
        if (sn_gt(cmd_sn_, max_cmd_sn_)) protocol_error("CmdSN window closed during discovery");
        iser::Bhs b(Opcode::TextRequest);
        b.set_final(true)
            .set_data_segment_length(uint32_t(payload.size()))
            .set_itt(itt)
            .set_ttt(ttt)
            .set_cmd_sn(cmd_sn_++)
            .set_exp_stat_sn(exp_stat_sn_);
        Captured c = exchange(b, std::move(payload), Opcode::TextResponse, deadline, "SendTargets");
        payload.clear();
        BhsView h = c.header();
        if (h.itt() != itt) protocol_error("Text Response for another ITT");
        bool f = h.flags() & 0x80, cont = h.flags() & 0x40;
        if (f && cont) protocol_error("Text Response with both F and C set");
        text.insert(text.end(), c.data.begin(), c.data.end());
        if (f) {
            if (h.ttt() != kNoTag) protocol_error("final Text Response with a Target Transfer Tag");
            break;
        }
        ttt = h.ttt();
        if (ttt == kNoTag) protocol_error("Text Response to be continued without a Target Transfer Tag");
    }
    std::vector<DiscoveredTarget> out;
    for (const auto& [k, v] : parse_text(text)) {
        if (k == "TargetName") {
            out.push_back({v, {}});
        } else if (k == "TargetAddress") {
            if (out.empty()) protocol_error("SendTargets: TargetAddress before any TargetName");
            out.back().addresses.push_back(v);
        }
    }
    return out;
}

void Session::Impl::logout(std::chrono::milliseconds timeout) {
    if (!tasks_.empty()) throw std::logic_error("logout with commands outstanding");
    if (down_) {
        RBIO_LOG(Info,
                 "no connection to " << portal_.to_string() << " while reinstating: nothing to log out of");
        return;
    }
    const uint32_t itt = allocate_itt();
    iser::Bhs b;
    b.set_opcode(Opcode::LogoutRequest, true)
        .set_flags(0x80)  // reason 0: close the session
        .set_itt(itt)
        .set_cmd_sn(cmd_sn_)
        .set_exp_stat_sn(exp_stat_sn_);
    std::optional<Captured> answer;
    try {
        answer = exchange(b, {}, Opcode::LogoutResponse, Clock::now() + timeout, "logout");
    } catch (const InitiatorError& e) {
        // The session ends either way. istgt sometimes closes the connection
        // before its Logout Response leaves (the race is on its side).
        if (e.kind() != ErrorKind::ConnectionLost) throw;
        RBIO_LOG(Info, "target " << portal_.to_string()
                                 << " closed the connection without a Logout Response: " << e.what());
        return;
    }
    const Captured& c = *answer;
    if (c.header().itt() != itt) protocol_error("Logout Response for another ITT");
    if (uint8_t resp = c.bhs[2]; resp != 0)
        protocol_error("logout refused with response " + std::to_string(resp));
    RBIO_LOG(Info, "logged out of " << portal_.to_string());
}

}  // namespace rbio::initiator
