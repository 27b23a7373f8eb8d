/*
 * NOP-In pings on a connection, the way tgt's own TCP transport does them,
 * for rbio's TCP and iSER transports alike: every nop_interval seconds (a
 * target setting: `tgtadm --op update --mode target --name nop_interval`,
 * and `nop_count`) one NOP-In that asks for a NOP-Out; more than nop_count
 * unanswered in a row end the connection. That finds an initiator whose
 * network still answers but which does not (stopped, hung): on iSER the
 * adapter acknowledges RDMA traffic without the initiator's process, so the
 * transport's own liveness probe cannot. tgt's iSER driver pings with
 * NOP-Ins that want no answer, and ignores these settings.
 *
 * One of the few files that include tgt's (version-specific, C) headers.
 */
#ifndef RBIO_GLUE_CONN_PING_H
#define RBIO_GLUE_CONN_PING_H

#include <stdio.h> /* before tgt's log.h, whose dprintf macro clashes with it */

#include "iscsid.h"

struct rbio_ping {
	int interval; /* seconds; 0: no pings */
	int tick;     /* seconds left to the next one */
	int count;    /* unanswered pings tolerated */
	int inflight; /* unanswered so far */
	long ttt;     /* the Target Transfer Tag of the last one */
};

/* ep_login_complete's share: the settings of the connection's target. */
void rbio_ping_login_complete(struct rbio_ping *p, const struct iscsi_connection *conn);
/* ep_close's share: no more pings. */
void rbio_ping_stop(struct rbio_ping *p);
/* ep_nop_reply's share for one connection: a NOP-Out answered TTT. */
void rbio_ping_reply(struct rbio_ping *p, long ttt);

enum rbio_ping_due { RBIO_PING_NONE, RBIO_PING_SENT, RBIO_PING_UNANSWERED };
/* Once a second: queues the next ping for the core to send when it is due
 * (the task from the transport's alloc_task), or says that too many went
 * unanswered; the caller then ends the connection (why: its log line). */
enum rbio_ping_due rbio_ping_tick(struct rbio_ping *p, struct iscsi_connection *conn, char *why,
				  size_t why_len);

#endif
