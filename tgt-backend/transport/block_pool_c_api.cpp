// extern "C" entry points of the block pools (rbio/bs/block_pool.h) for the
// tgt glue. Nothing here lets a C++ exception unwind into tgtd.
#include <cstdio>
#include <exception>
#include <memory>

#include "rbio/bs/block_pool.h"
#include "rbio/bs/block_pool.hpp"

using rbio::tp::Block;
using rbio::tp::BlockPool;
using rbio::tp::BlockPoolConfig;
using rbio::tp::ReleaseQueue;

struct rbio_pool {
    explicit rbio_pool(const BlockPoolConfig& c) : pool(c) {}
    BlockPool pool;
};

struct rbio_release_queue {
    ReleaseQueue queue;
};

extern "C" {

rbio_pool* rbio_pool_new(const rbio_pool_config* c, char* err, size_t errlen) {
    BlockPoolConfig pc;
    pc.min_shift = c->min_shift;
    pc.classes = c->classes;
    pc.pooled_max = c->pooled_max;
    pc.page_aligned = c->page_aligned != 0;
    pc.tail = c->tail;
    try {
        return std::make_unique<rbio_pool>(pc).release();
    } catch (const std::exception& e) {
        std::snprintf(err, errlen, "%s", e.what());
    } catch (...) {
        std::snprintf(err, errlen, "unexpected error making a block pool");
    }
    return nullptr;
}

void rbio_pool_free(rbio_pool* p) { std::unique_ptr<rbio_pool> owned(p); }

void* rbio_pool_alloc(rbio_pool* p, size_t size) { return p->pool.alloc(size); }

void rbio_pool_release(void* payload) {
    if (payload) BlockPool::release(payload);
}

void rbio_pool_charge(void* payload, size_t* held) { BlockPool::charge(payload, held); }

void rbio_pool_trim(rbio_pool* p) { p->pool.trim(); }

rbio_release_queue* rbio_release_queue_new(void) {
    try {
        return std::make_unique<rbio_release_queue>().release();
    } catch (...) {
        return nullptr;
    }
}

void rbio_release_queue_free(rbio_release_queue* q) { std::unique_ptr<rbio_release_queue> owned(q); }

void rbio_release_after(rbio_release_queue* q, void* payload, uint64_t after, uint64_t done) {
    q->queue.release_after(Block::of(payload), after, done);
}

void rbio_release_done(rbio_release_queue* q, uint64_t done) { q->queue.release_done(done); }

void rbio_release_all(rbio_release_queue* q) { q->queue.release_all(); }

}  // extern "C"
