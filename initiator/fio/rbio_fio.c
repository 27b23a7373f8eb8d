/* fio external ioengine "rbio": fio's I/O over the rbio userspace iSCSI
 * initiator. The only file that includes fio's headers (those of exactly the
 * installed fio, fetched by scripts/fio-headers.sh into .cache/); the
 * session work is in rbio_fio_core.cpp behind a C interface.
 *
 *   fio --ioengine=external:/path/librbio_fio.so --portal=127.0.0.1:3260 \
 *       --target=iqn.2026-11.com.example:disk1 --lun=1 --name=job ...
 *
 * portal=A,B (several gateways of one LU): one session per portal under the
 * initiator's MultipathSession (ALUA states, failover, fail back).
 *
 * ->queue queues a READ(16)/WRITE(16)/SYNCHRONIZE CACHE(10), ->commit sends
 * every queued command with one flush (one sendmsg), ->getevents runs the
 * session's event loop until enough commands completed. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fio.h"
#include "optgroup.h"

#include "rbio_fio_core.h"

#if FIO_IOOPS_VERSION != 31
#error "the rbio engine is written against fio's engine ABI 31 (fio 3.33)"
#endif

struct rbio_fio_options {
	void *pad; /* fio: an option offset of 0 means "none" */
	char *portal;
	char *target;
	unsigned int lun;
	char *initiator_name;
	char *chap_user;
	char *chap_secret;
	char *header_digest;
	char *data_digest;
	unsigned int timeout_ms;
	unsigned int replacement_timeout_ms;
	char *fence;
};

static struct fio_option options[] = {
	{
		.name = "portal",
		.lname = "rbio iSCSI portal",
		.type = FIO_OPT_STR_STORE,
		.off1 = offsetof(struct rbio_fio_options, portal),
		.help = "iSCSI portal HOST[:PORT] (port 3260 by default); several portals of one "
			"LU "
			"separated by commas or spaces: multipath with ALUA, failover and fail "
			"back",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_ISCSI,
	},
	{
		.name = "target",
		.lname = "rbio iSCSI target",
		.type = FIO_OPT_STR_STORE,
		.off1 = offsetof(struct rbio_fio_options, target),
		.help = "iSCSI target name (IQN)",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_ISCSI,
	},
	{
		.name = "lun",
		.lname = "rbio LUN",
		.type = FIO_OPT_INT,
		.off1 = offsetof(struct rbio_fio_options, lun),
		.def = "0",
		.minval = 0,
		.maxval = 16383, /* the largest single-level LUN */
		.help = "logical unit number",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_ISCSI,
	},
	{
		.name = "initiator_name",
		.lname = "rbio initiator name",
		.type = FIO_OPT_STR_STORE,
		.off1 = offsetof(struct rbio_fio_options, initiator_name),
		.help = "iSCSI initiator name (IQN) to log in with",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_ISCSI,
	},
	{
		.name = "chap_user",
		.lname = "rbio CHAP user",
		.type = FIO_OPT_STR_STORE,
		.off1 = offsetof(struct rbio_fio_options, chap_user),
		.help = "one-way CHAP user name (CHAP_N)",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_ISCSI,
	},
	{
		.name = "chap_secret",
		.lname = "rbio CHAP secret",
		.type = FIO_OPT_STR_STORE,
		.off1 = offsetof(struct rbio_fio_options, chap_secret),
		.help = "one-way CHAP secret",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_ISCSI,
	},
	{
		.name = "header_digest",
		.lname = "rbio HeaderDigest",
		.type = FIO_OPT_STR_STORE,
		.off1 = offsetof(struct rbio_fio_options, header_digest),
		.help = "none, accept (default), prefer or crc32c",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_ISCSI,
	},
	{
		.name = "data_digest",
		.lname = "rbio DataDigest",
		.type = FIO_OPT_STR_STORE,
		.off1 = offsetof(struct rbio_fio_options, data_digest),
		.help = "none, accept (default), prefer or crc32c",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_ISCSI,
	},
	{
		.name = "command_timeout",
		.lname = "rbio command timeout",
		.type = FIO_OPT_INT,
		.off1 = offsetof(struct rbio_fio_options, timeout_ms),
		.def = "30000",
		.minval = 1,
		.maxval = 3600000,
		.help = "milliseconds a command may take before it is aborted (ABORT TASK) and "
			"sent again (1-3600000)",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_ISCSI,
	},
	{
		.name = "replacement_timeout",
		.lname = "rbio replacement timeout",
		.type = FIO_OPT_INT,
		.off1 = offsetof(struct rbio_fio_options, replacement_timeout_ms),
		.def = "120000",
		.help = "milliseconds a lost session is reinstated for before its I/Os fail (0: no "
			"recovery); "
			"with several portals: how long I/Os wait while no path serves them",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_ISCSI,
	},
	{
		.name = "fence",
		.lname = "rbio fence",
		.type = FIO_OPT_STR_STORE,
		.off1 = offsetof(struct rbio_fio_options, fence),
		.help = "with several portals: lu-reset (default) holds a failed path's writes "
			"until "
			"its gateway has ended them (LOGICAL UNIT RESET there, or a refused "
			"connection); none re-sends them at once",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_ISCSI,
	},
	{
		.name = NULL,
	},
};

