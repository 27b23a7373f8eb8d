/*
 * Implicit ALUA on rbio LUs, wired into stock tgtd.
 *
 * tgt copies the device type's ops table into every LU (lu->dev_type_template
 * = *t in target.c's tgt_device_create, before the backing store's bs_init),
 * so an rbio LU can put its own function in front of each SCSI command
 * without touching any other LU: it refuses what this gateway's asymmetric
 * access state forbids, answers REPORT TARGET PORT GROUPS, sets the TPGS
 * bits of INQUIRY and adds this gateway's target port designators to VPD
 * page 0x83. A tgt timer re-reads the groups file once a second and, when
 * the states change, raises ASYMMETRIC ACCESS STATE CHANGED on every I_T
 * nexus of every rbio LU. The logic is tgt-free C++ behind rbio/bs/alua.h.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdint.h>
#include <string.h>

#include "list.h"
#include "util.h"
#include "tgtd.h"
#include "scsi.h"
#include "spc.h"
#include "target.h"
#include "work.h"

#include "rbio/bs/alua.h"
#include "alua_glue.h"
#include "wire_bytes.h"

#define ASC_ASYMMETRIC_ACCESS_STATE_CHANGED 0x2a06

static struct rbio_alua *gateway; /* NULL: ALUA off */
static int settings_bad;          /* refuse rbio LUs: which group they are in is unknown */
static char settings_error[1024];
static struct rbio_alua_lu *lus; /* rbio LUs with ALUA, for unit attentions */
static struct tgt_work poll_work;

/* How long tgtd's event loop waits for a read of the groups file: a file
 * system that answers does so in well under this; one that does not holds
 * only the reader thread, and no later poll waits until that read returns.
 * At start nothing is served yet, and the first read decides the state. */
#define POLL_WAIT_MS 100
#define FIRST_POLL_WAIT_MS 5000

void rbio_alua_glue_metrics(struct rbio_metrics *m)
{
	if (gateway)
		rbio_alua_add_metrics(gateway, m);
}

static void raise_state_changed(void)
{
	struct rbio_alua_lu *al;
	struct it_nexus_lu_info *itn_lu;

	for (al = lus; al; al = al->next) {
		/* tgt queues every unit attention it is given, and a host
		 * gets them one command at a time: one not yet reported
		 * already says the states changed. */
		list_for_each_entry(itn_lu, &al->lu->lu_itl_info_list, lu_itl_info_siblings)
			ua_sense_clear(itn_lu, ASC_ASYMMETRIC_ACCESS_STATE_CHANGED);
		/* itn_id 0 is no I_T nexus (iSCSI's carry a non-zero TSIH):
		 * every nexus of the LU gets the unit attention. */
		ua_sense_add_other_it_nexus(0, al->lu, ASC_ASYMMETRIC_ACCESS_STATE_CHANGED);
	}
}

static void poll_groups(void *data)
{
	char msg[1024], desc[2048];
	(void)data;

	switch (rbio_alua_poll(gateway, POLL_WAIT_MS, msg, sizeof(msg))) {
	case RBIO_ALUA_CHANGED:
		rbio_alua_describe(gateway, desc, sizeof(desc));
		log_error("rbio: alua: states changed, unit attention raised: %s\n", desc);
		raise_state_changed();
		break;
	case RBIO_ALUA_BAD:
	case RBIO_ALUA_ANSWERING:
		log_error("rbio: alua: %s\n", msg);
		break;
	case RBIO_ALUA_UNCHANGED:
		break;
	}
	add_work(&poll_work, 1);
}

void rbio_alua_glue_start(void)
{
	char msg[1024], desc[2048];

	if (rbio_alua_create(&gateway, settings_error, sizeof(settings_error))) {
		settings_bad = 1;
		log_error("rbio: alua: the ALUA settings cannot be read, so rbio LUs are refused "
			  "until the file is fixed and tgtd restarted (served without them, hosts "
			  "could use a gateway they must not): %s\n",
			  settings_error);
		return;
	}
	if (!gateway)
		return;
	/* The first read of the groups file. What is wrong with it is said
	 * now: later polls speak only when the file changes. */
	if (rbio_alua_poll(gateway, FIRST_POLL_WAIT_MS, msg, sizeof(msg)) == RBIO_ALUA_BAD)
		log_error("rbio: alua: %s\n", msg);
	rbio_alua_describe(gateway, desc, sizeof(desc));
	log_error("rbio: alua: on, %s\n", desc);
	poll_work.func = poll_groups;
	poll_work.data = NULL;
	add_work(&poll_work, 1);
}

static int refuse(struct scsi_cmd *cmd, uint8_t key, uint16_t asc)
{
	if (scsi_get_data_dir(cmd) == DATA_READ)
		scsi_set_in_resid_by_actual(cmd, 0);
	sense_data_build(cmd, key, asc);
	return SAM_STAT_CHECK_CONDITION;
}

static int report_target_port_groups(struct scsi_cmd *cmd, int fenced)
{
	uint32_t alloc = rbio_get_be32(&cmd->scb[6]);
	uint32_t room = scsi_get_in_length(cmd);
	long n;

	if (alloc > room)
		alloc = room;
	n = rbio_alua_rtpg(gateway, cmd->scb, (uint32_t)cmd->scb_len, fenced,
			   scsi_get_in_buffer(cmd), alloc);
	if (n < 0)
		return refuse(cmd, ILLEGAL_REQUEST, ASC_INVALID_FIELD_IN_CDB);
	scsi_set_in_resid_by_actual(cmd, (uint32_t)n < alloc ? (uint32_t)n : alloc);
	return SAM_STAT_GOOD;
}

