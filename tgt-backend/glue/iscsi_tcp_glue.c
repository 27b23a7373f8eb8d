/*
 * rbio's TCP transport inside stock tgtd.
 *
 * tgt's iSCSI core talks to a transport through `struct iscsi_transport`:
 * it pulls request bytes with ep_read(), pushes every response part with
 * ep_write_begin() and asks for send or receive readiness with
 * ep_event_modify(). The stock TCP transport maps each of those to system
 * calls: a read() per PDU part, a write() per response part between two
 * setsockopt(TCP_CORK), an epoll_ctl() per EPOLLOUT toggle.
 *
 * This transport takes over the listening sockets of tgtd's portals
 * (portal_takeover.c), so every new TCP connection gets it, and maps the
 * same calls onto memory: ep_read() is served from a buffer filled by one
 * receive per event (request batching); ep_write_begin() queues the part
 * and the whole pass leaves in one sendmsg() (message coalescing); EPOLLOUT
 * is armed only when the socket is full; and the core's receive and send
 * handlers run in one loop per event, so responses completed while a pass
 * runs go out in the same pass and requests buffered meanwhile are
 * processed on the send path.
 * Login, negotiation, SCSI and task management stay tgt's.
 *
 * A READ, or a WRITE with all its data immediate and received, at the head
 * of the receive buffer goes past the core's reader, and a GOOD response
 * past its writer (direct_commands.h): the pass hands them to tgt's SCSI
 * layer and the send queue itself.
 *
 * Unlike stock tgt, connections are accepted only while tgtd can serve a
 * login (readiness_gate.c).
 *
 * A write's data that arrived whole in the receive buffer is executed from
 * there, without a copy (write_in_place): the core's data buffer for the
 * command is lent from the receive buffer (rbio/iser/stream_rx.hpp) and
 * given back when the core frees it.
 *
 * Response data is sent from the core's own buffers without a copy. The
 * core frees a task and its buffers as soon as it has handed the last part
 * over, so the free callbacks defer the release until the sendmsg() that
 * carried the data is done (rbio/bs/block_pool.h).
 *
 * One of the few files that include tgt's (version-specific, C) headers.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "iscsid.h"
#include "target.h"

#include "rbio/bs/block_pool.h"
#include "rbio/bs/data_budget.h"
#include "rbio/bs/tcp_transport.h"
#include "conn_pass.h"
#include "conn_ping.h"
#include "rx_quiet.h"
#include "pdu_bounds.h"
#include "direct_commands.h"
#include "glue_settings.h"
#include "iscsi_tcp_glue.h"
#include "metrics_glue.h"
#include "portal_takeover.h"
#include "readiness_gate.h"
#include "stats_tick.h"

/* ---- buffers and tasks, pooled (rbio/bs/block_pool.h) */

/* Data buffers are page aligned (O_DIRECT backing stores need it), with a
 * word more: tgt pads data to 4 bytes in place before sending it. Kept for
 * reuse in size classes from 4 KiB to 4 MiB, 64 MiB at most. Tasks come
 * from a pool of their own. Both live as long as tgtd. */
static const struct rbio_pool_config data_pool_config = { 12, 11, 64u << 20, 1, 4 };
static const struct rbio_pool_config task_pool_config = { 8, 8, 16u << 20, 0, 0 };
static struct rbio_pool *data_pool, *task_pool;

/* ---- one connection */

#define RBIO_PEER_LEN (INET6_ADDRSTRLEN + 16)

struct rbio_conn {
	int fd;
	struct rbio_tcp_conn *engine;
	struct list_head siblings; /* all rbio connections */
	struct rbio_pass pass;
	int writable_event; /* this pass runs for EPOLLOUT */
	int rx_wait_fired;  /* this pass runs because a moderated wait ran out */
	int epollout_armed;
	int epollin_off; /* EPOLLIN left out of the socket's events */
	/* the send queue takes a response (rbio_tcp_conn_tx_open), as the
	 * last call that can change it said: queueing, a flush, a cancel */
	int tx_open;
	uint64_t rx_served;                  /* bytes ep_read handed to the core */
	int bhs_have;                        /* bytes of the current BHS handed over */
	int bhs_fresh;                       /* a BHS was read, nothing after it yet */
	struct it_nexus *nexus;              /* the session's, once write_in_place asked */
	unsigned lent;                       /* data buffers lent from the receive buffer */
	int any_buffer;                      /* this pass: target_takes_any_buffer(), or -1 */
	struct rbio_release_queue *releases; /* freed by the core, still being sent */
	struct rbio_data_budget budget;      /* its data buffers, until released */
	char peer[RBIO_PEER_LEN];
	char portal[RBIO_PEER_LEN]; /* the local address it came in on */
	struct rbio_ping ping;
	struct rbio_rx_quiet quiet;

	struct iscsi_connection iscsi_conn;
};

static struct rbio_conn *RC(struct iscsi_connection *conn)
{
	return container_of(conn, struct rbio_conn, iscsi_conn);
}

static struct iscsi_transport rbio_tcp;
static struct rbio_tp_settings settings;
static LIST_HEAD(rbio_conns);

/* The silence the socket's receives ended since last asked (rx_quiet.h). */
static void note_silence(struct rbio_conn *rc)
{
	rbio_rx_silences_push(&rc->quiet.silences, rbio_tcp_conn_take_silence(rc->engine),
			      rc->iscsi_conn.stat_sn);
}

