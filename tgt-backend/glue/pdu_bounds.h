/*
 * Lengths and offsets of a request that tgt's core (tgt 1.0.85, iscsid.c)
 * would use to address memory without checking them, checked before the
 * core reads the request; for rbio's TCP and iSER transports alike:
 * - A SCSI Command's Expected Data Transfer Length: the core sizes the
 *   command's buffer from it in an int, so from 2 GiB on the size wraps
 *   and the command gets no buffer at all, which the store would then read
 *   into (librbd: crash) and Data-In be sent from.
 * - A Data-Out's BufferOffset and length: the core receives the data at its
 *   task's buffer plus the offset without comparing either with that
 *   buffer, so one PDU writes wherever it likes in tgtd -- into other
 *   commands' buffers (rbio's transports pool them) or off the heap.
 * - A Data-Out the command does not wait for (more data than it still
 *   expects, before its R2T is sent, unsolicited after its burst ended):
 *   the core would run the command a second time, queueing it twice or
 *   sending its response, and freeing it, while the store still works on
 *   it.
 * - Additional header segments (AHS), which the core trusts as it finds
 *   them: on a request other than a SCSI Command it reads them through a
 *   pointer left from an earlier command (into freed memory, past its
 *   end); an Extended CDB AHS with AHSLength 0 makes it copy (size_t)-1
 *   bytes; a bidirectional command's Read Length wraps in its buffer
 *   size, so a 4 KiB buffer takes a read of the CDB's length.
 * - A request's CmdSN outside the window the target advertised (ExpCmdSN
 *   to MaxCmdSN, RFC 7143 4.2.2.1), or one already waiting: the core parks
 *   every non-immediate request ahead of ExpCmdSN on the session's pending
 *   list, with its buffer, and never checks MaxCmdSN (stock tgt's own iSER
 *   driver does); an initiator that skips one CmdSN could park commands
 *   without end, and a duplicate stays parked after its twin ran.
 * Each closes the connection, with the reason in tgtd's log.
 *
 * One of the few files that include tgt's (version-specific, C) headers.
 */
#ifndef RBIO_GLUE_PDU_BOUNDS_H
#define RBIO_GLUE_PDU_BOUNDS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h> /* before tgt's log.h, whose dprintf macro clashes with it */

#include "iscsid.h"
#include "iscsi_proto.h"
#include "wire_bytes.h"

/* The cases above, out of line: each returns 1 with why set when the
 * request is refused. */
__attribute__((cold)) int rbio_pdu_edtl_refused(const uint8_t *bhs, char *why, size_t why_len);
int rbio_pdu_data_out_refused(const struct iscsi_connection *conn, const uint8_t *bhs, char *why,
			      size_t why_len);
__attribute__((cold)) int rbio_pdu_ahs_refused_for(const uint8_t *bhs, char *why, size_t why_len);
int rbio_pdu_cmdsn_refused(const struct iscsi_connection *conn, const uint8_t *bhs, char *why,
			   size_t why_len);
/* For the transport's close hook, which tgt's conn_close calls first: it
 * then frees the connection's tasks waiting their CmdSN turn and those
 * queued to send, and after them conn->rx_task, the task of a PDU cut
 * short. A Data-Out cut short names a task that may be on either list (a
 * parked WRITE's unsolicited data, a solicited Data-Out while the next
 * R2T waits to be sent): freed twice, tgtd crashed. Clears rx_task then. */
void rbio_pdu_forget_rx_task_on_lists(struct iscsi_connection *conn);
/* rbio_pdu_out_of_bounds for every request but a SCSI Command. */
int rbio_pdu_other_refused(const struct iscsi_connection *conn, const uint8_t *bhs, char *why,
			   size_t why_len);

/* task: a command whose solicited data the transport fetched itself (an
 * iSER RDMA READ) and now hands to the core as a Data-Out naming its ITT.
 * The core gives a Data-Out to the first command of the session with that
 * ITT, unchecked: a command that reused the ITT meanwhile (an initiator's
 * error, or a hostile one) would get the data, beyond its own buffer. 0, or
 * 1 with why set: the connection must close. */
int rbio_pdu_itt_reused(const struct iscsi_connection *conn, const struct iscsi_task *task,
			char *why, size_t why_len);

/* ahs: the whole AHS (TotalAHSLength * 4 bytes) of a SCSI Command received
 * in full feature phase, before the core runs the command. 0, or 1 with
 * why set: the connection must close. */
int rbio_pdu_ahs_refused(const uint8_t *ahs, size_t len, char *why, size_t why_len);

/* bhs: a whole BHS received in full feature phase. 0: the request is
 * within what the core can address (or not one of the above, or a
 * Data-Out for no command of the session, which the core answers itself).
 * Otherwise why says what is wrong and the connection must close. Inline:
 * every PDU passes here, most of them SCSI Commands. */
static inline __attribute__((always_inline)) int
rbio_pdu_out_of_bounds(const struct iscsi_connection *conn, const uint8_t *bhs, char *why,
		       size_t why_len)
{
	/* With every opcode's checks in it, GCC put this function out of
	 * line (a call and ~37 instructions per command over iSER): a SCSI
	 * Command's are here, always inline, the rest out of line. */
	if ((bhs[0] & ISCSI_OPCODE_MASK) != ISCSI_OP_SCSI_CMD)
		return rbio_pdu_other_refused(conn, bhs, why, why_len);
	/* The core's buffer size, roundup(EDTL, padding), is an int. */
	if (rbio_get_be32(bhs + 20) > (uint32_t)INT32_MAX - 3)
		return rbio_pdu_edtl_refused(bhs, why, why_len);
	/* Only a command that does not come next in CmdSN order needs a
	 * closer look. */
	if (!(bhs[0] & ISCSI_OP_IMMEDIATE) && conn->session &&
	    rbio_get_be32(bhs + 24) != conn->session->exp_cmd_sn)
		return rbio_pdu_cmdsn_refused(conn, bhs, why, why_len);
	return 0;
}

#endif
