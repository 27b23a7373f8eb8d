#pragma once
// The buffers and tasks both transports hand to tgt's iSCSI core: blocks
// with a header in front of the payload, kept after use in one free stack
// per power-of-two size class, and a queue that holds a block back until
// the send that still points into it is done.
//
// tgt's core frees a task and its data buffer as soon as it has handed the
// last response part over, while the transport's send (a sendmsg() not yet
// made, an RDMA WRITE not yet completed) may still read them: that is what
// ReleaseQueue is for. Pooling keeps malloc/mmap (and, for RDMA, memory
// registration) off the per-I/O path: they run only when a pool grows.
//
// Single-threaded, as tgtd's event loop is: no locks.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <vector>

namespace rbio::tp {

class BlockPool;

// Lies right before every payload. 16-aligned, so the payload is too.
struct alignas(16) Block {
    Block* next;             // free stack or release queue
    uint64_t release_after;  // completions that must be counted first
    BlockPool* pool;
    void* tag;         // the owner's (e.g. the RDMA memory region)
    size_t size;       // usable bytes
    size_t allocated;  // bytes from the system, header included
    int cls;           // size class, or -1: not pooled
    uint32_t magic;
    // A connection's count of data-buffer bytes (data_budget_mib) that
    // holds `size` for this block until it is released, wherever that
    // happens (the core's free, or a send's completion); nullptr: none.
    size_t* charged;

    void* payload() { return reinterpret_cast<unsigned char*>(this) + sizeof(Block); }
    static Block* of(void* payload) {
        return reinterpret_cast<Block*>(static_cast<unsigned char*>(payload) - sizeof(Block));
    }
};

struct BlockPoolConfig {
    unsigned min_shift = 12;        // the smallest class: 4 KiB
    unsigned classes = 11;          // so up to 4 MiB; larger blocks are not pooled
    size_t pooled_max = 64u << 20;  // bytes kept in the free stacks at most
    // Payload page aligned (O_DIRECT backing stores need it), the header at
    // the end of a page of its own in front; else the header just before.
    bool page_aligned = true;
    bool mapped = false;  // page aligned from mmap() rather than the heap
    size_t tail = 0;      // bytes allocated past the usable size
    // Once per block made (e.g. memory registration): false drops the block
    // and fails the allocation. on_destroy undoes it.
    bool (*on_make)(void* ctx, Block& b) = nullptr;
    void (*on_destroy)(void* ctx, Block& b) = nullptr;
    void* ctx = nullptr;
};

class BlockPool {
public:
    // std::invalid_argument when the classes do not fit a size_t.
    explicit BlockPool(const BlockPoolConfig& c);
    ~BlockPool();
    BlockPool(const BlockPool&) = delete;
    BlockPool& operator=(const BlockPool&) = delete;

    // At least `size` usable bytes; nullptr when out of memory or on_make
    // refused. From a free stack when one has a block: no system call.
    void* alloc(size_t size) noexcept;
    // Counts b->size in *held, and in the process's total
    // (rbio_all_data.held), until the block is released.
    static void charge(void* payload, size_t* held) noexcept;
    // Back to its pool's free stack, or to the system when the pool holds
    // pooled_max bytes already or the block is not of a size class; takes
    // its size off the count it was charged to (and off the total).
    static void release(Block* b) noexcept;
    static void release(void* payload) noexcept { release(Block::of(payload)); }
    // payload came from this pool's alloc() (and is not released).
    bool owns(void* payload) const noexcept;
    // Gives the blocks kept for reuse back to the system (tgtd exiting);
    // blocks in use stay valid and come back to the pool as usual.
    void trim() noexcept;

    const BlockPoolConfig& config() const noexcept { return c_; }
    size_t pooled_bytes() const noexcept { return pooled_; }
    size_t blocks_made() const noexcept { return made_; }
    // The size class of `size`, or -1: larger than the largest.
    int size_class(size_t size) const noexcept;

private:
    Block* make(int cls, size_t size) noexcept;
    // alloc() and put_back() without a free block, or with the pool full:
    // out of line, so the per-I/O paths save no registers for them.
    [[gnu::noinline, gnu::cold]] void* alloc_new(int cls, size_t size) noexcept;
    [[gnu::noinline, gnu::cold]] void destroy(Block* b) noexcept;
    void free_memory(Block* b) noexcept;
    void put_back(Block* b) noexcept;

    BlockPoolConfig c_;
    std::vector<Block*> free_;
    size_t pooled_ = 0;
    size_t made_ = 0;
};

// Blocks waiting for a completion count (PDUs sent, work requests done) to
// reach the value they were deferred with; released in order. Intrusive
// (through Block::next): deferring never allocates.
class ReleaseQueue {
public:
    ReleaseQueue() = default;
    ~ReleaseQueue() { release_all(); }
    ReleaseQueue(const ReleaseQueue&) = delete;
    ReleaseQueue& operator=(const ReleaseQueue&) = delete;

    // Releases b now if `done` has reached `after`, else once release_done()
    // is called with at least `after`.
    void release_after(Block* b, uint64_t after, uint64_t done) noexcept;
    void release_done(uint64_t done) noexcept;
    void release_all() noexcept;
    bool empty() const noexcept { return head_ == nullptr; }

private:
    Block* head_ = nullptr;
    Block* tail_ = nullptr;
};

}  // namespace rbio::tp
