/*
 * rbio's iSER transport inside stock tgtd.
 *
 * tgt 1.0.85's own iSER is a driver of its own (iser.c: its own PDU parser,
 * login code and command queue) with one completion per signalled send, a
 * fixed 512 KiB I/O limit and an initiator-name ACL bug (with only
 * `-I ALL`, every iSER login is refused). This transport instead runs iSER
 * connections through tgt's iSCSI core, the same code that serves TCP, and
 * maps the core's byte-stream view onto RDMA (tgt-backend/docs/
 * iser-takeover.md has the reasoning and tgt's internals):
 *
 *  - every received SEND holds one whole PDU; ep_read() serves the core
 *    its BHS, AHS and data from the receive buffer, whose AHS-and-data
 *    part is a registered data buffer: a command's immediate data is not
 *    copied, that buffer becomes the task's (tp_alloc_data_buf);
 *  - a Data-In the core sends becomes an RDMA WRITE from the task's
 *    (registered) buffer to the initiator's advertised read buffer; when it
 *    carries the status, a SCSI Response SEND follows in the same post;
 *  - an R2T becomes an RDMA READ of the initiator's write buffer straight
 *    into the task's buffer; when it completes, the core is handed a
 *    Data-Out header whose data is already in place;
 *  - every other PDU is a SEND (iSER header + PDU from a registered slot).
 *
 * The engine (iser-opt's IserEndpoint) chains a pass's work requests into
 * one post, signals one send in 16 with per-QP tracking, and reaps
 * completions in batches, re-arming the channel only when idle.
 *
 * The CM event channel of tgt's iSER listeners (iser_portals_list) is taken
 * over, so tgt keeps its wildcard binds and every new connection comes
 * here. Targets made with `--lld iser` keep working: their driver's
 * completion callbacks are pointed at the iSCSI core's, and their `rdma`
 * flag, which makes the core refuse a login, is lifted for the duration of
 * a login PDU.
 *
 * One of the few files that include tgt's (version-specific, C) headers.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>

#include "iscsid.h"
#include "iser.h"
#include "target.h"
#include "driver.h"
#include "work.h"

#include "rbio/bs/block_pool.h"
#include "rbio/bs/data_budget.h"
#include "rbio/bs/iser_transport.h"
#include "rbio/bs/tcp_transport.h"
#include "conn_pass.h"
#include "conn_ping.h"
#include "rx_quiet.h"
#include "pdu_bounds.h"
#include "direct_commands.h"
#include "wire_bytes.h"
#include "glue_settings.h"
#include "iscsi_iser_glue.h"
#include "metrics_glue.h"
#include "readiness_gate.h"

extern struct list_head iser_portals_list; /* tgtd's, exported (-Wl,-E) */

/* Outstanding RDMA READs per connection: one per task with an R2T out
 * (tgt's MaxOutstandingR2T is 1, its command window at most 512). */
#define RBIO_ISER_MAX_READS 1024
/* The most Data-In bytes one PDU (so one RDMA WRITE) may carry. */
#define RBIO_ISER_MAX_XMIT (16u << 20)

/* What the initiator advertised in the iSER header of a SCSI command; lies
 * right before the core's task, in a block of task_pool. */
struct iser_task_prefix {
	int read_valid, write_valid;
	uint32_t read_stag, write_stag;
	uint64_t read_va, write_va;
	int read_slot;          /* 1 + index of its RDMA READ in flight, or 0 */
} __attribute__((aligned(16))); /* so is the task that follows */

struct read_op {
	struct iscsi_task *task; /* NULL: free, or orphaned by the core */
	int in_use;
	uint8_t lun[8];
	uint32_t itt, ttt, offset, len;
};

struct rbio_iser_conn {
	struct rbio_iser_ep *ep;
	struct rdma_cm_id *id; /* owned by ep */
	int fd;                /* the completion channel, in tgtd's epoll once established */
	/* fd is in tgtd's epoll: from the CM's ESTABLISHED (the initiator's
	 * RTU) until the close. The initiator's first message can complete on the QP
	 * before that, and a connection closed for it then is never
	 * disconnected: the kernel's CM skips the DREQ of a disconnect while
	 * it waits for the RTU, and destroying the id sends a REJ that the
	 * connected initiator ignores. So the completions wait in the CQ. */
	int cq_watched;
	struct list_head siblings;
	struct rbio_pass pass;
	struct rbio_ping ping;
	struct rbio_rx_quiet quiet;
	int heard; /* this pass has received a PDU or READ data (and told quiet) */
	int passes_since_tick;
	int reap_due; /* the tick wants the CQ reaped in the next scheduled pass */
	/* the core set the connection closing with sends not yet complete:
	 * when the close goes ahead regardless (CLOCK_MONOTONIC ms), 0 while
	 * it has not waited */
	uint64_t close_deadline_ms;
	int peer_gone; /* the CM said disconnected, unreachable, rejected or removed */
	/* the PDU the core is reading: bhs[48] then `rest` (AHS and data) */
	const uint8_t *rx_bhs;
	const uint8_t *rx_rest;
	uint32_t rx_len, rx_off;
	uint8_t synth_bhs[BHS_SIZE]; /* a Data-Out standing for an RDMA READ */
	struct rbio_iser_rx adv;     /* iSER header of the PDU being read */
	/* the response the core is handing over */
	uint8_t tx_bhs[BHS_SIZE];
	const void *tx_data;
	size_t tx_data_len;
	struct read_op reads[RBIO_ISER_MAX_READS];
	int reads_in_use;
	uint16_t free_reads[RBIO_ISER_MAX_READS]; /* a stack of free indexes */
	struct rbio_data_budget budget;           /* its data buffers, until released */
	char peer[INET6_ADDRSTRLEN + 16];
	char portal[INET6_ADDRSTRLEN + 16]; /* the local address it came in on */

	struct iscsi_connection iscsi_conn;
};

static struct rbio_iser_conn *RC(struct iscsi_connection *conn)
{
	return container_of(conn, struct rbio_iser_conn, iscsi_conn);
}

static struct iser_task_prefix *prefix_of(struct iscsi_task *task)
{
	return (struct iser_task_prefix *)task - 1;
}

static struct iscsi_transport rbio_iser;

struct rbio_rx_quiet *rbio_iser_rx_quiet(struct iscsi_connection *conn)
{
	return conn->tp == &rbio_iser ? &RC(conn)->quiet : NULL;
}

