/*
 * READ and WRITE commands past tgt's byte-stream reader and writer; see
 * direct_commands.h. Written against tgt 1.0.85's iscsid.c (reading a
 * command: iscsi_alloc_task, iscsi_scsi_cmd_rx_start, iscsi_task_queue,
 * iscsi_task_execute; answering it: iscsi_scsi_cmd_tx_start,
 * iscsi_cmd_rsp_build, iscsi_scsi_cmd_tx_done), whose bookkeeping this
 * repeats on the same structures for the one case it takes.
 *
 * One of the few files that include tgt's (version-specific, C) headers.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <stdio.h> /* before tgt's log.h, whose dprintf macro clashes with it */
#include <string.h>

#include "direct_commands.h"
#include "wire_bytes.h"

#include "iscsi_proto.h"
#include "scsi.h"

/* BHS offsets (RFC 7143 11.3) */
enum {
	OFF_FLAGS = 1,
	OFF_AHS_LEN = 4,
	OFF_DLENGTH = 5,
	OFF_EDTL = 20,
	OFF_CMDSN = 24,
	OFF_EXP_STATSN = 28
};

inline int rbio_direct_cmd_eligible(const struct iscsi_connection *conn, const uint8_t *bhs)
{
	const struct iscsi_session *s = conn->session;
	uint8_t rw = bhs[OFF_FLAGS] & (ISCSI_FLAG_CMD_READ | ISCSI_FLAG_CMD_WRITE);
	uint32_t dlength, edtl;

	/* rx_task: the core is not half way through a command (its read
	 * states are private to iscsid.c; a transport of whole PDUs never
	 * leaves one half read). */
	if ((bhs[0] & ISCSI_OPCODE_MASK) != ISCSI_OP_SCSI_CMD || bhs[OFF_AHS_LEN] != 0 ||
	    conn->state != STATE_SCSI || conn->closed || conn->rx_task || !s)
		return 0;
	/* Digests are the core's (and never negotiated over iSER). */
	if ((conn->session_param[ISCSI_PARAM_HDRDGST_EN].val |
	     conn->session_param[ISCSI_PARAM_DATADGST_EN].val) &
	    DIGEST_CRC32C)
		return 0;
	dlength = rbio_get_be24(bhs + OFF_DLENGTH);
	edtl = rbio_get_be32(bhs + OFF_EDTL);
	if (edtl == 0)
		return 0;
	if (rw == ISCSI_FLAG_CMD_READ) {
		if (dlength != 0)
			return 0;
	} else if (rw == ISCSI_FLAG_CMD_WRITE) {
		/* All of it immediate: no R2T, no unsolicited Data-Out. */
		if (dlength != edtl || !(bhs[OFF_FLAGS] & ISCSI_FLAG_CMD_FINAL))
			return 0;
	} else {
		return 0;
	}
	/* In CmdSN order with nothing waiting, so nothing queued behind it
	 * becomes due; anything else goes through the core's queue. */
	if (bhs[0] & ISCSI_OP_IMMEDIATE)
		return 1;
	return rbio_get_be32(bhs + OFF_CMDSN) == s->exp_cmd_sn && list_empty(&s->pending_cmd_list);
}

inline void rbio_direct_cmd_queue(struct iscsi_connection *conn, struct iscsi_task *task,
				  const uint8_t *bhs)
{
	struct iscsi_session *s = conn->session;
	uint32_t dlength = rbio_get_be24(bhs + OFF_DLENGTH);
	int write = bhs[OFF_FLAGS] & ISCSI_FLAG_CMD_WRITE;

	memcpy(&task->req, bhs, BHS_SIZE);
	task->conn = conn;
	task->tag = task->req.itt;
	INIT_LIST_HEAD(&task->c_list);
	list_add(&task->c_siblings, &conn->task_list);
	list_add(&task->c_hlist, &s->cmd_list);
	conn_get(conn);
	if (write) {
		/* Everything came: nothing to solicit, nothing unsolicited. */
		task->offset = (int)dlength;
		task->r2t_count = 0;
		task->unsol_count = 0;
	}
	conn->exp_stat_sn = rbio_get_be32(bhs + OFF_EXP_STATSN);
	conn->stats.rxdata_octets += BHS_SIZE + dlength;
	conn->stats.scsicmd_pdus++;
	if (!(bhs[0] & ISCSI_OP_IMMEDIATE))
		s->exp_cmd_sn = rbio_get_be32(bhs + OFF_CMDSN) + 1;
	scsi_set_data_dir(&task->scmd, write ? DATA_WRITE : DATA_READ);
	/* Errors are the SCSI layer's to report in the response; the core
	 * ignores this return value too. */
	(void)iscsi_scsi_cmd_execute(task);
}

