/*
 * The C ABI between the tgt glue and rbio's metrics (tgt-backend/metrics/).
 *
 * Once a second, glue/metrics_glue.c makes a struct rbio_metrics, lets each
 * part of the module add what it serves (every rbio LU, every connection
 * of rbio's transports), and writes the result in Prometheus' text format.
 * Naming, typing, escaping and formatting happen behind these calls, in
 * C++ with no tgt dependency; the per-I/O paths only bump counters, as
 * before. No function lets a C++ exception escape.
 */
#ifndef RBIO_BS_METRICS_H
#define RBIO_BS_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "rbio/bs/c_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Room for a connection's counters (rbio::iser::Counter, in its order). */
#define RBIO_METRICS_CONN_COUNTERS 32

struct rbio_metrics; /* one exposition under construction (opaque) */

/* The metrics_file setting (config file, then RBIO_METRICS_FILE) into path
 * ("" = none), "%c" replaced by control_port (tgtd -C): 0, or -1 with a
 * message naming the file, line or variable. */
int rbio_metrics_load_path(char *path, size_t len, unsigned control_port, char *err, size_t errlen);

/* Makes this process the only writer of path (a lock beside it, held
 * until the process exits): 0, or -1 with why -- another tgtd writes it
 * (two tgtds of one box sharing a metrics_file without "%c"). */
int rbio_metrics_claim(const char *path, char *err, size_t errlen);

/* NULL when out of memory. Every sample is labelled with control_port. */
struct rbio_metrics *rbio_metrics_new(const char *tgt_version, unsigned control_port);
void rbio_metrics_free(struct rbio_metrics *m);

/* One LU; NULL strings count as "". */
struct rbio_metrics_lu {
    const char *target; /* the target's IQN */
    uint64_t lun;
    const char *backing_store; /* tgt's bs-type: rbio (a file) or rbio_rbd */
    const char *path;          /* the backing file, or rbd:POOL/IMAGE */
    uint64_t size_bytes;
};
void rbio_metrics_add_lu(struct rbio_metrics *m, const struct rbio_metrics_lu *lu,
                         const struct rbio_bs_counters *counters);

enum rbio_metrics_transport { RBIO_METRICS_TCP = 0, RBIO_METRICS_ISER = 1 };

/* One connection: its labels (NULL counts as "") and its gauge. */
struct rbio_metrics_conn {
    enum rbio_metrics_transport transport;
    const char *target;         /* IQN, once logged in */
    const char *initiator;      /* IQN, once logged in */
    const char *portal;         /* local ADDRESS:PORT */
    const char *peer;           /* the initiator's ADDRESS:PORT */
    uint64_t data_buffer_bytes; /* data buffers it holds now (data_budget_mib) */
};
void rbio_metrics_add_connection(struct rbio_metrics *m, const struct rbio_metrics_conn *conn,
                                 const uint64_t *counters, size_t n);
void rbio_metrics_set_accepted(struct rbio_metrics *m, uint64_t connections_accepted);
void rbio_metrics_set_over_data_budget(struct rbio_metrics *m, uint64_t connections_closed);
/* Data buffers all connections hold now; data_budget_total_mib in bytes
 * (0: no limit). */
void rbio_metrics_set_data_buffers(struct rbio_metrics *m, uint64_t held, uint64_t limit);

/* This gateway's ALUA view (alua/c_api.cpp fills it in); NULL strings
 * count as "". Not called: ALUA is off, and no ALUA family is written. */
struct rbio_metrics_alua_group {
    uint16_t id;
    const char *state; /* "active/optimized", ..., as in the groups file */
};
struct rbio_metrics_alua {
    uint16_t port_group;
    const char *state;                            /* this gateway's port group's state */
    const char *groups_file;                      /* "" without one (the gateway alone) */
    int file_ok;                                  /* the groups file's current version is in use */
    const struct rbio_metrics_alua_group *groups; /* every group of the file */
    size_t n_groups;
};
void rbio_metrics_set_alua(struct rbio_metrics *m, const struct rbio_metrics_alua *alua);

/* Writes the exposition to path atomically (temporary file, then rename).
 * 0, or -1 with why (including an earlier add that failed). */
int rbio_metrics_write(struct rbio_metrics *m, const char *path, char *err, size_t errlen);
/* Removes the file (tgtd exits: the metrics of a process that is gone
 * would mislead). */
void rbio_metrics_remove(const char *path);

#ifdef __cplusplus
}
#endif

#endif
