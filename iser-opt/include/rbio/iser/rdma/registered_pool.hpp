#pragma once
// Registered memory carved into equal slots: receive buffers, send headers,
// data buffers. Registered once (one ibv_reg_mr) when the pool is made, so no
// I/O ever registers memory; acquire/release are a pop and a push on a free
// stack sized up front, with no allocation and no lock (a pool belongs to one
// event-loop thread).
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "rbio/iser/rdma/verbs.hpp"

namespace rbio::iser::rdma {

class RegisteredPool {
public:
    static constexpr uint32_t kNone = UINT32_MAX;

    // `access` as for ibv_reg_mr, e.g. IBV_ACCESS_LOCAL_WRITE |
    // IBV_ACCESS_REMOTE_READ. Memory comes from an anonymous mapping (page
    // aligned, zeroed). Throws RdmaError (with the sizes) when mapping or
    // registering fails, std::invalid_argument for a zero size or count.
    RegisteredPool(ibv_pd* pd, size_t slot_size, uint32_t slot_count, int access);
    ~RegisteredPool();
    RegisteredPool(const RegisteredPool&) = delete;
    RegisteredPool& operator=(const RegisteredPool&) = delete;

    // A free slot's index, or kNone when all are in use.
    uint32_t acquire() {
        if (free_.empty()) return kNone;
        uint32_t i = free_.back();
        free_.pop_back();
        return i;
    }
    // Gives a slot back; releasing one twice is a bug the pool does not check
    // on this path.
    void release(uint32_t index) {
        assert(index < count_ && "slot outside the pool");
        assert(free_.size() < count_ && "more releases than acquires");
        free_.push_back(index);
    }

    uint8_t* data(uint32_t index) const { return base_ + size_t(index) * slot_size_; }
    std::span<uint8_t> slot(uint32_t index) const { return {data(index), slot_size_}; }
    // The slot that holds `p`, or kNone when p is outside the pool.
    uint32_t index_of(const void* p) const;
    bool contains(const void* p, size_t n) const;

    uint32_t lkey() const { return mr_->lkey; }
    uint32_t rkey() const { return mr_->rkey; }
    size_t slot_size() const { return slot_size_; }
    uint32_t slot_count() const { return count_; }
    uint32_t available() const { return uint32_t(free_.size()); }

private:
    size_t slot_size_;
    uint32_t count_;
    size_t bytes_;
    uint8_t* base_ = nullptr;
    MrPtr mr_;
    std::vector<uint32_t> free_;
};

}  // namespace rbio::iser::rdma
