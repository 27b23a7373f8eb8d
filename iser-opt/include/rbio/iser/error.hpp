#pragma once
// Why the byte stream of a connection cannot be framed. Every one of these
// means "drop this connection": once framing is lost, no later byte of the
// stream can be trusted to start a PDU. A data digest error alone leaves the
// framing intact and could be answered with a Reject at ErrorRecoveryLevel
// >= 1 (RFC 7143 §7.8); at level 0 it ends the connection like the rest, and
// that is all this layer does for now.
#include <cstdint>
#include <string>

namespace rbio::iser {

enum class PduErrc : uint8_t {
    UnknownOpcode,         // opcode not defined for PDUs from this sender
    DataSegmentTooLong,    // DataSegmentLength > our MaxRecvDataSegmentLength
    AhsTooLong,            // TotalAHSLength beyond the configured limit
    MalformedAhs,          // an AHS runs past TotalAHSLength
    HeaderDigestMismatch,  // CRC32C over BHS+AHS differs
    DataDigestMismatch,    // CRC32C over data+padding differs
};

// Short name of a code, e.g. "header-digest-mismatch".
const char* to_string(PduErrc code);

struct PduError {
    PduErrc code;
    std::string message;  // with the values involved, e.g. "header digest
                          // mismatch: got 0x1 expected 0x2"
};

}  // namespace rbio::iser
