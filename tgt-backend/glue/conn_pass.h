/*
 * A connection's pass: what rbio's TCP and iSER glue share in driving tgt's
 * iSCSI core.
 *
 * The core calls its transport from its receive and send handlers, and asks
 * for send readiness (ep_event_modify with EPOLLOUT) when it has responses.
 * Both transports track that readiness themselves: a connection's event
 * handler runs a pass (the core's handlers, then one post or sendmsg for
 * everything queued), and a request to send from outside a pass (a
 * completion, a ping, a forced close) schedules one as a tgt sched event.
 * The last thing a pass does is close a connection the core marked
 * STATE_CLOSE, which may free it.
 *
 * One of the few files that include tgt's (version-specific, C) headers.
 */
#ifndef RBIO_GLUE_CONN_PASS_H
#define RBIO_GLUE_CONN_PASS_H

#include <stdint.h>
#include <stdio.h> /* before tgt's log.h, whose dprintf macro clashes with it */

#include "iscsid.h"

/* Requests a connection may have in tgt's core (each a task holding a
 * reference to it, conn->refcount) while it takes no response. Twice tgt's
 * largest MaxQueueCmd: an initiator that takes its responses never meets
 * it, and one that does not can no longer make tgtd keep a task (about
 * 1 KiB) for every 48-byte request it sends, until the OOM killer ends
 * tgtd and every session with it. TCP stops reading such a connection;
 * iSER, whose receives the peer's flow control does not slow, closes it. */
#define RBIO_CONN_TASKS_HELD 1024

struct rbio_pass {
	struct iscsi_connection *conn;
	struct event_data ev;   /* a pass outside the connection's own event */
	void (*run)(void *ctx); /* the transport's pass, without the close */
	void *ctx;
	int in_pass;       /* the core's handlers are running in a pass */
	int tx_wanted;     /* the core has responses to send */
	void *release_mem; /* set: the connection is gone; free this when tgt runs the event */
	uint64_t tx_parts; /* ep_write_begin and ep_write_end calls: the
			    * core's send handler may stop after any
			    * part of a PDU, or end one writing nothing,
			    * and wants calling again */
	/* on the list of passes a backing store's completions asked for
	 * (rbio_pass_defer_begin) */
	struct list_head deferred;
	/* NULL, or the transport's say on closing now: 0 holds the close
	 * back until a later pass asks again (see rbio_pass_finish) */
	int (*may_close)(void *ctx);
};

void rbio_pass_init(struct rbio_pass *p, struct iscsi_connection *conn, void (*run)(void *ctx),
		    void *ctx);

/*
 * Before full feature phase the core reads the next request only once the
 * response to the last one is handed over; calling its receive handler in
 * between would hit a state it treats as fatal. It asks to send (EPOLLOUT)
 * exactly when a request is complete, and asks for EPOLLIN again when the
 * response is out, so "wants to send" marks that window.
 */
int rbio_pass_awaiting_login_response(const struct rbio_pass *p);

/* Calls the core's send handler while it wants to send, may_send(ctx) says
 * there is room, and each call hands over a part (or takes a ping's
 * NOP-Out reply, which sends nothing, off the queue). 1 when a part went. */
int rbio_pass_tx(struct rbio_pass *p, int (*may_send)(void *ctx), void *ctx);

/* ep_event_modify's share: records whether the core wants to send, and
 * schedules a pass when it does (or is closing) outside a pass. */
void rbio_pass_event_modify(struct rbio_pass *p, int events);
/* Schedules a pass, unless one is running, when the core wants to send or
 * is closing. */
void rbio_pass_schedule_if_due(struct rbio_pass *p);
/*
 * A connection going away: the last call on its pass, with the memory that
 * holds both (freed with free()). Freed now, or, while the pass is in tgt's
 * list of scheduled events, when tgt reaches it: tgt walks that list
 * holding a pointer to the next event, and the connection may be released
 * by the event before its pass (a backing store's completions ending its
 * last task), so taking the pass out there would have tgt run it from
 * freed memory. A pass deferred by completions is forgotten.
 */
void rbio_pass_release(struct rbio_pass *p, void *mem);

/*
 * Completions delivered from a tgt sched event (a backing store's
 * end-of-pass flush) want their connections' passes to send. Scheduled as
 * sched events, those passes would run only after tgtd's event loop made
 * one more epoll_wait(timeout 0): tgt runs only what was scheduled before
 * it started the list. Between begin and end, passes are collected instead,
 * and end runs them at once. At one command in flight that is one system
 * call and one trip round tgtd's loop less per I/O.
 */
void rbio_pass_defer_begin(void);
void rbio_pass_defer_end(void);

/* ep_force_close: a pass closes the connection. */
void rbio_pass_force_close(struct rbio_pass *p);

/* The last thing a handler does: the connection may be freed by
 * conn_close(), which it calls for a connection the core set closing
 * unless p->may_close says to wait. */
void rbio_pass_finish(struct rbio_pass *p);

#endif
