/*
 * The C ABI between tgt's iSCSI core and rbio's TCP transport.
 *
 * glue/iscsi_tcp_glue.c (which includes tgt's headers) implements tgt's
 * `struct iscsi_transport` with these calls; behind them is C++ with no tgt
 * dependency: iser-opt's StreamRx (request batching) and TxQueue (message
 * coalescing) over one socket. No function lets a C++ exception escape.
 */
#ifndef RBIO_BS_TCP_TRANSPORT_H
#define RBIO_BS_TCP_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- settings: /etc/rbio/tgtd.conf (or $RBIO_CONFIG), then environment */

#define RBIO_TP_DEFAULT_CONFIG "/etc/rbio/tgtd.conf"

struct rbio_tp_settings {
    int enabled;                    /* take over tgtd's TCP portals (and, with iser, its iSER listeners) */
    int iser;                       /* take over tgtd's iSER listeners too */
    char portals[1024];             /* "" = every portal, else "ADDR:PORT,..." */
    char stats_file[4096];          /* "" = none; "%p" becomes tgtd's pid */
    int batch_reads;                /* one receive per event for many PDUs */
    int coalesce;                   /* one sendmsg per pass for many PDUs */
    int send_inline;                /* send in the pass that produced the response,
                                       not after an EPOLLOUT round trip */
    uint32_t direct_read_kib;       /* data reads at least this large skip the buffer */
    int write_in_place;             /* a write's data buffered whole becomes its buffer, uncopied */
    uint32_t rx_buffer_kib;         /* receive buffer per connection */
    uint32_t max_queued_kib;        /* queued response bytes that force a send */
    uint32_t rx_wait_pdus;          /* receive moderation: most requests waited for; 0/1: off */
    uint32_t rx_wait_us;            /* receive moderation: longest wait for them */
    uint32_t iser_spin_us;          /* iSER: longest spin on an empty CQ (adaptive); 0: never */
    uint32_t iser_srq_depth;        /* iSER: receives shared by a device's connections; 0: per connection */
    uint32_t iser_receive_kib;      /* iSER: each receive's data buffer; writes up to it use it in place */
    uint32_t iser_pass_completions; /* iSER: completions a pass reaps before the loop's other work; 0: any */
    int direct_commands;            /* READ/WRITE past the core's byte-stream reader and writer */
    uint32_t data_budget_mib;       /* data buffers one connection may hold (data_budget.h); 0: any */
    uint32_t data_budget_total_mib; /* data buffers all connections may hold together; 0: any */
    int data_budget_total_auto;     /* that figure is half the memory tgtd may use ("auto") */
    char source[4200];              /* where the settings came from, for the log */
};

/* Defaults, then the config file, then RBIO_TRANSPORT / RBIO_ISER /
 * RBIO_PORTALS / RBIO_STATS_FILE. 0, or -1 with a message naming the file, line and key. */
int rbio_tp_load_settings(struct rbio_tp_settings *s, char *err, size_t errlen);
/* The settings as one line, for tgtd's log. */
void rbio_tp_describe_settings(const struct rbio_tp_settings *s, char *out, size_t len);
/* "auto"'s data_budget_total_mib for a process that may use `bytes` of
 * memory: half of it, at least 64 MiB, at most 1048576. */
uint32_t rbio_tp_auto_total_mib(uint64_t bytes);
/* `bytes`, or the lowest memory limit of the cgroups in `proc_cgroup` (a
 * /proc/PID/cgroup) and their ancestors when lower: cgroup v2's memory.max
 * under `root` (e.g. /sys/fs/cgroup), v1's memory.limit_in_bytes under
 * root/memory. Up to the root the process sees, which in a container's
 * cgroup namespace is the container's own cgroup. */
uint64_t rbio_tp_cgroup_memory_limit(const char *proc_cgroup, const char *root, uint64_t bytes);
/* The portal is in s->portals (ADDR:PORT, [ADDR]:PORT or *:PORT). */
int rbio_tp_portal_selected(const struct rbio_tp_settings *s, const char *addr, int port);
/* GNU build-id of the running executable as hex; 0, or -1 if it has none. */
int rbio_tp_running_build_id(char *hex, size_t len);

/* ---- one connection */

struct rbio_tcp_conn;

enum rbio_tx_state { RBIO_TX_IDLE = 0, RBIO_TX_PENDING, RBIO_TX_BLOCKED, RBIO_TX_FAILED };

struct rbio_tcp_conn *rbio_tcp_conn_new(int fd, const struct rbio_tp_settings *s, char *err, size_t errlen);
/* Adds the connection's counters to the totals and frees it (not the fd). */
void rbio_tcp_conn_free(struct rbio_tcp_conn *c);

/* receive side */
void rbio_tcp_conn_take_event(struct rbio_tcp_conn *c);
/* The event's receive into the buffer: bytes, 0 at end of stream, -errno. */
long rbio_tcp_conn_fill(struct rbio_tcp_conn *c);
/* The longest silence of the peer (no byte received) that a receive ended
 * since the last call, in whole seconds; 0: none of a second or more. */
uint32_t rbio_tcp_conn_take_silence(struct rbio_tcp_conn *c);
/* Bytes for the core: > 0, 0 at end of stream, -EAGAIN, -errno. */
long rbio_tcp_conn_read(struct rbio_tcp_conn *c, void *buf, size_t n);
/* The buffered bytes [offset, offset + len) after those read so far, lent
 * in place until rbio_tcp_conn_give_back(); NULL when not all there (or no
 * receive chunk would be left free). */
