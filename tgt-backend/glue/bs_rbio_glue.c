/*
 * The rbio backing store as tgtd sees it: a backingstore_template named
 * "rbio" (and "rbio_rbd", see below) registered from register_bs_module(), which tgtd calls after
 * it dlopen()s every module in its backing-store folder.
 *
 * This is one of the few files that include tgt's (version-specific, C)
 * headers. It only translates: scsi_cmd -> rbio_bs_cmd on the way in,
 * rbio_bs_result -> status and sense on the way out, and wires the engine's
 * eventfd and end-of-pass flush into tgtd's own event loop.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>

#include "list.h"
#include "util.h"
#include "tgtd.h"
#include "scsi.h"
#include "spc.h"
#include "target.h"

#include "rbio/bs/c_api.h"
#include "rbio/version.h"
#include "alua_glue.h"
#include "conn_pass.h"
#include "iscsi_iser_glue.h"
#include "iscsi_tcp_glue.h"
#include "metrics_glue.h"
#include "rx_quiet.h"
#include "stale_sessions.h"

#define RBIO_EXPORT __attribute__((visibility("default")))

#ifndef RBIO_TGT_VERSION
#define RBIO_TGT_VERSION "unknown"
#endif

struct rbio_lu_priv {
	struct rbio_bs_lu *engine;
	struct scsi_lu *lu;
	struct event_data flush_ev; /* end-of-pass flush, once per pass */
	int event_fd;
	int opened; /* the backing store opened at least once */
	struct rbio_alua_lu alua;
	struct list_head siblings;        /* rbio_lus, for the metrics */
	struct rbio_stale_sessions stale; /* sessions of a fenced RBD client */
	uint32_t quiet_limit_s;           /* rbd_quiet_s of an RBD LU, or 0: off */
};

static LIST_HEAD(rbio_lus);

static struct rbio_lu_priv *rbio_priv(struct scsi_lu *lu)
{
	/* tgt allocates bs_datasize bytes right behind the scsi_lu */
	return (struct rbio_lu_priv *)((char *)lu + sizeof(*lu));
}

struct rbio_alua_lu *rbio_lu_alua(struct scsi_lu *lu)
{
	return &rbio_priv(lu)->alua;
}

int rbio_lu_fenced(struct scsi_lu *lu)
{
	struct rbio_lu_priv *priv = rbio_priv(lu);

	return priv->engine && priv->opened && rbio_bs_lu_fenced(priv->engine);
}

/* tgt's abort_cmd marks a command the store already has with the task
 * management request that waits for it. */
static int rbio_aborting(void *ctx, void *handle)
{
	const struct scsi_cmd *cmd = handle;
	(void)ctx;

	return cmd->mreq != NULL;
}

static void rbio_complete(void *ctx, void *handle, const struct rbio_bs_result *res)
{
	struct scsi_cmd *cmd = handle;
	(void)ctx;

	if (res->status == SAM_STAT_TASK_ABORTED) {
		scsi_set_in_resid_by_actual(cmd, 0);
		target_cmd_io_done(cmd, SAM_STAT_TASK_ABORTED);
		return;
	}

	if (res->status == SAM_STAT_GOOD) {
		/* tgt 1.0.85's sbc_unmap runs on into its failure path after
		 * handing the command to the store: it leaves sense (05/25/00)
		 * and the whole parameter list as residual on the command,
		 * which a GOOD response would carry. */
		if (cmd->scb[0] == UNMAP) {
			cmd->sense_len = 0;
			scsi_set_out_resid_by_actual(cmd, scsi_get_out_length(cmd));
		}
		target_cmd_io_done(cmd, SAM_STAT_GOOD);
		return;
	}
	/* No Data-In with an error: the buffer may hold nothing of this
	 * command's (a read that failed) but whatever it last carried, which
	 * may be another initiator's data (the transport pools buffers). */
	if (scsi_get_data_dir(cmd) == DATA_READ)
		scsi_set_in_resid_by_actual(cmd, 0);
	if (res->has_info)
		sense_data_build_with_info(cmd, res->sense_key, res->asc, res->info);
	else
		sense_data_build(cmd, res->sense_key, res->asc);
	target_cmd_io_done(cmd, res->status);
}