/* tgt's INQUIRY answer, then the ALUA parts: TPGS in standard data, the
 * target port designators behind tgt's LU designators in page 0x83. */
static int inquiry(int host_no, struct scsi_cmd *cmd, struct rbio_alua_lu *al)
{
	struct scsi_lu *lu = cmd->dev;
	int ret = al->orig[INQUIRY](host_no, cmd);
	uint8_t *buf = scsi_get_in_buffer(cmd);
	uint32_t got = scsi_get_in_transfer_len(cmd);
	uint8_t page[512];
	struct vpd *vpd;
	uint32_t total, alloc, n;

	if (ret != SAM_STAT_GOOD || lu->lun != cmd->dev_id)
		return ret;
	if (!(cmd->scb[1] & 0x01)) {
		if (got > 5)
			buf[5] |= RBIO_ALUA_INQUIRY_TPGS;
		return ret;
	}
	vpd = lu->attrs.lu_vpd[PCODE_OFFSET(0x83)];
	if (cmd->scb[2] != 0x83 || !vpd ||
	    4u + vpd->size + RBIO_ALUA_PORT_DESIGNATORS > sizeof(page))
		return ret;

	page[0] = (uint8_t)(((lu->attrs.qualifier & 0x7) << 5) | (lu->attrs.device_type & 0x1f));
	page[1] = 0x83;
	memcpy(page + 4, vpd->data, vpd->size);
	total = 4u + vpd->size;
	total += (uint32_t)rbio_alua_port_designators(gateway, page + total, sizeof(page) - total);
	put_unaligned_be16((uint16_t)(total - 4), page + 2);

	alloc = get_unaligned_be16(&cmd->scb[3]);
	if (alloc > scsi_get_in_length(cmd))
		alloc = scsi_get_in_length(cmd);
	n = total < alloc ? total : alloc;
	memcpy(buf, page, n);
	scsi_set_in_resid_by_actual(cmd, n);
	return ret;
}

static int alua_cmd_perform(int host_no, struct scsi_cmd *cmd)
{
	struct rbio_alua_lu *al = rbio_lu_alua(cmd->dev);
	uint8_t op = cmd->scb[0], key;
	uint16_t asc;
	/* A fenced RBD client fails every request with 04/0C already; saying
	 * so in REPORT TARGET PORT GROUPS too keeps hosts' multipath (and its
	 * TEST UNIT READY path checker) from taking this path back. */
	int fenced = rbio_lu_fenced(cmd->dev);

	if (rbio_alua_check(gateway, cmd->scb, (uint32_t)cmd->scb_len, al->atomic_caw, fenced, &key,
			    &asc))
		return refuse(cmd, key, asc);
	if (op == INQUIRY)
		return inquiry(host_no, cmd, al);
	if (rbio_alua_is_rtpg(cmd->scb, (uint32_t)cmd->scb_len))
		return report_target_port_groups(cmd, fenced);
	if (!al->orig[op])
		return refuse(cmd, ILLEGAL_REQUEST, ASC_INVALID_OP_CODE);
	return al->orig[op](host_no, cmd);
}

int rbio_alua_glue_lu_init(struct scsi_lu *lu, struct rbio_alua_lu *al)
{
	int op;

	memset(al, 0, sizeof(*al));
	if (settings_bad) {
		log_error("rbio: tid:%d lun:%" PRIu64
			  ": refused: the ALUA settings cannot be read: %s\n",
			  lu->tgt->tid, lu->lun, settings_error);
		return -1;
	}
	if (!gateway)
		return 0;
	al->lu = lu;
	/* The LU's own copy of tgt's command table. */
	for (op = 0; op < 256; op++) {
		struct device_type_operations *ops = &lu->dev_type_template.ops[op];

		al->orig[op] = ops->cmd_perform;
		/* Refused in every state: refused as tgt refuses what it does not
		 * implement (the same INVALID COMMAND OPERATION CODE), so that
		 * REPORT SUPPORTED OPERATION CODES does not offer it. */
		if (ops->cmd_perform && rbio_alua_refused_everywhere((uint8_t)op)) {
			ops->cmd_perform = spc_illegal_op;
			continue;
		}
		/* ALUA in front of the commands tgt implements (wrapping its
		 * spc_illegal_op would have them listed as supported), and of
		 * MAINTENANCE IN, which carries REPORT TARGET PORT GROUPS. */
		if ((ops->cmd_perform && ops->cmd_perform != spc_illegal_op) ||
		    op == MAINT_PROTOCOL_IN)
			ops->cmd_perform = alua_cmd_perform;
	}
	al->next = lus;
	lus = al;
	al->attached = 1;
	return 0;
}

int rbio_alua_glue_check_backing(struct scsi_lu *lu, int fd)
{
	char err[512];

	if (!gateway || !rbio_alua_backing_check(gateway, fd, lu->bsoflags, err, sizeof(err)))
		return 0;
	log_error("rbio: tid:%d lun:%" PRIu64 ": refused: %s\n", lu->tgt->tid, lu->lun, err);
	return -1;
}

void rbio_alua_glue_lu_exit(struct rbio_alua_lu *al)
{
	struct rbio_alua_lu **p;

	if (!al->attached)
		return;
	for (p = &lus; *p; p = &(*p)->next) {
		if (*p == al) {
			*p = al->next;
			break;
		}
	}
	al->attached = 0;
}
