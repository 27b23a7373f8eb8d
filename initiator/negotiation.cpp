#include "rbio/initiator/negotiation.hpp"

#include <algorithm>
#include <charconv>

#include "rbio/initiator/error.hpp"
#include "rbio/initiator/log.hpp"

namespace rbio::initiator {
namespace {

[[noreturn]] void bad_answer(std::string_view key, std::string_view offered, std::string_view answer,
                             const char* why) {
    fail(ErrorKind::Protocol, "negotiation: target answered " + std::string(key) + "=" + printable(answer) +
                                  " to our " + std::string(offered) + ": " + why);
}

const char* yes_no(bool b) { return b ? "Yes" : "No"; }

// Keys whose value the target declares about itself and that need no answer.
bool is_target_declaration(std::string_view key) {
    return key == "TargetAlias" || key == "TargetPortalGroupTag" || key == "TargetAddress" ||
           key == "MaxRecvDataSegmentLength" || key == "TargetName";
}

// RFC 7143 §6.2: answers that leave a key at its default.
bool is_non_value(std::string_view v) { return v == "Irrelevant" || v == "NotUnderstood" || v == "Reject"; }

}  // namespace

bool parse_digest_policy(std::string_view text, DigestPolicy& out) {
    if (text == "none") out = DigestPolicy::None;
    else if (text == "prefer") out = DigestPolicy::Prefer;
    else if (text == "accept") out = DigestPolicy::Accept;
    else if (text == "crc32c") out = DigestPolicy::Require;
    else return false;
    return true;
}

const char* digest_offer(DigestPolicy p) {
    switch (p) {
        case DigestPolicy::None: return "None";
        case DigestPolicy::Prefer: return "CRC32C,None";
        case DigestPolicy::Accept: return "None,CRC32C";
        case DigestPolicy::Require: return "CRC32C";
    }
    return "None";
}

std::string describe(const NegotiatedParams& p) {
    return std::string("HeaderDigest=") + (p.header_digest ? "CRC32C" : "None") +
           " DataDigest=" + (p.data_digest ? "CRC32C" : "None") +
           " MaxRecvDataSegmentLength=" + std::to_string(p.our_max_recv_data_segment_length) +
           " TargetMaxRecvDataSegmentLength=" + std::to_string(p.target_max_recv_data_segment_length) +
           " MaxBurstLength=" + std::to_string(p.max_burst_length) +
           " FirstBurstLength=" + std::to_string(p.first_burst_length) +
           " ImmediateData=" + yes_no(p.immediate_data) + " InitialR2T=" + yes_no(p.initial_r2t) +
           " MaxOutstandingR2T=" + std::to_string(p.max_outstanding_r2t) +
           " DataPDUInOrder=" + yes_no(p.data_pdu_in_order) +
           " DataSequenceInOrder=" + yes_no(p.data_sequence_in_order) +
           " ErrorRecoveryLevel=" + std::to_string(p.error_recovery_level) +
           " MaxConnections=" + std::to_string(p.max_connections) +
           (p.rdma_extensions ? " RDMAExtensions=Yes" : "");
}

uint32_t parse_number(std::string_view key, std::string_view value, uint32_t lo, uint32_t hi) {
    uint64_t v = 0;
    std::string_view digits = value;
    int base = 10;
    if (digits.size() > 2 && digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X')) {
        digits.remove_prefix(2);
        base = 16;
    }
    auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v, base);
    if (digits.empty() || ec != std::errc() || ptr != digits.data() + digits.size())
        fail(ErrorKind::Protocol,
             "negotiation: " + std::string(key) + "=" + printable(value) + " is not a number");
    if (v < lo || v > hi)
        fail(ErrorKind::Protocol, "negotiation: " + std::string(key) + "=" + printable(value) +
                                      " is outside " + std::to_string(lo) + ".." + std::to_string(hi));
    return uint32_t(v);
}

bool parse_bool(std::string_view key, std::string_view value) {
    if (value == "Yes") return true;
    if (value == "No") return false;
    fail(ErrorKind::Protocol,
         "negotiation: " + std::string(key) + "=" + printable(value) + " is neither Yes nor No");
}

uint32_t negotiate_min(std::string_view key, uint32_t offered, std::string_view answer, uint32_t lo,
                       uint32_t hi) {
    uint32_t v = parse_number(key, answer, lo, hi);
    if (v > offered) bad_answer(key, std::to_string(offered), answer, "more than offered (minimum rule)");
    return v;
}

bool negotiate_and(std::string_view key, bool offered, std::string_view answer) {
    bool v = parse_bool(key, answer);
    if (!offered && v) bad_answer(key, "No", answer, "AND rule leaves only No");
    return offered && v;
}