static void rbio_flush_handler(struct event_data *ev)
{
	struct rbio_lu_priv *priv = ev->data;

	/* Commands done in this flush (inline I/O, or io_uring completions
	 * reaped right after submitting) send their responses now, not after
	 * another turn of tgtd's loop (conn_pass.h). */
	rbio_pass_defer_begin();
	rbio_bs_flush(priv->engine);
	rbio_pass_defer_end();
}

static void rbio_request_flush(void *ctx)
{
	struct rbio_lu_priv *priv = ctx;

	tgt_add_sched_event(&priv->flush_ev);
}

static void rbio_log(void *ctx, int level, const char *msg)
{
	struct rbio_lu_priv *priv = ctx;
	int tid = priv && priv->lu && priv->lu->tgt ? priv->lu->tgt->tid : -1;
	uint64_t lun = priv && priv->lu ? priv->lu->lun : 0;

	if (level == RBIO_BS_LOG_DEBUG) {
		if (is_debug)
			log_debug("rbio: tid:%d lun:%" PRIu64 ": %s\n", tid, lun, msg);
		return;
	}
	log_error("rbio: tid:%d lun:%" PRIu64 ": %s\n", tid, lun, msg);
}

#define ASC_CAPACITY_DATA_HAS_CHANGED 0x2a09

/* The RBD image under the LU was resized: READ CAPACITY answers from
 * lu->size, and every I_T nexus gets a unit attention so hosts look again
 * (Linux rescans the disk on it), without restarting anything. */
static void rbio_capacity_changed(void *ctx, uint64_t bytes)
{
	struct rbio_lu_priv *priv = ctx;
	struct scsi_lu *lu = priv->lu;

	log_error("rbio: tid:%d lun:%" PRIu64 ": capacity %" PRIu64 " -> %" PRIu64
		  " bytes; hosts are told (unit attention 2A/09)\n",
		  lu->tgt->tid, lu->lun, lu->size, bytes);
	lu->size = bytes;
	ua_sense_add_other_it_nexus(0, lu, ASC_CAPACITY_DATA_HAS_CHANGED);
}

static void rbio_refresh_vpd(struct scsi_lu *lu, int page)
{
	struct vpd *vpd = lu->attrs.lu_vpd[PCODE_OFFSET(page)];

	if (vpd && vpd->vpd_update)
		vpd->vpd_update(lu, NULL);
}

/* COMPARE AND WRITE reaches this LU's store (rbio_enable_compare_and_write,
 * rbio_settle_compare_and_write). */
static int rbio_lu_compare_and_write(struct scsi_lu *lu)
{
	return lu->dev_type_template.ops[COMPARE_AND_WRITE].cmd_perform != spc_illegal_op;
}

/* The MAXIMUM COMPARE AND WRITE LENGTH hosts are told (at most 128). */
static uint32_t rbio_max_compare_and_write(struct scsi_lu *lu)
{
	struct rbio_lu_priv *priv = rbio_priv(lu);

	if (!rbio_lu_compare_and_write(lu))
		return 0;
	if (!priv->opened || !priv->engine)
		return RBIO_BS_MAX_COMPARE_AND_WRITE_BLOCKS;
	return rbio_bs_lu_max_compare_and_write(priv->engine, lu->blk_shift);
}

/* tgt's own filler of the Block Limits page (static in spc.c; the same
 * for every LU), which rbio_update_vpd_b0 calls first. */
static void (*tgt_update_vpd_b0)(struct scsi_lu *lu, void *id);

/* The Block Limits page as tgt fills it (tgt keeps it without its 4-byte
 * header), with two of its fields made true for an rbio LU:
 * - MAXIMUM COMPARE AND WRITE LENGTH (byte 5): what the store takes, or 0
 *   where the command is refused (tgt's page claims 128 blocks on every LU,
 *   and hosts read a number as support: VMware's ATS);
 * - MAXIMUM UNMAP BLOCK DESCRIPTOR COUNT (byte 24) on a thin LU: tgt fills
 *   the page again whenever tgtadm sets thin_provisioning (tgt-admin does,
 *   for targets.conf's params), and its "no limit" there would advertise
 *   lists the engine refuses. */
