#include "conn_ping.h"

#include <sys/epoll.h>

#include "list.h"
#include "tgtd.h"

/* One counter for every connection of both transports: a NOP-Out's TTT is
 * matched across a transport's connections. */
static long last_ttt;

void rbio_ping_login_complete(struct rbio_ping *p, const struct iscsi_connection *conn)
{
	struct iscsi_target *target;

	list_for_each_entry(target, &iscsi_targets_list, tlist)
	{
		if (target->tid != conn->tid)
			continue;
		p->count = target->nop_count;
		p->interval = target->nop_interval;
		/* A full interval before the first ping: the next tick may come
		 * at once, and a ping right behind the final Login Response
		 * reaches an initiator still taking that response in. */
		p->tick = target->nop_interval + 1;
		p->inflight = 0;
		break;
	}
}

void rbio_ping_stop(struct rbio_ping *p)
{
	p->interval = 0;
}

void rbio_ping_reply(struct rbio_ping *p, long ttt)
{
	if (p->ttt == ttt)
		p->inflight = 0;
}

enum rbio_ping_due rbio_ping_tick(struct rbio_ping *p, struct iscsi_connection *conn, char *why,
				  size_t why_len)
{
	struct iscsi_task *task;

	if (p->interval == 0 || conn->state == STATE_CLOSE || --p->tick > 0)
		return RBIO_PING_NONE;
	p->tick = p->interval;
	if (++p->inflight > p->count) {
		snprintf(why, why_len, "no reply to %d NOP-In pings", p->count);
		return RBIO_PING_UNANSWERED;
	}
	task = conn->tp->alloc_task(conn, 0);
	if (!task)
		return RBIO_PING_NONE;
	if (++last_ttt == ISCSI_RESERVED_TAG)
		last_ttt = 1;
	p->ttt = last_ttt;
	task->conn = conn;
	task->tag = ISCSI_RESERVED_TAG;
	task->req.opcode = ISCSI_OP_NOOP_IN;
	task->req.itt = cpu_to_be32(ISCSI_RESERVED_TAG);
	task->req.ttt = cpu_to_be32(p->ttt);
	list_add_tail(&task->c_list, &conn->tx_clist);
	conn->tp->ep_event_modify(conn, EPOLLIN | EPOLLOUT);
	return RBIO_PING_SENT;
}