struct rbio_rx_quiet *rbio_tcp_rx_quiet(struct iscsi_connection *conn)
{
	struct rbio_conn *rc;

	if (conn->tp != &rbio_tcp)
		return NULL;
	rc = RC(conn);
	/* Every receive path notes its silences; the event handler takes
	 * those of its fill, and these are the pass's own (a direct read
	 * into a data buffer, batch_reads off), taken before the command is
	 * judged. Numbered from the StatSN of now, perhaps later than the
	 * silence's end: that only makes them harder to clear. */
	note_silence(rc);
	return &rc->quiet;
}

static void conn_log_close(struct rbio_conn *rc, const char *why)
{
	log_error("rbio: tcp: %s: closing connection: %s\n", rc->peer, why);
}

static void deferred_release(struct rbio_conn *rc, int all)
{
	if (all)
		rbio_release_all(rc->releases);
	else
		rbio_release_done(rc->releases, rbio_tcp_conn_tx_done_total(rc->engine));
}

/* Releases block b once `pdus` PDUs have been sent (or dropped). */
static void release_after(struct rbio_conn *rc, void *b, uint64_t pdus)
{
	rbio_release_after(rc->releases, b, pdus, rbio_tcp_conn_tx_done_total(rc->engine));
}

/* Releases block b now, or once every PDU queued so far has been sent. */
static void defer_or_release(struct rbio_conn *rc, void *b)
{
	release_after(rc, b, rbio_tcp_conn_tx_queued_total(rc->engine));
}

/* Reading waits: the socket takes no response (the initiator is not
 * reading), and more than RBIO_CONN_TASKS_HELD requests wait for theirs
 * (conn_pass.h). EPOLLOUT is armed then,
 * and the pass it brings reads on. Not while the queue is merely full:
 * nothing would wake the connection once a flush emptied it. */
static int rx_held(struct rbio_conn *rc)
{
	return rc->iscsi_conn.refcount > RBIO_CONN_TASKS_HELD &&
	       rbio_tcp_conn_tx_state(rc->engine) == RBIO_TX_BLOCKED;
}

/* EPOLLOUT when a response waits for room. EPOLLIN always, but while a
 * login response waits for room: before full feature phase nothing more is
 * read until it leaves, so a client that sends login requests and never
 * reads the responses would fill the receive buffer and leave the socket
 * readable, waking tgtd for nothing on every loop (a busy spin for as long
 * as it holds the connection); and while reading is held (rx_held), for
 * the same reason. EPOLLOUT brings the pass that goes on. */
static void arm_epollout(struct rbio_conn *rc, int on)
{
	const int in_off = on && (rbio_pass_awaiting_login_response(&rc->pass) || rx_held(rc));

	if (rc->epollout_armed == on && rc->epollin_off == in_off)
		return;
	if (tgt_event_modify(rc->fd, (in_off ? 0 : EPOLLIN) | (on ? EPOLLOUT : 0)))
		log_error("rbio: tcp: %s: epoll_ctl failed: %m\n", rc->peer);
	rbio_tcp_conn_count_event_ctl(rc->engine);
	rc->epollout_armed = on;
	rc->epollin_off = in_off;
}

static void after_send(struct rbio_conn *rc, enum rbio_tx_state st)
{
	struct iscsi_connection *conn = &rc->iscsi_conn;

	rc->tx_open = rbio_tcp_conn_tx_open(rc->engine);
	deferred_release(rc, 0);
	if (st == RBIO_TX_FAILED) {
		if (conn->state != STATE_CLOSE) {
			char why[256];

			snprintf(why, sizeof(why), "send failed: %s",
				 rbio_tcp_conn_tx_error(rc->engine));
			conn_log_close(rc, why);
			conn->state = STATE_CLOSE;
		}
		return;
	}
	/* With send_inline off, responses wait for EPOLLOUT as in stock tgt. */
	if (conn->state != STATE_CLOSE) /* else it is closed right after */
		arm_epollout(rc, st == RBIO_TX_BLOCKED ||
					 (!settings.send_inline && rc->pass.tx_wanted));
}

/* Responses go out inline (send_inline), or in a pass that runs for
 * EPOLLOUT, while the socket takes them. Asked before each call of the
 * core's send handler (two per PDU): what the queue said last, no call. */
static int may_send(void *ctx)
{
	struct rbio_conn *rc = ctx;

	return (settings.send_inline || rc->writable_event) && rc->tx_open;
}

static int direct_command(struct rbio_conn *rc);
static int direct_responses(struct rbio_conn *rc);

/*
 * Runs tgt's receive and send handlers until neither makes progress: every
 * buffered request is processed, every response the core has is queued, and
 * whatever a response unblocked (the next login request, commands completed
 * inline) is handled in the same pass. Then one flush.
 */
