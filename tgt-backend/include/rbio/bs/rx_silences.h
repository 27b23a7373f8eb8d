/*
 * The silences of one iSCSI connection that its host has not yet shown it
 * lived through, for rbd_quiet_s (glue/rx_quiet.h says why). Plain C,
 * without tgt, so that the rule is unit-tested.
 *
 * A silence is its length and the StatSN of the first response the target
 * could send after it ended. A command whose ExpStatSN is past that StatSN
 * was sent by a host that had read the response: it clears that silence
 * and every older one. Commands its host sent before it gave up (a late
 * burst) cannot. The connection is suspect for a limit L while any silence
 * of L or more is left.
 *
 * Kept as a stack, oldest at the bottom, lengths strictly falling: a new
 * silence drops the newer-end ones no longer than itself (whatever clears
 * it clears them, and it is at least as long). When the stack is full the
 * new silence takes in the newest one: the longer length and the later
 * StatSN, which only makes it harder to clear.
 */
#ifndef RBIO_BS_RX_SILENCES_H
#define RBIO_BS_RX_SILENCES_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RBIO_RX_SILENCES 4

struct rbio_rx_silences {
    uint32_t n;
    struct {
        uint32_t len_s;        /* seconds with nothing from the host */
        uint32_t since_statsn; /* the first StatSN sent after it */
    } s[RBIO_RX_SILENCES];
};

/* A silence of len_s seconds ended; the next response will carry stat_sn. */
static inline void rbio_rx_silences_push(struct rbio_rx_silences *q, uint32_t len_s, uint32_t stat_sn) {
    if (len_s == 0) return;
    while (q->n > 0 && q->s[q->n - 1].len_s <= len_s) q->n--;
    if (q->n == RBIO_RX_SILENCES) {
        /* falling lengths: the newest is longer than len_s */
        len_s = q->s[--q->n].len_s;
    }
    q->s[q->n].len_s = len_s;
    q->s[q->n].since_statsn = stat_sn;
    q->n++;
}

/* A command with this ExpStatSN arrived: clears what it shows its host
 * read past (serial number arithmetic, RFC 7143 4.2.2.1), and returns the
 * longest silence left, in seconds (0: none). */
static inline uint32_t rbio_rx_silences_ack(struct rbio_rx_silences *q, uint32_t exp_statsn) {
    uint32_t cleared = 0, i;

    while (cleared < q->n && (int32_t)(exp_statsn - q->s[cleared].since_statsn) > 0) cleared++;
    if (cleared > 0) {
        for (i = cleared; i < q->n; i++) q->s[i - cleared] = q->s[i];
        q->n -= cleared;
    }
    return q->n > 0 ? q->s[0].len_s : 0;
}

#ifdef __cplusplus
}
#endif

#endif
