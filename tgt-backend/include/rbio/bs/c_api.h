/*
 * The small C ABI between tgt's world and rbio's backing-store engine.
 *
 * Only glue/bs_rbio_glue.c includes tgt's headers; it translates a
 * `struct scsi_cmd` into `struct rbio_bs_cmd` and turns a
 * `struct rbio_bs_result` back into tgt status and sense. Everything behind
 * these functions is C++ with no tgt dependency, unit-tested without tgtd.
 * No function here lets a C++ exception escape.
 */
#ifndef RBIO_BS_C_API_H
#define RBIO_BS_C_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct rbio_bs_lu; /* one engine per logical unit (opaque) */

/* Most block descriptors one UNMAP may carry; advertised in the Block
 * Limits VPD page (tgt's default, 0xffffffff, makes initiators build lists
 * no device could take) and enforced by the engine. */
#define RBIO_BS_MAX_UNMAP_DESCRIPTORS 256u

/* Most blocks one COMPARE AND WRITE may carry on a file; advertised in the
 * Block Limits VPD page and enforced by the engine (RBD takes fewer:
 * rbio_bs_lu_max_compare_and_write). */
#define RBIO_BS_MAX_COMPARE_AND_WRITE_BLOCKS 128u

enum rbio_bs_log_level { RBIO_BS_LOG_ERROR = 0, RBIO_BS_LOG_INFO = 1, RBIO_BS_LOG_DEBUG = 2 };

/* SAM status plus fixed-format sense fields; the glue builds the sense. */
struct rbio_bs_result {
    uint8_t status; /* 0x00 GOOD, 0x02 CHECK CONDITION, 0x40 TASK ABORTED (no sense) */
    uint8_t sense_key;
    uint16_t asc;     /* ASC << 8 | ASCQ */
    uint8_t has_info; /* INFORMATION field valid (e.g. miscompare offset) */
    uint64_t info;
};

struct rbio_bs_hooks {
    void *ctx;
    /* A command finished; called from the event loop (flush or eventfd). */
    void (*complete)(void *ctx, void *cmd, const struct rbio_bs_result *res);
    /* Ask for rbio_bs_flush() once the current event-loop pass ends. */
    void (*request_flush)(void *ctx);
    void (*log)(void *ctx, int level, const char *msg);
    /* The backing store's size changed (an RBD image was resized): tell
     * hosts. Called from the event loop; may be NULL. */
    void (*capacity_changed)(void *ctx, uint64_t bytes);
    /* Whether task management (ABORT TASK, LOGICAL UNIT RESET) waits for
     * `cmd`: commands that run in many steps (VERIFY, WRITE SAME over a
     * large range) ask between steps and end with TASK ABORTED, so the
     * reset is answered without reading or writing the rest. May be NULL. */
    int (*aborting)(void *ctx, void *cmd);
    /* The Ceph cluster fenced the LU's RBD client (blocklisted it). Called
     * once per fence from an event handler (never inside a submit or a
     * completion): end the sessions that exist now and refuse their late
     * commands (rbio_bs_refuse), since the engine then opens the image
     * again with a new client. Returns 0, or -1 if it could not (the engine
     * then does not reopen). May be NULL: no reopen, as before. */
    int (*fenced)(void *ctx);
};

/* One SCSI command as the engine needs it. Buffers stay valid until
 * `complete` is called for `cmd`. */
struct rbio_bs_cmd {
    void *cmd;
    const uint8_t *cdb;
    uint32_t cdb_len;
    uint64_t offset;   /* byte offset of the first LBA (set by tgt's SBC code) */
    uint32_t transfer; /* bytes the CDB addresses (tl) */
    uint8_t *in_buf;   /* data-in (to the initiator) */
    uint32_t in_len;
    uint8_t *out_buf; /* data-out (from the initiator) */
    uint32_t out_len;
    uint64_t lu_size; /* bytes */
    uint32_t block_shift;
    uint8_t write_cache; /* WCE of the caching mode page: 0 means every write is FUA */
    uint8_t thin;        /* LU advertises thin provisioning */
};

/* Creates an engine from tgtadm's --bsopts (may be NULL). Returns 0, or -1
 * with a one-line reason in err. */
int rbio_bs_lu_create(const char *bsopts, const struct rbio_bs_hooks *hooks, struct rbio_bs_lu **out,
                      char *err, size_t errlen);
/* Waits for in-flight I/O, then frees everything. */
void rbio_bs_lu_destroy(struct rbio_bs_lu *lu);