static void conn_pass(void *ctx)
{
	struct rbio_conn *rc = ctx;
	struct iscsi_connection *conn = &rc->iscsi_conn;
	int progress;

	if (conn->closed) /* by tgt; only waiting for its tasks to go */
		return;
	rc->pass.in_pass = 1;
	rc->any_buffer = -1;
	do {
		progress = 0;
		while (conn->state != STATE_CLOSE &&
		       !rbio_pass_awaiting_login_response(&rc->pass) && !rx_held(rc) &&
		       rbio_tcp_conn_rx_ready(rc->engine)) {
			uint64_t before = rc->rx_served;

			if (!settings.direct_commands || !direct_command(rc))
				iscsi_rx_handler(conn);
			if (rc->rx_served == before)
				break;
			progress = 1;
		}
		if (settings.direct_commands && direct_responses(rc))
			progress = 1;
		if (rbio_pass_tx(&rc->pass, may_send, rc))
			progress = 1;
	} while (progress);
	rc->pass.in_pass = 0;

	/* Also when the core is closing: its last response (a login reject,
	 * a logout response) is queued and must leave before the close. */
	after_send(rc, rbio_tcp_conn_flush(rc->engine));
	if (conn->state != STATE_CLOSE && rbio_tcp_conn_rx_wait_fd(rc->engine) >= 0) {
		char why[128];

		if (rbio_tcp_conn_rx_wait_end_pass(rc->engine, rc->rx_wait_fired,
						   conn->state == STATE_SCSI, why, sizeof(why)))
			log_error("rbio: tcp: %s: %s\n", rc->peer, why);
	}
	rc->rx_wait_fired = 0;
}

static void conn_event_handler(int fd, int events, void *data)
{
	struct rbio_conn *rc = data;
	struct iscsi_connection *conn = &rc->iscsi_conn;

	(void)fd;
	rc->writable_event = (events & EPOLLOUT) != 0;
	if (events & EPOLLOUT)
		after_send(rc, rbio_tcp_conn_on_writable(rc->engine));
	if (events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
		long n;

		rbio_tcp_conn_take_event(rc->engine);
		n = rbio_tcp_conn_fill(rc->engine);
		/* (and rbio_tcp_rx_quiet() for receives inside the pass) */
		note_silence(rc);
		if (n < 0 && n != -EAGAIN && conn->state != STATE_CLOSE) {
			char why[128];

			snprintf(why, sizeof(why), "receive failed: %s", strerror((int)-n));
			conn_log_close(rc, why);
			conn->state = STATE_CLOSE;
		}
	}
	conn_pass(rc);
	rc->writable_event = 0;
	rbio_pass_finish(&rc->pass);
}

/* Receive moderation: the socket wakes tgtd only once a few requests are in
 * (rbio/iser/rx_moderation.hpp). When the initiator sends fewer, this timer
 * ends the wait and the pass takes what came. */
static void rx_wait_handler(int fd, int events, void *data)
{
	struct rbio_conn *rc = data;

	(void)fd;
	(void)events;
	if (!rbio_tcp_conn_rx_wait_expired(rc->engine))
		return;
	rc->rx_wait_fired = 1;
	conn_event_handler(rc->fd, EPOLLIN, rc);
}

/* ---- struct iscsi_transport */

/* The digests PDUs carry: CRC32C where the session negotiated it, none
 * before full feature phase. */
static void session_digests(const struct iscsi_connection *conn, int *hd, int *dd)
{
	*hd = *dd = 0;
	if (conn->state != STATE_SCSI)
		return;
	*hd = (conn->session_param[ISCSI_PARAM_HDRDGST_EN].val & DIGEST_CRC32C) != 0;
	*dd = (conn->session_param[ISCSI_PARAM_DATADGST_EN].val & DIGEST_CRC32C) != 0;
}

static size_t tp_read(struct iscsi_connection *conn, void *buf, size_t nbytes)
{
	struct rbio_conn *rc = RC(conn);
	char *bhs = (char *)&conn->req.bhs;
	/* the core reads a request's BHS, and only that, into req.bhs */
	int is_bhs = (char *)buf >= bhs && (char *)buf < bhs + BHS_SIZE;
	long n;

	n = rbio_tcp_conn_read(rc->engine, buf, nbytes);
	if (n == -EAGAIN) {
		errno = EAGAIN;
		return (size_t)-1;
	}
	if (n <= 0) {
		if (n < 0) {
			char why[128];

			snprintf(why, sizeof(why), "receive failed: %s", strerror((int)-n));
			conn_log_close(rc, why);
		} else if ((char *)buf != bhs || rc->bhs_have) {
			conn_log_close(rc, "peer closed in the middle of a PDU");
		}
		return 0; /* tgt: end of stream, close */
	}
	rc->rx_served += (uint64_t)n;
	rc->bhs_fresh = 0;

	if (is_bhs) {
		rc->bhs_have = (int)((char *)buf + n - bhs);
		if (rc->bhs_have == BHS_SIZE) {
			char why[192];
			uint32_t max_data =
				conn->state == STATE_SCSI
					? conn->session_param[ISCSI_PARAM_MAX_RECV_DLENGTH].val
					: INCOMING_BUFSIZE;

			int hd, dd;

			session_digests(conn, &hd, &dd);
			rc->bhs_have = 0;
			if (rbio_tcp_conn_check_bhs(rc->engine, bhs, max_data, hd, dd, why,
						    sizeof(why)) ||
			    (conn->state == STATE_SCSI &&
			     rbio_pdu_out_of_bounds(conn, (const uint8_t *)bhs, why,
						    sizeof(why)))) {
				conn_log_close(rc, why);
				return 0;
			}
			rc->bhs_fresh = 1;
		}
	} else if (conn->state == STATE_SCSI && conn->req.ahssize &&
		   (char *)buf >= (char *)conn->req.ahs &&
		   (char *)buf + n == (char *)conn->req.ahs + conn->req.ahssize) {
		/* The core read a SCSI Command's AHS (only a SCSI Command gets
		 * this far with any, pdu_bounds.h) into the command's own
		 * buffer, and is about to trust it. */
		char why[160];

		if (rbio_pdu_ahs_refused(conn->req.ahs, conn->req.ahssize, why, sizeof(why))) {
			conn_log_close(rc, why);
			return 0;
		}
	}
	return (size_t)n;
}

