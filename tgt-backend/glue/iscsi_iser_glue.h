/* rbio's iSER transport inside tgtd (glue/iscsi_iser_glue.c). */
#ifndef RBIO_ISCSI_ISER_GLUE_H
#define RBIO_ISCSI_ISER_GLUE_H

/* Unless the settings or a tgtd of another build say no, takes over the CM
 * channel of tgtd's iSER listeners. Called once from register_bs_module(),
 * after tgt's iSER driver has started listening. */
void rbio_iscsi_iser_start(void);

#endif
