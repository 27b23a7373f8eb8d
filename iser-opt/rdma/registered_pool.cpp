#include "rbio/iser/rdma/registered_pool.hpp"

#include <sys/mman.h>

#include <cerrno>
#include <stdexcept>
#include <string>

namespace rbio::iser::rdma {

RegisteredPool::RegisteredPool(ibv_pd* pd, size_t slot_size, uint32_t slot_count, int access)
    : slot_size_(slot_size), count_(slot_count), bytes_(slot_size * slot_count) {
    if (slot_size == 0 || slot_count == 0)
        throw std::invalid_argument("registered pool: slot size and count must be positive");
    void* m = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) throw_rdma("registered pool: mmap of " + std::to_string(bytes_) + " bytes");
    base_ = static_cast<uint8_t*>(m);
    mr_.reset(ibv_reg_mr(pd, base_, bytes_, access));
    if (!mr_) {
        int err = errno;
        munmap(base_, bytes_);
        throw_rdma("registered pool: ibv_reg_mr of " + std::to_string(slot_count) + " x " +
                       std::to_string(slot_size) + " bytes",
                   err);
    }
    free_.reserve(slot_count);
    // Lowest indexes on top, so a lightly used pool touches few pages.
    for (uint32_t i = slot_count; i-- > 0;) free_.push_back(i);
}

RegisteredPool::~RegisteredPool() {
    mr_.reset();  // deregister before the memory goes
    munmap(base_, bytes_);
}

uint32_t RegisteredPool::index_of(const void* p) const {
    auto* b = static_cast<const uint8_t*>(p);
    if (b < base_ || b >= base_ + bytes_) return kNone;
    return uint32_t(size_t(b - base_) / slot_size_);
}

bool RegisteredPool::contains(const void* p, size_t n) const {
    auto* b = static_cast<const uint8_t*>(p);
    return b >= base_ && n <= bytes_ && b <= base_ + bytes_ - n;
}

}  // namespace rbio::iser::rdma