static size_t tp_write_begin(struct iscsi_connection *conn, void *buf, size_t nbytes)
{
	struct rbio_conn *rc = RC(conn);
	char *rsp = conn->rsp_buffer;

	rc->pass.tx_parts++;
	if (buf == (void *)&conn->rsp.bhs) {
		rbio_tcp_conn_tx_header(rc->engine, buf);
	} else if (buf == (void *)conn->tx_digest) {
		/* the engine computes digests over what it sends */
	} else if (rsp && (char *)buf >= rsp && (char *)buf < rsp + conn->rsp_buffer_size) {
		/* Login, text and reject data live in one per-connection buffer
		 * the core rewrites for the next response: send a copy. Rare. */
		size_t len = conn->rsp.datasize;
		void *b = rbio_pool_alloc(data_pool, len);

		if (!b) {
			conn_log_close(rc, "out of memory for a response");
			conn->state = STATE_CLOSE;
			return nbytes;
		}
		memcpy(b, buf, len);
		rbio_tcp_conn_tx_data(rc->engine, b, len);
		/* sent with the PDU that ep_write_end queues next */
		release_after(rc, b, rbio_tcp_conn_tx_queued_total(rc->engine) + 1);
	} else {
		rbio_tcp_conn_tx_data(rc->engine, buf, conn->rsp.datasize);
	}
	return nbytes;
}

static void tp_write_end(struct iscsi_connection *conn)
{
	struct rbio_conn *rc = RC(conn);
	int hd, dd;

	rc->pass.tx_parts++; /* progress, though nothing is written (see struct rbio_pass) */
	session_digests(conn, &hd, &dd);
	int queued = rbio_tcp_conn_tx_end(rc->engine, hd, dd);

	rc->tx_open = queued == 1;
	if (queued >= 0)
		return;
	conn_log_close(rc, rbio_tcp_conn_tx_state(rc->engine) == RBIO_TX_FAILED
				   ? rbio_tcp_conn_tx_error(rc->engine)
				   : "response not queued");
	conn->state = STATE_CLOSE;
}

static void tp_event_modify(struct iscsi_connection *conn, int events)
{
	struct rbio_conn *rc = RC(conn);

	/* With send_inline off, a response from outside a pass waits for
	 * EPOLLOUT instead of a scheduled pass. */
	if ((events & EPOLLOUT) && !settings.send_inline && !rc->pass.in_pass) {
		rc->pass.tx_wanted = 1;
		arm_epollout(rc, 1);
		return;
	}
	rbio_pass_event_modify(&rc->pass, events);
}

static size_t tp_close(struct iscsi_connection *conn)
{
	struct rbio_conn *rc = RC(conn);

	tgt_event_del(rc->fd);
	if (rbio_tcp_conn_rx_wait_fd(rc->engine) >= 0)
		tgt_event_del(rbio_tcp_conn_rx_wait_fd(rc->engine));
	conn->state = STATE_CLOSE;
	rbio_ping_stop(&rc->ping);
	rbio_tcp_conn_tx_cancel(rc->engine);
	rc->tx_open = rbio_tcp_conn_tx_open(rc->engine);
	deferred_release(rc, 0);
	rbio_pdu_forget_rx_task_on_lists(conn);
	return 0;
}

static void tp_force_close(struct iscsi_connection *conn)
{
	rbio_pass_force_close(&RC(conn)->pass);
}

static void tp_release(struct iscsi_connection *conn)
{
	struct rbio_conn *rc = RC(conn);
	char counters[384];

	conn_exit(conn);
	rbio_tcp_conn_describe(rc->engine, counters, sizeof(counters));
	log_error("rbio: tcp: %s: connection ended; %s\n", rc->peer, counters);
	rbio_release_queue_free(rc->releases); /* releases what it still holds */
	rbio_data_budget_leave(&rc->budget);
	rbio_tcp_conn_free(rc->engine);
	close(rc->fd);
	list_del(&rc->siblings);
	rbio_pass_release(&rc->pass, rc);
	rbio_tp_stats_connection(0);
	rbio_stats_write();
}

static int tp_show(struct iscsi_connection *conn, char *buf, int rest)
{
	struct rbio_conn *rc = RC(conn);
	struct sockaddr_storage from;
	socklen_t len = sizeof(from);
	char host[INET6_ADDRSTRLEN];
	int n;

	if (getpeername(rc->fd, (struct sockaddr *)&from, &len) ||
	    getnameinfo((struct sockaddr *)&from, len, host, sizeof(host), NULL, 0, NI_NUMERICHOST))
		return 0;
	n = snprintf(buf, rest, "IP Address: %s", host);
	return n > 0 ? (n < rest ? n : rest - 1) : 0;
}

static struct iscsi_task *tp_alloc_task(struct iscsi_connection *conn, size_t ext_len)
{
	size_t size = sizeof(struct iscsi_task) + ext_len;
	void *task = rbio_pool_alloc(task_pool, size);

	(void)conn;
	if (task)
		memset(task, 0, size);
	return task;
}