/* Once per pass, before the core sees what came (rx_quiet.h). */
static void note_heard(struct rbio_iser_conn *rc)
{
	if (!rc->heard) {
		rc->heard = 1;
		rbio_rx_quiet_heard(&rc->quiet, &rc->iscsi_conn);
	}
}
static struct rbio_tp_settings settings;
static LIST_HEAD(rbio_iser_conns);
static struct rdma_event_channel *cm_channel;
/* Tasks, each behind its prefix (rbio/bs/block_pool.h); lives as long as
 * tgtd. Data buffers come from the endpoint's registered pool. */
static const struct rbio_pool_config task_pool_config = { 8, 8, 16u << 20, 0, 0 };
static struct rbio_pool *task_pool;

static void conn_log_close(struct rbio_iser_conn *rc, const char *why)
{
	log_error("rbio: iser: %s: closing connection: %s\n", rc->peer, why);
}

/* The cold paths of per-PDU functions (a failure, a login, an R2T) stay
 * out of line, so those functions save no registers for them. */
__attribute__((noinline, cold)) static void conn_fail(struct rbio_iser_conn *rc, const char *why)
{
	if (rc->iscsi_conn.state != STATE_CLOSE) {
		conn_log_close(rc, why);
		rc->iscsi_conn.state = STATE_CLOSE;
	}
}

/* ---- data buffers within data_budget_mib and data_budget_total_mib
 * (data_budget.h) */

/* Going over data_budget_mib, or being the connection that would take
 * tgtd over data_budget_total_mib, closes the connection: logged and
 * counted once. */
__attribute__((noinline, cold)) static void over_budget(struct rbio_iser_conn *rc, size_t size)
{
	char why[320];

	if (rc->iscsi_conn.state == STATE_CLOSE)
		return;
	rbio_data_budget_why(&rc->budget, size, why, sizeof(why));
	conn_fail(rc, why);
	rbio_tp_stats_over_budget();
}

/* A buffer of `size` more bytes keeps the connection within its budget
 * and tgtd within the total (having closed others if need be); else the
 * connection has failed. */
static int within_budget(struct rbio_iser_conn *rc, size_t size)
{
	if (rbio_data_budgets_admit(&rc->budget, size))
		return 1;
	over_budget(rc, size);
	return 0;
}

/* Another connection's buffer would take tgtd over data_budget_total_mib
 * and this one holds the most: a scheduled pass closes it. */
static void close_for_total(void *ctx, const char *why)
{
	struct rbio_iser_conn *rc = ctx;

	if (rc->iscsi_conn.state == STATE_CLOSE)
		return;
	conn_fail(rc, why);
	rbio_tp_stats_over_budget();
	rbio_pass_schedule_if_due(&rc->pass);
}

/* A registered data buffer charged to the connection's budget; NULL, with
 * the connection failed, when it would go over it or none is left. */
static void *budgeted_data_buf(struct rbio_iser_conn *rc, size_t size)
{
	void *buf;

	if (!within_budget(rc, size))
		return NULL;
	buf = rbio_iser_data_alloc(rc->ep, size);
	if (!buf) {
		conn_fail(rc, "no registered data buffer left");
		return NULL;
	}
	rbio_pool_charge(buf, &rc->budget.held);
	return buf;
}

/* The current receive's block, its immediate data in place, taken as the
 * command's data buffer (rbio_iser_ep_take_rx) and charged like any: the
 * receive is reposted with a fresh block, so taken ones are bounded only
 * by the budget. NULL: not taken (the caller copies), or over the budget
 * (*over set, the connection failed). */
static void *budgeted_rx_data(struct rbio_iser_conn *rc, size_t size, int *over)
{
	void *buf;

	*over = !within_budget(rc, size);
	if (*over)
		return NULL;
	buf = rbio_iser_ep_take_rx(rc->ep, size);
	if (buf)
		rbio_pool_charge(buf, &rc->budget.held);
	return buf;
}

/* ---- the receive side: one whole PDU per receive */

/*
 * What a login PDU changes in its target while the core handles it, and
 * puts back afterwards, so tgtadm keeps showing the admin's settings:
 *
 *  - `rdma`, set on targets made with `--lld iser`: tgt's core refuses
 *    those ("Target is RDMA, but conn is TCP") because its own iSER never
 *    goes through it. This connection is RDMA, so the flag is lifted.
 *  - TargetRecvDataSegmentLength, which tgt's targets offer as 256 KiB:
 *    it bounds what the initiator may SEND (immediate data, text), and our
 *    receive buffers hold RBIO_ISER_RECV_DATA_MAX. The core copies the
 *    target's values into the connection on the first login PDU, so a
 *    lower value there is what gets negotiated.
 *  - InitialR2T, when the admin has set it to No: a write's first burst
 *    beyond its immediate data would then come as unsolicited Data-Out
 *    SENDs, each landing in a receive buffer of its own and copied into
 *    the task's buffer, and each a PDU through the core. Offered as Yes
 *    (an OR key: the session gets Yes), that data is fetched by one RDMA
 *    READ straight into the task's buffer; an R2T over iSER never crosses
 *    the wire. write_in_place = off keeps the admin's value.
 */
struct login_override {
	struct iscsi_target *t;
	int rdma;
	unsigned int trdsl;
	unsigned int initial_r2t;
	unsigned int header_digest, data_digest;
};

__attribute__((noinline, cold)) static void login_override_apply(struct login_override *o,
								 const uint8_t *bhs,
								 const uint8_t *data, uint32_t len)
{
	const char key[] = "TargetName=";
	uint32_t i = 0;

	o->t = NULL;
	if ((bhs[0] & 0x3f) != ISCSI_OP_LOGIN)
		return;
	while (i < len) {
		const char *kv = (const char *)data + i;
		size_t n = strnlen(kv, len - i);

		if (n < len - i && n > sizeof(key) - 1 && !memcmp(kv, key, sizeof(key) - 1)) {
			struct iscsi_target *t = target_find_by_name(kv + sizeof(key) - 1);

			if (!t)
				return;
			o->t = t;
			o->rdma = t->rdma;
			o->trdsl = t->session_param[ISCSI_PARAM_TARGET_RDSL].val;
			o->initial_r2t = t->session_param[ISCSI_PARAM_INITIAL_R2T_EN].val;
			o->header_digest = t->session_param[ISCSI_PARAM_HDRDGST_EN].val;
			o->data_digest = t->session_param[ISCSI_PARAM_DATADGST_EN].val;
			t->rdma = 0;
			/* iSER carries no digests (RFC 7145 5.1: both keys None).
			 * A target set up for TCP may allow CRC32C; granted over
			 * iSER, the core would wait for 4 digest bytes no receive
			 * holds and read the next receive shifted by them. */
			t->session_param[ISCSI_PARAM_HDRDGST_EN].val = DIGEST_NONE;
			t->session_param[ISCSI_PARAM_DATADGST_EN].val = DIGEST_NONE;
			if (o->trdsl > RBIO_ISER_RECV_DATA_MAX)
				t->session_param[ISCSI_PARAM_TARGET_RDSL].val =
					RBIO_ISER_RECV_DATA_MAX;
			if (settings.write_in_place)
				t->session_param[ISCSI_PARAM_INITIAL_R2T_EN].val = 1;
			return;
		}
		i += (uint32_t)n + 1;
	}
}

