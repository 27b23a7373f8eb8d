#pragma once
// Implicit ALUA (SPC-4 5.16) for rbio LUs served by several gateways: the
// asymmetric access states of target port groups, which commands each
// state lets through, and the bytes hosts read (REPORT TARGET PORT GROUPS,
// the port designators of VPD page 0x83). Plain values in, bytes out: no tgt.
//
// One gateway (one tgtd) is one target port group with one target port; its
// relative target port identifier is its group id.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace rbio::bs::alua {

// The ASYMMETRIC ACCESS STATE codes of SPC-4 (REPORT TARGET PORT GROUPS).
enum class State : uint8_t {
    active_optimized = 0x0,
    active_non_optimized = 0x1,
    standby = 0x2,
    unavailable = 0x3,
    transitioning = 0xf,
};

// "active/optimized", ... as in the groups file; nullopt for anything else.
std::optional<State> parse_state(std::string_view name);
std::string_view state_name(State s);

struct Group {
    uint16_t id;
    State state;
    bool operator==(const Group&) const = default;
};

// Every target port group of the LU set, sorted by id, ids unique.
using GroupTable = std::vector<Group>;

// Most groups one file may list: what one RTPG answer and its 16-bit
// allocation length comfortably hold.
inline constexpr size_t max_groups = 256;

// Parses a groups file: one "ID STATE" per line, ID 1..65535, '#' starts a
// comment. Throws ConfigError naming `where` and the line.
GroupTable parse_groups(std::string_view text, const std::string& where);

std::optional<State> state_of(const GroupTable& t, uint16_t id);

// Sense for a command the state does not let through.
struct Refusal {
    uint8_t key;   // sense key
    uint16_t asc;  // ASC << 8 | ASCQ
};

// What a gateway in `state` does with the command: nullopt runs it.
// Standby lets through what SPC-4 lists for it (INQUIRY, REPORT LUNS,
// MODE/LOG SENSE and SELECT, diagnostics, REQUEST SENSE, MAINTENANCE IN/OUT)
// and fails the rest with NOT READY 04/0B; unavailable and transitioning let
// through INQUIRY, REPORT LUNS, REQUEST SENSE and MAINTENANCE IN/OUT and
// fail the rest with 04/0C and 04/0A. In every state, the commands whose
// effect would be kept per gateway (reservations) or that are not atomic
// across gateways (COMPARE AND WRITE, ORWRITE) are refused: ILLEGAL
// REQUEST, INVALID COMMAND OPERATION CODE. atomic_compare_and_write: the
// backing store itself makes COMPARE AND WRITE atomic against every
// gateway (an RBD image: the OSD compares and writes), so it runs.
std::optional<Refusal> check_access(State state, std::span<const uint8_t> cdb,
                                    bool atomic_compare_and_write = false);

// The opcodes check_access refuses in every state and on every store
// (reservations, ORWRITE): not offered at all, so that REPORT SUPPORTED
// OPERATION CODES does not list them. COMPARE AND WRITE is not one: it
// runs where the store makes it atomic.
bool refused_everywhere(uint8_t op);

// MAINTENANCE IN / REPORT TARGET PORT GROUPS.
bool is_report_target_port_groups(std::span<const uint8_t> cdb);

// REPORT TARGET PORT GROUPS parameter data for `cdb` (length-only or
// extended header, as its PARAMETER DATA FORMAT asks). Writes at most
// out.size() bytes; returns the full length (more than out.size() means
// truncated, as the allocation length allows). changed_implicitly sets
// each group's status code to 02h (altered by implicit ALUA behaviour).
// nullopt: a format this target does not support (INVALID FIELD IN CDB).
// unavailable_group: a group reported unavailable whatever `groups` says
// (this gateway's own, for an LU it cannot serve).
std::optional<size_t> report_target_port_groups(const GroupTable& groups, std::span<const uint8_t> cdb,
                                                bool changed_implicitly, std::span<uint8_t> out,
                                                std::optional<uint16_t> unavailable_group = std::nullopt);

// Seconds a host should allow for a transition (extended RTPG header).
inline constexpr uint8_t implicit_transition_seconds = 10;

// The two VPD 0x83 designators that name this gateway's target port:
// relative target port (type 4) and target port group (type 5), both with
// association "target port". 16 bytes; returns bytes written (0 if out is
// too small).
inline constexpr size_t port_designators_size = 16;
size_t port_designators(uint16_t group, std::span<uint8_t> out);

// Why a backing store opened with `oflags` cannot be shared by gateways,
// or nullopt. Gateways on one box share the page cache of a local file, so
// a write through one is read through another; gateways on several boxes
// do not: a block device, or a file on a network file system, must then be
// opened with O_DIRECT (tgtadm --bsoflags direct). A block device can be
// reached from several boxes (iSCSI, FC, NVMe-oF), so it always needs it.
std::optional<std::string> shared_backing_problem(int fd, int oflags);

// The TPGS field of standard INQUIRY data (byte 5): implicit ALUA.
inline constexpr uint8_t inquiry_tpgs_implicit = 0x10;

}  // namespace rbio::bs::alua
