#pragma once
// Operational parameter negotiation (RFC 7143 §6.2, §13): what the initiator
// offers, the result function of each key, and the checks of the target's
// answers. Pure functions over key=value lists, unit-tested without a target.
#include <cstdint>
#include <string>
#include <string_view>

#include "rbio/initiator/text.hpp"

namespace rbio::initiator {

// What we accept for HeaderDigest / DataDigest.
enum class DigestPolicy : uint8_t {
    None,     // offer "None"
    Prefer,   // offer "CRC32C,None": digests if the target agrees
    Accept,   // offer "None,CRC32C": no digests unless the target insists
    Require,  // offer "CRC32C"
};
// "none", "prefer", "accept", "crc32c" (= Require).
bool parse_digest_policy(std::string_view text, DigestPolicy& out);
const char* digest_offer(DigestPolicy p);

// What the initiator proposes at login.
struct LoginOffer {
    DigestPolicy header_digest = DigestPolicy::Accept;
    DigestPolicy data_digest = DigestPolicy::Accept;
    uint32_t max_recv_data_segment_length = 262144;  // ours; declarative
    uint32_t max_burst_length = 1u << 20;
    uint32_t first_burst_length = 262144;
    bool immediate_data = true;
    bool initial_r2t = false;
    uint32_t max_outstanding_r2t = 1;
    bool data_pdu_in_order = true;
    bool data_sequence_in_order = true;
    // iSER (RFC 7145 §6.3): RDMAExtensions=Yes, digests None, and the iSER
    // keys that replace MaxRecvDataSegmentLength for SENDs.
    bool rdma_extensions = false;
    uint32_t initiator_recv_data_segment_length = 8192;  // what our receive buffers hold
    uint32_t target_recv_data_segment_length = 8192;     // what we may send at most
};

// The session's parameters after login; defaults are RFC 7143's.
struct NegotiatedParams {
    bool header_digest = false;
    bool data_digest = false;
    uint32_t our_max_recv_data_segment_length = 8192;     // we declared
    uint32_t target_max_recv_data_segment_length = 8192;  // the target declared
    uint32_t max_burst_length = 262144;
    uint32_t first_burst_length = 65536;
    bool immediate_data = true;
    bool initial_r2t = true;
    uint32_t max_outstanding_r2t = 1;
    bool data_pdu_in_order = true;
    bool data_sequence_in_order = true;
    uint32_t error_recovery_level = 0;
    uint32_t max_connections = 1;
    // iSER: when set, our_/target_max_recv_data_segment_length above hold the
    // negotiated Initiator-/TargetRecvDataSegmentLength.
    bool rdma_extensions = false;
};

// One line for logs: "HeaderDigest=CRC32C DataDigest=None ...".
std::string describe(const NegotiatedParams& p);

// ---- result functions (RFC 7143 §13). Each checks that the responder's
// answer is a legal result for the offer and returns it; an illegal answer
// throws InitiatorError(Protocol) naming the key and the values.

// Numbers: decimal or 0x-hex (RFC 7143 §6.1), within [lo, hi].
uint32_t parse_number(std::string_view key, std::string_view value, uint32_t lo, uint32_t hi);
// Yes/No.
bool parse_bool(std::string_view key, std::string_view value);
// Minimum: the answer must not exceed the offer.
uint32_t negotiate_min(std::string_view key, uint32_t offered, std::string_view answer, uint32_t lo,
                       uint32_t hi);
// Boolean AND (ImmediateData): an offer of No leaves only No.
bool negotiate_and(std::string_view key, bool offered, std::string_view answer);
// Boolean OR (InitialR2T, DataPDUInOrder, DataSequenceInOrder): an offer of
// Yes leaves only Yes.
bool negotiate_or(std::string_view key, bool offered, std::string_view answer);
// List: the answer must be one of the offered values.
std::string negotiate_list(std::string_view key, std::string_view offered_list, std::string_view answer);

// ---- as the responder, for keys the target offers first
//
// Our answer to a numeric key under a minimum rule: min(ours, theirs).
uint32_t respond_min(uint32_t ours, uint32_t theirs);
bool respond_and(bool ours, bool theirs);
bool respond_or(bool ours, bool theirs);

// ---- whole exchange

// Keys of the operational stage (ErrorRecoveryLevel=0, MaxConnections=1 and
// the rest of LoginOffer). A discovery session only negotiates digests
// (None) and MaxRecvDataSegmentLength.
KeyValues operational_offer(const LoginOffer& offer, bool discovery);

// Tracks one operational negotiation: apply each login response's keys as
// they come, then finish() for keys the target never answered.
class Negotiation {
public:
    Negotiation(const LoginOffer& offer, bool discovery);
    // The target's keys of one response. Answers to our offers are checked
    // and applied; keys the target offers first get a reply appended to
    // `replies` (for the next request); declarations are recorded.
    void apply(const KeyValues& keys, KeyValues& replies);
    // Keys offered but never answered keep RFC 7143's defaults combined with
    // the offer; checks FirstBurstLength <= MaxBurstLength.
    const NegotiatedParams& finish();
    const NegotiatedParams& params() const { return p_; }

private:
    LoginOffer offer_;
    bool discovery_;
    KeyValues offered_;
    NegotiatedParams p_;
    std::vector<std::string> answered_;
    uint32_t irdsl_ = 8192;  // iSER: InitiatorRecvDataSegmentLength (RFC 7145 default)
    uint32_t trdsl_ = 8192;  // TargetRecvDataSegmentLength
};

}  // namespace rbio::initiator