bool negotiate_or(std::string_view key, bool offered, std::string_view answer) {
    bool v = parse_bool(key, answer);
    if (offered && !v) bad_answer(key, "Yes", answer, "OR rule leaves only Yes");
    return offered || v;
}

std::string negotiate_list(std::string_view key, std::string_view offered_list, std::string_view answer) {
    size_t pos = 0;
    while (pos <= offered_list.size()) {
        size_t comma = offered_list.find(',', pos);
        if (comma == std::string_view::npos) comma = offered_list.size();
        if (offered_list.substr(pos, comma - pos) == answer) return std::string(answer);
        pos = comma + 1;
    }
    bad_answer(key, offered_list, answer, "not one of the offered values");
}

uint32_t respond_min(uint32_t ours, uint32_t theirs) { return std::min(ours, theirs); }
bool respond_and(bool ours, bool theirs) { return ours && theirs; }
bool respond_or(bool ours, bool theirs) { return ours || theirs; }

KeyValues operational_offer(const LoginOffer& o, bool discovery) {
    KeyValues kv;
    auto num = [](uint32_t v) { return std::to_string(v); };
    if (discovery) {
        kv = {{"HeaderDigest", "None"},
              {"DataDigest", "None"},
              {"MaxRecvDataSegmentLength", num(o.max_recv_data_segment_length)}};
        return kv;
    }
    const bool rdma = o.rdma_extensions;
    kv = {{"HeaderDigest", rdma ? "None" : digest_offer(o.header_digest)},
          {"DataDigest", rdma ? "None" : digest_offer(o.data_digest)},
          {"MaxRecvDataSegmentLength", num(o.max_recv_data_segment_length)},
          {"MaxBurstLength", num(o.max_burst_length)},
          {"FirstBurstLength", num(o.first_burst_length)},
          {"ImmediateData", yes_no(o.immediate_data)},
          {"InitialR2T", yes_no(o.initial_r2t)},
          {"MaxOutstandingR2T", num(o.max_outstanding_r2t)},
          {"DataPDUInOrder", yes_no(o.data_pdu_in_order)},
          {"DataSequenceInOrder", yes_no(o.data_sequence_in_order)},
          {"ErrorRecoveryLevel", "0"},
          {"MaxConnections", "1"}};
    if (rdma) {
        kv.insert(kv.begin(), {"RDMAExtensions", "Yes"});
        kv.emplace_back("InitiatorRecvDataSegmentLength", num(o.initiator_recv_data_segment_length));
        kv.emplace_back("TargetRecvDataSegmentLength", num(o.target_recv_data_segment_length));
    }
    return kv;
}

Negotiation::Negotiation(const LoginOffer& offer, bool discovery)
    : offer_(offer), discovery_(discovery), offered_(operational_offer(offer, discovery)) {
    p_.our_max_recv_data_segment_length = offer.max_recv_data_segment_length;
}

