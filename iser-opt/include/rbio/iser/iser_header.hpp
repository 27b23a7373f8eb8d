#pragma once
// RFC 7145 framing: the iSER header that precedes every iSCSI PDU carried in
// an RDMA SEND, and the private data of the RDMA CM connect request/reply.
// No verbs dependency, so it is unit-tested and fuzzed on any host.
//
// A SEND message is [iSER header 28 B][BHS 48 B][AHS][data segment]. There
// are no digests and no padding over iSER (RFC 7145 §6: HeaderDigest and
// DataDigest are None, the RDMA transport checks integrity), and Data-In,
// R2T and solicited Data-Out are replaced by RDMA WRITE and RDMA READ of the
// buffers the initiator advertised in the header of its SCSI command.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace rbio::iser {

inline constexpr size_t kIserHeaderLength = 28;
inline constexpr size_t kIserCmPrivateLength = 4;

enum class IserOpcode : uint8_t {
    Control = 0x1,  // an iSCSI control-type PDU follows
    Hello = 0x2,    // only with iSERHelloRequired=Yes, which rbio never offers
    HelloReply = 0x3,
};

struct IserHeader {
    IserOpcode opcode = IserOpcode::Control;
    // The initiator's buffer the target may RDMA READ from (WRITE commands:
    // the solicited part of the data) ...
    bool write_stag_valid = false;
    uint32_t write_stag = 0;
    uint64_t write_va = 0;
    // ... and the buffer it may RDMA WRITE into (READ commands).
    bool read_stag_valid = false;
    uint32_t read_stag = 0;
    uint64_t read_va = 0;

    void encode(std::span<uint8_t, kIserHeaderLength> out) const;
    // The header at the front of a received message, or why it is not one:
    // too short, or an opcode other than Control. Reserved bits are ignored,
    // as RFC 7143 asks of receivers.
    static std::optional<IserHeader> decode(std::span<const uint8_t> message, std::string& error);
    // The same for a header known to be whole and of opcode Control (the
    // receive path checks both first): nothing to report, no string.
    static IserHeader decode_control(std::span<const uint8_t, kIserHeaderLength> header);
};

// Private data of the iSER CM REQ (RFC 7145 §9.3.1 as deployed by Linux and
// tgt): one flags byte and three reserved bytes.
struct IserCmRequest {
    // The initiator's advertised addresses are virtual addresses, not
    // offsets into zero-based MRs.
    bool zbva_not_supported = true;
    // The initiator cannot take Send with Invalidate.
    bool send_with_invalidate_not_supported = true;

    void encode(std::span<uint8_t, kIserCmPrivateLength> out) const;
    // Absent or short private data is the RFC's default (both supported).
    static IserCmRequest decode(std::span<const uint8_t> private_data);
};

}  // namespace rbio::iser