inline struct iscsi_task *rbio_direct_cmd_next(struct iscsi_connection *conn)
{
	struct iscsi_task *task;
	struct scsi_cmd *sc;
	uint32_t len;

	if (conn->state != STATE_SCSI || conn->tx_task || list_empty(&conn->tx_clist))
		return NULL;
	task = list_first_entry(&conn->tx_clist, struct iscsi_task, c_list);
	sc = &task->scmd;
	if ((task->req.opcode & ISCSI_OPCODE_MASK) != ISCSI_OP_SCSI_CMD ||
	    scsi_get_result(sc) != SAM_STAT_GOOD || sc->sense_len)
		return NULL;
	switch (scsi_get_data_dir(sc)) {
	case DATA_READ:
		/* What the core would send as one Data-In with the status. */
		len = scsi_get_in_transfer_len(sc);
		if (task->offset != 0 || len == 0 || scsi_get_in_buffer(sc) != task->data ||
		    len > (uint32_t)conn->session_param[ISCSI_PARAM_MAX_XMIT_DLENGTH].val)
			return NULL;
		return task;
	case DATA_WRITE:
		return task->r2t_count ? NULL : task;
	default:
		return NULL;
	}
}

inline void rbio_direct_cmd_response(struct iscsi_connection *conn, struct iscsi_task *task,
				     uint8_t bhs[48], uint32_t data_len)
{
	struct iscsi_cmd_rsp *rsp = (struct iscsi_cmd_rsp *)bhs;
	struct iscsi_session *s = conn->session;

	memset(rsp, 0, BHS_SIZE);
	rsp->opcode = ISCSI_OP_SCSI_CMD_RSP;
	rsp->flags = ISCSI_FLAG_CMD_FINAL;
	rsp->response = ISCSI_STATUS_CMD_COMPLETED;
	rsp->cmd_status = SAM_STAT_GOOD;
	rsp->itt = task->tag;
	rsp->statsn = htonl(conn->stat_sn++);
	rsp->exp_cmdsn = htonl(s->exp_cmd_sn);
	rsp->max_cmdsn = htonl(s->exp_cmd_sn + s->max_queue_cmd);
	/* The Data-In PDUs before it: over iSER, the RDMA WRITE of the data. */
	rsp->exp_datasn = htonl(data_len ? 1 : 0);
	iscsi_rsp_set_residual(rsp, &task->scmd);
	conn->stats.txdata_octets += BHS_SIZE + data_len;
}

inline void rbio_direct_cmd_data_in(struct iscsi_connection *conn, struct iscsi_task *task,
				    uint8_t bhs[48], uint32_t data_len)
{
	struct iscsi_data_rsp *rsp = (struct iscsi_data_rsp *)bhs;
	struct iscsi_session *s = conn->session;
	int32_t resid = scsi_get_in_resid(&task->scmd);

	memset(rsp, 0, BHS_SIZE);
	rsp->opcode = ISCSI_OP_SCSI_DATA_IN;
	rsp->flags = ISCSI_FLAG_CMD_FINAL | ISCSI_FLAG_DATA_STATUS;
	rsp->cmd_status = SAM_STAT_GOOD;
	rsp->itt = task->tag;
	rsp->ttt = htonl(ISCSI_RESERVED_TAG);
	rsp->datasn = htonl((uint32_t)task->exp_r2tsn++);
	rsp->statsn = htonl(conn->stat_sn++);
	rsp->exp_cmdsn = htonl(s->exp_cmd_sn);
	rsp->max_cmdsn = htonl(s->exp_cmd_sn + s->max_queue_cmd);
	/* A shorter transfer than asked for (RFC 7143 11.7.5) */
	if (resid > 0) {
		rsp->flags |= ISCSI_FLAG_CMD_UNDERFLOW;
		rsp->residual_count = htonl((uint32_t)resid);
	} else if (resid < 0) {
		rsp->flags |= ISCSI_FLAG_CMD_OVERFLOW;
		rsp->residual_count = htonl((uint32_t)-resid);
	}
	hton24(rsp->dlength, data_len);
	task->offset += (int)data_len;
	conn->stats.txdata_octets += BHS_SIZE + data_len;
}

inline void rbio_direct_cmd_finish(struct iscsi_task *task)
{
	list_del(&task->c_list);
	iscsi_free_cmd_task(task);
}
