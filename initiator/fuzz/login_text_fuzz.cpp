// libFuzzer target for what a target says during login and in text
// responses: the key=value text (RFC 7143 §6.1) and the operational
// negotiation it drives (§6.2, §13). The input is split into the data
// segments of several login responses; each is parsed and applied to one
// Negotiation, as login.cpp does. A target that breaks the rules must end
// the negotiation with InitiatorError (and nothing else); one that follows
// them must leave parameters within RFC 7143's ranges.
//
// Input: byte 0 = offer bits (0-1 header digest policy, 2 ImmediateData,
// 3 InitialR2T, 4 discovery, 5-6 data digest policy), then segments
// separated by 0xff bytes.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <vector>

#include "rbio/initiator/error.hpp"
#include "rbio/initiator/negotiation.hpp"
#include "rbio/initiator/text.hpp"

#include "rbio/common/fuzz_check.hpp"

using namespace rbio::initiator;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 1) return 0;
    const uint8_t bits = data[0];
    LoginOffer offer;
    const DigestPolicy policies[] = {DigestPolicy::None, DigestPolicy::Prefer, DigestPolicy::Accept,
                                     DigestPolicy::Require};
    offer.header_digest = policies[bits & 3];
    offer.data_digest = policies[(bits >> 5) & 3];
    offer.immediate_data = bits & 4;
    offer.initial_r2t = bits & 8;
    const bool discovery = bits & 16;

    Negotiation n(offer, discovery);
    try {
        // What parses survives a round trip through our own encoder.
        KeyValues all = parse_text({data + 1, size - 1});
        KeyValues again = parse_text(encode_text(all));
        FUZZ_CHECK(again == all);

        size_t start = 1;
        for (size_t i = 1; i <= size; ++i) {
            if (i < size && data[i] != 0xff) continue;
            KeyValues keys = parse_text({data + start, i - start});
            KeyValues replies;
            n.apply(keys, replies);
            start = i + 1;
        }
        const NegotiatedParams& p = n.finish();
        FUZZ_CHECK(p.target_max_recv_data_segment_length >= 512 &&
                   p.target_max_recv_data_segment_length <= 16777215);
        FUZZ_CHECK(p.max_burst_length >= 512 && p.first_burst_length <= p.max_burst_length);
        (void)describe(p);
    } catch (const InitiatorError&) {
        // a target breaking the rules: the login ends, as it should
    }
    return 0;
}