void *rbio_tcp_conn_lend(struct rbio_tcp_conn *c, size_t offset, size_t len);
/* 1 if p came from rbio_tcp_conn_lend() (and is given back now), else 0. */
int rbio_tcp_conn_give_back(struct rbio_tcp_conn *c, const void *p);
/* The next len buffered bytes, not yet read, to look at in place (valid
 * until the next read or fill); NULL when fewer are buffered. */
const void *rbio_tcp_conn_peek(const struct rbio_tcp_conn *c, size_t len);
/* The core has bytes (or an end of stream, or a direct read) to take now. */
int rbio_tcp_conn_rx_ready(const struct rbio_tcp_conn *c);
/* A header the core just read: 0 if acceptable, else -1 and why. Counts
 * one PDU in. max_data is the largest DataSegmentLength accepted now; the
 * digests are the session's (what follows the header on the wire). */
int rbio_tcp_conn_check_bhs(struct rbio_tcp_conn *c, const void *bhs, uint32_t max_data, int header_digest,
                            int data_digest, char *err, size_t errlen);

/* receive moderation (rbio/iser/rx_moderation.hpp): the socket wakes tgtd
 * only once a few requests are in, with a timer ending a wait that lasts */
/* The wait timer's descriptor (readable when a wait ran out), or -1 when
 * moderation is off. */
int rbio_tcp_conn_rx_wait_fd(const struct rbio_tcp_conn *c);
/* 1 if the timer expired (its event is taken), else 0. */
int rbio_tcp_conn_rx_wait_expired(struct rbio_tcp_conn *c);
/* The end of a pass: adjusts the socket's wake-up threshold and arms the
 * timer. 0, or -1 and why (then moderation is off for this connection). */
int rbio_tcp_conn_rx_wait_end_pass(struct rbio_tcp_conn *c, int timer_fired, int full_feature, char *err,
                                   size_t errlen);

/* send side: header, optional data, end; queued until a flush */
/* The queue takes a response now: not blocked, not failed, room left (what
 * the pass asks before each response; one call instead of three). */
int rbio_tcp_conn_tx_open(const struct rbio_tcp_conn *c);
void rbio_tcp_conn_tx_header(struct rbio_tcp_conn *c, const void *bhs);
void rbio_tcp_conn_tx_data(struct rbio_tcp_conn *c, const void *data, size_t len);
/* Queues the PDU: 1, or 0 when the queue takes no more for now (what
 * rbio_tcp_conn_tx_open() would say next), or -1 (the stream failed or the
 * queue overflowed). Only this, a flush (or on_writable) and a cancel
 * change what rbio_tcp_conn_tx_open() says. */
int rbio_tcp_conn_tx_end(struct rbio_tcp_conn *c, int header_digest, int data_digest);
enum rbio_tx_state rbio_tcp_conn_flush(struct rbio_tcp_conn *c);
enum rbio_tx_state rbio_tcp_conn_on_writable(struct rbio_tcp_conn *c);
enum rbio_tx_state rbio_tcp_conn_tx_state(const struct rbio_tcp_conn *c);
void rbio_tcp_conn_tx_cancel(struct rbio_tcp_conn *c);
const char *rbio_tcp_conn_tx_error(const struct rbio_tcp_conn *c);
/* PDUs queued so far / PDUs written or dropped so far: a buffer a queued
 * PDU points at may be reused once completed >= the queued count of then. */
uint64_t rbio_tcp_conn_tx_queued_total(const struct rbio_tcp_conn *c);
uint64_t rbio_tcp_conn_tx_done_total(const struct rbio_tcp_conn *c);

void rbio_tcp_conn_count_event_ctl(struct rbio_tcp_conn *c);
/* A command that went past tgt's reader and writer (direct_commands). */
void rbio_tcp_conn_count_direct(struct rbio_tcp_conn *c);
/* One line of this connection's counters, for logs. */
void rbio_tcp_conn_describe(const struct rbio_tcp_conn *c, char *out, size_t len);
/* Adds what the connection counted since its last publish to the totals. */
void rbio_tcp_conn_publish(struct rbio_tcp_conn *c);
/* Copies up to n of the connection's counters (rbio::iser::Counter order)
 * into out; returns how many. */
size_t rbio_tcp_conn_counters(const struct rbio_tcp_conn *c, uint64_t *out, size_t n);

/* ---- process-wide statistics */

void rbio_tp_stats_connection(int opened); /* 1 opened, 0 closed */
/* Connections opened since tgtd started (TCP and iSER). */
uint64_t rbio_tp_stats_accepted(void);
/* A connection closed for going over data_budget_mib (TCP or iSER). */
void rbio_tp_stats_over_budget(void);
/* Connections closed for that since tgtd started. */
uint64_t rbio_tp_stats_over_budget_total(void);
/* Writes the totals, then `connections` (one "connection=..." line per open
 * connection, or NULL), to path: atomically (temporary file, then rename). */
int rbio_tp_stats_write(const char *path, const char *connections, char *err, size_t errlen);

/* Removes the statistics file (at exit). */
void rbio_tp_stats_remove(const char *path);

#ifdef __cplusplus
}
#endif

#endif
