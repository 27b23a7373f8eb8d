// Which commands each asymmetric access state lets through (SPC-4 5.16.2.4).
#include "rbio/bs/alua.hpp"

namespace rbio::bs::alua {

namespace {

constexpr uint8_t NOT_READY = 0x02, ILLEGAL_REQUEST = 0x05;

enum Op : uint8_t {
    TEST_UNIT_READY = 0x00,
    REQUEST_SENSE = 0x03,
    INQUIRY = 0x12,
    MODE_SELECT = 0x15,
    RESERVE_6 = 0x16,
    RELEASE_6 = 0x17,
    MODE_SENSE = 0x1a,
    RECEIVE_DIAGNOSTIC = 0x1c,
    SEND_DIAGNOSTIC = 0x1d,
    LOG_SELECT = 0x4c,
    READ_CAPACITY_10 = 0x25,
    LOG_SENSE = 0x4d,
    MODE_SELECT_10 = 0x55,
    RESERVE_10 = 0x56,
    RELEASE_10 = 0x57,
    MODE_SENSE_10 = 0x5a,
    PERSISTENT_RESERVE_IN = 0x5e,
    PERSISTENT_RESERVE_OUT = 0x5f,
    COMPARE_AND_WRITE = 0x89,
    ORWRITE_16 = 0x8b,
    SERVICE_ACTION_IN_16 = 0x9e,
    REPORT_LUNS = 0xa0,
    MAINTENANCE_IN = 0xa3,
    MAINTENANCE_OUT = 0xa4,
};

// Reservations would live in one gateway's memory while another gateway
// serves the same LU; a read-compare-write is atomic only within one
// tgtd; MODE SELECT changes that tgtd's mode pages only (its write cache,
// SWP) and tells only its own hosts (2A/01): writes through the other
// gateways would go on with the old cache setting or write protection.
// Refused rather than kept silently per gateway.
bool gateway_local(uint8_t op) {
    switch (op) {
        case MODE_SELECT:
        case MODE_SELECT_10:
        case RESERVE_6:
        case RELEASE_6:
        case RESERVE_10:
        case RELEASE_10:
        case PERSISTENT_RESERVE_IN:
        case PERSISTENT_RESERVE_OUT:
        case COMPARE_AND_WRITE:
        case ORWRITE_16: return true;
        default: return false;
    }
}

// Commands every state answers: a host must be able to find out where it is.
bool always_allowed(uint8_t op) {
    switch (op) {
        case INQUIRY:
        case REPORT_LUNS:
        case REQUEST_SENSE:
        case MAINTENANCE_IN:
        case MAINTENANCE_OUT: return true;
        default: return false;
    }
}

// SPC-4's list, and READ CAPACITY: a host that finds the LU through a
// standby port first (a hot spare's path, or a host booting while a
// gateway is standby) reads its size there, and Linux's sd takes a refusal
// for a disk of 0 bytes that it does not read again when the port becomes
// active -- the path would be useless exactly when failover needs it.
// Reading the capacity touches no data. (LIO allows it for the same
// reason.)
bool standby_allowed(std::span<const uint8_t> cdb) {
    const uint8_t op = cdb[0];
    switch (op) {
        case READ_CAPACITY_10: return true;
        case SERVICE_ACTION_IN_16: return cdb.size() >= 2 && (cdb[1] & 0x1f) == 0x10;  // READ CAPACITY(16)
        case MODE_SENSE:
        case MODE_SENSE_10:
        case MODE_SELECT:
        case MODE_SELECT_10:
        case LOG_SENSE:
        case LOG_SELECT:
        case RECEIVE_DIAGNOSTIC:
        case SEND_DIAGNOSTIC: return true;
        default: return always_allowed(op);
    }
}

}  // namespace

std::optional<Refusal> check_access(State state, std::span<const uint8_t> cdb,
                                    bool atomic_compare_and_write) {
    if (cdb.empty()) return Refusal{ILLEGAL_REQUEST, 0x2000};
    const uint8_t op = cdb[0];
    const bool shared_atomic = atomic_compare_and_write && op == COMPARE_AND_WRITE;
    if (gateway_local(op) && !shared_atomic) return Refusal{ILLEGAL_REQUEST, 0x2000};
    switch (state) {
        case State::active_optimized:
        case State::active_non_optimized: return std::nullopt;
        case State::standby:
            if (standby_allowed(cdb)) return std::nullopt;
            return Refusal{NOT_READY, 0x040b};
        case State::unavailable:
            if (always_allowed(op)) return std::nullopt;
            return Refusal{NOT_READY, 0x040c};
        case State::transitioning:
            if (always_allowed(op)) return std::nullopt;
            return Refusal{NOT_READY, 0x040a};
    }
    return Refusal{NOT_READY, 0x040a};
}

bool refused_everywhere(uint8_t op) { return gateway_local(op) && op != COMPARE_AND_WRITE; }

bool is_report_target_port_groups(std::span<const uint8_t> cdb) {
    return cdb.size() >= 12 && cdb[0] == MAINTENANCE_IN && (cdb[1] & 0x1f) == 0x0a;
}

}  // namespace rbio::bs::alua