static void tp_free_task(struct iscsi_task *task)
{
	/* A task's sense data or ping data may still be queued. */
	if (task->conn)
		defer_or_release(RC(task->conn), task);
	else
		rbio_pool_release(task);
}

/* ---- a write's data used in place (write_in_place) */

/* Backing stores that take a buffer at any address: tgt's null store (no
 * I/O), and rbio's and tgt's rdwr store unless the LU is opened O_DIRECT
 * (bs aio always is). Looked up once tgtd has registered them all. */
static struct backingstore_template *bst_null, *bst_rbio, *bst_rdwr;

static int lu_takes_any_buffer(const struct scsi_lu *lu)
{
	if (!bst_null) {
		bst_null = get_backingstore_template("null");
		bst_rbio = get_backingstore_template("rbio");
		bst_rdwr = get_backingstore_template("rdwr");
	}
	if (lu->bst == bst_null)
		return 1;
	return lu->bst && (lu->bst == bst_rbio || lu->bst == bst_rdwr) &&
	       !(lu->bsoflags & O_DIRECT);
}

/* Every LU of the session's target, not only the addressed one: decoding
 * the LUN would be tgt's job, and a target mixing stores keeps the copy. */
static int target_takes_any_buffer(struct rbio_conn *rc)
{
	struct iscsi_session *session = rc->iscsi_conn.session;
	struct it_nexus_lu_info *itl;

	/* LUs change only between passes (tgtadm is served by the event loop) */
	if (rc->pass.in_pass && rc->any_buffer >= 0)
		return rc->any_buffer;
	rc->any_buffer = 0;
	if (!rc->nexus) /* the session, and so its nexus, outlives the connection */
		rc->nexus = it_nexus_lookup(session->target->tid, session->tsih);
	if (!rc->nexus)
		return 0;
	list_for_each_entry(itl, &rc->nexus->itn_itl_info_list, itn_itl_info_siblings)
	{
		if (!lu_takes_any_buffer(itl->lu))
			return 0;
	}
	rc->any_buffer = 1;
	return 1;
}

/* The `size` buffered bytes from `offset` on (after those read so far) as a
 * write's data buffer, lent in place, where every LU takes one. */
static void *lend_write_data(struct rbio_conn *rc, size_t offset, size_t size)
{
	void *lent;

	if (size < 4096 || !settings.write_in_place || !target_takes_any_buffer(rc))
		return NULL;
	lent = rbio_tcp_conn_lend(rc->engine, offset, size);
	rc->lent += lent != NULL;
	return lent;
}

/*
 * The core asks for a command's data buffer right after reading its BHS,
 * before the data. A write that carries all its data as immediate data,
 * already buffered whole, gets the buffered data itself: the core's read of
 * it then copies nothing (rbio/iser/stream_rx.hpp).
 */
static void *write_in_place(struct rbio_conn *rc, size_t size)
{
	struct iscsi_connection *conn = &rc->iscsi_conn;
	struct iscsi_cmd *req = (struct iscsi_cmd *)&conn->req.bhs;
	size_t offset;
	uint32_t dlength;

	/* reads leave at the first test */
	if ((req->flags & (ISCSI_FLAG_CMD_READ | ISCSI_FLAG_CMD_WRITE)) != ISCSI_FLAG_CMD_WRITE ||
	    !rc->bhs_fresh || (req->opcode & ISCSI_OPCODE_MASK) != ISCSI_OP_SCSI_CMD ||
	    conn->state != STATE_SCSI)
		return NULL;
	dlength = ntoh24(req->dlength);
	if (dlength != ntohl(req->data_length) || roundup(dlength, PAD_WORD_LEN) != size)
		return NULL;
	/* AHS and header digest come first */
	offset = (size_t)req->hlength * 4;
	if (conn->session_param[ISCSI_PARAM_HDRDGST_EN].val & DIGEST_CRC32C)
		offset += 4;
	return lend_write_data(rc, offset, size);
}

/* Going over data_budget_mib, or being the connection that would take
 * tgtd over data_budget_total_mib, closes the connection (data_budget.h):
 * logged and counted once. */
__attribute__((noinline, cold)) static void over_budget(struct rbio_conn *rc, size_t size)
{
	char why[320];

	if (rc->iscsi_conn.state == STATE_CLOSE)
		return;
	rbio_data_budget_why(&rc->budget, size, why, sizeof(why));
	conn_log_close(rc, why);
	rbio_tp_stats_over_budget();
}

/* A data buffer from the pool, charged to the connection's budget; NULL,
 * with the connection closing, when it would go over it or memory is
 * short. Closed here: the core drops the error of a bidirectional
 * command's read buffer, and would leave the connection open. */
static void *budgeted_data_buf(struct rbio_conn *rc, size_t size)
{
	void *buf;

	if (!rbio_data_budgets_admit(&rc->budget, size)) {
		over_budget(rc, size);
		rc->iscsi_conn.state = STATE_CLOSE;
		return NULL;
	}
	buf = rbio_pool_alloc(data_pool, size);
	if (!buf) {
		conn_log_close(rc, "out of memory for a data buffer");
		rc->iscsi_conn.state = STATE_CLOSE;
		return NULL;
	}
	rbio_pool_charge(buf, &rc->budget.held);
	return buf;
}

/* Another connection's buffer would take tgtd over data_budget_total_mib
 * and this one holds the most: closed by a pass of its own, since this
 * runs in the other's. */