static void rbio_update_vpd_b0(struct scsi_lu *lu, void *id)
{
	struct vpd *vpd = lu->attrs.lu_vpd[PCODE_OFFSET(0xb0)];

	if (tgt_update_vpd_b0)
		tgt_update_vpd_b0(lu, id);
	if (!vpd)
		return;
	if (vpd->size >= 2)
		vpd->data[1] = (uint8_t)rbio_max_compare_and_write(lu);
	if (lu->attrs.thinprovisioning && vpd->size >= 24)
		put_unaligned_be32(RBIO_BS_MAX_UNMAP_DESCRIPTORS, vpd->data + 20);
}

static void rbio_hook_vpd_b0(struct scsi_lu *lu)
{
	struct vpd *vpd = lu->attrs.lu_vpd[PCODE_OFFSET(0xb0)];

	if (!vpd || !vpd->vpd_update || vpd->vpd_update == rbio_update_vpd_b0)
		return;
	if (!tgt_update_vpd_b0)
		tgt_update_vpd_b0 = vpd->vpd_update;
	if (vpd->vpd_update == tgt_update_vpd_b0)
		vpd->vpd_update = rbio_update_vpd_b0;
}

/* tgt 1.0.85 refuses COMPARE AND WRITE on every LU: its command table maps
 * 89h to spc_illegal_op, the SBC code that would run it (sbc_rw, which
 * checks and passes on COMPARE AND WRITE) left commented out, since stock
 * stores could not run it atomically. rbio's store can, so an rbio LU's
 * own copy of the table routes 89h to sbc_rw as WRITE(16) is, with a
 * write's reservation rules: at init on an LU of one gateway (ALUA not
 * attached), and rbio_settle_compare_and_write decides again once the store
 * is open. */
static void rbio_enable_compare_and_write(struct scsi_lu *lu, struct rbio_alua_lu *al)
{
	struct device_type_operations *ops = lu->dev_type_template.ops;

	if (ops[COMPARE_AND_WRITE].cmd_perform != spc_illegal_op || !ops[WRITE_16].cmd_perform ||
	    ops[WRITE_16].cmd_perform == spc_illegal_op)
		return;
	/* With ALUA attached, WRITE(16)'s entry is ALUA's check, which then
	 * calls what it wrapped: CAW gets the same check and tgt's sbc_rw. */
	if (al->attached) {
		if (!al->orig[WRITE_16] || al->orig[WRITE_16] == spc_illegal_op)
			return;
		al->orig[COMPARE_AND_WRITE] = al->orig[WRITE_16];
	}
	ops[COMPARE_AND_WRITE].cmd_perform = ops[WRITE_16].cmd_perform;
	ops[COMPARE_AND_WRITE].pr_conflict_bits = ops[WRITE_16].pr_conflict_bits;
}

/* tgt 1.0.85's sbc_verify, from the first LU table it is found in. */
static int (*tgt_sbc_verify)(int host_no, struct scsi_cmd *cmd);

/* tgt 1.0.85 answers VERIFY with BYTCHK 00b (verify the medium) GOOD in its
 * core without reading anything, and takes the reserved 10b for 00b (it
 * tests one bit): a scan for bad blocks (sg_verify) passed over them. An
 * rbio LU's table sends those to the store, which reads every block back
 * (MEDIUM ERROR on the first it cannot read) and refuses 10b; 01b and 11b
 * (data to compare) go through tgt's checks as before. */
static int rbio_verify(int host_no, struct scsi_cmd *cmd)
{
	struct scsi_lu *lu = cmd->dev;
	const uint64_t blocks_in_lu = lu->size >> lu->blk_shift;
	unsigned char key = ILLEGAL_REQUEST;
	uint16_t asc = ASC_INVALID_FIELD_IN_CDB;
	uint64_t lba;

	if (cmd->scb[1] & 0x02)
		return tgt_sbc_verify(host_no, cmd);
	if (lu->attrs.removable && !lu->attrs.online) {
		key = NOT_READY;
		asc = ASC_MEDIUM_NOT_PRESENT;
		goto sense;
	}
	if (cmd->scb[1] & 0xe0) /* protection information: tgt has none */
		goto sense;
	lba = scsi_rw_offset(cmd->scb);
	if (lba >= blocks_in_lu || scsi_rw_count(cmd->scb) > blocks_in_lu - lba) {
		asc = ASC_LBA_OUT_OF_RANGE;
		goto sense;
	}
	cmd->offset = lba << lu->blk_shift;
	if (lu->bst->bs_cmd_submit(cmd)) {
		key = HARDWARE_ERROR;
		asc = ASC_INTERNAL_TGT_FAILURE;
		goto sense;
	}
	return SAM_STAT_GOOD;
sense:
	scsi_set_in_resid_by_actual(cmd, 0);
	sense_data_build(cmd, key, asc);
	return SAM_STAT_CHECK_CONDITION;
}