/* Opens the backing file (O_RDWR | oflags, read-only when access is denied),
 * or the Ceph RBD image of a path "rbd:POOL/IMAGE" (fd is then -1).
 * Returns 0 with fd/size/blksize/readonly set, or -1 with a reason in err. */
int rbio_bs_lu_open(struct rbio_bs_lu *lu, const char *path, int oflags, int *fd, uint64_t *size,
                    uint32_t *blksize, int *readonly, char *err, size_t errlen);
/* Finishes in-flight I/O on the file and closes it. */
void rbio_bs_lu_close(struct rbio_bs_lu *lu);

/* The eventfd to watch for completions: level-triggered (EPOLLIN, not
 * EPOLLET). rbio_bs_on_event() resets it, so it stays readable exactly while
 * completions wait. tgtd's event loop drops the rest of an epoll_wait batch
 * whenever a handler removes a watched fd (a connection closing); an edge
 * lost that way would never come back and leave commands hanging. */
int rbio_bs_lu_event_fd(const struct rbio_bs_lu *lu);
/* Whether the open backing store is a Ceph RBD image. */
int rbio_bs_lu_rbd(const struct rbio_bs_lu *lu);
/* Most blocks of 2^block_shift bytes one COMPARE AND WRITE may carry on
 * the open backing store; 0 where it cannot run atomically (RBD with
 * blocks over 512 bytes). */
uint32_t rbio_bs_lu_max_compare_and_write(const struct rbio_bs_lu *lu, uint32_t block_shift);
/* Whether the options asked to advertise thin provisioning. */
int rbio_bs_lu_thin(const struct rbio_bs_lu *lu);
/* Whether the cluster has fenced this gateway's RBD client (blocklisted):
 * every request fails until the LU is opened again. */
int rbio_bs_lu_fenced(const struct rbio_bs_lu *lu);

/* Queues a command; always completes it later through hooks->complete.
 * Returns 0, or -1 if the engine could not take it (tgt then fails it). */
int rbio_bs_submit(struct rbio_bs_lu *lu, const struct rbio_bs_cmd *cmd);
/* Completes cmd later with NOT READY, target port in unavailable state
 * (02/04/0C) without running it (a late command of a fenced session). */
int rbio_bs_refuse(struct rbio_bs_lu *lu, const struct rbio_bs_cmd *cmd);
/* rbd_lock=takeover, cmd came after its connection's silence of
 * rbd_quiet_s: 1 when cmd writes data to the image, so that its session is
 * to end (counted), else 0. */
int rbio_bs_ends_quiet_session(struct rbio_bs_lu *lu, const struct rbio_bs_cmd *cmd);
/* rbd_quiet_s of an RBD LU as it applies (10 by default with
 * rbd_lock=takeover, 0 with the cooperative lock); 0 for a file LU. */
uint32_t rbio_bs_lu_rbd_quiet_s(const struct rbio_bs_lu *lu);
/* End of an event-loop pass: submit what was gathered, reap what is done. */
void rbio_bs_flush(struct rbio_bs_lu *lu);
/* The eventfd is readable: reset it, then reap completions. */
void rbio_bs_on_event(struct rbio_bs_lu *lu);

/* One line of counters for logs and the bench. */
void rbio_bs_lu_stats(const struct rbio_bs_lu *lu, char *buf, size_t len);

/* The engine's counters since the LU was created (see rbio::bs::Counters),
 * for the metrics file; read on tgtd's event-loop thread, as they are
 * written. */
struct rbio_bs_counters {
    uint64_t commands, reads, read_bytes, writes, written_bytes;
    uint64_t ios, merged, inline_ios, submit_calls, passes;
    uint64_t reaped_inline, reaped_event, event_wakeups, errors;
    uint32_t ios_in_flight;      /* I/Os handed to io_uring (or librbd), not yet complete */
    uint32_t rbd;                /* 1: the LU is on a Ceph RBD image */
    uint32_t rbd_fenced;         /* 1: the cluster blocklisted this gateway's client for it */
    uint64_t rbd_lock_takeovers; /* rbd_lock=takeover: takeovers of the image's lock started */
    uint64_t rbd_fences;         /* times the cluster fenced the LU's client */
    uint64_t rbd_quiet_ends;     /* sessions ended for a write after a silence (rbd_quiet_s) */
    uint64_t miscompares;        /* COMPARE AND WRITEs that ended in MISCOMPARE (not in errors) */
};
void rbio_bs_lu_counters(const struct rbio_bs_lu *lu, struct rbio_bs_counters *out);

#ifdef __cplusplus
}
#endif

#endif
