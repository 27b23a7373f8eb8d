/* rbio's metrics file inside tgtd (glue side): see metrics_glue.c. */
#ifndef RBIO_METRICS_GLUE_H
#define RBIO_METRICS_GLUE_H

#include <stddef.h>
#include <stdint.h>

#include "rbio/bs/metrics.h"

struct iscsi_connection;

/* Reads metrics_file and, unless it is none, writes the metrics once a
 * second from now on, whatever the transports' settings (the LUs' metrics
 * matter with tgt's own TCP transport too). Called once from
 * register_bs_module(). */
void rbio_metrics_start(void);

/* What each part of the module adds to the metrics of a tick. */
void rbio_bs_glue_metrics(struct rbio_metrics *m);    /* bs_rbio_glue.c: every rbio LU */
void rbio_iscsi_tcp_metrics(struct rbio_metrics *m);  /* iscsi_tcp_glue.c: its connections */
void rbio_iscsi_iser_metrics(struct rbio_metrics *m); /* iscsi_iser_glue.c: its connections */

/* One connection of either transport; its target and initiator come from
 * tgt's core (empty until the login has named them). */
void rbio_metrics_add_iscsi_conn(struct rbio_metrics *m, struct iscsi_connection *conn,
				 enum rbio_metrics_transport transport, const char *portal,
				 const char *peer, const uint64_t *counters, size_t n,
				 uint64_t data_buffer_bytes);

#endif
