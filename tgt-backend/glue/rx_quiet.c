/*
 * A connection's silences, shared by rbio's TCP and iSER glue (rx_quiet.h).
 *
 * One of the few files that include tgt's (version-specific, C) headers.
 */
#define _GNU_SOURCE
#include "rx_quiet.h"

#include <string.h>
#include <time.h>

#include "driver.h"
#include "target.h"

static uint64_t now_ms(void)
{
	struct timespec t;

	/* Coarse: a tick's resolution is plenty for seconds, and it is the
	 * cheapest clock there is. */
	clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
	return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

void rbio_rx_quiet_start(struct rbio_rx_quiet *q)
{
	q->last_ms = now_ms();
	q->quiet_s = 0;
	q->since_statsn = 0;
}

void rbio_rx_quiet_heard(struct rbio_rx_quiet *q, const struct iscsi_connection *conn)
{
	uint64_t now = now_ms();
	uint64_t gap_s = (now - q->last_ms) / 1000;

	q->last_ms = now;
	if (gap_s == 0)
		return;
	if (gap_s > q->quiet_s)
		q->quiet_s = gap_s > UINT32_MAX ? UINT32_MAX : (uint32_t)gap_s;
	/* The next response's StatSN: the host shows it reads again once it
	 * acknowledges that one. */
	q->since_statsn = conn->stat_sn;
}

/* tgt's iSCSI driver, which both rbio transports serve: only its commands
 * live in a struct iscsi_task. */
static int iscsi_command(const struct scsi_cmd *cmd)
{
	static struct tgt_driver *iscsi;
	struct tgt_driver *d;

	if (!cmd->c_target || cmd->c_target->lid < 0)
		return 0;
	d = tgt_drivers[cmd->c_target->lid];
	if (!iscsi && d && strcmp(d->name, "iscsi") == 0)
		iscsi = d;
	return d && d == iscsi;
}

uint32_t rbio_rx_quiet_of_cmd(struct scsi_cmd *cmd)
{
	struct iscsi_task *task;
	struct rbio_rx_quiet *q;
	uint32_t exp_statsn;

	if (!iscsi_command(cmd))
		return 0;
	task = container_of(cmd, struct iscsi_task, scmd);
	if (!task->conn)
		return 0;
	q = rbio_tcp_rx_quiet(task->conn);
	if (!q)
		q = rbio_iser_rx_quiet(task->conn);
	if (!q || !q->quiet_s)
		return 0;
	/* Serial number arithmetic (RFC 7143 4.2.2.1): ExpStatSN past the
	 * first response after the silence. */
	exp_statsn = be32_to_cpu(((const struct iscsi_cmd *)&task->req)->exp_statsn);
	if ((int32_t)(exp_statsn - q->since_statsn) > 0)
		q->quiet_s = 0;
	return q->quiet_s;
}
