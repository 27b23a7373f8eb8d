#include "rbio/iser/iser_header.hpp"

#include <cstdio>

namespace rbio::iser {
namespace {

constexpr uint8_t kWriteStagValid = 0x08;
constexpr uint8_t kReadStagValid = 0x04;
constexpr uint8_t kZbvaNotSupported = 0x80;
constexpr uint8_t kSendWithInvalidateNotSupported = 0x40;

void put32(uint8_t* p, uint32_t v) {
    p[0] = uint8_t(v >> 24);
    p[1] = uint8_t(v >> 16);
    p[2] = uint8_t(v >> 8);
    p[3] = uint8_t(v);
}
void put64(uint8_t* p, uint64_t v) {
    put32(p, uint32_t(v >> 32));
    put32(p + 4, uint32_t(v));
}
uint32_t get32(const uint8_t* p) {
    return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | uint32_t(p[3]);
}
uint64_t get64(const uint8_t* p) { return uint64_t(get32(p)) << 32 | get32(p + 4); }

}  // namespace

void IserHeader::encode(std::span<uint8_t, kIserHeaderLength> out) const {
    uint8_t* p = out.data();
    p[0] = uint8_t(uint8_t(opcode) << 4 | (write_stag_valid ? kWriteStagValid : 0) |
                   (read_stag_valid ? kReadStagValid : 0));
    p[1] = p[2] = p[3] = 0;
    put32(p + 4, write_stag_valid ? write_stag : 0);
    put64(p + 8, write_stag_valid ? write_va : 0);
    put32(p + 16, read_stag_valid ? read_stag : 0);
    put64(p + 20, read_stag_valid ? read_va : 0);
}

std::optional<IserHeader> IserHeader::decode(std::span<const uint8_t> message, std::string& error) {
    char why[96];
    if (message.size() < kIserHeaderLength) {
        std::snprintf(why, sizeof why, "iSER message of %zu bytes is shorter than its header",
                      message.size());
        error = why;
        return std::nullopt;
    }
    const uint8_t* p = message.data();
    const uint8_t op = p[0] >> 4;
    if (op != uint8_t(IserOpcode::Control)) {
        std::snprintf(why, sizeof why, "iSER opcode 0x%x is not an iSCSI control-type PDU%s", op,
                      op == 2 || op == 3 ? " (Hello was not negotiated)" : "");
        error = why;
        return std::nullopt;
    }
    return decode_control(message.first<kIserHeaderLength>());
}

IserHeader IserHeader::decode_control(std::span<const uint8_t, kIserHeaderLength> header) {
    const uint8_t* p = header.data();
    IserHeader h;
    h.write_stag_valid = (p[0] & kWriteStagValid) != 0;
    h.read_stag_valid = (p[0] & kReadStagValid) != 0;
    if (h.write_stag_valid) {
        h.write_stag = get32(p + 4);
        h.write_va = get64(p + 8);
    }
    if (h.read_stag_valid) {
        h.read_stag = get32(p + 16);
        h.read_va = get64(p + 20);
    }
    return h;
}

void IserCmRequest::encode(std::span<uint8_t, kIserCmPrivateLength> out) const {
    out[0] = uint8_t((zbva_not_supported ? kZbvaNotSupported : 0) |
                     (send_with_invalidate_not_supported ? kSendWithInvalidateNotSupported : 0));
    out[1] = out[2] = out[3] = 0;
}

IserCmRequest IserCmRequest::decode(std::span<const uint8_t> private_data) {
    IserCmRequest r{false, false};
    if (private_data.size() >= kIserCmPrivateLength) {
        r.zbva_not_supported = (private_data[0] & kZbvaNotSupported) != 0;
        r.send_with_invalidate_not_supported = (private_data[0] & kSendWithInvalidateNotSupported) != 0;
    }
    return r;
}

}  // namespace rbio::iser
