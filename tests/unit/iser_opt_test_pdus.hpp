#pragma once
// Builders and a reference reader shared by the iser-opt unit tests: streams
// of varied, valid PDUs as plain bytes, and a driver that pushes a byte
// stream through an RxBuffer in reads of chosen sizes.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <random>
#include <vector>

#include "rbio/iser/pdu.hpp"
#include "rbio/iser/rx_buffer.hpp"

namespace rbio::iser::test {

using Bytes = std::vector<uint8_t>;

// One PDU as its parts: header is BHS + AHS.
struct Parts {
    Bytes header;
    Bytes data;
    bool operator==(const Parts&) const = default;
};

// A header with an opcode, ITT, `ahs_words` words of Extended-CDB AHS and
// the DataSegmentLength of `data_length`.
inline Bytes make_header(Opcode op, uint32_t itt, uint8_t ahs_words, uint32_t data_length) {
    Bhs bhs(op);
    bhs.set_final(true).set_itt(itt).set_total_ahs_words(ahs_words).set_data_segment_length(data_length);
    Bytes h(bhs.bytes().begin(), bhs.bytes().end());
    if (ahs_words > 0) {
        // One AHS filling all the words: AHSLength = words*4 - 3.
        size_t body = size_t(ahs_words) * 4 - 3;
        h.push_back(uint8_t(body >> 8));
        h.push_back(uint8_t(body));
        h.push_back(uint8_t(AhsType::ExtendedCdb));
        for (size_t i = 0; i < body; ++i) h.push_back(uint8_t(0xa0 + i));
    }
    return h;
}

inline Bytes pattern(size_t n, uint32_t seed) {
    Bytes b(n);
    for (size_t i = 0; i < n; ++i) b[i] = uint8_t((i * 131 + seed * 7 + (i >> 8)) & 0xff);
    return b;
}

inline Parts make_pdu(Opcode op, uint32_t itt, uint8_t ahs_words, uint32_t data_length) {
    return Parts{make_header(op, itt, ahs_words, data_length), pattern(data_length, itt)};
}

inline Bytes encode(const Parts& p, bool hd, bool dd) {
    Bytes out(encoded_size(p.header, p.data.size(), hd, dd));
    size_t n = encode_pdu(out, p.header, p.data, hd, dd);
    out.resize(n);
    return out;
}

// `count` initiator PDUs with data lengths covering every padding and
// digest case (0..max_data), some with AHS.
inline std::vector<Parts> varied_pdus(size_t count, uint32_t max_data, uint32_t seed = 1) {
    static constexpr Opcode kOps[] = {Opcode::ScsiCommand, Opcode::DataOut, Opcode::NopOut,
                                      Opcode::TextRequest, Opcode::TaskMgmtRequest};
    std::mt19937 rng(seed);
    std::vector<Parts> v;
    for (size_t i = 0; i < count; ++i) {
        uint32_t len = i < 9 ? uint32_t(i) : uint32_t(rng() % (max_data + 1));
        if (len > max_data) len = max_data;
        uint8_t ahs = (i % 7 == 3) ? uint8_t(1 + rng() % 4) : 0;
        v.push_back(make_pdu(kOps[i % 5], uint32_t(0x1000 + i), ahs, len));
    }
    return v;
}

inline Bytes concat(const std::vector<Parts>& pdus, bool hd, bool dd) {
    Bytes s;
    for (const Parts& p : pdus) {
        Bytes e = encode(p, hd, dd);
        s.insert(s.end(), e.begin(), e.end());
    }
    return s;
}

// What came out of an RxBuffer for a stream.
struct Received {
    std::vector<Parts> pdus;
    size_t need_destination = 0;  // PDUs that took the direct path
    size_t reads = 0;
    bool failed = false;
    PduErrc error{};
    std::string message;
};

// Drains every PDU rx has; direct-path data goes to fresh vectors.
inline void drain(RxBuffer& rx, Received& out, std::deque<Bytes>& destinations) {
    for (;;) {
        RxResult r = rx.next();
        if (r.status == RxStatus::Pdu) {
            Parts p;
            p.header.assign(r.pdu.bhs.begin(), r.pdu.bhs.end());
            p.header.insert(p.header.end(), r.pdu.ahs.begin(), r.pdu.ahs.end());
            p.data.assign(r.pdu.data.begin(), r.pdu.data.end());
            out.pdus.push_back(std::move(p));
        } else if (r.status == RxStatus::NeedDestination) {
            ++out.need_destination;
            destinations.emplace_back(r.pdu.header().data_segment_length());
            rx.set_data_destination(destinations.back());
        } else {
            if (r.status == RxStatus::Failed) {
                out.failed = true;
                out.error = rx.error().code;
                out.message = rx.error().message;
            }
            return;
        }
    }
}

// Copies up to `n` bytes from `src` into the vectors; returns how many.
inline size_t scatter(std::span<const iovec> iov, const uint8_t* src, size_t n) {
    size_t done = 0;
    for (const iovec& v : iov) {
        size_t k = std::min(n - done, v.iov_len);
        std::memcpy(v.iov_base, src + done, k);
        done += k;
        if (done == n) break;
    }
    return done;
}

// Feeds `stream` into a new RxBuffer; each read takes at most next_read()
// bytes (and what the buffer offers), as a socket read would.
inline Received feed(const RxConfig& cfg, const Bytes& stream, const std::function<size_t()>& next_read,
                     ConnectionCounters* counters_out = nullptr) {
    ConnectionCounters counters;
    RxBuffer rx(cfg, counters);
    Received out;
    std::deque<Bytes> destinations;
    size_t pos = 0;
    while (pos < stream.size()) {
        auto iov = rx.read_vectors();
        if (iov.empty()) break;
        size_t n = scatter(iov, stream.data() + pos, std::min(next_read(), stream.size() - pos));
        rx.commit(n);
        pos += n;
        ++out.reads;
        drain(rx, out, destinations);
        if (out.failed) break;
    }
    if (counters_out) *counters_out = counters;
    return out;
}

}  // namespace rbio::iser::test