void Negotiation::apply(const KeyValues& keys, KeyValues& replies) {
    constexpr uint32_t kMaxLen = (1u << 24) - 1;
    for (const auto& [key, value] : keys) {
        if (key == "MaxRecvDataSegmentLength") {  // declarative (RFC 7143 §13.12)
            p_.target_max_recv_data_segment_length = parse_number(key, value, 512, kMaxLen);
            continue;
        }
        std::optional<std::string> offered = find_key(offered_, key);
        if (!offered) {
            if (is_target_declaration(key)) continue;
            // Offered first by the target: answer it in the next request.
            if (offer_.rdma_extensions && key == "MaxOutstandingUnexpectedPDUs") {
                parse_number(key, value, 0, UINT32_MAX);
                replies.emplace_back(key, "0");  // no limit of ours (min-or-zero)
            } else if (key == "ErrorRecoveryLevel" || key == "MaxConnections") {
                parse_number(key, value, 0, 65535);
                replies.emplace_back(key, key == "MaxConnections" ? "1" : "0");
            } else if (key == "DefaultTime2Wait") {
                // Maximum (RFC 7143 §13.15): the answer is at least the
                // target's; ours would be 0, no wait.
                replies.emplace_back(key, std::to_string(parse_number(key, value, 0, 3600)));
            } else if (key == "DefaultTime2Retain") {  // Minimum (§13.16)
                replies.emplace_back(key, std::to_string(respond_min(0, parse_number(key, value, 0, 3600))));
            } else if (key == "OFMarker" || key == "IFMarker") {
                replies.emplace_back(key, "No");
            } else {
                replies.emplace_back(key, "NotUnderstood");
            }
            continue;
        }
        if (std::find(answered_.begin(), answered_.end(), key) != answered_.end())
            fail(ErrorKind::Protocol, "negotiation: target answered " + key + " twice");
        answered_.push_back(key);
        if (is_non_value(value)) {
            RBIO_LOG(Info, "negotiation: target answered " << key << "=" << value << "; the default applies");
            continue;
        }
        if (key == "HeaderDigest") p_.header_digest = negotiate_list(key, *offered, value) == "CRC32C";
        else if (key == "DataDigest") p_.data_digest = negotiate_list(key, *offered, value) == "CRC32C";
        else if (key == "MaxBurstLength")
            p_.max_burst_length = negotiate_min(key, offer_.max_burst_length, value, 512, kMaxLen);
        else if (key == "FirstBurstLength")
            p_.first_burst_length = negotiate_min(key, offer_.first_burst_length, value, 512, kMaxLen);
        else if (key == "ImmediateData") p_.immediate_data = negotiate_and(key, offer_.immediate_data, value);
        else if (key == "InitialR2T") p_.initial_r2t = negotiate_or(key, offer_.initial_r2t, value);
        else if (key == "MaxOutstandingR2T")
            p_.max_outstanding_r2t = negotiate_min(key, offer_.max_outstanding_r2t, value, 1, 65535);
        else if (key == "DataPDUInOrder")
            p_.data_pdu_in_order = negotiate_or(key, offer_.data_pdu_in_order, value);
        else if (key == "DataSequenceInOrder")
            p_.data_sequence_in_order = negotiate_or(key, offer_.data_sequence_in_order, value);
        else if (key == "ErrorRecoveryLevel") p_.error_recovery_level = negotiate_min(key, 0, value, 0, 2);
        else if (key == "MaxConnections") p_.max_connections = negotiate_min(key, 1, value, 1, 65535);
        else if (key == "RDMAExtensions")
            p_.rdma_extensions = negotiate_and(key, offer_.rdma_extensions, value);
        else if (key == "InitiatorRecvDataSegmentLength")
            irdsl_ = negotiate_min(key, offer_.initiator_recv_data_segment_length, value, 512, kMaxLen);
        else if (key == "TargetRecvDataSegmentLength")
            trdsl_ = negotiate_min(key, offer_.target_recv_data_segment_length, value, 512, kMaxLen);
    }
}

const NegotiatedParams& Negotiation::finish() {
    auto answered = [&](std::string_view k) {
        return std::find(answered_.begin(), answered_.end(), k) != answered_.end();
    };
    // RFC 7143 defaults combined with our offer where the target kept silent.
    if (!discovery_) {
        if (!answered("ImmediateData")) p_.immediate_data = offer_.immediate_data && true;
        if (!answered("InitialR2T")) p_.initial_r2t = offer_.initial_r2t || true;
        if (!answered("MaxBurstLength"))
            p_.max_burst_length = std::min<uint32_t>(offer_.max_burst_length, 262144);
        if (!answered("FirstBurstLength"))
            p_.first_burst_length = std::min<uint32_t>(offer_.first_burst_length, 65536);
        if (!answered("MaxOutstandingR2T")) p_.max_outstanding_r2t = 1;
    }
    if (offer_.rdma_extensions) {
        if (!p_.rdma_extensions)
            fail(ErrorKind::LoginRefused, std::string("negotiation: the target ") +
                                              (answered("RDMAExtensions") ? "refused" : "did not answer") +
                                              " RDMAExtensions=Yes: not an iSER portal");
        // RFC 7145 §6.3: RDMAExtensions=Yes leaves no digests; the iSER
        // keys bound what each side SENDs (defaults 8192 when unanswered).
        if (p_.header_digest || p_.data_digest)
            fail(ErrorKind::Protocol, "negotiation: digests chosen with RDMAExtensions=Yes");
        p_.our_max_recv_data_segment_length = irdsl_;
        p_.target_max_recv_data_segment_length = trdsl_;
    }
    // A digest the user required (--header-digest/--data-digest crc32c) and
    // the target declined or left unanswered would leave the session
    // without the protection asked for, silently.
    auto required = [&](std::string_view key, DigestPolicy policy, bool chosen) {
        if (offer_.rdma_extensions || policy != DigestPolicy::Require || chosen) return;
        fail(ErrorKind::LoginRefused, "negotiation: " + std::string(key) +
                                          "=CRC32C is required and the target " +
                                          (answered(key) ? "declined it" : "did not answer it"));
    };
    required("HeaderDigest", offer_.header_digest, p_.header_digest);
    required("DataDigest", offer_.data_digest, p_.data_digest);
    if (p_.first_burst_length > p_.max_burst_length)
        fail(ErrorKind::Protocol, "negotiation: FirstBurstLength " + std::to_string(p_.first_burst_length) +
                                      " exceeds MaxBurstLength " + std::to_string(p_.max_burst_length));
    return p_;
}

}  // namespace rbio::initiator
