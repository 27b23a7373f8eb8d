/* Requests whose lengths tgt's core cannot address safely; see pdu_bounds.h. */
#include "pdu_bounds.h"

#include <arpa/inet.h>
#include <string.h>

#include "util.h" /* tgt's roundup, as the core sizes buffers */

enum {
	OFF_DLENGTH = 5,
	OFF_ITT = 16,
	OFF_EDTL = 20,
	OFF_TTT = 20,
	OFF_CMDSN = 24,
	OFF_BUFFER_OFFSET = 40
};

/* The task the core gives a Data-Out of this ITT (wire order) to: the
 * first of the session with the tag (the newest; the core adds at the
 * front). NULL: none. */
static const struct iscsi_task *task_of_tag(const struct iscsi_session *session, uint32_t itt)
{
	const struct iscsi_task *task;

	list_for_each_entry(task, &session->cmd_list, c_hlist)
	{
		if (task->tag == itt)
			return task;
	}
	return NULL;
}

/* Whether the task waits in its connection's send queue (an R2T or a
 * response to send). tgt's list_del leaves c_list NULL, and c_list also
 * links the CmdSN-ordered pending list: look in the queue itself. */
static int queued_to_send(const struct iscsi_task *task)
{
	const struct iscsi_task *t;

	list_for_each_entry(t, &task->conn->tx_clist, c_list)
	{
		if (t == task)
			return 1;
	}
	return 0;
}

void rbio_pdu_forget_rx_task_on_lists(struct iscsi_connection *conn)
{
	const struct iscsi_task *t, *rx = conn->rx_task;

	if (!rx || !conn->session)
		return;
	if (rx == conn->tx_task || queued_to_send(rx))
		goto freed_there;
	list_for_each_entry(t, &conn->session->pending_cmd_list, c_list)
	{
		if (t == rx && t->conn == conn)
			goto freed_there;
	}
	return;
freed_there:
	conn->rx_task = NULL;
}

int rbio_pdu_edtl_refused(const uint8_t *bhs, char *why, size_t why_len)
{
	snprintf(why, why_len,
		 "SCSI Command with Expected Data Transfer Length %u, beyond the 2 GiB tgt can "
		 "buffer",
		 rbio_get_be32(bhs + OFF_EDTL));
	return 1;
}

int rbio_pdu_itt_reused(const struct iscsi_connection *conn, const struct iscsi_task *task,
			char *why, size_t why_len)
{
	const struct iscsi_task *first = task_of_tag(conn->session, task->tag);

	if (first == task)
		return 0;
	snprintf(why, why_len,
		 first ? "a command reused ITT 0x%08x while the target fetched the data of the "
			 "command with it"
		       : "the command of ITT 0x%08x is not in its session",
		 ntohl(task->tag));
	return 1;
}

int rbio_pdu_ahs_refused_for(const uint8_t *bhs, char *why, size_t why_len)
{
	snprintf(why, why_len,
		 "%u bytes of AHS on a request of opcode 0x%02x (only a SCSI Command has any)",
		 (unsigned)bhs[4] * 4, bhs[0] & ISCSI_OPCODE_MASK);
	return 1;
}

/* Whether a request of this opcode byte is one the core orders by CmdSN
 * (what iscsi_task_rx_done queues, without the I bit). */
static int ordered(uint8_t opcode)
{
	const uint8_t op = opcode & ISCSI_OPCODE_MASK;

	return !(opcode & ISCSI_OP_IMMEDIATE) &&
	       (op == ISCSI_OP_SCSI_CMD || op == ISCSI_OP_NOOP_OUT || op == ISCSI_OP_SCSI_TMFUNC ||
		op == ISCSI_OP_LOGOUT);
}

