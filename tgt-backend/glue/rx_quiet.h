/*
 * How long a connection had heard nothing from its initiator before its
 * latest requests arrived, for bs_rbio_glue.c's rbd_quiet_s.
 *
 * A write that reaches a gateway after a long silence may be one its host
 * gave up on: held in a cut link (the host's TCP sends it again once the
 * link is back, also after the host closed the connection) or in this
 * tgtd's stalled event loop, while the host timed the path out and wrote
 * it through another gateway, perhaps with newer data after it. With
 * rbd_lock=takeover such a write would take the image's lock back and land
 * over that newer data. A live host is never silent that long: open-iscsi
 * sends a NOP-Out after noop_out_interval (5 s) without a PDU from the
 * target, and answers the target's NOP-In pings.
 *
 * A silence stays on record until the host shows that it reads this
 * connection now: a command whose ExpStatSN acknowledges a response sent
 * after the silence ended. Requests its host sent before giving up (all of
 * a late burst) cannot.
 *
 * One of the few files that include tgt's (version-specific, C) headers.
 */
#ifndef RBIO_GLUE_RX_QUIET_H
#define RBIO_GLUE_RX_QUIET_H

#include <stdint.h>
#include <stdio.h> /* before tgt's log.h, whose dprintf macro clashes with it */

#include "iscsid.h"

struct rbio_rx_quiet {
	uint64_t last_ms;      /* CLOCK_MONOTONIC_COARSE ms of the last receive */
	uint32_t quiet_s;      /* the longest silence not acknowledged since, s */
	uint32_t since_statsn; /* the StatSN of the first response after it */
};

/* At the connection's set-up: silent from now. */
void rbio_rx_quiet_start(struct rbio_rx_quiet *q);
/* Bytes came from the initiator (once per receive call or pass, before the
 * core sees them). */
void rbio_rx_quiet_heard(struct rbio_rx_quiet *q, const struct iscsi_connection *conn);
/* Seconds of silence on record for the connection of SCSI command cmd,
 * after cmd's ExpStatSN has cleared what its host acknowledges; 0 when the
 * command did not come through one of rbio's transports. */
uint32_t rbio_rx_quiet_of_cmd(struct scsi_cmd *cmd);

/* Each transport's record of a connection, NULL if it is not its own. */
struct rbio_rx_quiet *rbio_tcp_rx_quiet(struct iscsi_connection *conn);
struct rbio_rx_quiet *rbio_iser_rx_quiet(struct iscsi_connection *conn);

#endif
