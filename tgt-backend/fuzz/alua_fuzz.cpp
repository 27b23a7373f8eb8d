// libFuzzer target for ALUA's parsers and encoders: an arbitrary groups
// file (what every gateway reads, perhaps half-written or damaged) and an
// arbitrary REPORT TARGET PORT GROUPS CDB with an output buffer of any
// size. A bad file must be refused with ConfigError and nothing else; a
// parsed table must be sorted, unique, 1..65535 and within max_groups; the
// RTPG bytes must never pass the buffer, and their length field must match
// what was built.
//
// Input: 12 bytes of CDB, 2 bytes of output size, 1 byte of state for the
// access check, then the file's text.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "rbio/bs/alua.hpp"
#include "rbio/bs/config_file.hpp"

#include "rbio/common/fuzz_check.hpp"

using namespace rbio::bs::alua;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 15) return 0;
    const uint8_t* cdb = data;
    const size_t out_size = (size_t(data[12]) << 8 | data[13]) % 4097;
    const State states[] = {State::active_optimized, State::active_non_optimized, State::standby,
                            State::unavailable, State::transitioning};
    const State state = states[data[14] % 5];
    std::string_view text(reinterpret_cast<const char*>(data + 15), size - 15);

    GroupTable t;
    try {
        t = parse_groups(text, "fuzz");
    } catch (const rbio::bs::ConfigError&) {
        t = {{1, State::standby}};
    }
    FUZZ_CHECK(t.size() <= max_groups);
    for (size_t i = 0; i < t.size(); ++i) {
        FUZZ_CHECK(t[i].id >= 1);
        FUZZ_CHECK(state_name(t[i].state) != "unknown");
        if (i) FUZZ_CHECK(t[i - 1].id < t[i].id);
    }

    // Guard bytes around the output: any write past out_size is caught.
    std::vector<uint8_t> buf(out_size + 16, 0xa5);
    auto n = report_target_port_groups(t, {cdb, 12}, data[14] & 0x80, {buf.data(), out_size});
    for (size_t i = out_size; i < buf.size(); ++i) FUZZ_CHECK(buf[i] == 0xa5);
    if (n) {
        const size_t header = (cdb[1] >> 5) == 1 ? 8 : 4;
        FUZZ_CHECK(*n == header + t.size() * 12);
        if (out_size >= 4) {
            const size_t len = size_t(buf[0]) << 24 | size_t(buf[1]) << 16 | size_t(buf[2]) << 8 | buf[3];
            FUZZ_CHECK(len + 4 == *n);
        }
    }
    (void)check_access(state, {cdb, 12});
    (void)check_access(state, {cdb, size_t(data[14] % 13)});
    uint8_t desig[port_designators_size + 1];
    FUZZ_CHECK(port_designators(uint16_t(data[12] << 8 | data[13]), {desig, out_size % (sizeof desig + 1)}) %
                   port_designators_size ==
               0);
    return 0;
}