int rbio_pdu_cmdsn_refused(const struct iscsi_connection *conn, const uint8_t *bhs, char *why,
			   size_t why_len)
{
	const struct iscsi_session *s = conn->session;
	const struct iscsi_connection *c;
	const struct iscsi_task *task;
	const uint32_t cmd_sn = rbio_get_be32(bhs + OFF_CMDSN);
	/* Serial arithmetic (RFC 1982): how far ahead of ExpCmdSN, mod 2^32;
	 * from 2^31 on, behind it. */
	const uint32_t ahead = cmd_sn - s->exp_cmd_sn;
	uint32_t window = s->max_queue_cmd;

	/* The window's end is the highest MaxCmdSN the target advertised:
	 * ExpCmdSN + max_queue_cmd in every response of full feature phase
	 * (ExpCmdSN only grows), but a connection that joined the session
	 * advertised its login's CmdSN + 1 (conn->max_cmd_sn), which may lie
	 * beyond while commands sent before it are still on their way on the
	 * other connections. That CmdSN is the initiator's, unchecked by tgt,
	 * and a compliant one is at most the MaxCmdSN it had + 1: so at most
	 * two past ExpCmdSN + max_queue_cmd. A login that claimed more (or a
	 * connection old enough for its value to have wrapped) widens
	 * nothing. */
	list_for_each_entry(c, &s->conn_list, clist)
	{
		const uint32_t end = c->max_cmd_sn - s->exp_cmd_sn;

		if (end > window && end <= s->max_queue_cmd + 2)
			window = end;
	}
	if (ahead > window) {
		snprintf(
			why, why_len,
			ahead >= 0x80000000u
				? "CmdSN %u, before ExpCmdSN %u (a request already received)"
				: "CmdSN %u, beyond the window the target advertised (ExpCmdSN %u, "
				  "MaxCmdSN %u)",
			cmd_sn, s->exp_cmd_sn, s->exp_cmd_sn + window);
		return 1;
	}
	/* A duplicate: on the pending list (which holds only requests ahead
	 * of ExpCmdSN: the core runs one as soon as its turn comes), or still
	 * being received on another connection of the session (the core
	 * queues it once its data is in). Refused, the list holds at most one
	 * request per CmdSN of the window. */
	list_for_each_entry(task, &s->pending_cmd_list, c_list)
	{
		if (ntohl(task->req.statsn) == cmd_sn)
			goto duplicate;
	}
	list_for_each_entry(c, &s->conn_list, clist)
	{
		if (c != conn && c->rx_task && ordered(c->rx_task->req.opcode) &&
		    ntohl(c->rx_task->req.statsn) == cmd_sn)
			goto duplicate;
	}
	return 0;
duplicate:
	snprintf(why, why_len,
		 "CmdSN %u again, while the request with it waits for its turn (ExpCmdSN %u)",
		 cmd_sn, s->exp_cmd_sn);
	return 1;
}

int rbio_pdu_other_refused(const struct iscsi_connection *conn, const uint8_t *bhs, char *why,
			   size_t why_len)
{
	const uint8_t op = bhs[0] & ISCSI_OPCODE_MASK;

	/* Only a SCSI Command has AHS (RFC 7143, 11.2.1.2). */
	if (bhs[4] != 0)
		return rbio_pdu_ahs_refused_for(bhs, why, why_len);
	if (op == ISCSI_OP_SCSI_DATA_OUT)
		return rbio_pdu_data_out_refused(conn, bhs, why, why_len);
	/* The other requests the core orders by CmdSN. */
	if (ordered(bhs[0]) && conn->session &&
	    rbio_get_be32(bhs + OFF_CMDSN) != conn->session->exp_cmd_sn)
		return rbio_pdu_cmdsn_refused(conn, bhs, why, why_len);
	return 0;
}

int rbio_pdu_ahs_refused(const uint8_t *ahs, size_t len, char *why, size_t why_len)
{
	/* The AHS the core looks at, where it looks (iscsi_target_cmd_queue):
	 * an Extended CDB first, then a Read Length. */
	if (len >= 4 && ahs[2] == ISCSI_AHSTYPE_CDB) {
		uint32_t ahslength = (uint32_t)ahs[0] << 8 | ahs[1];

		if (ahslength == 0) {
			snprintf(why, why_len,
				 "an Extended CDB AHS with AHSLength 0 (it counts its reserved "
				 "byte)");
			return 1;
		}
		/* What the core refuses itself, it refuses before reading on. */
		if (4 + (size_t)(ahslength - 1) > len)
			return 0;
		ahs += 4 + (ahslength - 1);
		len -= 4 + (ahslength - 1);
	}
	/* The core sizes the read buffer as roundup(Read Length, 4) in 32 bits. */
	if (len >= 8 && ahs[2] == ISCSI_AHSTYPE_RLENGTH &&
	    rbio_get_be32(ahs + 4) > (uint32_t)INT32_MAX - 3) {
		snprintf(why, why_len,
			 "a Bidirectional Read Length AHS of %u bytes, beyond the 2 GiB tgt can "
			 "buffer",
			 rbio_get_be32(ahs + 4));
		return 1;
	}
	return 0;
}

