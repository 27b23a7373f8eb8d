// What hosts read about ALUA: REPORT TARGET PORT GROUPS parameter data and
// the target port designators of VPD page 0x83 (SPC-4 6.37, 7.8.6).
#include <algorithm>
#include <cstring>

#include "rbio/bs/alua.hpp"

namespace rbio::bs::alua {

namespace {

// Supported states (byte 1 of a descriptor): T_SUP, U_SUP, S_SUP, AN_SUP, AO_SUP.
constexpr uint8_t supported_states = 0x80 | 0x08 | 0x04 | 0x02 | 0x01;
constexpr uint8_t status_implicit = 0x02;
constexpr size_t descriptor_size = 8 + 4;  // one target port per group

// Writes at `pos` what fits of `bytes`; the caller counts the full length.
void put(std::span<uint8_t> out, size_t pos, std::initializer_list<uint8_t> bytes) {
    for (uint8_t b : bytes) {
        if (pos < out.size()) out[pos] = b;
        ++pos;
    }
}

uint8_t hi(uint32_t v) { return uint8_t(v >> 8); }
uint8_t lo(uint32_t v) { return uint8_t(v); }

}  // namespace

std::optional<size_t> report_target_port_groups(const GroupTable& groups, std::span<const uint8_t> cdb,
                                                bool changed_implicitly, std::span<uint8_t> out,
                                                std::optional<uint16_t> unavailable_group) {
    if (!is_report_target_port_groups(cdb)) return std::nullopt;
    const uint8_t format = cdb[1] >> 5;
    if (format > 1) return std::nullopt;  // 000b: length only, 001b: extended header
    const size_t header = format == 1 ? 8 : 4;
    const size_t total = header + groups.size() * descriptor_size;
    const uint32_t data_length = uint32_t(total - 4);

    put(out, 0, {uint8_t(data_length >> 24), uint8_t(data_length >> 16), hi(data_length), lo(data_length)});
    if (format == 1) put(out, 4, {0x10, implicit_transition_seconds, 0, 0});
    size_t pos = header;
    for (const Group& g : groups) {
        const State state = g.id == unavailable_group ? State::unavailable : g.state;
        put(out, pos,
            {uint8_t(state), supported_states, hi(g.id), lo(g.id), 0,
             changed_implicitly ? status_implicit : uint8_t(0), 0, 1,
             // the group's one target port: its relative target port id is the group id
             0, 0, hi(g.id), lo(g.id)});
        pos += descriptor_size;
    }
    return total;
}

size_t port_designators(uint16_t group, std::span<uint8_t> out) {
    if (out.size() < port_designators_size) return 0;
    // Code set binary (1), association target port (0x10), types 4 and 5;
    // 4 bytes each: two reserved, then the 16-bit identifier.
    const uint8_t bytes[port_designators_size] = {
        0x01, 0x10 | 0x04, 0, 4, 0, 0, hi(group), lo(group),
        0x01, 0x10 | 0x05, 0, 4, 0, 0, hi(group), lo(group),
    };
    std::memcpy(out.data(), bytes, sizeof(bytes));
    return sizeof(bytes);
}

}  // namespace rbio::bs::alua