static void close_for_total(void *ctx, const char *why)
{
	struct rbio_conn *rc = ctx;

	if (rc->iscsi_conn.state == STATE_CLOSE)
		return;
	conn_log_close(rc, why);
	rbio_tp_stats_over_budget();
	rbio_pass_force_close(&rc->pass);
}

static void *tp_alloc_data_buf(struct iscsi_connection *conn, size_t size)
{
	void *lent = write_in_place(RC(conn), size);

	return lent ? lent : budgeted_data_buf(RC(conn), size);
}

static void tp_free_data_buf(struct iscsi_connection *conn, void *buf)
{
	struct rbio_conn *rc = RC(conn);

	if (!buf)
		return;
	/* A write's data is never sent: one lent is given back at once. */
	if (rc->lent && rbio_tcp_conn_give_back(rc->engine, buf)) {
		rc->lent--;
		return;
	}
	defer_or_release(rc, buf);
}

/* ---- READ and WRITE past the core's reader and writer (direct_commands.h) */

/*
 * A READ, or a WRITE whose data is all immediate and all buffered, at the
 * head of the receive buffer: its task and data buffer as the core's reader
 * would get them from this transport (a WRITE's data lent in place where
 * write_in_place allows, else copied once, as the core's read copies it),
 * then SCSI. 1: taken (or the connection is closing); 0: the core reads it.
 */
static int direct_command(struct rbio_conn *rc)
{
	struct iscsi_connection *conn = &rc->iscsi_conn;
	const void *peek = rbio_tcp_conn_peek(rc->engine, BHS_SIZE);
	union {
		struct iscsi_cmd cmd;
		uint8_t b[BHS_SIZE];
	} h;
	struct iscsi_task *task;
	void *data;
	size_t size;
	int write;
	char why[192];

	/* Only between PDUs (conn_read_pdu()'s state): not half way through
	 * the reading of one. */
	if (!peek || conn->rx_buffer != (void *)&conn->req.bhs || conn->rx_size != BHS_SIZE)
		return 0;
	memcpy(h.b, peek, BHS_SIZE);
	if (!rbio_direct_cmd_eligible(conn, h.b))
		return 0;
	write = (h.cmd.flags & ISCSI_FLAG_CMD_WRITE) != 0;
	/* in size_t: an Expected Data Transfer Length near 4 GiB must not
	 * wrap to a small buffer */
	size = roundup((size_t)ntohl(h.cmd.data_length), PAD_WORD_LEN);
	/* The core reads a WRITE whose data is still coming as it comes, and
	 * a READ larger than one Data-In (whose response is the core's anyway,
	 * rbio_direct_cmd_next) gets its buffer from the core as before. */
	if (write ? !rbio_tcp_conn_peek(rc->engine, BHS_SIZE + size)
		  : size > (size_t)conn->session_param[ISCSI_PARAM_MAX_XMIT_DLENGTH].val)
		return 0;
	if (rbio_tcp_conn_check_bhs(rc->engine, h.b,
				    conn->session_param[ISCSI_PARAM_MAX_RECV_DLENGTH].val, 0, 0,
				    why, sizeof(why))) {
		conn_log_close(rc, why);
		conn->state = STATE_CLOSE;
		return 1;
	}
	/* Buffered, so served whole; the header is then read as the core
	 * reads it, one copy into the task. */
	if (rbio_tcp_conn_read(rc->engine, h.b, BHS_SIZE) != BHS_SIZE)
		goto broken;
	rc->rx_served += BHS_SIZE;
	task = tp_alloc_task(conn, 0);
	if (!task) {
		conn_log_close(rc, "out of memory for a task");
		conn->state = STATE_CLOSE;
		return 1;
	}
	data = write ? lend_write_data(rc, 0, size) : NULL;
	if (!data)
		data = budgeted_data_buf(rc, size);
	if (!data) { /* the connection is closing, logged */
		tp_free_task(task);
		return 1;
	}
	task->data = data;
	if (write) {
		if (rbio_tcp_conn_read(rc->engine, data, size) != (long)size) {
			tp_free_data_buf(conn, data);
			tp_free_task(task);
			goto broken;
		}
		rc->rx_served += size;
	}
	rbio_tcp_conn_count_direct(rc->engine);
	rbio_direct_cmd_queue(conn, task, h.b);
	return 1;
broken:
	conn_log_close(rc, "buffered bytes could not be read");
	conn->state = STATE_CLOSE;
	return 1;
}

/*
 * The responses at the head of the core's list that need not go through its
 * writer (direct_commands.h), queued as the core's writer queues them: a
 * READ's one Data-In with the status in it, a WRITE's SCSI Response. It
 * stops at the first the core must send, so responses leave in the core's
 * order. 1 when it queued any.
 */