static void login_override_restore(const struct login_override *o)
{
	if (!o->t)
		return;
	o->t->rdma = o->rdma;
	o->t->session_param[ISCSI_PARAM_TARGET_RDSL].val = o->trdsl;
	o->t->session_param[ISCSI_PARAM_INITIAL_R2T_EN].val = o->initial_r2t;
	o->t->session_param[ISCSI_PARAM_HDRDGST_EN].val = o->header_digest;
	o->t->session_param[ISCSI_PARAM_DATADGST_EN].val = o->data_digest;
}

/* The send queue has room for a few work requests (a PDU becomes at most
 * two: an RDMA WRITE and a SEND) and a send slot is free. */
static int may_send(void *ctx)
{
	struct rbio_iser_conn *rc = ctx;

	return rbio_iser_ep_room(rc->ep, 4);
}

/*
 * The responses at the head of the core's list that need not go through
 * its writer (direct_commands.h), each queued as work requests at once: a
 * READ's RDMA WRITE and SCSI Response in one post, a WRITE's SCSI
 * Response. It stops at the first the core must send, so responses leave
 * in the order the core would have sent them.
 */
static void direct_responses(struct rbio_iser_conn *rc)
{
	struct iscsi_connection *conn = &rc->iscsi_conn;
	struct iscsi_task *task;
	uint8_t r[BHS_SIZE];

	while (may_send(rc) && (task = rbio_direct_cmd_next(conn)) != NULL) {
		struct iser_task_prefix *p = prefix_of(task);
		int failed;

		if (scsi_get_data_dir(&task->scmd) == DATA_READ) {
			uint32_t len = scsi_get_in_transfer_len(&task->scmd);

			/* No read buffer advertised: the core's writer hands
			 * the Data-In to tp_write_end(), which says so. */
			if (!p->read_valid)
				return;
			rbio_direct_cmd_response(conn, task, r, len);
			failed = rbio_iser_ep_rdma_write_send(rc->ep, task->data, 0, len,
							      p->read_va, p->read_stag, r);
		} else {
			rbio_direct_cmd_response(conn, task, r, 0);
			failed = rbio_iser_ep_send(rc->ep, r, BHS_SIZE, NULL, 0);
		}
		if (failed) {
			conn_fail(rc, "a response could not be queued");
			return;
		}
		rbio_direct_cmd_finish(task);
	}
}

static void run_tx(struct rbio_iser_conn *rc)
{
	if (settings.direct_commands)
		direct_responses(rc);
	rbio_pass_tx(&rc->pass, may_send, rc);
}

/*
 * Hands the current PDU to the core. What the PDUs of a pass produce goes
 * to the send side once, after the last of them (the run_tx() of
 * cq_event_handler, whose rbio_iser_ep_run() calls on_rx and on_done),
 * except a login response: the core must have handed it over before the
 * next PDU of the same pass comes in. Were a PDU fed outside a pass, the
 * core's ep_event_modify(EPOLLOUT) would have scheduled one (see
 * tp_event_modify), which sends and flushes what is left.
 */
static void feed(struct rbio_iser_conn *rc, const struct login_override *login)
{
	struct iscsi_connection *conn = &rc->iscsi_conn;

	while (conn->state != STATE_CLOSE && rc->rx_off < rc->rx_len) {
		uint32_t before = rc->rx_off;

		iscsi_rx_handler(conn);
		if (rc->rx_off == before)
			break;
	}
	if (login)
		login_override_restore(login);
	if (conn->state != STATE_CLOSE && rc->rx_off < rc->rx_len)
		conn_fail(rc, "the iSCSI core did not take a whole PDU");
	/* Nor may it wait for more of this one (a digest): it would read the
	 * next receive as the rest, shifted, with no check of what it then
	 * takes for a header. Done: at a new PDU's header (conn_read_pdu), or
	 * at its end while a login response is built. */
	else if (conn->state != STATE_CLOSE && conn->rx_size != 0 &&
		 !(conn->rx_buffer == (void *)&conn->req.bhs && conn->rx_size == BHS_SIZE))
		conn_fail(rc,
			  "a receive ended inside its PDU (the iSCSI core waits for more of it)");
	rc->rx_len = rc->rx_off = 0;
	if (rbio_pass_awaiting_login_response(&rc->pass))
		run_tx(rc);
}

static struct iscsi_task *tp_alloc_task(struct iscsi_connection *conn, size_t ext_len);
static void tp_free_data_buf(struct iscsi_connection *conn, void *buf);

/*
 * A READ or WRITE the core need not read (direct_commands.h): its task and
 * data buffer as the core's reader would get them from this transport (a
 * WRITE's immediate data is the receive's data block, uncopied), then
 * SCSI. 1: taken (or the connection failed); 0: the core reads it.
 */
static int direct_command(struct rbio_iser_conn *rc, const struct rbio_iser_rx *rx)
{
	struct iscsi_connection *conn = &rc->iscsi_conn;
	uint32_t edtl;
	struct iscsi_task *task;
	void *data;
	int over;

	if (!rbio_direct_cmd_eligible(conn, rx->bhs))
		return 0;
	edtl = rbio_get_be32(rx->bhs + 20); /* Expected Data Transfer Length */
	if (rx->bhs[1] & ISCSI_FLAG_CMD_WRITE) {
		data = budgeted_rx_data(rc, edtl, &over);
		if (!data)
			return over; /* not taken: the core reads it, and copies */
	} else {
		data = budgeted_data_buf(rc, edtl);
		if (!data)
			return 1;
	}
	task = tp_alloc_task(conn, 0); /* the prefix from rc->adv */
	if (!task) {
		tp_free_data_buf(conn, data);
		conn_fail(rc, "no task for a command");
		return 1;
	}
	task->data = data;
	rbio_iser_ep_count_direct(rc->ep);
	rbio_direct_cmd_queue(conn, task, rx->bhs);
	return 1;
}

