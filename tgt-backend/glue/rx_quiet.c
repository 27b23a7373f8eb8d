/*
 * A connection's silences, shared by rbio's TCP and iSER glue (rx_quiet.h).
 *
 * One of the few files that include tgt's (version-specific, C) headers.
 */
#define _GNU_SOURCE
#include "rx_quiet.h"

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
	q->silences.n = 0;
}

void rbio_rx_quiet_heard(struct rbio_rx_quiet *q, const struct iscsi_connection *conn)
{
	uint64_t now = now_ms();
	uint64_t gap_s = (now - q->last_ms) / 1000;

	q->last_ms = now;
	rbio_rx_silences_push(&q->silences, gap_s > UINT32_MAX ? UINT32_MAX : (uint32_t)gap_s,
			      conn->stat_sn);
}

/* Whether cmd lives in a struct iscsi_task: tgt's iSCSI driver ends its
 * commands as such (cmd_end_notify), and so does the iSER driver once
 * rbio's iSER transport serves it (iscsi_iser_glue.c takes the iSCSI
 * driver's callbacks for it); stock iSER's commands are not. */
static int iscsi_command(const struct scsi_cmd *cmd)
{
	static struct tgt_driver *iscsi;
	struct tgt_driver *d;

	if (!iscsi) {
		int i = get_driver_index((char *)"iscsi");

		if (i < 0 || !tgt_drivers[i])
			return 0;
		iscsi = tgt_drivers[i];
	}
	if (!cmd->c_target || cmd->c_target->lid < 0)
		return 0;
	d = tgt_drivers[cmd->c_target->lid];
	return d && d->cmd_end_notify == iscsi->cmd_end_notify;
}

uint32_t rbio_rx_quiet_of_cmd(struct scsi_cmd *cmd)
{
	struct iscsi_task *task;
	struct rbio_rx_quiet *q;

	if (!iscsi_command(cmd))
		return 0;
	task = container_of(cmd, struct iscsi_task, scmd);
	if (!task->conn)
		return 0;
	q = rbio_tcp_rx_quiet(task->conn);
	if (!q)
		q = rbio_iser_rx_quiet(task->conn);
	if (!q)
		return 0;
	return rbio_rx_silences_ack(
		&q->silences, be32_to_cpu(((const struct iscsi_cmd *)&task->req)->exp_statsn));
}
