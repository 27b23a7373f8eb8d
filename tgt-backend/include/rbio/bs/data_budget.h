/*
 * What iSCSI connections may hold in data buffers at once: each one
 * (data_budget_mib) and all of tgtd's together (data_budget_total_mib).
 * Plain C, without tgt, so that the rules are unit-tested.
 *
 * tgt's core asks for a command's whole data buffer (its Expected Data
 * Transfer Length) as the command arrives, before any SCSI check, and keeps
 * it until the response has left. A host that sends a window of large READs
 * and then stops reading its socket makes the store fill buffer after
 * buffer that cannot leave: 128 READs of 1 GiB pin 128 GiB, and the OOM
 * killer ends tgtd with every other host's sessions. The transports count
 * each connection's data buffers (rbio_pool_charge: until a buffer is
 * released, which for a READ is when its send is done) and close the
 * connection whose next buffer would take it over the budget.
 *
 * A connection that holds nothing is always given its buffer, however
 * large: a command a host may send always runs, alone if need be.
 *
 * One connection's budget does not bound a host that opens many, or many
 * hosts each holding theirs; the total does. A buffer that would take tgtd
 * over it closes the connection that holds the most: the asking one when
 * that is it (ties included), else the other, which is asked to close
 * (its transport's pass closes it) and no longer counts, and the asking
 * one is served. So the connections that keep buffers are the ones that
 * take their responses, whoever asks last. Others are closed only when
 * closing those that hold more than the asking one makes room; else the
 * asking one is closed, or, holding nothing, served alone.
 */
#ifndef RBIO_BS_DATA_BUDGET_H
#define RBIO_BS_DATA_BUDGET_H

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

struct rbio_data_budget {
    size_t held;  /* bytes of the connection's data buffers not yet released */
    size_t limit; /* bytes; 0: no budget */
    /* On the process's list (rbio_data_budget_join), so that the total's
     * rule can find the connection holding the most and close it. */
    struct rbio_data_budget *prev, *next;
    void (*close)(void *ctx, const char *why); /* logs, and closes it soon */
    void *ctx;
    int closing; /* closed for the total: its bytes no longer count */
};

/* Every connection's data buffers together (data_budget_total_mib). */
struct rbio_data_total {
    size_t held;  /* bytes of every charged buffer not yet released */
    size_t limit; /* bytes; 0: no limit */
    struct rbio_data_budget *first;
};

/* The process's; tgtd's event loop is its only user (no lock). */
extern struct rbio_data_total rbio_all_data;

/* A budget of `mib` MiB (0: none). */
static inline struct rbio_data_budget rbio_data_budget_of_mib(unsigned mib) {
    struct rbio_data_budget b = {0, (size_t)mib << 20, NULL, NULL, NULL, NULL, 0};
    return b;
}

/* Whether a buffer of `size` more bytes keeps the connection within it. */
static inline int rbio_data_budget_admits(const struct rbio_data_budget *b, size_t size) {
    return b->limit == 0 || b->held == 0 || (b->held <= b->limit && size <= b->limit - b->held);
}

/* data_budget_total_mib: `mib` MiB, 0 for none. */
void rbio_data_total_set_limit_mib(unsigned mib);
/* Puts the connection's budget on the process's list, with what closes it
 * (close(ctx, why) logs why and has the connection closed outside the
 * caller's stack; it may run from another connection's pass). Leave it
 * before the budget's memory goes. */
void rbio_data_budget_join(struct rbio_data_budget *b, void (*close)(void *ctx, const char *why), void *ctx);
void rbio_data_budget_leave(struct rbio_data_budget *b);

/* Out of line: the total would be passed. Closes the connections holding
 * the most, other than b, until the buffer fits, when closing those that
 * hold more than b can make it fit; else 0 (b is then counted as closing,
 * and the caller closes it), or 1 when b holds nothing. */
int rbio_data_total_make_room(struct rbio_data_budget *b, size_t size);

/* Whether a buffer of `size` more bytes for b keeps tgtd within the total,
 * after closing others if need be. */
static inline int rbio_data_total_admits(struct rbio_data_budget *b, size_t size) {
    const struct rbio_data_total *t = &rbio_all_data;
    return t->limit == 0 || (t->held <= t->limit && size <= t->limit - t->held) ||
           rbio_data_total_make_room(b, size);
}

/* Both: the connection's own budget first, so that no other connection
 * is closed for a buffer its own budget refuses anyway. */
static inline int rbio_data_budgets_admit(struct rbio_data_budget *b, size_t size) {
    return rbio_data_budget_admits(b, size) && rbio_data_total_admits(b, size);
}

/* Why a buffer of `size` more bytes was refused (by b's own budget, else by
 * the total), for the log line that closes the connection. */
void rbio_data_budget_why(const struct rbio_data_budget *b, size_t size, char *out, size_t len);

#ifdef __cplusplus
}
#endif

#endif
