#pragma once
// The SBC opcodes the backing store executes, SAM status and sense values,
// and the mapping of I/O errors to sense (SBC-4, SPC-5).
#include <cstdint>

#include "rbio/bs/c_api.h"

namespace rbio::bs::scsi {

enum Opcode : uint8_t {
    kRead6 = 0x08,
    kWrite6 = 0x0a,
    kRead10 = 0x28,
    kWrite10 = 0x2a,
    kWriteVerify10 = 0x2e,
    kVerify10 = 0x2f,
    kPreFetch10 = 0x34,
    kSyncCache10 = 0x35,
    kWriteSame10 = 0x41,
    kUnmap = 0x42,
    kRead16 = 0x88,
    kCompareAndWrite = 0x89,
    kWrite16 = 0x8a,
    kOrWrite16 = 0x8b,
    kWriteVerify16 = 0x8e,
    kVerify16 = 0x8f,
    kPreFetch16 = 0x90,
    kSyncCache16 = 0x91,
    kWriteSame16 = 0x93,
    kRead12 = 0xa8,
    kWrite12 = 0xaa,
    kWriteVerify12 = 0xae,
    kVerify12 = 0xaf,
};

constexpr uint8_t kGood = 0x00;
constexpr uint8_t kCheckCondition = 0x02;

enum SenseKey : uint8_t {
    kNotReady = 0x02,
    kMediumError = 0x03,
    kHardwareError = 0x04,
    kIllegalRequest = 0x05,
    kDataProtect = 0x07,
    kMiscompare = 0x0e,
};

enum Asc : uint16_t {
    kAscTargetPortUnavailable = 0x040c,
    kAscWriteError = 0x0c00,
    kAscUnrecoveredReadError = 0x1100,
    kAscMiscompareDuringVerify = 0x1d00,
    kAscParameterListLength = 0x1a00,
    kAscLbaOutOfRange = 0x2100,
    kAscInvalidFieldInCdb = 0x2400,
    kAscInvalidFieldInParameterList = 0x2600,
    kAscSpaceAllocationFailedWriteProtect = 0x2707,
    kAscInternalTargetFailure = 0x4400,
};

inline rbio_bs_result good() { return rbio_bs_result{kGood, 0, 0, 0, 0}; }
inline constexpr uint8_t kTaskAborted = 0x40;
inline rbio_bs_result task_aborted() { return rbio_bs_result{kTaskAborted, 0, 0, 0, 0}; }
inline rbio_bs_result check(uint8_t key, uint16_t asc) {
    return rbio_bs_result{kCheckCondition, key, asc, 0, 0};
}
inline rbio_bs_result check_info(uint8_t key, uint16_t asc, uint64_t info) {
    return rbio_bs_result{kCheckCondition, key, asc, 1, info};
}

// Where a failed transfer went: a file (through io_uring) or an RBD image.
enum class Backing { File, Rbd };

// Sense for a failed transfer: err is a positive errno (EIO when a read hit
// the end of a file that shrank). ENOSPC/EDQUOT on a write mean the thin
// file could not get space, which SBC reports as a space-allocation failure.
// From librbd, two errors say this gateway's path cannot serve the image
// while its data is fine, and hosts' multipath should retry on another
// gateway ("target port in unavailable state"), where MEDIUM ERROR would
// fail the I/O to the application: ESHUTDOWN (librbd's EBLOCKLISTED, another
// gateway took the exclusive lock and fenced this one) and EROFS (a client
// that took the lock on purpose, with rbd_lock_acquire, declines to hand it
// over). From a file they are what any other error is.
inline rbio_bs_result io_failure(bool write, int err, Backing backing) {
    if (backing == Backing::Rbd && (err == 108 /*ESHUTDOWN*/ || err == 30 /*EROFS*/))
        return check(kNotReady, kAscTargetPortUnavailable);
    if (write && (err == 28 /*ENOSPC*/ || err == 122 /*EDQUOT*/))
        return check(kDataProtect, kAscSpaceAllocationFailedWriteProtect);
    return write ? check(kMediumError, kAscWriteError) : check(kMediumError, kAscUnrecoveredReadError);
}

inline uint32_t be16(const uint8_t* p) { return uint32_t(p[0]) << 8 | p[1]; }
inline uint32_t be32(const uint8_t* p) {
    return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3];
}
inline uint64_t be64(const uint8_t* p) { return uint64_t(be32(p)) << 32 | be32(p + 4); }
inline void put_be32(uint8_t* p, uint32_t v) {
    p[0] = uint8_t(v >> 24);
    p[1] = uint8_t(v >> 16);
    p[2] = uint8_t(v >> 8);
    p[3] = uint8_t(v);
}
inline void put_be64(uint8_t* p, uint64_t v) {
    put_be32(p, uint32_t(v >> 32));
    put_be32(p + 4, uint32_t(v));
}

// Blocks a READ, WRITE, WRITE AND VERIFY, ORWRITE or WRITE SAME CDB names,
// as tgt's scsi_rw_count reads them (READ/WRITE(6): 0 is 256); 0 for any
// other command. tgt hands the store this times the block size in 32 bits
// (cmd->tl), which wraps from 4 GiB on.
inline uint32_t rw_blocks(const uint8_t* cdb) {
    switch (cdb[0]) {
        case kRead6:
        case kWrite6: return cdb[4] ? cdb[4] : 256;
        case kRead10:
        case kWrite10:
        case kWriteVerify10:
        case kWriteSame10: return be16(cdb + 7);
        case kRead12:
        case kWrite12:
        case kWriteVerify12: return be32(cdb + 6);
        case kRead16:
        case kWrite16:
        case kWriteVerify16:
        case kOrWrite16:
        case kWriteSame16: return be32(cdb + 10);
        default: return 0;
    }
}

// Number of blocks a VERIFY CDB covers (tgt's SBC layer does not set it).
inline uint32_t verify_blocks(const uint8_t* cdb) {
    switch (cdb[0]) {
        case kVerify10: return be16(cdb + 7);
        case kVerify12: return be32(cdb + 6);
        case kVerify16: return be32(cdb + 10);
        default: return 0;
    }
}

}  // namespace rbio::bs::scsi
