// Size-classed block pools and the queue of blocks whose release waits for
// a send (rbio/bs/block_pool.hpp).
#include "rbio/bs/block_pool.hpp"

#include <sys/mman.h>

#include <bit>
#include <cstdlib>
#include <limits>

#include "rbio/bs/data_budget.h"

namespace rbio::tp {

namespace {

constexpr size_t kPage = 4096;
constexpr uint32_t kMagic = 0x72424c4b;  // "rBLK"

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

}  // namespace

BlockPool::BlockPool(const BlockPoolConfig& c) : c_(c) {
    if (c.min_shift + c.classes >= std::numeric_limits<size_t>::digits)
        throw std::invalid_argument("block pool: size classes beyond a size_t");
    if (c.mapped && !c.page_aligned)
        throw std::invalid_argument("block pool: mapped blocks are page aligned");
    free_.assign(c.classes, nullptr);
}

BlockPool::~BlockPool() { trim(); }

void BlockPool::trim() noexcept {
    for (Block*& f : free_)
        while (f) {
            Block* b = f;
            f = b->next;
            pooled_ -= b->size;
            destroy(b);
        }
}

int BlockPool::size_class(size_t size) const noexcept {
    // The smallest power of two >= size, without a loop over the classes:
    // this runs for every task and data buffer (iSER receive buffers of
    // 8.25 KiB went through three classes).
    const unsigned shift = size <= 1 ? 0u : unsigned(std::bit_width(size - 1));
    const unsigned cls = shift <= c_.min_shift ? 0u : shift - c_.min_shift;
    return cls < c_.classes ? int(cls) : -1;
}

void* BlockPool::alloc(size_t size) noexcept {
    const int cls = size_class(size);
    if (cls >= 0) [[likely]] {
        if (Block* b = free_[size_t(cls)]) [[likely]] {
            free_[size_t(cls)] = b->next;
            pooled_ -= b->size;
            return b->payload();
        }
    }
    return alloc_new(cls, size);
}

void* BlockPool::alloc_new(int cls, size_t size) noexcept {
    Block* b = make(cls, cls >= 0 ? size_t(1) << (c_.min_shift + unsigned(cls)) : size);
    return b ? b->payload() : nullptr;
}

Block* BlockPool::make(int cls, size_t size) noexcept {
    // Checked before the rounding, which would wrap a size near SIZE_MAX
    // to 0 (a block of no bytes handed out as the size asked).
    if (size > std::numeric_limits<size_t>::max() / 2) return nullptr;
    if (c_.page_aligned) size = round_up(size, kPage);
    Block* b = nullptr;
    size_t allocated = 0;
    if (c_.mapped) {
        allocated = round_up(kPage + size + c_.tail, kPage);
        void* m = mmap(nullptr, allocated, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) return nullptr;
        b = reinterpret_cast<Block*>(static_cast<unsigned char*>(m) + kPage - sizeof(Block));
    } else if (c_.page_aligned) {
        void* m = nullptr;
        allocated = kPage + size + c_.tail;
        if (posix_memalign(&m, kPage, allocated)) return nullptr;
        b = reinterpret_cast<Block*>(static_cast<unsigned char*>(m) + kPage - sizeof(Block));
    } else {
        allocated = sizeof(Block) + size + c_.tail;
        b = static_cast<Block*>(std::malloc(allocated));  // 16-aligned on this ABI
        if (!b) return nullptr;
    }
    *b = Block{nullptr, 0, this, nullptr, size, allocated, cls, kMagic, nullptr};
    if (c_.on_make && !c_.on_make(c_.ctx, *b)) {
        free_memory(b);  // not made: nothing for on_destroy to undo
        return nullptr;
    }
    ++made_;
    return b;
}

void BlockPool::destroy(Block* b) noexcept {
    if (c_.on_destroy) c_.on_destroy(c_.ctx, *b);
    free_memory(b);
}

void BlockPool::free_memory(Block* b) noexcept {
    b->magic = 0;
    if (c_.mapped) munmap(static_cast<unsigned char*>(b->payload()) - kPage, b->allocated);
    else if (c_.page_aligned) std::free(static_cast<unsigned char*>(b->payload()) - kPage);
    else std::free(b);
}

void BlockPool::put_back(Block* b) noexcept {
    if (b->cls >= 0 && pooled_ + b->size <= c_.pooled_max) [[likely]] {
        b->next = free_[size_t(b->cls)];
        free_[size_t(b->cls)] = b;
        pooled_ += b->size;
        return;
    }
    destroy(b);
}

void BlockPool::charge(void* payload, size_t* held) noexcept {
    Block* b = Block::of(payload);
    b->charged = held;
    *held += b->size;
    rbio_all_data.held += b->size;
}

void BlockPool::release(Block* b) noexcept {
    if (b->charged) {
        *b->charged -= b->size;
        rbio_all_data.held -= b->size;
        b->charged = nullptr;
    }
    b->pool->put_back(b);
}

bool BlockPool::owns(void* payload) const noexcept {
    const Block* b = Block::of(payload);
    return b->magic == kMagic && b->pool == this;
}

void ReleaseQueue::release_after(Block* b, uint64_t after, uint64_t done) noexcept {
    if (done >= after) {
        BlockPool::release(b);
        return;
    }
    b->release_after = after;
    b->next = nullptr;
    if (tail_) tail_->next = b;
    else head_ = b;
    tail_ = b;
}

void ReleaseQueue::release_done(uint64_t done) noexcept {
    while (head_ && head_->release_after <= done) {
        Block* b = head_;
        head_ = b->next;
        BlockPool::release(b);
    }
    if (!head_) tail_ = nullptr;
}

void ReleaseQueue::release_all() noexcept {
    while (head_) {
        Block* b = head_;
        head_ = b->next;
        BlockPool::release(b);
    }
    tail_ = nullptr;
}

}  // namespace rbio::tp
