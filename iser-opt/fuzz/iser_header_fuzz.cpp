// libFuzzer target for what an iSER peer sends before any PDU: the iSER
// header in front of every message (RFC 7145 §9.2) and the private data of
// the RDMA CM connection request (§9.3.1). Any bytes must decode to a
// header or an error message (never both, never a crash), and a decoded
// header must encode back to bytes that decode to the same header.
//
// Input: the message (its first bytes are the header).
#include <array>
#include <cstdint>
#include <string>

#include "rbio/iser/iser_header.hpp"

#include "rbio/common/fuzz_check.hpp"

using namespace rbio::iser;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string error;
    auto h = IserHeader::decode({data, size}, error);
    FUZZ_CHECK(h.has_value() == error.empty());
    if (h) {
        FUZZ_CHECK(size >= kIserHeaderLength);
        std::array<uint8_t, kIserHeaderLength> out{};
        h->encode(out);
        std::string again_error;
        auto again = IserHeader::decode(out, again_error);
        FUZZ_CHECK(again.has_value());
        FUZZ_CHECK(again->opcode == h->opcode);
        FUZZ_CHECK(again->write_stag_valid == h->write_stag_valid &&
                   again->read_stag_valid == h->read_stag_valid);
        FUZZ_CHECK(!h->write_stag_valid ||
                   (again->write_stag == h->write_stag && again->write_va == h->write_va));
        FUZZ_CHECK(!h->read_stag_valid || (again->read_stag == h->read_stag && again->read_va == h->read_va));
    }

    auto cm = IserCmRequest::decode({data, size});
    std::array<uint8_t, kIserCmPrivateLength> cm_out{};
    cm.encode(cm_out);
    auto cm_again = IserCmRequest::decode(cm_out);
    FUZZ_CHECK(cm_again.zbva_not_supported == cm.zbva_not_supported);
    FUZZ_CHECK(cm_again.send_with_invalidate_not_supported == cm.send_with_invalidate_not_supported);
    return 0;
}
