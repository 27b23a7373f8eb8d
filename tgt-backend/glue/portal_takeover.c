/*
 * tgtd's TCP portals taken over: their listening sockets stay tgt's (tgt
 * made them and closes them when a portal is removed) but leave tgt's
 * accept handler for rbio's, so every new connection on them gets rbio's
 * transport. Connections already open are not affected.
 *
 * One of the few files that include tgt's (version-specific, C) headers.
 */
#define _GNU_SOURCE
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "iscsid.h"

#include "rbio/bs/tcp_transport.h"
#include "portal_takeover.h"

/*
 * Listening sockets already served by rbio's accept handler. A portal is
 * known by its struct, its socket's number and that socket's inode: when
 * an admin deletes a portal and adds one back between two ticks, tgt's
 * new struct and socket can get the freed address and number, but never
 * the same socket inode, and tgt's own accept handler is then on it.
 */
struct taken_portal {
	void *portal;
	int fd;
	ino_t ino;
	int watched; /* in tgtd's epoll set: accepting */
};
#define RBIO_MAX_PORTALS 64
static struct taken_portal taken[RBIO_MAX_PORTALS];
static int nr_taken;
static int accepting = 1;
static rbio_accept_fn accept_handler;

static int watch_portal(struct taken_portal *t, int on)
{
	if (t->watched == on)
		return 0;
	if (!on) {
		tgt_event_del(t->fd);
	} else if (tgt_event_add(t->fd, EPOLLIN, accept_handler, NULL)) {
		log_error("rbio: tcp: cannot watch the listening socket %d: %m\n", t->fd);
		return -1;
	}
	t->watched = on;
	return 0;
}

/* Connections waiting in a listening socket's accept queue. */
static unsigned queued_connections(int lfd)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);

	/* for a listening socket the kernel reports its accept queue here */
	if (getsockopt(lfd, IPPROTO_TCP, TCP_INFO, &ti, &len))
		return 0;
	return ti.tcpi_unacked;
}

/* The inode of the socket fd, 0 when it has none (closed). */
static ino_t socket_ino(int fd)
{
	struct stat st;

	return fstat(fd, &st) ? 0 : st.st_ino;
}

static int same_portal(const struct taken_portal *t, const struct iscsi_portal *p)
{
	return t->portal == (const void *)p && t->fd == p->fd && t->ino == socket_ino(p->fd);
}

static int portal_taken(struct iscsi_portal *p)
{
	int i;

	for (i = 0; i < nr_taken; i++)
		if (same_portal(&taken[i], p))
			return 1;
	return 0;
}

/* Before anything acts on a taken socket's number: it may be another
 * socket's by now (a connection's, tgtadm's, a new portal's). */
static void forget_removed_portals(void)
{
	int i = 0;

	while (i < nr_taken) {
		struct iscsi_portal *p;
		int present = 0;

		list_for_each_entry(p, &iscsi_portals_list, iscsi_portal_siblings)
		{
			if (same_portal(&taken[i], p))
				present = 1;
		}
		if (present)
			i++;
		else
			taken[i] = taken[--nr_taken];
	}
}

unsigned rbio_portals_accepting(int on)
{
	unsigned waiting = 0;
	int i;

	forget_removed_portals();
	for (i = 0; i < nr_taken; i++) {
		if (on)
			waiting += queued_connections(taken[i].fd);
		watch_portal(&taken[i], on);
	}
	accepting = on;
	return waiting;
}

void rbio_portals_take_over(const struct rbio_tp_settings *s, rbio_accept_fn accept)
{
	struct iscsi_portal *p;

	accept_handler = accept;
	forget_removed_portals();
	list_for_each_entry(p, &iscsi_portals_list, iscsi_portal_siblings)
	{
		if (p->fd < 0 || portal_taken(p) || !rbio_tp_portal_selected(s, p->addr, p->port))
			continue;
		if (nr_taken == RBIO_MAX_PORTALS) {
			log_error("rbio: tcp: more than %d portals; %s:%d stays with tgt's "
				  "transport\n",
				  RBIO_MAX_PORTALS, p->addr, p->port);
			continue;
		}
		tgt_event_del(p->fd);
		taken[nr_taken].portal = p;
		taken[nr_taken].fd = p->fd;
		taken[nr_taken].ino = socket_ino(p->fd);
		taken[nr_taken].watched = 0;
		if (accepting && watch_portal(&taken[nr_taken], 1)) {
			log_error("rbio: tcp: portal %s:%d: not served\n", p->addr, p->port);
			continue;
		}
		nr_taken++;
		log_error("rbio: tcp: portal %s:%d served by rbio's transport\n", p->addr, p->port);
	}
}