static void settings_of(struct thread_data *td, struct rbio_fio_settings *s)
{
	struct rbio_fio_options *o = td->eo;
	unsigned long long max_bs = td->o.max_bs[DDIR_READ];

	if (td->o.max_bs[DDIR_WRITE] > max_bs)
		max_bs = td->o.max_bs[DDIR_WRITE];
	memset(s, 0, sizeof(*s));
	s->portal = o->portal;
	s->target = o->target;
	s->lun = o->lun;
	s->initiator_name = o->initiator_name;
	s->chap_user = o->chap_user;
	s->chap_secret = o->chap_secret;
	s->header_digest = o->header_digest;
	s->data_digest = o->data_digest;
	s->timeout_ms = o->timeout_ms;
	s->replacement_timeout_ms = o->replacement_timeout_ms;
	s->fence = o->fence;
	s->max_io_bytes = max_bs > 0xffffffffULL ? 0xffffffffU : (unsigned int)max_bs;
}

static struct rbio_fio_conn *connect_or_report(struct thread_data *td)
{
	struct rbio_fio_settings s;
	char err[512] = "";
	struct rbio_fio_conn *c;

	settings_of(td, &s);
	c = rbio_fio_connect(&s, err, sizeof(err));
	if (!c) {
		log_err("fio: rbio engine: %s\n", err);
		td_vmsg(td, EIO, err, "rbio connect");
	}
	return c;
}

/* Runs in fio's parent before the jobs start: the LU's size (a short
 * session of its own). */
static int eng_get_file_size(struct thread_data *td, struct fio_file *f)
{
	struct rbio_fio_conn *c;

	if (fio_file_size_known(f))
		return 0;
	c = connect_or_report(td);
	if (!c)
		return 1;
	f->real_file_size = rbio_fio_capacity_bytes(c);
	fio_file_set_size_known(f);
	rbio_fio_disconnect(c);
	return 0;
}

/* Runs in the job's thread or process: the session the job's I/O uses. */
static int eng_init(struct thread_data *td)
{
	struct rbio_fio_conn *c;

	if (td->o.nr_files > 1) {
		log_err("fio: rbio engine: one LU per job (nrfiles=%u)\n", td->o.nr_files);
		return 1;
	}
	c = connect_or_report(td);
	if (!c)
		return 1;
	td->io_ops_data = c;
	return 0;
}

