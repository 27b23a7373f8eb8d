// RxBuffer: request batching on the receive side. Byte streams of valid
// PDUs (RFC 7143 §11) cut into reads of every size must come out as the same
// PDUs; malformed streams must fail the connection with a precise reason.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <stdexcept>

#include "iser_opt_test_pdus.hpp"
#include "rbio/iser/rx_buffer.hpp"

namespace {

using namespace rbio::iser;
using namespace rbio::iser::test;
using ::testing::MatchesRegex;
using ::testing::StartsWith;

RxConfig config(bool hd, bool dd, size_t capacity = 64 * 1024, uint32_t mrdsl = 8192) {
    RxConfig c;
    c.capacity = capacity;
    c.limits.max_recv_data_segment_length = mrdsl;
    c.limits.header_digest = hd;
    c.limits.data_digest = dd;
    return c;
}

struct DigestCase {
    bool hd, dd;
};

class RxDigests : public ::testing::TestWithParam<DigestCase> {};

INSTANTIATE_TEST_SUITE_P(AllDigestSettings, RxDigests,
                         ::testing::Values(DigestCase{false, false}, DigestCase{true, false},
                                           DigestCase{false, true}, DigestCase{true, true}),
                         [](const auto& info) {
                             return std::string(info.param.hd ? "HD" : "noHD") +
                                    (info.param.dd ? "_DD" : "_noDD");
                         });

TEST_P(RxDigests, OneReadYieldsEveryPduInIt) {
    auto [hd, dd] = GetParam();
    auto pdus = varied_pdus(200, 300);
    Bytes stream = concat(pdus, hd, dd);
    ConnectionCounters c;
    Received r = feed(
        config(hd, dd, stream.size()), stream, [] { return SIZE_MAX; }, &c);
    EXPECT_FALSE(r.failed) << r.message;
    EXPECT_EQ(r.pdus, pdus);
    EXPECT_EQ(r.reads, 1u);
    EXPECT_EQ(c[Counter::RecvCalls], 1u);
    EXPECT_EQ(c[Counter::PdusIn], 200u);
    EXPECT_EQ(c[Counter::BytesIn], stream.size());
    EXPECT_DOUBLE_EQ(c.pdus_per_recv(), 200.0);
}

TEST_P(RxDigests, StreamSplitAtEveryByteBoundary) {
    auto [hd, dd] = GetParam();
    auto pdus = varied_pdus(12, 13);
    Bytes stream = concat(pdus, hd, dd);
    // Once in the buffer, once with every data segment placed directly (so
    // the cut also falls inside the padding and digest of a direct PDU).
    for (uint32_t threshold : {UINT32_MAX, 1u}) {
        RxConfig cfg = config(hd, dd);
        cfg.direct_data_threshold = threshold;
        for (size_t cut = 1; cut < stream.size(); ++cut) {
            bool first = true;
            Received r = feed(cfg, stream, [&] {
                size_t n = first ? cut : SIZE_MAX;
                first = false;
                return n;
            });
            ASSERT_FALSE(r.failed) << "cut " << cut << ": " << r.message;
            ASSERT_EQ(r.pdus, pdus) << "cut " << cut;
        }
    }
}

TEST_P(RxDigests, OneByteReadsCutEveryBoundaryAtOnce) {
    auto [hd, dd] = GetParam();
    auto pdus = varied_pdus(30, 40);
    Bytes stream = concat(pdus, hd, dd);
    Received r = feed(config(hd, dd), stream, [] { return 1; });
    EXPECT_FALSE(r.failed) << r.message;
    EXPECT_EQ(r.pdus, pdus);
    EXPECT_EQ(r.reads, stream.size());
}

TEST_P(RxDigests, RandomSplitsSmallBufferAndDirectPath) {
    auto [hd, dd] = GetParam();
    for (uint32_t seed = 1; seed <= 40; ++seed) {
        auto pdus = varied_pdus(150, 6000, seed);
        Bytes stream = concat(pdus, hd, dd);
        std::mt19937 rng(seed);
        RxConfig cfg = config(hd, dd, 1500 + seed * 97);
        // Some seeds also offer mid-size segments for direct placement.
        if (seed % 3 == 0) cfg.direct_data_threshold = 1000;
        Received r = feed(cfg, stream, [&] { return 1 + rng() % (seed % 2 ? 64 : 9000); });
        ASSERT_FALSE(r.failed) << "seed " << seed << ": " << r.message;
        ASSERT_EQ(r.pdus, pdus) << "seed " << seed;
        EXPECT_GT(r.need_destination, 0u);  // segments beyond the buffer went direct
    }
}

TEST(RxBuffer, DataSegmentLargerThanTheBufferGoesStraightToTheDestination) {
    RxConfig cfg = config(true, true, 4096, 1 << 20);
    ConnectionCounters c;
    RxBuffer rx(cfg, c);
    Parts big = make_pdu(Opcode::DataOut, 0x77, 0, 100003);
    Parts small = make_pdu(Opcode::NopOut, 0x78, 0, 10);
    Bytes stream = concat({big, small}, true, true);

    // The first read brings the header and the start of the data.
    auto iov = rx.read_vectors();
    ASSERT_EQ(iov.size(), 1u);
    ASSERT_EQ(iov[0].iov_len, 4096u);
    size_t pos = scatter(iov, stream.data(), 4096);
    rx.commit(pos);
    RxResult r = rx.next();
    ASSERT_EQ(r.status, RxStatus::NeedDestination);
    EXPECT_EQ(r.pdu.header().itt(), 0x77u);
    EXPECT_EQ(r.pdu.header().data_segment_length(), 100003u);
    EXPECT_EQ(rx.next().status, RxStatus::NeedDestination);  // until one is given

    Bytes dest(100003);
    rx.set_data_destination(dest);
    EXPECT_EQ(rx.next().status, RxStatus::NeedMore);
    // Data bytes that came with the header were copied over once.
    EXPECT_TRUE(std::equal(dest.begin(), dest.begin() + (4096 - 52), big.data.begin()));

    // Each later read: the rest of the destination, then the buffer's free
    // space, so the digest and the next PDU come in the same readv.
    size_t reads = 1;
    while (pos < stream.size()) {
        iov = rx.read_vectors();
        ASSERT_EQ(iov.size(), 2u);
        EXPECT_EQ(static_cast<uint8_t*>(iov[0].iov_base), dest.data() + (pos - 52));
        size_t n = scatter(iov, stream.data() + pos, std::min<size_t>(40000, stream.size() - pos));
        rx.commit(n);
        pos += n;
        ++reads;
        if (pos < 52 + 100003) {
            EXPECT_EQ(rx.next().status, RxStatus::NeedMore);
        }
    }
    EXPECT_EQ(reads, 4u);
    r = rx.next();
    ASSERT_EQ(r.status, RxStatus::Pdu);
    EXPECT_EQ(r.pdu.data.data(), dest.data());  // no copy: the data is the destination
    EXPECT_EQ(dest, big.data);
    EXPECT_EQ(r.pdu.header().itt(), 0x77u);
    r = rx.next();
    ASSERT_EQ(r.status, RxStatus::Pdu);
    EXPECT_EQ(r.pdu.header().itt(), 0x78u);
    EXPECT_EQ(Bytes(r.pdu.data.begin(), r.pdu.data.end()), small.data);
    EXPECT_EQ(rx.next().status, RxStatus::NeedMore);
    EXPECT_FALSE(rx.mid_pdu());
    EXPECT_EQ(c[Counter::PdusIn], 2u);
    EXPECT_EQ(c[Counter::RecvCalls], 4u);
}

TEST(RxBuffer, ThresholdOffersBufferedSegmentsForDirectPlacement) {
    RxConfig cfg = config(false, true);
    cfg.direct_data_threshold = 512;
    ConnectionCounters c;
    RxBuffer rx(cfg, c);
    std::vector<Parts> pdus = {make_pdu(Opcode::DataOut, 1, 0, 600), make_pdu(Opcode::DataOut, 2, 0, 100),
                               make_pdu(Opcode::DataOut, 3, 0, 513)};
    Bytes stream = concat(pdus, false, true);
    rx.commit(scatter(rx.read_vectors(), stream.data(), stream.size()));
    Bytes d1(600), d3(513);
    ASSERT_EQ(rx.next().status, RxStatus::NeedDestination);
    rx.set_data_destination(d1);
    RxResult r = rx.next();  // all bytes were there: yielded at once
    ASSERT_EQ(r.status, RxStatus::Pdu);
    EXPECT_EQ(r.pdu.data.data(), d1.data());
    EXPECT_EQ(d1, pdus[0].data);
    r = rx.next();
    ASSERT_EQ(r.status, RxStatus::Pdu);  // below the threshold: a view into the buffer
    EXPECT_EQ(Bytes(r.pdu.data.begin(), r.pdu.data.end()), pdus[1].data);
    ASSERT_EQ(rx.next().status, RxStatus::NeedDestination);
    rx.set_data_destination(d3);
    r = rx.next();
    ASSERT_EQ(r.status, RxStatus::Pdu);
    EXPECT_EQ(d3, pdus[2].data);
    EXPECT_EQ(rx.next().status, RxStatus::NeedMore);
}

TEST(RxBuffer, DestinationMisuseIsAProgrammingError) {
    ConnectionCounters c;
    RxConfig cfg = config(false, false);
    cfg.direct_data_threshold = 1;
    RxBuffer rx(cfg, c);
    Bytes d(10);
    EXPECT_THROW(rx.set_data_destination(d), std::logic_error);
    Bytes stream = encode(make_pdu(Opcode::DataOut, 1, 0, 11), false, false);
    rx.commit(scatter(rx.read_vectors(), stream.data(), stream.size()));
    ASSERT_EQ(rx.next().status, RxStatus::NeedDestination);
    EXPECT_THROW(rx.set_data_destination(d), std::invalid_argument);
    EXPECT_THROW(rx.commit(1), std::logic_error);  // nothing offered since the last commit
}

TEST(RxBuffer, OversizedSegmentFailsTheConnectionAfterTheGoodPdus) {
    RxConfig cfg = config(false, false, 64 * 1024, 262144);
    auto pdus = varied_pdus(5, 100);
    Bytes stream = concat(pdus, false, false);
    Bhs bad(Opcode::DataOut);
    bad.set_data_segment_length(1048576).set_itt(0x10);
    stream.insert(stream.end(), bad.bytes().begin(), bad.bytes().end());
    Bytes tail = concat(varied_pdus(3, 10), false, false);
    stream.insert(stream.end(), tail.begin(), tail.end());

    ConnectionCounters c;
    RxBuffer rx(cfg, c);
    rx.commit(scatter(rx.read_vectors(), stream.data(), stream.size()));
    for (size_t i = 0; i < 5; ++i) ASSERT_EQ(rx.next().status, RxStatus::Pdu);
    EXPECT_EQ(rx.next().status, RxStatus::Failed);
    EXPECT_TRUE(rx.failed());
    EXPECT_EQ(rx.error().code, PduErrc::DataSegmentTooLong);
    EXPECT_THAT(rx.error().message,
                StartsWith("data segment length 1048576 exceeds MaxRecvDataSegmentLength 262144"));
    // Failed for good: nothing more is yielded or read.
    EXPECT_EQ(rx.next().status, RxStatus::Failed);
    EXPECT_TRUE(rx.read_vectors().empty());
}

TEST(RxBuffer, UnknownOpcodeAndAhsBeyondLimitFail) {
    Bytes stream = encode(make_pdu(Opcode::NopOut, 1, 0, 0), false, false);
    stream[0] = 0x3f;
    Received r = feed(config(false, false), stream, [] { return SIZE_MAX; });
    EXPECT_TRUE(r.failed);
    EXPECT_EQ(r.message, "unknown opcode 0x3f from initiator");

    RxConfig cfg = config(false, false);
    cfg.limits.max_ahs_length = 8;
    r = feed(cfg, encode(make_pdu(Opcode::ScsiCommand, 1, 3, 0), false, false), [] { return SIZE_MAX; });
    EXPECT_TRUE(r.failed);
    EXPECT_EQ(r.error, PduErrc::AhsTooLong);

    Bytes bad_ahs = encode(make_pdu(Opcode::ScsiCommand, 1, 2, 0), false, false);
    bad_ahs[48] = 0x10;  // AHSLength now beyond TotalAHSLength
    r = feed(config(false, false), bad_ahs, [] { return 7; });
    EXPECT_TRUE(r.failed);
    EXPECT_EQ(r.error, PduErrc::MalformedAhs);
}

TEST(RxBuffer, HeaderDigestMismatchNamesBothValues) {
    Bytes stream = encode(make_pdu(Opcode::ScsiCommand, 9, 1, 8), true, true);
    stream[20] ^= 0x01;
    Received r = feed(config(true, true), stream, [] { return SIZE_MAX; });
    ASSERT_TRUE(r.failed);
    EXPECT_EQ(r.error, PduErrc::HeaderDigestMismatch);
    EXPECT_THAT(r.message, MatchesRegex("header digest mismatch: got 0x[0-9a-f]{8} expected 0x[0-9a-f]{8}"));
}

TEST(RxBuffer, DataDigestMismatchInBufferAndOnTheDirectPath) {
    for (uint32_t threshold : {UINT32_MAX, 1u}) {
        Bytes stream = encode(make_pdu(Opcode::DataOut, 9, 0, 4001), false, true);
        stream[48 + 4000] ^= 0x80;
        RxConfig cfg = config(false, true);
        cfg.direct_data_threshold = threshold;
        Received r = feed(cfg, stream, [] { return 333; });
        ASSERT_TRUE(r.failed);
        EXPECT_EQ(r.error, PduErrc::DataDigestMismatch);
        EXPECT_THAT(r.message, StartsWith("data digest mismatch: got 0x"));
        EXPECT_THAT(r.message, ::testing::HasSubstr("Data-Out, ITT 0x00000009, 4001 bytes"));
    }
    // A non-zero padding byte is covered by the digest too.
    Bytes stream = encode(make_pdu(Opcode::DataOut, 9, 0, 5), false, true);
    stream[48 + 6] = 1;
    EXPECT_TRUE(feed(config(false, true), stream, [] { return SIZE_MAX; }).failed);
}

TEST(RxBuffer, BatchingOffSwitchReadsOnePduPartAtATime) {
    RxConfig cfg = config(true, true);
    cfg.batch_reads = false;
    std::vector<Parts> pdus = {make_pdu(Opcode::ScsiCommand, 1, 2, 0), make_pdu(Opcode::DataOut, 2, 0, 4096),
                               make_pdu(Opcode::NopOut, 3, 0, 5)};
    Bytes stream = concat(pdus, true, true);
    ConnectionCounters c;
    RxBuffer rx(cfg, c);
    std::vector<size_t> offered;
    size_t pos = 0;
    Received out;
    std::deque<Bytes> dests;
    while (pos < stream.size()) {
        auto iov = rx.read_vectors();
        size_t room = 0;
        for (auto& v : iov) room += v.iov_len;
        offered.push_back(room);
        size_t n = scatter(iov, stream.data() + pos, std::min(room, stream.size() - pos));
        rx.commit(n);
        pos += n;
        drain(rx, out, dests);
    }
    EXPECT_EQ(out.pdus, pdus);
    // BHS, then AHS + digest; BHS, then rest of header, then data + digest; ...
    EXPECT_EQ(offered, (std::vector<size_t>{48, 12, 48, 4, 4100, 48, 4, 12}));
    EXPECT_DOUBLE_EQ(c.pdus_per_recv(), 3.0 / 8.0);
}

TEST(RxBuffer, PartialPduIsKeptAndCompactedForTheNextRead) {
    RxConfig cfg = config(false, false, 1024);
    cfg.limits.max_ahs_length = 64;  // so that 1 KiB is a legal capacity
    ConnectionCounters c;
    RxBuffer rx(cfg, c);
    // Small PDUs filling most of the buffer, then 100 bytes of a 300-byte PDU.
    auto pdus = varied_pdus(15, 8);
    Bytes stream = concat(pdus, false, false);
    Parts last = make_pdu(Opcode::DataOut, 0xabc, 0, 252);
    Bytes tail = encode(last, false, false);
    size_t small_bytes = stream.size();
    stream.insert(stream.end(), tail.begin(), tail.end());
    size_t first = small_bytes + 100;
    ASSERT_GT(1024 - first, 0u);
    ASSERT_LT(1024 - first, 200u);  // too little room left for the rest: compaction
    rx.commit(scatter(rx.read_vectors(), stream.data(), first));
    Received out;
    std::deque<Bytes> dests;
    drain(rx, out, dests);
    EXPECT_EQ(out.pdus.size(), 15u);
    EXPECT_TRUE(rx.mid_pdu());
    EXPECT_EQ(rx.buffered(), first - small_bytes);
    auto iov = rx.read_vectors();  // the partial PDU moved to the front
    ASSERT_EQ(iov.size(), 1u);
    EXPECT_EQ(iov[0].iov_len, 1024u - 100u);
    rx.commit(scatter(iov, stream.data() + first, stream.size() - first));
    drain(rx, out, dests);
    ASSERT_EQ(out.pdus.size(), 16u);
    EXPECT_EQ(out.pdus.back(), last);
    EXPECT_FALSE(rx.mid_pdu());
}

TEST(RxBuffer, CapacityBelowTheLargestHeaderIsRejected) {
    ConnectionCounters c;
    RxConfig cfg = config(true, true, 100);
    EXPECT_THROW(RxBuffer(cfg, c), std::invalid_argument);
    cfg.capacity = RxBuffer::min_capacity(cfg.limits);
    EXPECT_NO_THROW(RxBuffer(cfg, c));
}

TEST(RxBuffer, MinimalBufferStillCarriesMaximalAhsAndHugeData) {
    RxConfig cfg = config(true, true, 0, kMaxDataSegmentLength);
    cfg.capacity = RxBuffer::min_capacity(cfg.limits);
    std::vector<Parts> pdus = {make_pdu(Opcode::ScsiCommand, 1, 255, 70001),
                               make_pdu(Opcode::ScsiCommand, 2, 255, 0), make_pdu(Opcode::DataOut, 3, 0, 3)};
    Bytes stream = concat(pdus, true, true);
    std::mt19937 rng(3);
    Received r = feed(cfg, stream, [&] { return 1 + rng() % 2000; });
    ASSERT_FALSE(r.failed) << r.message;
    EXPECT_EQ(r.pdus, pdus);
    EXPECT_EQ(r.need_destination, 1u);  // the header-only PDU fits exactly
}

}  // namespace
