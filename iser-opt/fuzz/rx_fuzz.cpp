// libFuzzer target for RxBuffer: arbitrary byte streams, cut into reads of
// sizes drawn from the input, under limits and digest settings drawn from
// the input. Besides the sanitizers' checks it asserts two things:
//   - every yielded PDU is framed as its header says, within the limits;
//   - what comes out does not depend on how the stream was cut: the same
//     stream fed in reads as large as the buffer offers gives the same PDUs,
//     direct-path requests and failure.
//
// Input: 12 bytes of settings, then the stream (see settings_from()).
// Build and run: see iser-opt/README.md.
#include <cstdint>
#include <cstring>
#include <deque>
#include <vector>

#include "rbio/iser/crc32c.hpp"
#include "rbio/iser/rx_buffer.hpp"

#include "rbio/common/fuzz_check.hpp"

namespace {

using namespace rbio::iser;

constexpr size_t kSettingsBytes = 12;

struct Settings {
    RxConfig config;
    bool repair_digests;  // make the stream's digests right (see repair())
    uint32_t rng_seed;
    uint32_t max_read;  // upper bound of one read
};

Settings settings_from(const uint8_t* s) {
    Settings st;
    RxConfig& c = st.config;
    c.limits.header_digest = s[0] & 1;
    c.limits.data_digest = s[0] & 2;
    c.batch_reads = !(s[0] & 4);
    c.sender = (s[0] & 8) ? PduSender::Target : PduSender::Initiator;
    c.limits.max_ahs_length = uint32_t(s[1]) * 4;
    // Small limits most of the time, so lengths from the stream hit them.
    c.limits.max_recv_data_segment_length =
        (s[0] & 16) ? (uint32_t(s[2]) << 16 | uint32_t(s[3]) << 8 | s[4]) : (uint32_t(s[3]) << 8 | s[4]);
    c.capacity = RxBuffer::min_capacity(c.limits) + (uint32_t(s[5]) << 8 | s[6]) % 16384;
    c.direct_data_threshold = (s[0] & 32) ? (uint32_t(s[7]) << 8 | s[8]) : UINT32_MAX;
    st.repair_digests = s[0] & 64;
    st.rng_seed = uint32_t(s[9]) << 8 | s[10] | 1u;
    st.max_read = 1 + uint32_t(s[11]) * 64;
    return st;
}

struct Outcome {
    std::vector<uint32_t> events;  // per PDU: a digest of its bytes; per
                                   // NeedDestination: its data length
    bool failed = false;
    PduErrc error{};
    bool operator==(const Outcome&) const = default;
};

void check_pdu(const RxPdu& p, const RxConfig& c) {
    FUZZ_CHECK(p.bhs.size() == kBhsLength);
    BhsView h = p.header();
    FUZZ_CHECK(p.ahs.size() == h.ahs_length());
    FUZZ_CHECK(p.ahs.size() <= c.limits.max_ahs_length);
    FUZZ_CHECK(p.data.size() == h.data_segment_length());
    FUZZ_CHECK(p.data.size() <= c.limits.max_recv_data_segment_length);
    FUZZ_CHECK(is_known_opcode(h.opcode_byte(), c.sender));
}

uint32_t digest_of(const RxPdu& p) {
    uint32_t c = crc32c(p.bhs);
    c = crc32c_extend(c, p.ahs.data(), p.ahs.size());
    return crc32c_extend(c, p.data.data(), p.data.size());
}

// Feeds the stream in reads of at most next_read() bytes.
template <class NextRead>
Outcome run(const RxConfig& cfg, const uint8_t* data, size_t size, NextRead next_read) {
    ConnectionCounters counters;
    RxBuffer rx(cfg, counters);
    Outcome out;
    std::deque<std::vector<uint8_t>> destinations;
    size_t pos = 0;
    while (pos < size) {
        std::span<const iovec> iov = rx.read_vectors();
        if (iov.empty()) break;
        size_t want = std::min<size_t>(next_read(), size - pos), done = 0;
        for (const iovec& v : iov) {
            size_t k = std::min(want - done, v.iov_len);
            std::memcpy(v.iov_base, data + pos + done, k);
            done += k;
            if (done == want) break;
        }
        rx.commit(done);
        pos += done;
        for (;;) {
            RxResult r = rx.next();
            if (r.status == RxStatus::Pdu) {
                check_pdu(r.pdu, cfg);
                out.events.push_back(digest_of(r.pdu));
            } else if (r.status == RxStatus::NeedDestination) {
                uint32_t len = r.pdu.header().data_segment_length();
                FUZZ_CHECK(len > 0 && len <= cfg.limits.max_recv_data_segment_length);
                out.events.push_back(len);
                destinations.emplace_back(len);
                rx.set_data_destination(destinations.back());
            } else {
                break;
            }
        }
        if (rx.failed()) {
            out.failed = true;
            out.error = rx.error().code;
            FUZZ_CHECK(!rx.error().message.empty());
            FUZZ_CHECK(rx.next().status == RxStatus::Failed);
            FUZZ_CHECK(rx.read_vectors().empty());
            break;
        }
    }
    FUZZ_CHECK(counters[Counter::PdusIn] <= counters[Counter::BytesIn] / kBhsLength);
    return out;
}

// Random bytes almost never carry a right CRC32C, so paths behind a digest
// check would stay unexplored. This walks the stream as PDUs the simple way
// (independently of RxBuffer) and writes right digests where they go.
void repair(std::vector<uint8_t>& s, bool hd, bool dd) {
    size_t pos = 0;
    while (pos + kBhsLength <= s.size()) {
        BhsView h(s.data() + pos);
        size_t covered = kBhsLength + h.ahs_length();
        size_t data_at = pos + covered + (hd ? kDigestLength : 0);
        if (hd && data_at <= s.size())
            store_digest(s.data() + pos + covered, crc32c({s.data() + pos, covered}));
        size_t len = h.data_segment_length(), padded = pad4(len);
        size_t end = data_at + padded + (dd && len > 0 ? kDigestLength : 0);
        if (dd && len > 0 && end <= s.size())
            store_digest(s.data() + data_at + padded, crc32c({s.data() + data_at, padded}));
        pos = end;
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < kSettingsBytes) return 0;
    Settings st = settings_from(data);
    std::vector<uint8_t> stream(data + kSettingsBytes, data + size);
    if (st.repair_digests) repair(stream, st.config.limits.header_digest, st.config.limits.data_digest);
    data = stream.data();
    size = stream.size();

    uint32_t x = st.rng_seed;  // xorshift32: read sizes from the input's seed
    Outcome cut = run(st.config, data, size, [&] {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        return 1 + x % st.max_read;
    });
    Outcome whole = run(st.config, data, size, [] { return SIZE_MAX; });
    FUZZ_CHECK(cut == whole);
    return 0;
}
