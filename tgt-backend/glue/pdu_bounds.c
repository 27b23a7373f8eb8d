/* Requests whose lengths tgt's core cannot address safely; see pdu_bounds.h. */
#include "pdu_bounds.h"

#include <arpa/inet.h>
#include <string.h>

#include "wire_bytes.h"

#include "iscsi_proto.h"

enum { OFF_DLENGTH = 5, OFF_ITT = 16, OFF_EDTL = 20, OFF_BUFFER_OFFSET = 40 };

static uint64_t round_up(uint64_t n, uint64_t to)
{
	return to > 1 ? (n + to - 1) / to * to : n;
}

int rbio_pdu_out_of_bounds(const struct iscsi_connection *conn, const uint8_t *bhs, char *why,
			   size_t why_len)
{
	struct iscsi_task *task;
	const struct iscsi_cmd *cmd;
	uint32_t itt, edtl, offset, len;
	uint64_t pad;

	if ((bhs[0] & ISCSI_OPCODE_MASK) == ISCSI_OP_SCSI_CMD) {
		/* The core's buffer size, roundup(EDTL, padding), is an int. */
		edtl = rbio_get_be32(bhs + OFF_EDTL);
		if (edtl > (uint32_t)INT32_MAX - 3) {
			snprintf(why, why_len,
				 "SCSI Command with Expected Data Transfer Length %u, beyond the "
				 "2 GiB tgt can buffer",
				 edtl);
			return 1;
		}
		return 0;
	}
	if ((bhs[0] & ISCSI_OPCODE_MASK) != ISCSI_OP_SCSI_DATA_OUT || !conn->session)
		return 0;
	memcpy(&itt, bhs + OFF_ITT, sizeof(itt)); /* wire order, as task->tag */
	/* The task the core will pick: the first with this tag. */
	list_for_each_entry(task, &conn->session->cmd_list, c_hlist)
	{
		if (task->tag == itt)
			goto found;
	}
	return 0;
found:
	cmd = (const struct iscsi_cmd *)&task->req;
	offset = rbio_get_be32(bhs + OFF_BUFFER_OFFSET);
	len = rbio_get_be24(bhs + OFF_DLENGTH);
	if (!(cmd->flags & ISCSI_FLAG_CMD_WRITE)) {
		snprintf(why, why_len, "Data-Out for ITT 0x%08x, a command that writes nothing",
			 ntohl(itt));
		return 1;
	}
	/* The core gave the command max(immediate, EDTL) bytes, each rounded
	 * up to the padding, and receives a segment with its padding. */
	edtl = ntohl(cmd->data_length);
	pad = (uint64_t)conn->tp->data_padding;
	if ((uint64_t)offset + round_up(len, pad) > round_up(edtl, pad)) {
		snprintf(why, why_len,
			 "Data-Out for ITT 0x%08x at offset %u with %u bytes, beyond the %u bytes "
			 "its command transfers",
			 ntohl(itt), offset, len, edtl);
		return 1;
	}
	return 0;
}