static int direct_responses(struct rbio_conn *rc)
{
	struct iscsi_connection *conn = &rc->iscsi_conn;
	struct iscsi_task *task;
	uint8_t r[BHS_SIZE];
	int hd, dd, queued, progress = 0;

	session_digests(conn, &hd, &dd);
	while (conn->state != STATE_CLOSE && may_send(rc) &&
	       (task = rbio_direct_cmd_next(conn)) != NULL) {
		if (scsi_get_data_dir(&task->scmd) == DATA_READ) {
			uint32_t len = scsi_get_in_transfer_len(&task->scmd);

			rbio_direct_cmd_data_in(conn, task, r, len);
			rbio_tcp_conn_tx_header(rc->engine, r);
			rbio_tcp_conn_tx_data(rc->engine, task->data, len);
		} else {
			rbio_direct_cmd_response(conn, task, r, 0);
			rbio_tcp_conn_tx_header(rc->engine, r);
		}
		queued = rbio_tcp_conn_tx_end(rc->engine, hd, dd);
		rc->tx_open = queued == 1;
		if (queued < 0) {
			conn_log_close(rc, rbio_tcp_conn_tx_state(rc->engine) == RBIO_TX_FAILED
						   ? rbio_tcp_conn_tx_error(rc->engine)
						   : "response not queued");
			conn->state = STATE_CLOSE;
			return progress;
		}
		/* its buffers are released once the send is done */
		rbio_direct_cmd_finish(task);
		progress = 1;
	}
	return progress;
}

static int tp_getsockname(struct iscsi_connection *conn, struct sockaddr *sa, socklen_t *len)
{
	return getsockname(RC(conn)->fd, sa, len);
}

static int tp_getpeername(struct iscsi_connection *conn, struct sockaddr *sa, socklen_t *len)
{
	return getpeername(RC(conn)->fd, sa, len);
}

static void tp_nop_reply(long ttt)
{
	struct rbio_conn *rc;

	list_for_each_entry(rc, &rbio_conns, siblings) rbio_ping_reply(&rc->ping, ttt);
}

static int tp_login_complete(struct iscsi_connection *conn)
{
	rbio_ping_login_complete(&RC(conn)->ping, conn);
	return 0;
}

static int tp_init(void)
{
	return 0;
}

/* tgtd is exiting: a statistics file of a process that is gone would
 * mislead, and the buffers kept for reuse go back to the system. */
static void tp_exit(void)
{
	rbio_gate_stop();
	rbio_stats_remove();
	rbio_pool_trim(data_pool);
	rbio_pool_trim(task_pool);
}

static struct iscsi_transport rbio_tcp = {
	.name = "iscsi",
	.rdma = 0,
	.data_padding = PAD_WORD_LEN,
	.ep_init = tp_init,
	.ep_exit = tp_exit,
	.ep_login_complete = tp_login_complete,
	.alloc_task = tp_alloc_task,
	.free_task = tp_free_task,
	.ep_read = tp_read,
	.ep_write_begin = tp_write_begin,
	.ep_write_end = tp_write_end,
	.ep_close = tp_close,
	.ep_force_close = tp_force_close,
	.ep_release = tp_release,
	.ep_show = tp_show,
	.ep_event_modify = tp_event_modify,
	.alloc_data_buf = tp_alloc_data_buf,
	.free_data_buf = tp_free_data_buf,
	.ep_getsockname = tp_getsockname,
	.ep_getpeername = tp_getpeername,
	.ep_nop_reply = tp_nop_reply,
};

/* ---- accepting connections on the portals taken over */

static void set_socket_options(int fd)
{
	int on = 1, idle = 1800, cnt = 6, intvl = 300;

	/* tgt's keepalive and latency settings, so behaviour stays stock */
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
}

static void describe_peer(const struct sockaddr_storage *ss, socklen_t len, char *out,
			  size_t outlen)
{
	char host[INET6_ADDRSTRLEN], serv[8];

	if (getnameinfo((const struct sockaddr *)ss, len, host, sizeof(host), serv, sizeof(serv),
			NI_NUMERICHOST | NI_NUMERICSERV))
		snprintf(out, outlen, "unknown peer");
	else if (ss->ss_family == AF_INET6)
		snprintf(out, outlen, "[%s]:%s", host, serv);
	else
		snprintf(out, outlen, "%s:%s", host, serv);
}

/*
 * A peer that closed or reset its end while it waited in the listen queue
 * has given up on this connection (an initiator whose login timed out
 * tries again on a new one): its stale login must not reach tgt's core,
 * where it could be taken for a reinstatement of the session that the
 * initiator's newer connection is logging in.
 */
static int peer_gone(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLRDHUP };

	return poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

