/* The C interface between fio's engine ABI (rbio_fio.c, the only file that
 * includes fio's headers) and the initiator library (rbio_fio_core.cpp).
 * No C++ exception crosses it: every function catches, returns an error
 * code and writes a message with its context into the caller's buffer. */
#ifndef RBIO_FIO_CORE_H
#define RBIO_FIO_CORE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The engine's options, as fio parsed them (strings may be NULL). */
struct rbio_fio_settings {
    const char *portal; /* "HOST[:PORT]", or several separated by ',' or ' ' (multipath) */
    const char *target; /* target IQN */
    unsigned int lun;
    const char *initiator_name; /* NULL: the library's default */
    const char *chap_user;
    const char *chap_secret;
    const char *header_digest; /* none, accept, prefer, crc32c */
    const char *data_digest;
    unsigned int timeout_ms;             /* per command */
    unsigned int replacement_timeout_ms; /* session recovery; 0: none */
    unsigned int max_io_bytes;           /* largest I/O the job issues (sizes buffers) */
    const char *fence;                   /* lu-reset (default), none; see SessionOptions::fence */
};

struct rbio_fio_conn;

/* RBIO_FIO_WRITE_FUA: a write the target answers once it is durable (fio's
 * sync=1 / sync=dsync, which other engines get from O_SYNC / O_DSYNC). */
enum rbio_fio_op { RBIO_FIO_READ = 0, RBIO_FIO_WRITE = 1, RBIO_FIO_SYNC = 2, RBIO_FIO_WRITE_FUA = 3 };

/* Logs in and reads the LU's capacity. NULL on failure (message in err). */
struct rbio_fio_conn *rbio_fio_connect(const struct rbio_fio_settings *s, char *err, size_t errlen);
/* Logs out (if the session is still usable) and frees everything. */
void rbio_fio_disconnect(struct rbio_fio_conn *c);
uint64_t rbio_fio_capacity_bytes(const struct rbio_fio_conn *c);
uint32_t rbio_fio_block_size(const struct rbio_fio_conn *c);

/* Queues one command; it leaves with the next commit or reap. 0, or a
 * positive errno (EINVAL: not aligned to the block size or beyond the LU;
 * EIO: the session has ended). */
int rbio_fio_queue(struct rbio_fio_conn *c, enum rbio_fio_op op, void *buf, uint64_t len, uint64_t offset,
                   void *cookie, char *err, size_t errlen);
/* Sends every queued command with one flush. 0 or a positive errno. */
int rbio_fio_commit(struct rbio_fio_conn *c, char *err, size_t errlen);
/* Waits until at least `min` commands completed (timeout_ns < 0: no limit)
 * and makes up to `max` of them the current batch. Returns its size, or
 * -errno when the session ended (every command then completes with EIO on
 * the following calls, so fio can account for them). */
int rbio_fio_reap(struct rbio_fio_conn *c, unsigned int min, unsigned int max, int64_t timeout_ns, char *err,
                  size_t errlen);
/* Entry i of the current batch: the cookie, errno (0 ok) and residual. */
void *rbio_fio_completion(struct rbio_fio_conn *c, unsigned int i, int *error, uint64_t *resid);
/* Transport statistics for the end of the job. */
void rbio_fio_describe_stats(const struct rbio_fio_conn *c, char *out, size_t outlen);

#ifdef __cplusplus
}
#endif
#endif
