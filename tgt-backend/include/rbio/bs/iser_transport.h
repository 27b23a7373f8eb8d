/*
 * The C ABI between tgt's iSCSI core and rbio's iSER transport.
 *
 * glue/iscsi_iser_glue.c (which includes tgt's headers) drives tgt's core
 * over RDMA with these calls; behind them is C++ with no tgt dependency:
 * iser-opt's IserEndpoint (doorbell batching, selective signalling, batched
 * completion reaping) and registered data buffers. No function lets a C++
 * exception escape.
 */
#ifndef RBIO_BS_ISER_TRANSPORT_H
#define RBIO_BS_ISER_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The largest data segment an initiator may SEND (immediate data, text):
 * the TargetRecvDataSegmentLength logins negotiate, and what the receive
 * buffers hold. */
#define RBIO_ISER_RECV_DATA_MAX 8192u

struct rdma_cm_id;
struct rbio_tp_settings;
struct rbio_iser_ep;

/* One received PDU: its BHS, and its AHS and data segment (contiguous, in
 * a registered data buffer, not necessarily right after the BHS), valid
 * until the callback returns; len counts all three. The iSER header's
 * advertised buffers. */
struct rbio_iser_rx {
    const uint8_t *bhs;
    const uint8_t *rest;
    uint32_t len;
    int read_valid;
    uint32_t read_stag;
    uint64_t read_va;
    int write_valid;
    uint32_t write_stag;
    uint64_t write_va;
};

typedef void (*rbio_iser_rx_fn)(void *ctx, const struct rbio_iser_rx *rx);
/* An RDMA READ (or other operation posted with a token) is done: status 0,
 * or a negative errno when it failed or was cancelled. */
typedef void (*rbio_iser_done_fn)(void *ctx, uint64_t token, int status);

/* An endpoint on a connect request's id, with its receives posted. The
 * endpoint owns the id from now on; on failure (NULL, and why) the id is
 * destroyed already, which rejects the request. */
struct rbio_iser_ep *rbio_iser_ep_new(struct rdma_cm_id *id, const struct rbio_tp_settings *s,
                                      rbio_iser_done_fn done, void *ctx, char *err, size_t errlen);
/* Destroys the QP, cancels what is in flight (done() runs with
 * -ECANCELED), publishes the counters and frees everything. */
void rbio_iser_ep_free(struct rbio_iser_ep *ep);
/* Accepts the connection (responder resources from the request). */
int rbio_iser_ep_accept(struct rbio_iser_ep *ep, int initiator_depth, int responder_resources, char *err,
                        size_t errlen);
void rbio_iser_ep_disconnect(struct rbio_iser_ep *ep);
int rbio_iser_ep_fd(const struct rbio_iser_ep *ep);

/* The completion channel fired: every completion handled (rx() per PDU),
 * everything posted, the channel re-armed. 0, or -1 with why. */
int rbio_iser_ep_run(struct rbio_iser_ep *ep, rbio_iser_rx_fn rx, void *ctx, char *err, size_t errlen);
/* The last rbio_iser_ep_run() stopped at iser_pass_completions: the CQ may
 * hold more, its channel is not armed, and only another run reaps them. */
int rbio_iser_ep_yielded(const struct rbio_iser_ep *ep);
/* Posts what is queued (normally done by run). */
void rbio_iser_ep_flush(struct rbio_iser_ep *ep);
/* What rbio_iser_ep_quiet_tick() asks of the caller. */
enum rbio_iser_quiet {
    RBIO_ISER_QUIET_OK = 0,   /* nothing */
    RBIO_ISER_QUIET_REAP = 1, /* run a pass (rbio_iser_ep_run) although no event came */
    RBIO_ISER_QUIET_END = 2,  /* the peer is gone: close the connection (why says so) */
};
/* The connection is quiet (called once a second while it is): releases
 * what unsignalled sends still hold (one signalled zero-length RDMA WRITE,
 * when there is such a tail); after 5 quiet seconds in a row, probes an
 * idle peer the same way, so a vanished peer fails the next pass. Valid
 * from the accept on, before the connection's first PDU too. Work that has
 * been outstanding for 5 s with no completion at all asks for a pass that
 * reaps the CQ, and after 15 s for the connection's end (soft-RoCE retries
 * a lost request for ever when the initiator asked for 7 retries). */
int rbio_iser_ep_quiet_tick(struct rbio_iser_ep *ep, char *why, size_t whylen);

/* A PDU: header (BHS + AHS) and up to 8 KiB of data, copied. 0, or -1. */
int rbio_iser_ep_send(struct rbio_iser_ep *ep, const void *hdr, size_t hdr_len, const void *data,
                      size_t data_len);
/* RDMA WRITE of len bytes at `offset` in registered data buffer `buf` (from
 * rbio_iser_data_alloc) to the initiator's (va, rkey). 0, or -1. */
int rbio_iser_ep_rdma_write(struct rbio_iser_ep *ep, void *buf, size_t offset, size_t len, uint64_t va,
                            uint32_t rkey);
/* The same RDMA WRITE and, in the same post, the SEND of a PDU that is
 * the 48-byte BHS `bhs` alone (a READ's data, then its SCSI Response):
 * both queued, or neither (-1). */
int rbio_iser_ep_rdma_write_send(struct rbio_iser_ep *ep, void *buf, size_t offset, size_t len, uint64_t va,
                                 uint32_t rkey, const void *bhs);
/* RDMA READ into `buf` + offset; done(token) follows. 0, or -1. */
int rbio_iser_ep_rdma_read(struct rbio_iser_ep *ep, void *buf, size_t offset, size_t len, uint64_t va,
                           uint32_t rkey, uint64_t token);
/* One more command past tgt's reader and writer (Counter::DirectCommands). */
void rbio_iser_ep_count_direct(struct rbio_iser_ep *ep);
/* Room for `n` more work requests now. */
int rbio_iser_ep_room(const struct rbio_iser_ep *ep, unsigned n);
/* 1 while sends queued on a working connection have not all completed;
 * first asks for a completion that covers them (an unsignalled tail would
 * otherwise give none). */
int rbio_iser_ep_sends_pending(struct rbio_iser_ep *ep);
uint64_t rbio_iser_ep_queued_total(const struct rbio_iser_ep *ep);
uint64_t rbio_iser_ep_done_total(const struct rbio_iser_ep *ep);
void rbio_iser_ep_describe(const struct rbio_iser_ep *ep, char *out, size_t len);
void rbio_iser_ep_publish(struct rbio_iser_ep *ep);
/* Copies up to n of the connection's counters (rbio::iser::Counter order)
 * into out; returns how many. */
size_t rbio_iser_ep_counters(const struct rbio_iser_ep *ep, uint64_t *out, size_t n);

/* Data buffers registered with the endpoint's device (page aligned, pooled
 * by size class: registration happens when a pool grows, never per I/O). */
void *rbio_iser_data_alloc(struct rbio_iser_ep *ep, size_t size);
/* Called from the rx callback: the PDU's AHS-and-data buffer (`rest`)
 * becomes the caller's, a data buffer like rbio_iser_data_alloc()'s, when
 * it holds at least `size` bytes; the receive gets a fresh one. Once per
 * PDU; NULL otherwise (allocate and copy instead). */
void *rbio_iser_ep_take_rx(struct rbio_iser_ep *ep, size_t size);
/* Frees now, or once every work request queued on ep so far is complete
 * (ep NULL: now). */
void rbio_iser_data_free(struct rbio_iser_ep *ep, void *buf);

#ifdef __cplusplus
}
#endif

#endif
