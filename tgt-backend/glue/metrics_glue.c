/*
 * rbio's metrics file inside stock tgtd: once a second, every rbio LU and
 * every connection of rbio's transports, in Prometheus' text format, at
 * the path of metrics_file (for node_exporter's textfile collector, or
 * `rbio target-metrics`).
 *
 * The glue only gathers: each part of the module adds what it serves
 * (rbio_bs_glue_metrics, rbio_iscsi_tcp_metrics, rbio_iscsi_iser_metrics),
 * and rbio/bs/metrics.h names, formats and writes it. This runs on tgtd's
 * event-loop thread, as the counters are bumped, so it reads them without
 * locks; the per-I/O paths are unchanged.
 *
 * One of the few files that include tgt's (version-specific, C) headers.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "iscsid.h"
#include "work.h"

#include "rbio/bs/data_budget.h"
#include "rbio/bs/tcp_transport.h"
#include "metrics_glue.h"
#include "alua_glue.h"

#ifndef RBIO_TGT_VERSION
#define RBIO_TGT_VERSION "unknown"
#endif

/* tgtd's -C: not in tgt's headers (mgmt.c declares it where it uses it). */
extern short int control_port;

static char metrics_path[4096];
static pid_t metrics_pid; /* tgtd's: its children's exit() must not remove the file */
static int write_failing; /* logged once until a write works again */
/* This tgtd holds the file's lock: the only one that writes or removes it.
 * Two tgtds taking turns on one file would show each other's counters as
 * resets, and one's exit would remove the other's metrics. */
static int claimed;
static struct tgt_work metrics_work;

void rbio_metrics_add_iscsi_conn(struct rbio_metrics *m, struct iscsi_connection *conn,
				 enum rbio_metrics_transport transport, const char *portal,
				 const char *peer, const uint64_t *counters, size_t n,
				 uint64_t data_buffer_bytes)
{
	struct rbio_metrics_conn c = {
		.transport = transport,
		.initiator = conn->initiator,
		.portal = portal,
		.peer = peer,
		.data_buffer_bytes = data_buffer_bytes,
	};

	if (conn->session && conn->session->target)
		c.target = tgt_targetname(conn->session->target->tid);
	rbio_metrics_add_connection(m, &c, counters, n);
}

static int gather_and_write(char *err, size_t errlen)
{
	struct rbio_metrics *m;
	int rc;

	if (!claimed) {
		/* Tried every second, as a write is: the other tgtd may exit,
		 * a missing folder may appear. */
		if (rbio_metrics_claim(metrics_path, err, errlen))
			return -1;
		claimed = 1;
	}
	m = rbio_metrics_new(RBIO_TGT_VERSION, (unsigned)control_port);

	if (!m) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	rbio_bs_glue_metrics(m);
	rbio_iscsi_tcp_metrics(m);
	rbio_iscsi_iser_metrics(m);
	rbio_metrics_set_accepted(m, rbio_tp_stats_accepted());
	rbio_metrics_set_over_data_budget(m, rbio_tp_stats_over_budget_total());
	rbio_metrics_set_data_buffers(m, rbio_all_data.held, rbio_all_data.limit);
	rbio_alua_glue_metrics(m);
	rc = rbio_metrics_write(m, metrics_path, err, errlen);
	rbio_metrics_free(m);
	return rc;
}

static void tick(void *data)
{
	char err[512];

	(void)data;
	if (!gather_and_write(err, sizeof(err))) {
		if (write_failing)
			log_error("rbio: metrics: written to %s again\n", metrics_path);
		write_failing = 0;
	} else if (!write_failing) {
		/* tgtd serves on: metrics are no reason to stop I/O */
		log_error("rbio: metrics: cannot write them: %s (trying again every second)\n",
			  err);
		write_failing = 1;
	}
	add_work(&metrics_work, 1);
}

/* tgtd is exiting: the metrics of a process that is gone would mislead.
 * Not in a child that exits instead of exec'ing (tgt's call_program). */
static void remove_metrics(void)
{
	if (getpid() == metrics_pid && claimed)
		rbio_metrics_remove(metrics_path);
}

void rbio_metrics_start(void)
{
	char err[1024];

	if (rbio_metrics_load_path(metrics_path, sizeof(metrics_path), (unsigned)control_port, err,
				   sizeof(err))) {
		log_error("rbio: metrics: bad setting, no metrics file: %s\n", err);
		return;
	}
	if (!metrics_path[0])
		return;
	log_error("rbio: metrics: written once a second to %s\n", metrics_path);
	metrics_pid = getpid();
	atexit(remove_metrics);
	metrics_work.func = tick;
	metrics_work.data = NULL;
	tick(NULL);
}