/* A disk LU's VERIFY entries (or, with ALUA attached, what its check
 * calls) become rbio_verify where they are tgt's sbc_verify. (Other device
 * types map those opcodes to other functions.) */
static void rbio_route_verify(struct scsi_lu *lu, struct rbio_alua_lu *al)
{
	static const int verify_ops[] = { VERIFY_10, VERIFY_12, VERIFY_16 };
	size_t i;

	if (lu->dev_type_template.type != TYPE_DISK)
		return;
	for (i = 0; i < sizeof(verify_ops) / sizeof(verify_ops[0]); i++) {
		const int op = verify_ops[i];
		int (**slot)(int, struct scsi_cmd *) =
			al->attached ? &al->orig[op] : &lu->dev_type_template.ops[op].cmd_perform;

		if (!*slot || *slot == rbio_verify || *slot == spc_illegal_op)
			continue;
		if (!tgt_sbc_verify)
			tgt_sbc_verify = *slot;
		if (*slot == tgt_sbc_verify)
			*slot = rbio_verify;
	}
}

/* Once the store is open, COMPARE AND WRITE runs
 * - on a file, on an LU of one gateway: the store runs it alone on the LU;
 * - on RBD with 512-byte blocks, on any LU: librbd compares and writes one
 *   sector atomically in the OSD, so across gateways too (the ALUA check
 *   lets it through there: atomic_caw);
 * and is refused again, as tgt refuses it (INVALID COMMAND OPERATION CODE;
 * REPORT SUPPORTED OPERATION CODES does not list it among all commands,
 * though asked for 89h alone tgt 1.0.85 still answers supported):
 * - on a multi-gateway LU on a file: atomic within this tgtd only, not
 *   against writes through another gateway;
 * - on RBD with larger blocks: librbd takes one 512-byte sector at most. */
static void rbio_settle_compare_and_write(struct scsi_lu *lu, struct rbio_lu_priv *priv)
{
	struct device_type_operations *ops = &lu->dev_type_template.ops[COMPARE_AND_WRITE];
	int rbd = rbio_bs_lu_rbd(priv->engine);

	if ((rbd || !priv->alua.attached) &&
	    rbio_bs_lu_max_compare_and_write(priv->engine, lu->blk_shift)) {
		rbio_enable_compare_and_write(lu, &priv->alua);
	} else if (ops->cmd_perform != spc_illegal_op) {
		ops->cmd_perform = spc_illegal_op;
		ops->pr_conflict_bits = 0; /* refused before any reservation check */
	}
}

static void rbio_event_handler(int fd, int events, void *data)
{
	struct rbio_lu_priv *priv = data;
	(void)fd;
	(void)events;

	rbio_bs_on_event(priv->engine);
}

static int rbio_fenced(void *ctx)
{
	struct rbio_lu_priv *priv = ctx;

	return rbio_stale_sessions_take(&priv->stale, priv->lu->tgt);
}