static void on_rx(void *ctx, const struct rbio_iser_rx *rx)
{
	struct rbio_iser_conn *rc = ctx;
	struct iscsi_connection *conn = &rc->iscsi_conn;
	struct login_override login = { NULL, 0, 0, 0, 0, 0 };
	uint32_t ahs;

	if (conn->state == STATE_CLOSE || conn->closed)
		return;
	note_heard(rc);
	rc->adv = *rx;
	rc->rx_bhs = rx->bhs;
	rc->rx_rest = rx->rest;
	rc->rx_len = rx->len;
	rc->rx_off = 0;
	if (conn->state != STATE_SCSI) {
		ahs = (uint32_t)rx->bhs[4] * 4;
		login_override_apply(&login, rx->bhs, rx->rest + ahs, rx->len - BHS_SIZE - ahs);
	} else {
		char why[192];

		/* A peer that posts no receives for our responses (its SENDs
		 * wait, RNR-retried) yet sends requests: each keeps a task.
		 * Its receive credit does not shrink (a receive is reposted
		 * as soon as it is handled), so the request stream is not
		 * slowed as TCP's would be: the connection closes. */
		if (conn->refcount > RBIO_CONN_TASKS_HELD && !may_send(rc)) {
			conn_fail(rc, "more than 1024 requests wait for responses it takes none of "
				      "(the initiator posts no receives for them)");
			rc->rx_len = 0;
			return;
		}
		if (rbio_pdu_out_of_bounds(conn, rx->bhs, why, sizeof(why)) ||
		    (rx->bhs[4] != 0 &&
		     rbio_pdu_ahs_refused(rx->rest, (size_t)rx->bhs[4] * 4, why, sizeof(why)))) {
			conn_fail(rc, why);
			rc->rx_len = 0;
			return;
		}
		/* Over iSER the target fetches solicited data itself, by RDMA
		 * READ (RFC 7145): a solicited Data-Out from the initiator
		 * would race the READ's own (synthesized) one. */
		if ((rx->bhs[0] & ISCSI_OPCODE_MASK) == ISCSI_OP_SCSI_DATA_OUT &&
		    memcmp(rx->bhs + 20, "\xff\xff\xff\xff", 4) != 0) {
			conn_fail(rc, "a solicited Data-Out PDU, which iSER moves by RDMA READ");
			rc->rx_len = 0;
			return;
		}
		if (settings.direct_commands && direct_command(rc, rx)) {
			rc->rx_len = 0;
			return;
		}
	}
	feed(rc, &login);
}

/* An RDMA READ for an R2T is done: the data is in the task's buffer, and
 * the core gets the Data-Out that would have brought it. */
static void on_done(void *ctx, uint64_t token, int status)
{
	struct rbio_iser_conn *rc = ctx;
	struct iscsi_connection *conn = &rc->iscsi_conn;
	struct read_op *op;
	uint8_t *b = rc->synth_bhs;
	char why[160];

	if (token == 0 || token > RBIO_ISER_MAX_READS)
		return;
	op = &rc->reads[token - 1];
	if (!op->in_use)
		return;
	op->in_use = 0;
	rc->free_reads[RBIO_ISER_MAX_READS - rc->reads_in_use] = (uint16_t)(token - 1);
	rc->reads_in_use--;
	if (op->task)
		prefix_of(op->task)->read_slot = 0;
	if (status) {
		if (status != -ECANCELED)
			conn_fail(rc, "an RDMA READ of the initiator's data failed");
		return;
	}
	if (!op->task || conn->state == STATE_CLOSE || conn->closed)
		return;
	if (op->task->r2t_count < (long)op->len || task_in_scsi(op->task)) {
		/* Something else brought the data the READ fetched. */
		conn_fail(rc, "an RDMA READ finished for a command that no longer waits for data");
		return;
	}
	if (rbio_pdu_itt_reused(conn, op->task, why, sizeof(why))) {
		conn_fail(rc, why);
		return;
	}
	/* The write's data came in: a silence up to now (this tgtd stalled
	 * with the READ complete) is on record before the write is judged,
	 * as one before a received PDU is (rx_quiet.h). */
	note_heard(rc);
	memset(b, 0, BHS_SIZE);
	b[0] = ISCSI_OP_SCSI_DATA_OUT;
	b[1] = ISCSI_FLAG_CMD_FINAL;
	b[5] = (uint8_t)(op->len >> 16);
	b[6] = (uint8_t)(op->len >> 8);
	b[7] = (uint8_t)op->len;
	memcpy(b + 8, op->lun, 8);
	memcpy(b + 16, &op->itt, 4); /* wire order kept */
	memcpy(b + 20, &op->ttt, 4);
	rbio_put_be32(b + 28, conn->stat_sn);
	rbio_put_be32(b + 40, op->offset);
	rc->rx_bhs = b;
	rc->rx_rest = (const uint8_t *)op->task->data + op->offset;
	rc->rx_len = BHS_SIZE + op->len;
	rc->rx_off = 0;
	feed(rc, NULL);
}

static size_t tp_read(struct iscsi_connection *conn, void *buf, size_t nbytes)
{
	struct rbio_iser_conn *rc = RC(conn);
	size_t n, left = rc->rx_len - rc->rx_off;

	if (left == 0) {
		errno = EAGAIN;
		return (size_t)-1;
	}
	n = nbytes < left ? nbytes : left;
	if (rc->rx_off == 0 && n == BHS_SIZE) {
		/* The core reads a whole BHS first: a copy of constant size is
		 * a few moves (the variable one below, a byte loop). */
		memcpy(buf, rc->rx_bhs, BHS_SIZE);
	} else if (rc->rx_off < BHS_SIZE) {
		size_t h = BHS_SIZE - rc->rx_off;

		if (n > h)
			n = h;
		memcpy(buf, rc->rx_bhs + rc->rx_off, n);
	} else {
		const uint8_t *src = rc->rx_rest + (rc->rx_off - BHS_SIZE);

		/* A Data-Out standing for an RDMA READ: the data is there. */
		if (src != buf)
			memcpy(buf, src, n);
	}
	rc->rx_off += (uint32_t)n;
	return n;
}

/* ---- the send side */

static size_t tp_write_begin(struct iscsi_connection *conn, void *buf, size_t nbytes)
{
	struct rbio_iser_conn *rc = RC(conn);

	rc->pass.tx_parts++;
	if (buf == (void *)&conn->rsp.bhs) {
		memcpy(rc->tx_bhs, buf, BHS_SIZE);
		rc->tx_data = NULL;
		rc->tx_data_len = 0;
	} else if (buf != (void *)conn->tx_digest) {
		rc->tx_data = buf;
		rc->tx_data_len = conn->rsp.datasize;
	}
	return nbytes;
}

/* The SCSI Response that a Data-In with status stands for (RFC 7145:
 * no Data-In crosses the wire, the status comes in a response). */