static void eng_cleanup(struct thread_data *td)
{
	struct rbio_fio_conn *c = td->io_ops_data;
	char stats[4096];

	if (!c)
		return;
	rbio_fio_describe_stats(c, stats, sizeof(stats));
	if (getenv("RBIO_FIO_STATS"))
		log_info("rbio: %s: %s\n", td->o.name, stats);
	rbio_fio_disconnect(c);
	td->io_ops_data = NULL;
}

static int eng_open_file(struct thread_data *td, struct fio_file *f)
{
	(void)td;
	(void)f;
	return 0;
}

static int eng_close_file(struct thread_data *td, struct fio_file *f)
{
	(void)td;
	(void)f;
	return 0;
}

static enum fio_q_status eng_queue(struct thread_data *td, struct io_u *io_u)
{
	struct rbio_fio_conn *c = td->io_ops_data;
	enum rbio_fio_op op;
	char err[512] = "";
	int rc;

	fio_ro_check(td, io_u);
	switch (io_u->ddir) {
	case DDIR_READ:
		op = RBIO_FIO_READ;
		break;
	case DDIR_WRITE:
		/* sync=1 or sync=dsync: file engines open with O_SYNC / O_DSYNC;
		 * here each write asks the target for durability itself. */
		op = td->o.sync_io ? RBIO_FIO_WRITE_FUA : RBIO_FIO_WRITE;
		break;
	case DDIR_SYNC:
	case DDIR_DATASYNC:
		op = RBIO_FIO_SYNC;
		break;
	default:
		io_u->error = EOPNOTSUPP;
		return FIO_Q_COMPLETED;
	}
	rc = rbio_fio_queue(c, op, io_u->xfer_buf, io_u->xfer_buflen, io_u->offset, io_u, err,
			    sizeof(err));
	if (rc) {
		log_err("fio: rbio engine: %s\n", err);
		io_u->error = rc;
		return FIO_Q_COMPLETED;
	}
	return FIO_Q_QUEUED;
}

static int eng_commit(struct thread_data *td)
{
	struct rbio_fio_conn *c = td->io_ops_data;
	char err[512] = "";
	int rc;

	io_u_mark_submit(td, td->io_u_queued);
	rc = rbio_fio_commit(c, err, sizeof(err));
	if (rc) /* the commands complete with EIO in ->getevents */
		log_err("fio: rbio engine: %s\n", err);
	return 0;
}

static int eng_getevents(struct thread_data *td, unsigned int min, unsigned int max,
			 const struct timespec *t)
{
	struct rbio_fio_conn *c = td->io_ops_data;
	int64_t timeout_ns = t ? (int64_t)t->tv_sec * 1000000000LL + t->tv_nsec : -1;
	char err[512] = "";
	int n;

	n = rbio_fio_reap(c, min, max, timeout_ns, err, sizeof(err));
	if (err[0])
		log_err("fio: rbio engine: %s\n", err);
	return n;
}

static struct io_u *eng_event(struct thread_data *td, int event)
{
	struct rbio_fio_conn *c = td->io_ops_data;
	int error = 0;
	uint64_t resid = 0;
	struct io_u *io_u = rbio_fio_completion(c, (unsigned int)event, &error, &resid);

	if (io_u) {
		io_u->error = error;
		io_u->resid = resid;
	}
	return io_u;
}

__attribute__((visibility("default"))) struct ioengine_ops ioengine = {
	.name = "rbio",
	.version = FIO_IOOPS_VERSION,
	.flags = FIO_DISKLESSIO | FIO_NODISKUTIL | FIO_NOEXTEND | FIO_RAWIO,
	.init = eng_init,
	.cleanup = eng_cleanup,
	.queue = eng_queue,
	.commit = eng_commit,
	.getevents = eng_getevents,
	.event = eng_event,
	.open_file = eng_open_file,
	.close_file = eng_close_file,
	.get_file_size = eng_get_file_size,
	.option_struct_size = sizeof(struct rbio_fio_options),
	.options = options,
};