static void accept_handler(int lfd, int events, void *data)
{
	struct sockaddr_storage from;
	socklen_t len = sizeof(from);
	struct rbio_conn *rc;
	char err[256], peer[RBIO_PEER_LEN], portal[RBIO_PEER_LEN];
	int fd;

	(void)events;
	(void)data;
	if (!rbio_tgtd_ready()) {
		rbio_gate_pause();
		return;
	}
	fd = accept4(lfd, (struct sockaddr *)&from, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd < 0) {
		if (errno != EAGAIN && errno != EINTR)
			log_error("rbio: tcp: accept failed: %m\n");
		return;
	}
	describe_peer(&from, len, peer, sizeof(peer));
	len = sizeof(from);
	if (getsockname(fd, (struct sockaddr *)&from, &len))
		len = 0;
	describe_peer(&from, len, portal, sizeof(portal));
	if (peer_gone(fd)) {
		log_error("rbio: tcp: %s: dropped: the peer closed it while it waited to be "
			  "accepted\n",
			  peer);
		goto refuse;
	}
	set_socket_options(fd);

	rc = calloc(1, sizeof(*rc));
	if (!rc)
		goto refuse;
	rc->fd = fd;
	rc->tx_open = 1;
	rc->budget = rbio_data_budget_of_mib(settings.data_budget_mib);
	memcpy(rc->peer, peer, sizeof(rc->peer));
	memcpy(rc->portal, portal, sizeof(rc->portal));
	rc->releases = rbio_release_queue_new();
	if (!rc->releases) {
		free(rc);
		goto refuse;
	}
	rc->engine = rbio_tcp_conn_new(fd, &settings, err, sizeof(err));
	if (!rc->engine) {
		log_error("rbio: tcp: %s: refused: %s\n", rc->peer, err);
		rbio_release_queue_free(rc->releases);
		free(rc);
		goto refuse;
	}
	if (conn_init(&rc->iscsi_conn)) {
		rbio_tcp_conn_free(rc->engine);
		rbio_release_queue_free(rc->releases);
		free(rc);
		goto refuse;
	}
	rc->iscsi_conn.tp = &rbio_tcp;
	rbio_pass_init(&rc->pass, &rc->iscsi_conn, conn_pass, rc);
	rbio_rx_quiet_start(&rc->quiet);
	conn_read_pdu(&rc->iscsi_conn);
	if (tgt_event_add(fd, EPOLLIN, conn_event_handler, rc)) {
		conn_exit(&rc->iscsi_conn);
		rbio_tcp_conn_free(rc->engine);
		rbio_release_queue_free(rc->releases);
		free(rc);
		goto refuse;
	}
	if (rbio_tcp_conn_rx_wait_fd(rc->engine) >= 0 &&
	    tgt_event_add(rbio_tcp_conn_rx_wait_fd(rc->engine), EPOLLIN, rx_wait_handler, rc)) {
		log_error(
			"rbio: tcp: %s: refused: the receive-moderation timer cannot be watched\n",
			rc->peer);
		tgt_event_del(fd);
		conn_exit(&rc->iscsi_conn);
		rbio_tcp_conn_free(rc->engine);
		rbio_release_queue_free(rc->releases);
		free(rc);
		goto refuse;
	}
	list_add(&rc->siblings, &rbio_conns);
	rbio_data_budget_join(&rc->budget, close_for_total, rc);
	rbio_tp_stats_connection(1);
	return;
refuse:
	close(fd);
}

/* ---- once a second (stats_tick.c): pings, new portals, statistics */

static void ping_connections(void)
{
	struct rbio_conn *rc;
	char why[96];

	list_for_each_entry(rc, &rbio_conns, siblings)
	{
		if (rbio_ping_tick(&rc->ping, &rc->iscsi_conn, why, sizeof(why)) !=
		    RBIO_PING_UNANSWERED)
			continue;
		conn_log_close(rc, why);
		/* closing may free rc: leave the loop, the rest wait a tick */
		conn_close(&rc->iscsi_conn);
		break;
	}
}

/* The statistics file's lines, one per connection (stats_tick.h); each
 * connection's counters go into the totals first. */
static size_t describe_conns(char *out, size_t size)
{
	struct rbio_conn *rc;
	size_t used = 0;

	out[0] = '\0';
	list_for_each_entry(rc, &rbio_conns, siblings)
	{
		char line[512];
		int n;

		rbio_tcp_conn_publish(rc->engine);
		rbio_tcp_conn_describe(rc->engine, line, sizeof(line));
		n = snprintf(out + used, size - used, "connection=%s %s\n", rc->peer, line);
		if (n > 0 && (size_t)n < size - used)
			used += (size_t)n;
		else
			out[used] = '\0';
	}
	return used;
}

void rbio_iscsi_tcp_metrics(struct rbio_metrics *m)
{
	struct rbio_conn *rc;
	uint64_t counters[RBIO_METRICS_CONN_COUNTERS];
	size_t n;

	list_for_each_entry(rc, &rbio_conns, siblings)
	{
		n = rbio_tcp_conn_counters(rc->engine, counters, RBIO_METRICS_CONN_COUNTERS);
		rbio_metrics_add_iscsi_conn(m, &rc->iscsi_conn, RBIO_METRICS_TCP, rc->portal,
					    rc->peer, counters, n, rc->budget.held);
	}
}

/* This transport's share of the tick; the statistics file follows. */
static void each_second(void)
{
	ping_connections();
	rbio_portals_take_over(&settings, accept_handler);
}

/* ---- start */

void rbio_iscsi_tcp_start(void)
{
	char err[1024], desc[6000];
	const struct rbio_tp_settings *s = rbio_glue_settings(err, sizeof(err));

	if (!s) {
		log_error("rbio: tcp: bad settings, TCP portals stay with tgt's transport: %s\n",
			  err);
		return;
	}
	settings = *s;
	rbio_tp_describe_settings(&settings, desc, sizeof(desc));
	if (!settings.enabled) {
		log_error("rbio: tcp: transport off; TCP portals stay with tgt's transport (%s)\n",
			  desc);
		return;
	}
	if (!rbio_tgtd_build_matches("tcp", "TCP portals"))
		return;
	data_pool = rbio_pool_new(&data_pool_config, err, sizeof(err));
	task_pool = data_pool ? rbio_pool_new(&task_pool_config, err, sizeof(err)) : NULL;
	if (!task_pool) {
		log_error("rbio: tcp: %s; TCP portals stay with tgt's transport\n", err);
		rbio_pool_free(data_pool);
		data_pool = NULL;
		return;
	}
	if (rbio_gate_start())
		return;
	log_error("rbio: tcp: %s\n", desc);
	iscsi_transport_register(&rbio_tcp);
	rbio_portals_take_over(&settings, accept_handler);
	rbio_stats_tick_start(&settings, each_second, describe_conns);
}
