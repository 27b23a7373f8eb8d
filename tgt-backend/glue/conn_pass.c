/*
 * A connection's pass, shared by rbio's TCP and iSER glue (conn_pass.h).
 *
 * One of the few files that include tgt's (version-specific, C) headers.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <sys/epoll.h>

#include "conn_pass.h"

static LIST_HEAD(deferred_passes);
static int deferring;

static void pass_event(struct event_data *ev)
{
	struct rbio_pass *p = ev->data;

	if (p->release_mem) {
		free(p->release_mem); /* holds p: nothing after this */
		return;
	}
	p->run(p->ctx);
	rbio_pass_finish(p);
}

void rbio_pass_init(struct rbio_pass *p, struct iscsi_connection *conn, void (*run)(void *ctx),
		    void *ctx)
{
	p->conn = conn;
	p->run = run;
	p->ctx = ctx;
	p->in_pass = 0;
	p->tx_wanted = 0;
	p->tx_parts = 0;
	p->release_mem = NULL;
	p->may_close = NULL;
	tgt_init_sched_event(&p->ev, pass_event, p);
	INIT_LIST_HEAD(&p->deferred);
}

static void schedule(struct rbio_pass *p)
{
	/* Already a sched event: it runs where it is (taking it out of
	 * tgt's list while tgt walks it is not safe). */
	if (deferring && list_empty(&p->ev.e_list)) {
		if (list_empty(&p->deferred))
			list_add_tail(&p->deferred, &deferred_passes);
		return;
	}
	tgt_add_sched_event(&p->ev);
}

void rbio_pass_release(struct rbio_pass *p, void *mem)
{
	list_del_init(&p->deferred);
	if (p->ev.scheduled) {
		p->release_mem = mem;
		return;
	}
	free(mem);
}

void rbio_pass_defer_begin(void)
{
	deferring = 1;
}

void rbio_pass_defer_end(void)
{
	/* A pass may complete more commands, defer more passes, or close
	 * (and free) its connection, and a release cancels: take each pass
	 * off the list before running it. */
	while (!list_empty(&deferred_passes)) {
		struct rbio_pass *p =
			list_first_entry(&deferred_passes, struct rbio_pass, deferred);

		list_del_init(&p->deferred);
		pass_event(&p->ev);
	}
	deferring = 0;
}

int rbio_pass_awaiting_login_response(const struct rbio_pass *p)
{
	return p->conn->state != STATE_SCSI && p->tx_wanted;
}

int rbio_pass_tx(struct rbio_pass *p, int (*may_send)(void *ctx), void *ctx)
{
	int progress = 0;

	while (p->conn->state != STATE_CLOSE && p->tx_wanted && may_send(ctx)) {
		uint64_t before = p->tx_parts;

		iscsi_tx_handler(p->conn);
		if (p->tx_parts == before) {
			/* A NOP-Out that answered a ping (ITT 0xffffffff) has
			 * nothing to send: the core frees it and turns sending
			 * off (iscsi_task_tx_start's nodata), though responses
			 * may be queued behind it, which would then wait for
			 * the next event that turns it on (the next ping, up to
			 * nop_interval away). Each time round takes one such
			 * NOP-Out off the queue. */
			if (!p->tx_wanted && p->conn->state == STATE_SCSI && !p->conn->tx_task &&
			    !list_empty(&p->conn->tx_clist)) {
				p->tx_wanted = 1;
				continue;
			}
			break;
		}
		progress = 1;
	}
	return progress;
}

void rbio_pass_schedule_if_due(struct rbio_pass *p)
{
	if ((p->tx_wanted || p->conn->state == STATE_CLOSE) && !p->in_pass)
		schedule(p);
}

void rbio_pass_event_modify(struct rbio_pass *p, int events)
{
	p->tx_wanted = (events & EPOLLOUT) != 0;
	rbio_pass_schedule_if_due(p);
}

void rbio_pass_force_close(struct rbio_pass *p)
{
	p->conn->state = STATE_CLOSE;
	schedule(p);
}

void rbio_pass_finish(struct rbio_pass *p)
{
	/* closed: tgt closed it already (a session reinstated, tgtadm) and
	 * only waits for its tasks to go before releasing it */
	if (p->conn->state == STATE_CLOSE && !p->conn->closed &&
	    (!p->may_close || p->may_close(p->ctx)))
		conn_close(p->conn);
}