static tgtadm_err rbio_init(struct scsi_lu *lu, char *bsopts)
{
	struct rbio_lu_priv *priv = rbio_priv(lu);
	struct rbio_bs_hooks hooks;
	char err[512];

	memset(priv, 0, sizeof(*priv));
	priv->lu = lu;
	priv->event_fd = -1;
	hooks.ctx = priv;
	hooks.complete = rbio_complete;
	hooks.request_flush = rbio_request_flush;
	hooks.log = rbio_log;
	hooks.capacity_changed = rbio_capacity_changed;
	hooks.aborting = rbio_aborting;
	hooks.fenced = rbio_fenced;

	if (rbio_alua_glue_lu_init(lu, &priv->alua))
		return TGTADM_INVALID_REQUEST;
	if (!priv->alua.attached)
		rbio_enable_compare_and_write(lu, &priv->alua);
	rbio_route_verify(lu, &priv->alua);
	if (rbio_bs_lu_create(bsopts, &hooks, &priv->engine, err, sizeof(err))) {
		log_error("rbio: tid:%d lun:%" PRIu64 ": %s\n", lu->tgt->tid, lu->lun, err);
		rbio_alua_glue_lu_exit(&priv->alua);
		return TGTADM_INVALID_REQUEST;
	}
	tgt_init_sched_event(&priv->flush_ev, rbio_flush_handler, priv);

	/* Level-triggered, never EPOLLET: when a handler removes a watched fd
	 * (tgt_event_del, e.g. a connection closing), tgtd's event_loop
	 * discards the rest of that epoll_wait batch. An edge-triggered
	 * wake-up discarded that way is never reported again, and commands
	 * whose completions sit in the ring hang until the LU gets new work
	 * (seen as a stalled initiator in integration.hostile-input). The
	 * engine resets the eventfd on each wake-up, so it stays readable only
	 * while completions wait. */
	priv->event_fd = rbio_bs_lu_event_fd(priv->engine);
	if (tgt_event_add(priv->event_fd, EPOLLIN, rbio_event_handler, priv)) {
		log_error("rbio: tid:%d lun:%" PRIu64 ": cannot watch the completion eventfd\n",
			  lu->tgt->tid, lu->lun);
		rbio_bs_lu_destroy(priv->engine);
		priv->engine = NULL;
		rbio_alua_glue_lu_exit(&priv->alua);
		return TGTADM_UNKNOWN_ERR;
	}

	/* tgt filled the Block Limits (B0h) and Logical Block Provisioning
	 * (B2h) VPD pages in lu_init, before this; refresh them as tgtadm's
	 * thin_provisioning=1 would, so initiators see LBPU/LBPWS and the
	 * UNMAP limits, and B0h with rbio's fields on every LU. */
	rbio_hook_vpd_b0(lu);
	if (rbio_bs_lu_thin(priv->engine))
		lu->attrs.thinprovisioning = 1;
	rbio_refresh_vpd(lu, 0xb0);
	if (lu->attrs.thinprovisioning)
		rbio_refresh_vpd(lu, 0xb2);

	list_add_tail(&priv->siblings, &rbio_lus);
	dprintf("rbio: tid:%d lun:%" PRIu64 " ready (bsopts %s)\n", lu->tgt->tid, lu->lun,
		bsopts ? bsopts : "default");
	return TGTADM_SUCCESS;
}

static void rbio_exit(struct scsi_lu *lu)
{
	struct rbio_lu_priv *priv = rbio_priv(lu);
	char stats[512];

	rbio_alua_glue_lu_exit(&priv->alua);
	if (!priv->engine)
		return;
	list_del(&priv->siblings);
	tgt_remove_sched_event(&priv->flush_ev);
	tgt_event_del(priv->event_fd);
	/* An LU whose backing store never opened (refused with its reason
	 * logged) has no counters worth a line. */
	if (priv->opened) {
		rbio_bs_lu_stats(priv->engine, stats, sizeof(stats));
		log_error("rbio: tid:%d lun:%" PRIu64 ": removed; %s\n", lu->tgt->tid, lu->lun,
			  stats);
	}
	rbio_bs_lu_destroy(priv->engine);
	priv->engine = NULL;
	rbio_stale_sessions_free(&priv->stale);
}

void rbio_bs_glue_metrics(struct rbio_metrics *m)
{
	struct rbio_lu_priv *priv;
	struct rbio_bs_counters counters;

	list_for_each_entry(priv, &rbio_lus, siblings)
	{
		struct rbio_metrics_lu lu = {
			.target = priv->lu->tgt->name,
			.lun = priv->lu->lun,
			.backing_store = priv->lu->bst ? priv->lu->bst->bs_name : NULL,
			.path = priv->lu->path,
			.size_bytes = priv->lu->size,
		};

		rbio_bs_lu_counters(priv->engine, &counters);
		rbio_metrics_add_lu(m, &lu, &counters);
	}
}

