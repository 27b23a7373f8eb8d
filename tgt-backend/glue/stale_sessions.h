/*
 * The sessions of an LU whose RBD client the Ceph cluster fenced: ended, and
 * their late commands refused, so that the LU can be served again by a new
 * client without a write that a host gave up on landing late. Also single
 * sessions whose write came after a long silence (rbd_quiet_s).
 *
 * One of the few files that include tgt's (version-specific, C) headers.
 */
#ifndef RBIO_GLUE_STALE_SESSIONS_H
#define RBIO_GLUE_STALE_SESSIONS_H

#include <stddef.h>
#include <stdint.h>

struct target;
struct it_nexus;

/* A nexus is known by its id and its creation time: tgt hands out ids (iSCSI:
 * the session's 16-bit TSIH) one after another over all targets and reuses
 * them once they wrap, and an entry is forgotten only when a command reaches
 * the LU, which a standby gateway's LU may not see for a long time. A new
 * session given the id is not the ended one. */
struct rbio_stale_nexus {
	uint64_t itn_id;
	long ctime; /* struct it_nexus's, in seconds */
};

struct rbio_stale_sessions {
	struct rbio_stale_nexus *ended;
	size_t n;
};

/* Remembers every I_T nexus of target t and asks each of its iSCSI
 * connections to close (hosts log in again, as a new nexus). Returns 0, or
 * -1 when memory for the list could not be had (nothing is then closed). */
int rbio_stale_sessions_take(struct rbio_stale_sessions *s, struct target *t);
/* The same for the one nexus itn (rbd_quiet_s: a session whose late
 * write would take the lock over). Returns 0, or -1 without memory. */
int rbio_stale_sessions_add(struct rbio_stale_sessions *s, const struct it_nexus *itn);
/* Whether a command of nexus itn_id must be refused. Forgets the nexuses
 * that are gone (all their commands are done by then), also when a new
 * nexus has their id. */
int rbio_stale_sessions_has(struct rbio_stale_sessions *s, int tid, uint64_t itn_id);
void rbio_stale_sessions_free(struct rbio_stale_sessions *s);

#endif
