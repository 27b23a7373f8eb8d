/* rbio's TCP transport inside tgtd (glue/iscsi_tcp_glue.c). */
#ifndef RBIO_ISCSI_TCP_GLUE_H
#define RBIO_ISCSI_TCP_GLUE_H

/* Reads the settings and, unless they or a tgtd of another build say no,
 * takes over tgtd's TCP portals. Called once from register_bs_module(). */
void rbio_iscsi_tcp_start(void);

#endif