static int rbio_open(struct scsi_lu *lu, char *path, int *fd, uint64_t *size)
{
	struct rbio_lu_priv *priv = rbio_priv(lu);
	char err[512];
	uint32_t blksize = 0;
	int readonly = 0;

	if (rbio_bs_lu_open(priv->engine, path, lu->bsoflags, fd, size, &blksize, &readonly, err,
			    sizeof(err))) {
		log_error("rbio: tid:%d lun:%" PRIu64 ": %s\n", lu->tgt->tid, lu->lun, err);
		return -1;
	}
	/* An RBD image (no fd) is shared storage by design, read and written
	 * with librbd's cache off: nothing to check for several gateways. */
	if (*fd >= 0 && rbio_alua_glue_check_backing(lu, *fd))
		return -1;
	priv->opened = 1;
	priv->quiet_limit_s = rbio_bs_lu_rbd_quiet_s(priv->engine);
	priv->alua.atomic_caw = rbio_bs_lu_rbd(priv->engine);
	rbio_settle_compare_and_write(lu, priv);
	rbio_refresh_vpd(lu, 0xb0); /* COMPARE AND WRITE's length, now the store is known */
	if (readonly)
		lu->attrs.readonly = 1;
	if (!lu->attrs.no_auto_lbppbe)
		update_lbppbe(lu, (int)blksize);
	return 0;
}

static void rbio_close(struct scsi_lu *lu)
{
	struct rbio_lu_priv *priv = rbio_priv(lu);

	if (priv->engine)
		rbio_bs_lu_close(priv->engine);
}

/*
 * rbd_quiet_s (rx_quiet.h): a write on a connection that was silent that
 * long and not heard from since may be one its host gave up on and wrote
 * through another gateway, with newer data after it: it must not land,
 * whether this gateway owns the image's lock now or would take it over for
 * it. Its session is ended instead (a live host logs in again and sends it
 * again), and its later commands are refused as a fenced client's are.
 * 1 when cmd is to be refused.
 */
static int ends_quiet_session(struct rbio_lu_priv *priv, struct scsi_cmd *cmd,
			      const struct rbio_bs_cmd *c)
{
	struct scsi_lu *lu = priv->lu;
	uint32_t quiet = rbio_rx_quiet_of_cmd(cmd);

	if (quiet < priv->quiet_limit_s || !rbio_bs_ends_quiet_session(priv->engine, c))
		return 0;
	log_error("rbio: tid:%d lun:%" PRIu64
		  ": a write (opcode 0x%02x) to the RBD image came on a "
		  "connection that had heard nothing from its host for %" PRIu32
		  " s (rbd_quiet_s=%" PRIu32 "): ending its session (I_T nexus %" PRIu64
		  "), since its host may have given the write up and written through another "
		  "gateway since\n",
		  lu->tgt->tid, lu->lun, cmd->scb[0], quiet, priv->quiet_limit_s, cmd->cmd_itn_id);
	if (rbio_stale_sessions_add(&priv->stale, cmd->it_nexus))
		log_error("rbio: tid:%d lun:%" PRIu64 ": no memory to end I_T nexus %" PRIu64
			  "; its command is refused\n",
			  lu->tgt->tid, lu->lun, cmd->cmd_itn_id);
	return 1;
}

static int rbio_cmd_submit(struct scsi_cmd *cmd)
{
	struct scsi_lu *lu = cmd->dev;
	struct rbio_lu_priv *priv = rbio_priv(lu);
	struct rbio_bs_cmd c;

	c.cmd = cmd;
	c.cdb = cmd->scb;
	c.cdb_len = (uint32_t)cmd->scb_len;
	c.offset = cmd->offset;
	c.transfer = cmd->tl;
	c.in_buf = scsi_get_in_buffer(cmd);
	c.in_len = scsi_get_in_length(cmd);
	c.out_buf = scsi_get_out_buffer(cmd);
	c.out_len = scsi_get_out_length(cmd);
	c.lu_size = lu->size;
	c.block_shift = lu->blk_shift;
	c.thin = lu->attrs.thinprovisioning ? 1 : 0;
	c.write_cache = 1;
	if (!c.in_len) {
		/* Every command but a read: writes, and also WRITE SAME without
		 * a data-out buffer, which tgt lets through and which writes.
		 * WCE can change at any time through MODE SELECT; without the
		 * caching page, assume no cache and make writes durable. */
		struct mode_pg *pg = find_mode_page(lu, 0x08, 0);

		c.write_cache = pg ? !!(pg->mode_data[0] & 0x04) : 0;
	}

	/* tgt's core gives a command no buffer when its Expected Data Transfer
	 * Length is 2 GiB or more (it sizes buffers in an int); rbio's
	 * transports close such connections, tgt's own does not. Nothing to
	 * read into (librbd would write through the NULL) or write from. */
	if ((c.in_len && !c.in_buf) || (c.out_len && !c.out_buf))
		return EIO;
	set_cmd_async(cmd);
	if ((priv->stale.n &&
	     rbio_stale_sessions_has(&priv->stale, lu->tgt->tid, cmd->cmd_itn_id)) ||
	    (priv->quiet_limit_s && ends_quiet_session(priv, cmd, &c))) {
		/* A session of a fenced client, or one heard from after a long
		 * silence: a write of it may be one its host gave up on and
		 * wrote again elsewhere. */
		if (rbio_bs_refuse(priv->engine, &c)) {
			clear_cmd_async(cmd);
			return EIO;
		}
		return 0;
	}
	if (rbio_bs_submit(priv->engine, &c)) {
		clear_cmd_async(cmd);
		/* EIO: tgt fails the command on any nonzero value except in
		 * SYNCHRONIZE CACHE, which answers GOOD unless it is one of a
		 * few errno values (sbc_sync_cache) -- GOOD for a flush that
		 * never ran. */
		return EIO;
	}
	return 0;
}

