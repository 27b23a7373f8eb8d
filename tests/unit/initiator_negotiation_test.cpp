// RFC 7143 §13 result functions and the operational exchange of the
// initiator (initiator/negotiation.cpp), against plain key=value lists.
#include <gtest/gtest.h>

#include "rbio/initiator/chap.hpp"
#include "rbio/initiator/error.hpp"
#include "rbio/initiator/negotiation.hpp"

using namespace rbio::initiator;

namespace {

bool throws_protocol(const std::function<void()>& f) {
    try {
        f();
    } catch (const InitiatorError& e) {
        return e.kind() == ErrorKind::Protocol;
    }
    return false;
}

}  // namespace

TEST(InitiatorNegotiation, MinimumRuleTakesTheAnswerUpToTheOffer) {  // §13.13 MaxBurstLength
    EXPECT_EQ(negotiate_min("MaxBurstLength", 1048576, "262144", 512, 16777215), 262144u);
    EXPECT_EQ(negotiate_min("MaxBurstLength", 262144, "262144", 512, 16777215), 262144u);
    EXPECT_TRUE(throws_protocol([] { negotiate_min("MaxBurstLength", 65536, "262144", 512, 16777215); }));
    EXPECT_TRUE(throws_protocol([] { negotiate_min("MaxBurstLength", 65536, "100", 512, 16777215); }));
    EXPECT_TRUE(throws_protocol([] { negotiate_min("MaxBurstLength", 65536, "12ab", 512, 16777215); }));
    EXPECT_EQ(negotiate_min("FirstBurstLength", 65536, "0x1000", 512, 16777215), 4096u);
}

TEST(InitiatorNegotiation, AndRule) {  // §13.11 ImmediateData
    EXPECT_TRUE(negotiate_and("ImmediateData", true, "Yes"));
    EXPECT_FALSE(negotiate_and("ImmediateData", true, "No"));
    EXPECT_FALSE(negotiate_and("ImmediateData", false, "No"));
    EXPECT_TRUE(throws_protocol([] { negotiate_and("ImmediateData", false, "Yes"); }));
    EXPECT_TRUE(throws_protocol([] { negotiate_and("ImmediateData", true, "yes"); }));
}

TEST(InitiatorNegotiation, OrRule) {  // §13.10 InitialR2T, §13.18-19 in-order keys
    EXPECT_TRUE(negotiate_or("InitialR2T", false, "Yes"));
    EXPECT_FALSE(negotiate_or("InitialR2T", false, "No"));
    EXPECT_TRUE(negotiate_or("InitialR2T", true, "Yes"));
    EXPECT_TRUE(throws_protocol([] { negotiate_or("DataPDUInOrder", true, "No"); }));
}

TEST(InitiatorNegotiation, ListRuleAnswerMustBeOffered) {  // §13.1 digests
    EXPECT_EQ(negotiate_list("HeaderDigest", "None,CRC32C", "CRC32C"), "CRC32C");
    EXPECT_EQ(negotiate_list("HeaderDigest", "CRC32C,None", "None"), "None");
    EXPECT_TRUE(throws_protocol([] { negotiate_list("HeaderDigest", "None", "CRC32C"); }));
    EXPECT_TRUE(throws_protocol([] { negotiate_list("DataDigest", "CRC32C", "MD5"); }));
}

TEST(InitiatorNegotiation, ResponderSide) {
    EXPECT_EQ(respond_min(65536, 262144), 65536u);
    EXPECT_FALSE(respond_and(true, false));
    EXPECT_TRUE(respond_or(false, true));
}

TEST(InitiatorNegotiation, OfferHasEveryOperationalKey) {
    LoginOffer o;
    KeyValues kv = operational_offer(o, false);
    for (const char* k : {"HeaderDigest", "DataDigest", "MaxRecvDataSegmentLength", "MaxBurstLength",
                          "FirstBurstLength", "ImmediateData", "InitialR2T", "MaxOutstandingR2T",
                          "DataPDUInOrder", "DataSequenceInOrder", "ErrorRecoveryLevel", "MaxConnections"})
        EXPECT_TRUE(find_key(kv, k)) << k;
    EXPECT_EQ(*find_key(kv, "ErrorRecoveryLevel"), "0");
    EXPECT_EQ(*find_key(kv, "MaxConnections"), "1");
    EXPECT_EQ(operational_offer(o, true).size(), 3u);
}

