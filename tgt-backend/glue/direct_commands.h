/*
 * READ and WRITE commands taken from a transport's receive straight to
 * tgt's SCSI layer, and their responses straight back to the transport,
 * without tgt's byte-stream reader and writer (iscsi_rx_handler and
 * iscsi_tx_handler) in between.
 *
 * A transport that holds whole PDUs (iSER: one PDU per receive; TCP: a
 * batch of PDUs in its receive buffer) pays the core's state machines for
 * nothing: each command went through iscsi_rx_handler's states and the
 * transport's ep_read calls, each response through iscsi_tx_handler's
 * states, ep_write_begin/end and a re-parse of the BHS the core had just
 * built. Here the same bookkeeping
 * is done on the same structures, in the same order, so everything else
 * tgt's core does stays consistent with these commands: CmdSN ordering
 * (session->exp_cmd_sn, pending_cmd_list), StatSN (conn->stat_sn), task
 * management (the commands reach SCSI through the same target_cmd_queue),
 * connection close (the tasks are on conn->task_list and session->cmd_list
 * as the core puts them) and tgtadm's connection counters. Anything
 * outside the narrow common case (AHS, digests, bidirectional, unsolicited
 * Data-Out, an R2T, a command out of CmdSN order, a status other than
 * GOOD, sense data) is left to the core, which then handles it exactly as
 * before.
 *
 * Research: tgt-backend/docs/iser-takeover.md, section 8.
 */
#ifndef RBIO_GLUE_DIRECT_COMMANDS_H
#define RBIO_GLUE_DIRECT_COMMANDS_H

#include <stdint.h>

#include "iscsid.h"

/* 1 when the 48-byte `bhs` just received on `conn` (with its immediate
 * data, if any, at the start of the transport's receive buffer) may take
 * the direct path: a READ without immediate data or a WRITE whose data
 * came whole as immediate data, in CmdSN order, on a connection in full
 * feature phase. Only between PDUs: the core must not be half way through
 * one. Looks only; changes nothing. */
int rbio_direct_cmd_eligible(const struct iscsi_connection *conn, const uint8_t *bhs);

/* Queues `task` (from the transport's alloc_task; task->data holds the
 * whole data buffer, a WRITE's data already in it) for `bhs` as tgt's core
 * does once it has read a command: on the connection's and session's
 * lists, CmdSN advanced, the connection's counters, then SCSI. Only after
 * rbio_direct_cmd_eligible() said 1 for the same `bhs`. */
void rbio_direct_cmd_queue(struct iscsi_connection *conn, struct iscsi_task *task,
			   const uint8_t *bhs);

/* The first task on conn's response list when its response is one SCSI
 * Response PDU the transport can send itself: a READ with all its data in
 * task->data (to go before the response, in one Data-In's worth), or a
 * WRITE with all its data received; GOOD status, no sense data. NULL
 * otherwise, and then the core sends what comes next. */
struct iscsi_task *rbio_direct_cmd_next(struct iscsi_connection *conn);

/* The SCSI Response for `task` (from rbio_direct_cmd_next) into `bhs`:
 * consumes a StatSN and counts the PDU, with `data_len` bytes of Data-In
 * sent ahead of it (0 for a WRITE). */
void rbio_direct_cmd_response(struct iscsi_connection *conn, struct iscsi_task *task,
			      uint8_t bhs[48], uint32_t data_len);

/* For a READ from rbio_direct_cmd_next over TCP: the one Data-In PDU, with
 * the status in it (the S bit), into `bhs`, as the core sends a GOOD READ
 * whose data fits one PDU; consumes a StatSN and counts the PDU with its
 * `data_len` bytes, which follow it. */
void rbio_direct_cmd_data_in(struct iscsi_connection *conn, struct iscsi_task *task,
			     uint8_t bhs[48], uint32_t data_len);

/* The response is queued: the task leaves the response list and is freed
 * as the core frees it (target_cmd_done, its buffers through the
 * transport, the connection's reference). */
void rbio_direct_cmd_finish(struct iscsi_task *task);

#endif
