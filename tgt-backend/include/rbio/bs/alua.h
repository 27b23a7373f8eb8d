/*
 * The C ABI between tgt's world and rbio's ALUA (implicit asymmetric
 * logical unit access) for rbio LUs served by several gateways.
 *
 * glue/alua_glue.c (which includes tgt's headers) puts these calls in front
 * of an rbio LU's SCSI commands and runs the groups-file poll from tgtd's
 * timer; the logic behind them is C++ with no tgt dependency
 * (include/rbio/bs/alua*.hpp). No function lets a C++ exception escape.
 */
#ifndef RBIO_BS_ALUA_H
#define RBIO_BS_ALUA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct rbio_alua; /* this gateway: its port group and the LU set's states */

/* Reads port_group / alua_groups_file (config file, then RBIO_PORT_GROUP /
 * RBIO_ALUA_GROUPS). 0 with *out NULL: ALUA is off. 0 with *out set: on,
 * the port transitioning until the first rbio_alua_poll reads the groups
 * file. -1: the settings are wrong; err says which and why. */
int rbio_alua_create(struct rbio_alua **out, char *err, size_t errlen);
void rbio_alua_destroy(struct rbio_alua *a);

enum rbio_alua_poll {
    RBIO_ALUA_UNCHANGED = 0,
    RBIO_ALUA_CHANGED = 1,
    RBIO_ALUA_BAD = 2,
    RBIO_ALUA_ANSWERING = 3
};
/* Reads the groups file (in a thread of its own, waiting up to wait_ms for
 * it) and acts on it if it changed (a bad or missing file: once per
 * version). CHANGED: raise ASYMMETRIC ACCESS STATE CHANGED on every I_T
 * nexus. BAD: the states are kept, msg says why; also once when a read has
 * not returned for 5 s. ANSWERING: such a file answers again, states as
 * they were; msg says so. */
enum rbio_alua_poll rbio_alua_poll(struct rbio_alua *a, unsigned wait_ms, char *msg, size_t msglen);

/* 0: the command runs on this gateway. 1: fail it with CHECK CONDITION and
 * the sense key / ASC-ASCQ (ASC << 8 | ASCQ) given. atomic_caw: the LU's
 * backing store makes COMPARE AND WRITE atomic across gateways (RBD).
 * unavailable: this LU cannot be served here whatever the groups file
 * says (its RBD client was fenced): checked as in the unavailable state. */
int rbio_alua_check(const struct rbio_alua *a, const uint8_t *cdb, uint32_t cdb_len, int atomic_caw,
                    int unavailable, uint8_t *key, uint16_t *asc);

/* 1: an LU with ALUA refuses this opcode in every state and on every
 * store (reservations, ORWRITE), so it is not offered at all. */
int rbio_alua_refused_everywhere(uint8_t op);

/* The CDB is MAINTENANCE IN / REPORT TARGET PORT GROUPS. */
int rbio_alua_is_rtpg(const uint8_t *cdb, uint32_t cdb_len);
/* Its parameter data into buf (at most len bytes). Returns the full length
 * (more than len: truncated), or -1 for a format not supported.
 * unavailable: as for rbio_alua_check, this gateway's own group is
 * reported unavailable for this LU. */
long rbio_alua_rtpg(const struct rbio_alua *a, const uint8_t *cdb, uint32_t cdb_len, int unavailable,
                    uint8_t *buf, size_t len);

/* VPD 0x83 designators of this gateway's target port (relative target
 * port, target port group). Returns bytes written (RBIO_ALUA_PORT_DESIGNATORS),
 * 0 if len is too small. */
#define RBIO_ALUA_PORT_DESIGNATORS 16
size_t rbio_alua_port_designators(const struct rbio_alua *a, uint8_t *buf, size_t len);

/* 0 if the opened backing store (fd, opened with oflags) can be shared by
 * gateways; -1 with the reason in err (it needs O_DIRECT). */
int rbio_alua_backing_check(const struct rbio_alua *a, int fd, int oflags, char *err, size_t errlen);

/* TPGS bits of standard INQUIRY byte 5 (implicit ALUA). */
#define RBIO_ALUA_INQUIRY_TPGS 0x10

/* One line for tgtd's log: this gateway's group and every group's state. */
void rbio_alua_describe(const struct rbio_alua *a, char *buf, size_t len);

/* Adds this gateway's ALUA view to a metrics exposition (metrics.h). */
struct rbio_metrics;
void rbio_alua_add_metrics(const struct rbio_alua *a, struct rbio_metrics *m);

#ifdef __cplusplus
}
#endif

#endif