static void status_of(uint8_t r[BHS_SIZE], const uint8_t *din)
{
	memset(r, 0, BHS_SIZE);
	r[0] = ISCSI_OP_SCSI_CMD_RSP;
	/* F, and the Data-In's overflow/underflow bits, which are the same */
	r[1] = (uint8_t)(ISCSI_FLAG_CMD_FINAL |
			 (din[1] & (ISCSI_FLAG_CMD_OVERFLOW | ISCSI_FLAG_CMD_UNDERFLOW)));
	r[3] = din[3];                                      /* status */
	memcpy(r + 16, din + 16, 4);                        /* ITT */
	memcpy(r + 24, din + 24, 12);                       /* StatSN, ExpCmdSN, MaxCmdSN */
	rbio_put_be32(r + 36, rbio_get_be32(din + 36) + 1); /* ExpDataSN: Data-Ins so far */
	memcpy(r + 44, din + 44, 4);                        /* residual count */
}

__attribute__((noinline)) static int post_read(struct rbio_iser_conn *rc, struct iscsi_task *task)
{
	struct iser_task_prefix *p = prefix_of(task);
	const uint8_t *r2t = rc->tx_bhs;
	uint32_t offset = rbio_get_be32(r2t + 40), len = rbio_get_be32(r2t + 44);
	const uint8_t *cmd = (const uint8_t *)&task->req;
	uint32_t edtl = rbio_get_be32(cmd + 20), unsol;
	struct read_op *op;

	if (!p->write_valid)
		return -1;
	/* The initiator's write address skips what it sent unsolicited:
	 * immediate data, plus the first burst when InitialR2T=No. */
	unsol = rbio_get_be24(cmd + 5);
	if (!rc->iscsi_conn.session_param[ISCSI_PARAM_INITIAL_R2T_EN].val) {
		uint32_t fb = rc->iscsi_conn.session_param[ISCSI_PARAM_FIRST_BURST].val;

		unsol = fb < edtl ? fb : edtl;
	}
	if (offset < unsol || offset + len > edtl || offset + len < offset)
		return -1;
	if (rc->reads_in_use == RBIO_ISER_MAX_READS)
		return -1;
	op = &rc->reads[rc->free_reads[RBIO_ISER_MAX_READS - 1 - rc->reads_in_use]];
	op->in_use = 1;
	op->task = task;
	memcpy(op->lun, r2t + 8, 8);
	memcpy(&op->itt, r2t + 16, 4);
	memcpy(&op->ttt, r2t + 20, 4);
	op->offset = offset;
	op->len = len;
	if (rbio_iser_ep_rdma_read(rc->ep, task->data, offset, len, p->write_va + (offset - unsol),
				   p->write_stag, (uint64_t)(op - rc->reads) + 1)) {
		op->in_use = 0;
		return -1;
	}
	rc->reads_in_use++;
	p->read_slot = (int)(op - rc->reads) + 1;
	return 0;
}

static void tp_write_end(struct iscsi_connection *conn)
{
	struct rbio_iser_conn *rc = RC(conn);
	struct iscsi_task *task = conn->tx_task;
	uint8_t op = rc->tx_bhs[0] & 0x3f;
	int rc_post = 0;

	/* The core's send handler returns after a PDU's header and ends the
	 * PDU (here) in its next call, which writes nothing: that call is
	 * progress too, or run_tx() would stop with responses still queued
	 * and nothing left to call it again. */
	rc->pass.tx_parts++;

	if (op == ISCSI_OP_SCSI_DATA_IN) {
		struct iser_task_prefix *p = task ? prefix_of(task) : NULL;
		uint32_t offset = rbio_get_be32(rc->tx_bhs + 40);

		if (!p || !p->read_valid || !task->data ||
		    (const char *)rc->tx_data != (const char *)task->data + offset) {
			conn_fail(rc, "a Data-In without an advertised read buffer");
			return;
		}
		if (rc->tx_bhs[1] & ISCSI_FLAG_DATA_STATUS) {
			uint8_t r[BHS_SIZE];

			status_of(r, rc->tx_bhs);
			rc_post = rbio_iser_ep_rdma_write_send(rc->ep, task->data, offset,
							       rc->tx_data_len, p->read_va + offset,
							       p->read_stag, r);
		} else {
			rc_post =
				rbio_iser_ep_rdma_write(rc->ep, task->data, offset, rc->tx_data_len,
							p->read_va + offset, p->read_stag);
		}
	} else if (op == ISCSI_OP_R2T) {
		if (!task || post_read(rc, task)) {
			conn_fail(rc, "an R2T that cannot become an RDMA READ");
			return;
		}
	} else {
		rc_post = rbio_iser_ep_send(rc->ep, rc->tx_bhs, BHS_SIZE, rc->tx_data,
					    rc->tx_data_len);
	}
	if (rc_post)
		conn_fail(rc, "a response could not be queued");
}

/* Reaps the CQ. A pass that stopped at iser_pass_completions (the peer
 * kept it busy) left the channel unarmed: the next pass is scheduled, and
 * tgt runs what else is due (other connections, the store's completions,
 * tgtadm) before it. */
static void reap(struct rbio_iser_conn *rc)
{
	char why[256];

	rc->heard = 0;
	if (rbio_iser_ep_run(rc->ep, on_rx, rc, why, sizeof(why)))
		conn_fail(rc, why);
	else if (rbio_iser_ep_yielded(rc->ep)) {
		rc->reap_due = 1;
		tgt_add_sched_event(&rc->pass.ev);
	}
}

/* A pass outside the completion channel's event: what the core has to
 * send, then one post; first the CQ's completions when the tick asked for
 * them (work outstanding with no completion for a while), or the last
 * pass stopped at its limit. */
static void conn_pass(void *ctx)
{
	struct rbio_iser_conn *rc = ctx;

	if (rc->iscsi_conn.closed)
		return;
	rc->pass.in_pass = 1;
	if (rc->reap_due) {
		rc->reap_due = 0;
		reap(rc);
	}
	run_tx(rc);
	rc->pass.in_pass = 0;
	rbio_iser_ep_flush(rc->ep);
}

static void cq_event_handler(int fd, int events, void *data)
{
	struct rbio_iser_conn *rc = data;

	(void)fd;
	(void)events;
	if (rc->iscsi_conn.closed)
		return;
	rc->pass.in_pass = 1;
	rc->passes_since_tick++;
	reap(rc);
	run_tx(rc);
	rc->pass.in_pass = 0;
	rbio_iser_ep_flush(rc->ep);
	rbio_pass_finish(&rc->pass);
}

static void tp_event_modify(struct iscsi_connection *conn, int events)
{
	rbio_pass_event_modify(&RC(conn)->pass, events);
}