TEST(InitiatorNegotiation, ExchangeWithTgtLikeAnswers) {
    LoginOffer o;
    o.header_digest = DigestPolicy::Accept;
    Negotiation n(o, false);
    KeyValues replies;
    n.apply({{"HeaderDigest", "CRC32C"},
             {"DataDigest", "None"},
             {"MaxRecvDataSegmentLength", "8192"},
             {"MaxBurstLength", "262144"},
             {"FirstBurstLength", "65536"},
             {"ImmediateData", "Yes"},
             {"InitialR2T", "Yes"},
             {"MaxOutstandingR2T", "1"},
             {"DataPDUInOrder", "Yes"},
             {"DataSequenceInOrder", "Yes"},
             {"ErrorRecoveryLevel", "0"},
             {"MaxConnections", "1"},
             {"TargetAlias", "x"},
             {"X-vendor-key", "1"}},
            replies);
    const NegotiatedParams& p = n.finish();
    EXPECT_TRUE(p.header_digest);
    EXPECT_FALSE(p.data_digest);
    EXPECT_EQ(p.target_max_recv_data_segment_length, 8192u);
    EXPECT_EQ(p.our_max_recv_data_segment_length, o.max_recv_data_segment_length);
    EXPECT_EQ(p.max_burst_length, 262144u);
    EXPECT_EQ(p.first_burst_length, 65536u);
    EXPECT_TRUE(p.initial_r2t);
    ASSERT_EQ(replies.size(), 1u);  // the unknown key, answered NotUnderstood
    EXPECT_EQ(replies[0].second, "NotUnderstood");
}

// Keys the target offers first: DefaultTime2Wait's result is the Maximum
// (§13.15), so the answer is the target's value, not 0; DefaultTime2Retain's
// the Minimum (§13.16), so 0, ours.
TEST(InitiatorNegotiation, TimeKeysTheTargetOffersAreAnsweredByTheirRules) {
    Negotiation n(LoginOffer{}, false);
    KeyValues replies;
    n.apply({{"DefaultTime2Wait", "2"}, {"DefaultTime2Retain", "20"}}, replies);
    ASSERT_EQ(replies.size(), 2u);
    EXPECT_EQ(replies[0], (std::pair<std::string, std::string>{"DefaultTime2Wait", "2"}));
    EXPECT_EQ(replies[1], (std::pair<std::string, std::string>{"DefaultTime2Retain", "0"}));
}

TEST(InitiatorNegotiation, UnansweredKeysKeepDefaults) {
    LoginOffer o;
    o.initial_r2t = false;
    Negotiation n(o, false);
    KeyValues replies;
    n.apply({{"MaxBurstLength", "Irrelevant"}}, replies);
    const NegotiatedParams& p = n.finish();
    EXPECT_TRUE(p.initial_r2t);  // default Yes OR our No
    EXPECT_EQ(p.max_burst_length, 262144u);
    EXPECT_EQ(p.first_burst_length, 65536u);
    EXPECT_EQ(p.target_max_recv_data_segment_length, 8192u);
}

TEST(InitiatorNegotiation, IserKeys) {  // RFC 7145 §6.3
    LoginOffer o;
    o.rdma_extensions = true;
    o.header_digest = o.data_digest = DigestPolicy::Prefer;  // overridden: None
    KeyValues offer = operational_offer(o, false);
    EXPECT_EQ(find_key(offer, "RDMAExtensions"), "Yes");
    EXPECT_EQ(find_key(offer, "HeaderDigest"), "None");
    EXPECT_EQ(find_key(offer, "DataDigest"), "None");
    EXPECT_EQ(find_key(offer, "TargetRecvDataSegmentLength"), "8192");
    EXPECT_EQ(find_key(offer, "InitiatorRecvDataSegmentLength"), "8192");
    {  // tgt-like answers: the iSER lengths replace MaxRecvDataSegmentLength
        Negotiation n(o, false);
        KeyValues replies;
        n.apply({{"RDMAExtensions", "Yes"},
                 {"HeaderDigest", "None"},
                 {"DataDigest", "None"},
                 {"TargetRecvDataSegmentLength", "4096"},
                 {"InitiatorRecvDataSegmentLength", "8192"},
                 {"MaxRecvDataSegmentLength", "262144"},
                 {"MaxOutstandingUnexpectedPDUs", "0"}},
                replies);
        const NegotiatedParams& p = n.finish();
        EXPECT_TRUE(p.rdma_extensions);
        EXPECT_EQ(p.target_max_recv_data_segment_length, 4096u);
        EXPECT_EQ(p.our_max_recv_data_segment_length, 8192u);
        ASSERT_EQ(replies.size(), 1u);
        EXPECT_EQ(replies[0], (std::pair<std::string, std::string>{"MaxOutstandingUnexpectedPDUs", "0"}));
    }
    KeyValues replies;
    auto refused = [&](const KeyValues& answers) {
        try {
            Negotiation n(o, false);
            n.apply(answers, replies);
            n.finish();
        } catch (const InitiatorError& e) {
            return e.kind() == ErrorKind::LoginRefused;
        }
        return false;
    };
    EXPECT_TRUE(refused({{"RDMAExtensions", "No"}}));  // not an iSER portal
    EXPECT_TRUE(refused({}));                          // silent: default No
    EXPECT_TRUE(throws_protocol([&] {                  // beyond our offer (minimum rule)
        Negotiation(o, false).apply({{"TargetRecvDataSegmentLength", "65536"}}, replies);
    }));
    EXPECT_TRUE(throws_protocol([&] {  // digests with RDMAExtensions=Yes
        LoginOffer d = o;
        d.header_digest = DigestPolicy::Require;
        Negotiation n(d, false);
        n.apply({{"RDMAExtensions", "Yes"}, {"HeaderDigest", "CRC32C"}}, replies);
        n.finish();
    }));
}

