/* ALUA for rbio LUs (glue side): see alua_glue.c. */
#ifndef RBIO_ALUA_GLUE_H
#define RBIO_ALUA_GLUE_H

struct scsi_lu;
struct scsi_cmd;
struct rbio_metrics;

/* Per-LU ALUA state, kept in the LU's rbio private area. */
struct rbio_alua_lu {
	struct rbio_alua_lu *next; /* LUs of this gateway, for unit attentions */
	struct scsi_lu *lu;
	int (*orig[256])(int host_no, struct scsi_cmd *cmd); /* tgt's ops, wrapped */
	int attached;
	int atomic_caw; /* the backing store is an RBD image: the OSD does COMPARE AND WRITE */
};

/* Reads the ALUA settings once, when the module loads. */
void rbio_alua_glue_start(void);
/* bs_init of an rbio LU: with ALUA on, puts ALUA in front of the LU's SCSI
 * commands. 0, or -1 (bad ALUA settings: the LU is refused, logged). */
int rbio_alua_glue_lu_init(struct scsi_lu *lu, struct rbio_alua_lu *al);
void rbio_alua_glue_lu_exit(struct rbio_alua_lu *al);
/* bs_open of an rbio LU: with ALUA on, the opened backing store must be
 * safe to share between gateways. 0, or -1 (logged). */
int rbio_alua_glue_check_backing(struct scsi_lu *lu, int fd);

/* The metrics tick: this gateway's ALUA view, when ALUA is on. */
void rbio_alua_glue_metrics(struct rbio_metrics *m);

/* Implemented by bs_rbio_glue.c: the ALUA state in an rbio LU's private area. */
struct rbio_alua_lu *rbio_lu_alua(struct scsi_lu *lu);
/* Implemented by bs_rbio_glue.c: the cluster fenced the LU's RBD client, so
 * this gateway cannot serve the LU: its port reports unavailable for it. */
int rbio_lu_fenced(struct scsi_lu *lu);

#endif
