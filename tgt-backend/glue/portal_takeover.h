/* tgtd's TCP portals served by rbio's transport (glue/portal_takeover.c). */
#ifndef RBIO_GLUE_PORTAL_TAKEOVER_H
#define RBIO_GLUE_PORTAL_TAKEOVER_H

struct rbio_tp_settings;

/* What accepts a new connection on a taken portal's listening socket (a
 * tgt event handler). */
typedef void (*rbio_accept_fn)(int lfd, int events, void *data);

/* Moves the listening socket of every portal the settings select, and not
 * taken yet, from tgt's handler to `accept`. Called at start and once a
 * second, so portals added later with tgtadm are picked up. */
void rbio_portals_take_over(const struct rbio_tp_settings *s, rbio_accept_fn accept);
/* Watches the taken portals' sockets (1: accepting) or leaves them out of
 * tgtd's epoll set (0), so new connections wait in the listen queue.
 * Returns how many connections were waiting there when accepting resumes. */
unsigned rbio_portals_accepting(int on);

#endif