int rbio_pdu_data_out_refused(const struct iscsi_connection *conn, const uint8_t *bhs, char *why,
			      size_t why_len)
{
	const struct iscsi_task *task;
	const struct iscsi_cmd *cmd;
	uint32_t itt, edtl, offset, len;
	uint64_t pad;
	int unsolicited;

	if (!conn->session)
		return 0;
	memcpy(&itt, bhs + OFF_ITT, sizeof(itt)); /* wire order, as task->tag */
	task = task_of_tag(conn->session, itt);
	if (!task)
		return 0;
	cmd = (const struct iscsi_cmd *)&task->req;
	offset = rbio_get_be32(bhs + OFF_BUFFER_OFFSET);
	len = rbio_get_be24(bhs + OFF_DLENGTH);
	/* A task's data comes on its command's connection (RFC 7143 connection
	 * allegiance; no task reassignment at ErrorRecoveryLevel 0). The core
	 * looks the ITT up over the whole session: another connection closed
	 * while receiving it would free the task still queued on its own. */
	if (task->conn != conn) {
		snprintf(why, why_len,
			 "Data-Out for ITT 0x%08x on another connection than its command's",
			 ntohl(itt));
		return 1;
	}
	if (!(cmd->flags & ISCSI_FLAG_CMD_WRITE)) {
		snprintf(why, why_len, "Data-Out for ITT 0x%08x, a command that writes nothing",
			 ntohl(itt));
		return 1;
	}
	/* A command handed to SCSI waits for no more data: a Data-Out for it,
	 * even an empty one within the unsolicited burst the command left
	 * open (F=0 with all its data immediate), would at F=1 make the core
	 * run it a second time, whose first response frees the task under the
	 * second I/O. (The flag stays set until the task is freed.) */
	if (task_in_scsi(task)) {
		snprintf(why, why_len,
			 "Data-Out for ITT 0x%08x, whose command already runs (it waits for no "
			 "data)",
			 ntohl(itt));
		return 1;
	}
	/* The core gave the command max(immediate, EDTL) bytes, each rounded
	 * up to the padding, and receives a segment with its padding: the
	 * same arithmetic, in 64 bits. */
	edtl = ntohl(cmd->data_length);
	pad = (uint64_t)conn->tp->data_padding;
	if ((uint64_t)offset + roundup((uint64_t)len, pad) > roundup((uint64_t)edtl, pad)) {
		snprintf(why, why_len,
			 "Data-Out for ITT 0x%08x at offset %u with %u bytes, beyond the %u bytes "
			 "its command transfers",
			 ntohl(itt), offset, len, edtl);
		return 1;
	}
	/* Data the command does not wait for. The core would count it off
	 * r2t_count (below zero), and at F=1 run the command again: queued
	 * to send twice (a corrupt list), or to the store while it waits for
	 * an R2T to be sent, whose response would then free it under the
	 * store's I/O. */
	if (len > (uint32_t)(task->r2t_count > 0 ? task->r2t_count : 0)) {
		snprintf(why, why_len,
			 "Data-Out for ITT 0x%08x with %u bytes, more than the %d its command "
			 "still waits for",
			 ntohl(itt), len, task->r2t_count);
		return 1;
	}
	/* Only a Data-Out that ends a sequence (F=1) runs the command again. */
	if ((bhs[1] & ISCSI_FLAG_CMD_FINAL) && queued_to_send(task)) {
		snprintf(why, why_len,
			 "Data-Out for ITT 0x%08x before the target asked for it (its R2T "
			 "is not sent yet)",
			 ntohl(itt));
		return 1;
	}
	/* Unsolicited (the reserved TTT) only while the command's unsolicited
	 * burst is open; solicited only after an R2T. */
	unsolicited = memcmp(bhs + OFF_TTT, "\xff\xff\xff\xff", 4) == 0;
	if (unsolicited ? !task->unsol_count : task->exp_r2tsn == 0) {
		snprintf(why, why_len,
			 "Data-Out for ITT 0x%08x that the target did not ask for (%s)", ntohl(itt),
			 unsolicited ? "unsolicited, after its command's unsolicited data ended"
				     : "solicited, but no R2T was sent");
		return 1;
	}
	return 0;
}
