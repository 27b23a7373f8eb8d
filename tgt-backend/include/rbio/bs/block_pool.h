/*
 * The C ABI of the block pools (rbio/bs/block_pool.hpp) for the tgt glue:
 * the buffers and tasks both transports hand to tgt's iSCSI core, and the
 * queue that holds a block back until the send carrying it is done. No
 * function lets a C++ exception escape; none takes a lock (tgtd's event
 * loop is the only caller).
 */
#ifndef RBIO_BS_BLOCK_POOL_H
#define RBIO_BS_BLOCK_POOL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct rbio_pool;
struct rbio_release_queue;

struct rbio_pool_config {
    unsigned min_shift; /* the smallest size class is 1 << min_shift bytes */
    unsigned classes;   /* size classes; larger blocks are not pooled */
    size_t pooled_max;  /* bytes kept for reuse at most */
    int page_aligned;   /* payloads page aligned (O_DIRECT), else 16 */
    size_t tail;        /* bytes allocated past the usable size */
};

/* NULL, and why, when the config is impossible or memory is short. */
struct rbio_pool *rbio_pool_new(const struct rbio_pool_config *c, char *err, size_t errlen);
/* Frees the pool and the blocks it keeps; blocks in use must be back. */
void rbio_pool_free(struct rbio_pool *p);
/* At least `size` usable bytes, or NULL. No system call when a block of
 * its size class is free. */
void *rbio_pool_alloc(struct rbio_pool *p, size_t size);
/* Back to the pool it came from (payload from rbio_pool_alloc); its size
 * comes off the count it was charged to. */
void rbio_pool_release(void *payload);
/* Adds the block's usable size to *held, and takes it off again when the
 * block is released, directly or from a release queue (a connection's
 * data buffers, rbio/bs/data_budget.h), and in the process's total
 * (rbio_all_data.held) the same way. *held must outlive the block's use. */
void rbio_pool_charge(void *payload, size_t *held);
/* Gives the blocks kept for reuse back to the system (tgtd exiting); blocks
 * in use stay valid and come back to the pool as usual. */
void rbio_pool_trim(struct rbio_pool *p);

/* NULL when memory is short. */
struct rbio_release_queue *rbio_release_queue_new(void);
/* Releases what it holds, then itself. */
void rbio_release_queue_free(struct rbio_release_queue *q);
/* Releases payload now if done >= after, else once rbio_release_done()
 * is called with done >= after. Never allocates. */
void rbio_release_after(struct rbio_release_queue *q, void *payload, uint64_t after, uint64_t done);
/* Releases, in order, the blocks whose count `done` has reached. */
void rbio_release_done(struct rbio_release_queue *q, uint64_t done);
void rbio_release_all(struct rbio_release_queue *q);

#ifdef __cplusplus
}
#endif

#endif