#define RBIO_BST_OPS                                                                               \
	.bs_datasize = sizeof(struct rbio_lu_priv), .bs_open = rbio_open, .bs_close = rbio_close,  \
	.bs_init = rbio_init, .bs_exit = rbio_exit, .bs_cmd_submit = rbio_cmd_submit,              \
	.bs_oflags_supported = O_SYNC | O_DIRECT

static struct backingstore_template rbio_bst = {
	.bs_name = "rbio",
	RBIO_BST_OPS,
};

/* The same store under a second name, for RBD images in targets.conf:
 * tgt-admin skips a backing store that is not an existing file unless its
 * bs-type contains "rbd" (as stock "rbd" does). tgtadm takes either name
 * for either kind of path. */
static struct backingstore_template rbio_rbd_bst = {
	.bs_name = "rbio_rbd",
	RBIO_BST_OPS,
};

RBIO_EXPORT void register_bs_module(void)
{
	/* The SBC opcodes tgt routes to a file-backed store: the same set as
	 * stock rdwr, so an rbio LU behaves like an rdwr one to initiators. */
	static unsigned char opcodes[] = {
		ALLOW_MEDIUM_REMOVAL,
		COMPARE_AND_WRITE,
		FORMAT_UNIT,
		INQUIRY,
		MAINT_PROTOCOL_IN,
		MODE_SELECT,
		MODE_SELECT_10,
		MODE_SENSE,
		MODE_SENSE_10,
		ORWRITE_16,
		PERSISTENT_RESERVE_IN,
		PERSISTENT_RESERVE_OUT,
		PRE_FETCH_10,
		PRE_FETCH_16,
		READ_6,
		READ_10,
		READ_12,
		READ_16,
		READ_CAPACITY,
		RELEASE,
		REPORT_LUNS,
		REQUEST_SENSE,
		RESERVE,
		SEND_DIAGNOSTIC,
		SERVICE_ACTION_IN,
		START_STOP,
		SYNCHRONIZE_CACHE,
		SYNCHRONIZE_CACHE_16,
		TEST_UNIT_READY,
		UNMAP,
		VERIFY_10,
		VERIFY_12,
		VERIFY_16,
		WRITE_6,
		WRITE_10,
		WRITE_12,
		WRITE_16,
		WRITE_SAME,
		WRITE_SAME_16,
		WRITE_VERIFY,
		WRITE_VERIFY_12,
		WRITE_VERIFY_16,
	};

	bs_create_opcode_map(&rbio_bst, opcodes, (int)sizeof(opcodes));
	bs_create_opcode_map(&rbio_rbd_bst, opcodes, (int)sizeof(opcodes));
	register_backingstore_template(&rbio_bst);
	register_backingstore_template(&rbio_rbd_bst);
	rbio_alua_glue_start();
	log_error("rbio: version %s, backing store 'rbio' registered (built against tgt %s)\n",
		  RBIO_VERSION, RBIO_TGT_VERSION);
	rbio_iscsi_tcp_start();
	rbio_iscsi_iser_start();
	rbio_metrics_start();
}
