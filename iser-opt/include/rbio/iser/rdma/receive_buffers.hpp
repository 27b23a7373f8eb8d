#pragma once
// The memory of posted receives: one slot per receive, each holding a whole
// iSER message. Two layouts:
//
// * Contiguous (no source): slots of one registered pool, one SGE each.
// * Split (an owner's RecvBufferSource): the iSER header and BHS land in a
//   slot of a small registered pool (the first SGE, exactly their 76
//   bytes), the AHS and data segment in a buffer from the owner (the
//   second SGE). A PDU without AHS then has its data at the start of an
//   owner's buffer, which the owner can take (take()) and use in place,
//   e.g. as a SCSI command's data buffer, instead of copying the data out;
//   the slot gets a fresh buffer from the source before it is reposted.
//
// Single-threaded; slots are acquired and released like RegisteredPool's.
#include <infiniband/verbs.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "rbio/iser/iser_header.hpp"
#include "rbio/iser/pdu.hpp"
#include "rbio/iser/rdma/registered_pool.hpp"
#include "rbio/iser/rdma/work_queues.hpp"

namespace rbio::iser::rdma {

// Registered buffers for the AHS and data part of receives. acquire() runs
// once per slot at start and once per take(); it must not allocate on the
// I/O path (a pool), and release() gets back what was never taken.
class RecvBufferSource {
public:
    struct Buffer {
        uint8_t* data = nullptr;  // nullptr: none to be had
        uint32_t lkey = 0;
        size_t size = 0;  // usable bytes
    };
    virtual ~RecvBufferSource() = default;
    // A buffer of at least `size` bytes registered on the receives' device.
    virtual Buffer acquire(size_t size) = 0;
    virtual void release(uint8_t* data) = 0;
};

class ReceiveBuffers {
public:
    // `count` slots for messages of up to `message_size` bytes. Throws
    // RdmaError (registration, or the source had no buffer).
    ReceiveBuffers(ibv_pd* pd, uint32_t count, size_t message_size, RecvBufferSource* source);
    ~ReceiveBuffers();
    ReceiveBuffers(const ReceiveBuffers&) = delete;
    ReceiveBuffers& operator=(const ReceiveBuffers&) = delete;

    uint32_t acquire() { return heads_.acquire(); }
    void release(uint32_t slot) { heads_.release(slot); }
    uint32_t available() const { return heads_.available(); }
    uint32_t count() const { return heads_.slot_count(); }
    size_t message_size() const { return message_size_; }

    // The iSER header (then the BHS) of the message in `slot`.
    const uint8_t* head(uint32_t slot) const { return heads_.data(slot); }
    // What follows the BHS: AHS, then the data segment.
    const uint8_t* rest(uint32_t slot) const {
        return source_ ? parts_[slot].data : heads_.data(slot) + kIserHeaderLength + kBhsLength;
    }
    // The slot's receive SGEs, sge_count() of them, kept up to date here so
    // a repost points at them instead of building them again.
    ibv_sge* sges(uint32_t slot) { return sges_[slot].data(); }
    int sge_count() const { return source_ ? 2 : 1; }
    // Split layout: hands the slot's data part (at rest(slot)) to the caller
    // when it holds at least `min_size` bytes and a fresh one can be had;
    // the caller gives it back to the source's owner its own way. nullptr
    // (nothing changes) otherwise.
    uint8_t* take(uint32_t slot, size_t min_size);

private:
    void set_part(uint32_t slot, const RecvBufferSource::Buffer& b);

    size_t message_size_;
    RecvBufferSource* source_;
    RegisteredPool heads_;                         // whole messages, or iSER header + BHS
    std::vector<RecvBufferSource::Buffer> parts_;  // split: each slot's data part
    std::vector<std::array<ibv_sge, kMaxRecvSge>> sges_;
};

}  // namespace rbio::iser::rdma
