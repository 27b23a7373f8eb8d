/*
 * What one iSCSI connection may hold in data buffers at once
 * (data_budget_mib). Plain C, without tgt, so that the rule is unit-tested.
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
};

/* A budget of `mib` MiB (0: none). */
static inline struct rbio_data_budget rbio_data_budget_of_mib(unsigned mib) {
    struct rbio_data_budget b = {0, (size_t)mib << 20};
    return b;
}

/* Whether a buffer of `size` more bytes keeps the connection within it. */
static inline int rbio_data_budget_admits(const struct rbio_data_budget *b, size_t size) {
    return b->limit == 0 || b->held == 0 || (b->held <= b->limit && size <= b->limit - b->held);
}

/* Why a buffer of `size` more bytes was refused, for the log line that
 * closes the connection. */
static inline void rbio_data_budget_why(const struct rbio_data_budget *b, size_t size, char *out,
                                        size_t len) {
    const size_t mib = (size_t)1 << 20;
    snprintf(out, len,
             "a command wants %zu MiB of data buffers while the connection holds %zu MiB, over "
             "data_budget_mib=%zu (a host that does not read its responses keeps their buffers held)",
             (size + mib - 1) / mib, (b->held + mib - 1) / mib, b->limit / mib);
}

#ifdef __cplusplus
}
#endif

#endif
