/*
 * How long a connection had heard nothing from its initiator before its
 * latest requests arrived, for bs_rbio_glue.c's rbd_quiet_s.
 *
 * A write that reaches a gateway after a long silence may be one its host
 * gave up on: held in a cut link (the host's TCP sends it again once the
 * link is back, also after the host closed the connection) or in this
 * tgtd's stalled event loop, while the host timed the path out and wrote
 * it through another gateway, perhaps with newer data after it. Such a
 * write would take the image's lock back (over, or by asking) and land
 * over that newer data. A live host is never silent that long: open-iscsi
 * sends a NOP-Out after noop_out_interval (5 s) without a PDU from the
 * target, and answers the target's NOP-In pings.
 *
 * A silence stays on record until the host shows that it reads this
 * connection now (rbio/bs/rx_silences.h): a command whose ExpStatSN
 * acknowledges a response sent after the silence ended. Requests its host
 * sent before giving up (all of a late burst) cannot.
 *
 * One of the few files that include tgt's (version-specific, C) headers.
 */
#ifndef RBIO_GLUE_RX_QUIET_H
#define RBIO_GLUE_RX_QUIET_H

#include <stdint.h>
#include <stdio.h> /* before tgt's log.h, whose dprintf macro clashes with it */

#include "iscsid.h"
#include "rbio/bs/rx_silences.h"

struct rbio_rx_quiet {
	uint64_t last_ms; /* CLOCK_MONOTONIC_COARSE ms of the last receive (iSER) */
	struct rbio_rx_silences silences;
};

/* At the connection's set-up: silent from now. */
void rbio_rx_quiet_start(struct rbio_rx_quiet *q);
/* iSER: the pass received a PDU (before the core sees it). TCP's socket
 * receives note their silences themselves (rbio_tcp_conn_take_silence),
 * and rbio_tcp_rx_quiet() records them. */
void rbio_rx_quiet_heard(struct rbio_rx_quiet *q, const struct iscsi_connection *conn);
/* The longest silence (seconds) on record for the connection of SCSI
 * command cmd, once cmd's ExpStatSN has cleared what its host shows it
 * read past; 0 when the command did not come through one of rbio's
 * transports. */
uint32_t rbio_rx_quiet_of_cmd(struct scsi_cmd *cmd);

/* Each transport's record of a connection, up to date; NULL if the
 * connection is not its own. */
struct rbio_rx_quiet *rbio_tcp_rx_quiet(struct iscsi_connection *conn);
struct rbio_rx_quiet *rbio_iser_rx_quiet(struct iscsi_connection *conn);

#endif