/*
 * The core sets a connection closing right after handing over its last
 * response: a Logout Response, or a login reject. rdma_disconnect() then
 * moves the QP to the error state, which flushes a SEND the adapter has
 * not transmitted yet, so the initiator would wait out its logout timeout
 * or retry a refused login (stock tgt's iSER leaves the disconnect to the
 * initiator after a logout). So the close waits for every send queued to
 * complete: the CQ's event then runs a pass that asks again, and once
 * CLOSE_WAIT_MS are up the next tick's pass closes regardless (2-3 s).
 * Not when the peer has gone (the CM said so): nothing sent would reach
 * it.
 */
#define CLOSE_WAIT_MS 2000

static uint64_t monotonic_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

static int may_close(void *ctx)
{
	struct rbio_iser_conn *rc = ctx;
	uint64_t now;

	if (!rc->cq_watched || rc->peer_gone || !rbio_iser_ep_sends_pending(rc->ep)) {
		if (rc->close_deadline_ms)
			log_error("rbio: iser: %s: closing after waiting for the last sends: %s\n",
				  rc->peer,
				  rc->peer_gone ? "the peer disconnected" : "all completed");
		return 1;
	}
	now = monotonic_ms();
	if (!rc->close_deadline_ms) {
		rc->close_deadline_ms = now + CLOSE_WAIT_MS;
		return 0;
	}
	if (now < rc->close_deadline_ms)
		return 0;
	log_error("rbio: iser: %s: closing with sends not completed in %d ms\n", rc->peer,
		  CLOSE_WAIT_MS);
	return 1;
}

static size_t tp_close(struct iscsi_connection *conn)
{
	struct rbio_iser_conn *rc = RC(conn);

	if (rc->cq_watched) {
		tgt_event_del(rc->fd);
		rc->cq_watched = 0;
	}
	conn->state = STATE_CLOSE;
	rbio_ping_stop(&rc->ping);
	rbio_iser_ep_disconnect(rc->ep);
	/* As over TCP (pdu_bounds.h): feed() closes a connection whose
	 * receive ended inside its PDU, and the core then still holds that
	 * PDU's task, which may be queued too. */
	rbio_pdu_forget_rx_task_on_lists(conn);
	return 0;
}

static void tp_force_close(struct iscsi_connection *conn)
{
	rbio_pass_force_close(&RC(conn)->pass);
}

static void tp_release(struct iscsi_connection *conn)
{
	struct rbio_iser_conn *rc = RC(conn);
	char counters[512];

	conn_exit(conn);
	rbio_iser_ep_describe(rc->ep, counters, sizeof(counters));
	log_error("rbio: iser: %s: connection ended; %s\n", rc->peer, counters);
	rbio_iser_ep_free(rc->ep); /* destroys the QP and the CM id */
	rbio_data_budget_leave(&rc->budget);
	list_del(&rc->siblings);
	rbio_pass_release(&rc->pass, rc);
	rbio_tp_stats_connection(0);
}

static int sockaddr_copy(const struct sockaddr *src, struct sockaddr *sa, socklen_t *len)
{
	socklen_t n = src->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
						 : sizeof(struct sockaddr_in);

	if (*len < n)
		n = *len;
	memcpy(sa, src, n);
	*len = n;
	return 0;
}

static int tp_getsockname(struct iscsi_connection *conn, struct sockaddr *sa, socklen_t *len)
{
	return sockaddr_copy(rdma_get_local_addr(RC(conn)->id), sa, len);
}

static int tp_getpeername(struct iscsi_connection *conn, struct sockaddr *sa, socklen_t *len)
{
	return sockaddr_copy(rdma_get_peer_addr(RC(conn)->id), sa, len);
}

static int tp_show(struct iscsi_connection *conn, char *buf, int rest)
{
	struct sockaddr *sa = rdma_get_peer_addr(RC(conn)->id);
	char host[INET6_ADDRSTRLEN];
	int n;

	if (getnameinfo(sa,
			sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
						  : sizeof(struct sockaddr_in),
			host, sizeof(host), NULL, 0, NI_NUMERICHOST))
		return 0;
	n = snprintf(buf, rest, "RDMA IP Address: %s", host);
	return n > 0 ? (n < rest ? n : rest - 1) : 0;
}

static struct iscsi_task *tp_alloc_task(struct iscsi_connection *conn, size_t ext_len)
{
	struct rbio_iser_conn *rc = RC(conn);
	size_t size = sizeof(struct iscsi_task) + ext_len;
	struct iser_task_prefix *p = rbio_pool_alloc(task_pool, sizeof(*p) + size);

	if (!p)
		return NULL;
	memset(p, 0, sizeof(*p) + size);
	/* The core allocates a command's task while reading the command. */
	if (rc->rx_len && (rc->rx_bhs[0] & 0x3f) == ISCSI_OP_SCSI_CMD) {
		p->read_valid = rc->adv.read_valid;
		p->read_stag = rc->adv.read_stag;
		p->read_va = rc->adv.read_va;
		p->write_valid = rc->adv.write_valid;
		p->write_stag = rc->adv.write_stag;
		p->write_va = rc->adv.write_va;
	}
	return (struct iscsi_task *)(p + 1);
}

static void tp_free_task(struct iscsi_task *task)
{
	struct iser_task_prefix *p = prefix_of(task);

	/* An RDMA READ may still land in its buffer (deferred by the data
	 * buffer's release); its completion must not reach the task. */
	if (p->read_slot && task->conn)
		RC(task->conn)->reads[p->read_slot - 1].task = NULL;
	rbio_pool_release(p);
}

/*
 * The core allocates a command's data buffer while reading the command
 * (iscsi_alloc_task), then reads its immediate data into the buffer's
 * start. Without AHS that data already lies at the start of the receive's
 * data buffer, so that buffer is the task's: tp_read() finds the data in
 * place and copies nothing. Other PDUs, a second buffer of the same
 * command (bidirectional) or a command larger than the buffer
 * (iser_receive_kib) get one of their own.
 */
static void *tp_alloc_data_buf(struct iscsi_connection *conn, size_t size)
{
	struct rbio_iser_conn *rc = RC(conn);

	if (rc->rx_len > BHS_SIZE && rc->rx_off == BHS_SIZE && rc->rx_bhs != rc->synth_bhs &&
	    (rc->rx_bhs[0] & 0x3f) == ISCSI_OP_SCSI_CMD && rc->rx_bhs[4] == 0) {
		int over;
		void *buf = budgeted_rx_data(rc, size, &over);

		if (buf || over)
			return buf;
	}
	return budgeted_data_buf(rc, size);
}

static void tp_free_data_buf(struct iscsi_connection *conn, void *buf)
{
	rbio_iser_data_free(RC(conn)->ep, buf);
}