TEST(InitiatorNegotiation, BadAnswersEndTheLogin) {
    LoginOffer o;
    KeyValues replies;
    EXPECT_TRUE(throws_protocol([&] {
        Negotiation(o, false).apply({{"ErrorRecoveryLevel", "1"}}, replies);
    }));
    EXPECT_TRUE(throws_protocol([&] { Negotiation(o, false).apply({{"MaxConnections", "2"}}, replies); }));
    EXPECT_TRUE(throws_protocol([&] {
        Negotiation(o, false).apply({{"ImmediateData", "Yes"}, {"ImmediateData", "No"}}, replies);
    }));
    EXPECT_TRUE(throws_protocol([&] {
        Negotiation(o, false).apply({{"MaxRecvDataSegmentLength", "100"}}, replies);
    }));
    EXPECT_TRUE(throws_protocol([&] {  // FirstBurstLength above MaxBurstLength
        Negotiation n(o, false);
        n.apply({{"MaxBurstLength", "4096"}, {"FirstBurstLength", "8192"}}, replies);
        n.finish();
    }));
}

// --header-digest/--data-digest crc32c: a target that declines the digest
// or says nothing of it refuses the login; it does not go on without one.
TEST(InitiatorNegotiation, ARequiredDigestTheTargetDeclinesEndsTheLogin) {
    LoginOffer o;
    o.header_digest = DigestPolicy::Require;
    o.data_digest = DigestPolicy::Require;
    auto refusal = [&](const KeyValues& answers) -> std::string {
        try {
            Negotiation n(o, false);
            KeyValues replies;
            n.apply(answers, replies);
            n.finish();
        } catch (const InitiatorError& e) {
            return e.kind() == ErrorKind::LoginRefused ? e.what() : "";
        }
        return "";
    };
    EXPECT_NE(refusal({{"HeaderDigest", "Reject"}, {"DataDigest", "CRC32C"}})
                  .find("HeaderDigest=CRC32C is required and the target declined it"),
              std::string::npos);
    EXPECT_NE(refusal({{"HeaderDigest", "CRC32C"}})
                  .find("DataDigest=CRC32C is required and the target did not answer it"),
              std::string::npos);
    EXPECT_NE(refusal({{"HeaderDigest", "CRC32C"}, {"DataDigest", "Irrelevant"}}).find("DataDigest"),
              std::string::npos);
    Negotiation n(o, false);
    KeyValues replies;
    n.apply({{"HeaderDigest", "CRC32C"}, {"DataDigest", "CRC32C"}}, replies);
    const NegotiatedParams& p = n.finish();
    EXPECT_TRUE(p.header_digest && p.data_digest);
    // Prefer (or Accept) takes None as an answer.
    o.header_digest = o.data_digest = DigestPolicy::Prefer;
    Negotiation prefer(o, false);
    prefer.apply({{"HeaderDigest", "None"}}, replies);
    EXPECT_FALSE(prefer.finish().header_digest);
}

TEST(InitiatorText, RoundTripAndMalformed) {
    KeyValues kv = {{"SendTargets", "All"}, {"TargetName", "iqn.x:y"}};
    auto bytes = encode_text(kv);
    EXPECT_EQ(parse_text(bytes), kv);
    bytes.push_back(0);  // padding NULs are fine
    EXPECT_EQ(parse_text(bytes), kv);
    std::vector<uint8_t> no_nul = {'a', '=', 'b'};
    EXPECT_TRUE(throws_protocol([&] { parse_text(no_nul); }));
    std::vector<uint8_t> no_eq = {'a', 'b', 0};
    EXPECT_TRUE(throws_protocol([&] { parse_text(no_eq); }));
    std::vector<uint8_t> empty_key = {'=', 'b', 0};
    EXPECT_TRUE(throws_protocol([&] { parse_text(empty_key); }));
}

// A target's value in a message: an escape sequence would reach the
// admin's terminal, a long value would bury the line.
TEST(InitiatorText, ValuesInMessagesArePrintable) {
    EXPECT_EQ(printable("CHAP"), "CHAP");
    EXPECT_EQ(printable("\x1b]0;owned\x07"), "?]0;owned?");
    EXPECT_EQ(printable(std::string(100, 'x'), 8), "xxxxxxxx...");
    EXPECT_EQ(printable("a\x7f"
                        "b"),
              "a?b");
    // A number, a boolean, a binary value: each refused without the escape.
    for (const char* key : {"MaxBurstLength", "InitialR2T"}) {
        KeyValues replies;
        try {
            Negotiation(LoginOffer{}, false).apply({{key, "\x1b[2J"}}, replies);
            ADD_FAILURE() << key << ": a bad value was taken";
        } catch (const InitiatorError& e) {
            EXPECT_EQ(std::string(e.what()).find('\x1b'), std::string::npos) << e.what();
        }
    }
    try {
        decode_binary_value("0x\x1b[2J");
        ADD_FAILURE() << "a bad binary value was taken";
    } catch (const InitiatorError& e) {
        EXPECT_EQ(std::string(e.what()).find('\x1b'), std::string::npos) << e.what();
    }
}