static int tp_login_complete(struct iscsi_connection *conn)
{
	/* One Data-In, so one RDMA WRITE, per command: the initiator's
	 * receive size does not apply to data that is RDMA-written. */
	conn->session_param[ISCSI_PARAM_MAX_XMIT_DLENGTH].val = RBIO_ISER_MAX_XMIT;
	rbio_ping_login_complete(&RC(conn)->ping, conn);
	return 0;
}

static void tp_nop_reply(long ttt)
{
	struct rbio_iser_conn *rc;

	list_for_each_entry(rc, &rbio_iser_conns, siblings) rbio_ping_reply(&rc->ping, ttt);
}

static struct iscsi_transport rbio_iser = {
	.name = "iser",
	.rdma = 0,         /* tgt's core drives it like TCP; see the top */
	.data_padding = 1, /* iSER data segments are not padded */
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

/* ---- connection management on tgt's iSER listeners */

static void describe_address(struct sockaddr *sa, uint16_t port, char *out, size_t len)
{
	char host[INET6_ADDRSTRLEN];

	if (getnameinfo(sa,
			sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
						  : sizeof(struct sockaddr_in),
			host, sizeof(host), NULL, 0, NI_NUMERICHOST))
		snprintf(out, len, "unknown address");
	else if (sa->sa_family == AF_INET6)
		snprintf(out, len, "[%s]:%u", host, ntohs(port));
	else
		snprintf(out, len, "%s:%u", host, ntohs(port));
}

/* A connect request: 0 when the connection was set up and accepted; else
 * the id is gone (rejected) or must be rejected by the caller (-1). */
static int on_connect_request(struct rdma_cm_event *ev)
{
	struct rdma_cm_id *id = ev->id;
	struct rbio_iser_conn *rc;
	char err[256];
	int i;

	if (!rbio_tgtd_ready()) /* as on TCP (readiness_gate.h) */
		return -1;
	rc = calloc(1, sizeof(*rc));
	if (!rc)
		return -1;
	describe_address(rdma_get_peer_addr(id), rdma_get_dst_port(id), rc->peer, sizeof(rc->peer));
	describe_address(rdma_get_local_addr(id), rdma_get_src_port(id), rc->portal,
			 sizeof(rc->portal));
	for (i = 0; i < RBIO_ISER_MAX_READS; i++)
		rc->free_reads[i] = (uint16_t)(RBIO_ISER_MAX_READS - 1 - i);
	rc->id = id;
	rc->budget = rbio_data_budget_of_mib(settings.data_budget_mib);
	rc->ep = rbio_iser_ep_new(id, &settings, on_done, rc, err, sizeof(err));
	if (!rc->ep) {
		log_error("rbio: iser: %s: refused: %s\n", rc->peer, err);
		free(rc);
		return 1; /* the id is destroyed already */
	}
	id->context = rc;
	rc->fd = rbio_iser_ep_fd(rc->ep);
	if (conn_init(&rc->iscsi_conn))
		goto fail;
	rc->iscsi_conn.tp = &rbio_iser;
	rbio_pass_init(&rc->pass, &rc->iscsi_conn, conn_pass, rc);
	rbio_rx_quiet_start(&rc->quiet);
	rc->pass.may_close = may_close;
	conn_read_pdu(&rc->iscsi_conn);
	if (rbio_iser_ep_accept(rc->ep, ev->param.conn.responder_resources,
				ev->param.conn.initiator_depth, err, sizeof(err))) {
		log_error("rbio: iser: %s: %s\n", rc->peer, err);
		conn_exit(&rc->iscsi_conn);
		goto fail;
	}
	list_add(&rc->siblings, &rbio_iser_conns);
	rbio_data_budget_join(&rc->budget, close_for_total, rc);
	rbio_tp_stats_connection(1);
	return 0;
fail:
	id->context = NULL;
	rbio_iser_ep_free(rc->ep); /* destroying the id rejects the request */
	free(rc);
	return 1;
}

/* The initiator's RTU has reached the CM: its messages may be read now. */
static void on_established(struct rbio_iser_conn *rc)
{
	if (rc->iscsi_conn.closed) {
		/* closed before (tgtadm): the disconnect then was skipped */
		rbio_iser_ep_disconnect(rc->ep);
		return;
	}
	if (rc->iscsi_conn.state == STATE_CLOSE)
		return; /* its pass closes it, and can disconnect now */
	if (tgt_event_add(rc->fd, EPOLLIN, cq_event_handler, rc)) {
		conn_fail(rc, "its completion channel cannot be watched");
		rbio_pass_schedule_if_due(&rc->pass);
		return;
	}
	rc->cq_watched = 1;
}

static void cm_handler(int fd, int events, void *data)
{
	struct rdma_cm_event *ev;

	(void)fd;
	(void)events;
	(void)data;
	while (rdma_get_cm_event(cm_channel, &ev) == 0) {
		/* Acknowledged first: destroying an id whose event is not
		 * acknowledged waits for ever. What is used is copied. */
		struct rdma_cm_event copy = *ev;
		struct rbio_iser_conn *rc = copy.id ? copy.id->context : NULL;

		rdma_ack_cm_event(ev);
		if (copy.event == RDMA_CM_EVENT_CONNECT_REQUEST) {
			if (on_connect_request(&copy) < 0) {
				rdma_reject(copy.id, NULL, 0);
				rdma_destroy_id(copy.id);
			}
			continue;
		}
		if (!rc)
			continue;
		switch (copy.event) {
		case RDMA_CM_EVENT_ESTABLISHED:
			on_established(rc);
			break;
		case RDMA_CM_EVENT_DISCONNECTED:
		case RDMA_CM_EVENT_CONNECT_ERROR:
		case RDMA_CM_EVENT_UNREACHABLE:
		case RDMA_CM_EVENT_REJECTED:
		case RDMA_CM_EVENT_DEVICE_REMOVAL:
			if (rc->iscsi_conn.state != STATE_CLOSE)
				log_error("rbio: iser: %s: %s\n", rc->peer,
					  rdma_event_str(copy.event));
			rc->iscsi_conn.state = STATE_CLOSE;
			rc->peer_gone = 1; /* nothing sent now reaches it */
			rbio_pass_schedule_if_due(&rc->pass);
			break;
		default:
			break;
		}
	}
}

/* Moves the CM channel of tgt's iSER listeners to cm_handler. */
static int take_over_listeners(void)
{
	struct iser_portal *p;
	int flags, n = 0;

	list_for_each_entry(p, &iser_portals_list, iser_portal_siblings)
	{
		if (!p->cma_listen_id || !p->cma_listen_id->channel)
			continue;
		if (!cm_channel)
			cm_channel = p->cma_listen_id->channel;
		else if (cm_channel != p->cma_listen_id->channel)
			continue; /* tgt uses one channel for all */
		n++;
	}
	if (!cm_channel)
		return 0;
	flags = fcntl(cm_channel->fd, F_GETFL);
	if (flags < 0 || fcntl(cm_channel->fd, F_SETFL, flags | O_NONBLOCK) < 0)
		return -1;
	tgt_event_del(cm_channel->fd);
	if (tgt_event_add(cm_channel->fd, EPOLLIN, cm_handler, NULL))
		return -1;
	return n;
}

static int (*stock_iser_target_create)(struct target *);

/* tgt's iser driver creates its targets with ImmediateData=No, so every
 * write, however small, waits for an RDMA READ round trip. This transport
 * takes immediate data (up to RBIO_ISER_RECV_DATA_MAX per command), so its
 * targets start with tgt's usual Yes; `tgtadm --op update` (and
 * targets.conf) can still turn it off. */
static int iser_target_create(struct target *t)
{
	struct iscsi_target *target;
	int err = stock_iser_target_create(t);

	if (err)
		return err;
	target = target_find_by_id(t->tid);
	if (target)
		target->session_param[ISCSI_PARAM_IMM_DATA_EN].val = 1;
	return 0;
}

/* With tgt's own iSER out of the path, its driver's completion callbacks
 * would treat the core's tasks as its own: `--lld iser` targets complete
 * through the iSCSI core's callbacks instead. */
static int redirect_iser_driver(void)
{
	int iser = get_driver_index("iser"), iscsi = get_driver_index("iscsi");

	if (iser < 0 || iscsi < 0 || !tgt_drivers[iser] || !tgt_drivers[iscsi])
		return -1; /* checked before the takeover */
	tgt_drivers[iser]->cmd_end_notify = tgt_drivers[iscsi]->cmd_end_notify;
	tgt_drivers[iser]->mgmt_end_notify = tgt_drivers[iscsi]->mgmt_end_notify;
	if (tgt_drivers[iser]->target_create) {
		stock_iser_target_create = tgt_drivers[iser]->target_create;
		tgt_drivers[iser]->target_create = iser_target_create;
	}
	return 0;
}

/* Once a second: the connections' counters go into the process totals,
 * which the statistics file (written by stats_tick.c) shows, a
 * connection that has been quiet since the last tick gets its unsignalled
 * sends covered, so the buffers they hold come back, and is probed when
 * idle or given up when its work gets no completion (quiet_tick), and
 * NOP-In pings go out where the target asks for them (conn_ping.h). */
static struct tgt_work tick_work;

/* A quiet second: cover, probe, or (work outstanding, no completion) reap
 * and then give up; the pass it schedules does that, so rc stays valid in
 * the tick's walk of the list. */
static void quiet_tick(struct rbio_iser_conn *rc)
{
	char why[160];

	switch (rbio_iser_ep_quiet_tick(rc->ep, why, sizeof(why))) {
	case RBIO_ISER_QUIET_REAP:
		rc->reap_due = 1;
		tgt_add_sched_event(&rc->pass.ev);
		break;
	case RBIO_ISER_QUIET_END:
		conn_fail(rc, why);
		rbio_pass_schedule_if_due(&rc->pass);
		break;
	default:
		break;
	}
}

static void tick(void *data)
{
	struct rbio_iser_conn *rc;
	char why[96];

	(void)data;
	list_for_each_entry(rc, &rbio_iser_conns, siblings)
	{
		if (rbio_ping_tick(&rc->ping, &rc->iscsi_conn, why, sizeof(why)) ==
		    RBIO_PING_UNANSWERED) {
			/* a scheduled pass closes it: rc stays valid here */
			conn_fail(rc, why);
			rbio_pass_schedule_if_due(&rc->pass);
		}
		if (!rc->passes_since_tick && rc->cq_watched && rc->iscsi_conn.state != STATE_CLOSE)
			quiet_tick(rc);
		/* a close waiting for its sends: a pass asks again */
		if (rc->close_deadline_ms && !rc->iscsi_conn.closed)
			rbio_pass_schedule_if_due(&rc->pass);
		rc->passes_since_tick = 0;
		rbio_iser_ep_publish(rc->ep);
	}
	add_work(&tick_work, 1);
}

void rbio_iscsi_iser_metrics(struct rbio_metrics *m)
{
	struct rbio_iser_conn *rc;
	uint64_t counters[RBIO_METRICS_CONN_COUNTERS];
	size_t n;

	list_for_each_entry(rc, &rbio_iser_conns, siblings)
	{
		n = rbio_iser_ep_counters(rc->ep, counters, RBIO_METRICS_CONN_COUNTERS);
		rbio_metrics_add_iscsi_conn(m, &rc->iscsi_conn, RBIO_METRICS_ISER, rc->portal,
					    rc->peer, counters, n, rc->budget.held);
	}
}

void rbio_iscsi_iser_start(void)
{
	const struct rbio_tp_settings *s = rbio_glue_settings(NULL, 0);
	char err[1024];
	int n;

	if (!s)
		return; /* the TCP transport logged why */
	settings = *s;
	if (!settings.enabled || !settings.iser) {
		log_error("rbio: iser: transport off; iSER stays with tgt's driver\n");
		return;
	}
	if (list_empty(&iser_portals_list)) {
		log_error("rbio: iser: tgt's iSER is not listening (no RDMA device?); "
			  "nothing to take over\n");
		return;
	}
	if (!rbio_tgtd_build_matches("iser", "iSER portals"))
		return;
	if (get_driver_index("iser") < 0 || get_driver_index("iscsi") < 0) {
		log_error(
			"rbio: iser: tgt's iser or iscsi driver not found; iSER stays with tgt\n");
		return;
	}
	task_pool = rbio_pool_new(&task_pool_config, err, sizeof(err));
	if (!task_pool) {
		log_error("rbio: iser: %s; iSER stays with tgt\n", err);
		return;
	}
	n = take_over_listeners();
	if (n <= 0) {
		log_error("rbio: iser: cannot take over tgt's iSER listeners: %s\n",
			  n < 0 ? strerror(errno) : "none found");
		return;
	}
	redirect_iser_driver();
	iscsi_transport_register(&rbio_iser);
	tick_work.func = tick;
	tick_work.data = NULL;
	add_work(&tick_work, 1);
	log_error("rbio: iser: %d iSER listener(s) served by rbio's transport "
		  "(batching %s, selective signalling %s)\n",
		  n, settings.coalesce ? "on" : "off", settings.coalesce ? "on" : "off");
}
