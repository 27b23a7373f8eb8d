/*
 * Accepting connections on the taken TCP portals only when tgtd is ready.
 *
 * One of the few files that include tgt's (version-specific, C) headers.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "iscsid.h"

#include "portal_takeover.h"
#include "readiness_gate.h"

/*
 * A starting tgtd listens before it is configured: tgt.service sets its
 * State offline, adds the targets and their LUNs, then sets it ready, and
 * tgtd starts without any target. Stock tgt accepts and at once closes
 * every connection meanwhile. An initiator that reconnects a session in
 * recovery at that moment can take the close right after it bound the new
 * connection to the session, which sends open-iscsi into a loop of failed
 * rebinds ("can't bind conn ... retcode -107", open-iscsi #387) that ends
 * only when the replacement timeout has failed the queued I/O.
 *
 * So rbio's TCP transport accepts only while tgt itself would serve a login:
 * State ready and at least one target (tgt's own two conditions; targets
 * are added with their LUNs while the State is offline). Meanwhile the
 * listening sockets are left out of tgtd's epoll set and the kernel keeps
 * new connections in the listen queue, login request included. To the
 * initiator that is a login that takes longer; once tgtd is ready (checked
 * every RBIO_READY_POLL_MS) the login is served, and one that waited past
 * the initiator's login timeout was closed by it and is dropped unread
 * (peer_gone, in the TCP glue). A connection already accepted is not
 * affected by the State.
 */
#define RBIO_READY_POLL_MS 100

static int accepting_paused;
static int ready_timer_fd = -1;

int rbio_tgtd_ready(void)
{
	return is_system_available() && !list_empty(&iscsi_targets_list);
}

static void arm_ready_timer(int on)
{
	struct itimerspec its = { 0 };

	if (on) {
		its.it_interval.tv_nsec = RBIO_READY_POLL_MS * 1000000L;
		its.it_value = its.it_interval;
	}
	if (timerfd_settime(ready_timer_fd, 0, &its, NULL))
		log_error("rbio: tcp: cannot %s the readiness timer: %m\n", on ? "arm" : "stop");
}

void rbio_gate_pause(void)
{
	if (accepting_paused)
		return;
	rbio_portals_accepting(0);
	accepting_paused = 1;
	arm_ready_timer(1);
	log_error("rbio: tcp: tgtd is not ready (State %s, %s): new connections wait in the "
		  "listen queue\n",
		  is_system_available() ? "ready" : "offline",
		  list_empty(&iscsi_targets_list) ? "no target" : "targets present");
}

static void resume_accepting(void)
{
	unsigned waiting = rbio_portals_accepting(1);

	accepting_paused = 0;
	arm_ready_timer(0);
	log_error("rbio: tcp: tgtd is ready: accepting connections (%u waited in the listen "
		  "queue)\n",
		  waiting);
}

static void ready_timer_handler(int fd, int events, void *data)
{
	uint64_t expirations;

	(void)events;
	(void)data;
	if (read(fd, &expirations, sizeof(expirations)) < 0 && errno != EAGAIN)
		log_error("rbio: tcp: readiness timer: %m\n");
	if (accepting_paused && rbio_tgtd_ready())
		resume_accepting();
}

void rbio_gate_stop(void)
{
	if (ready_timer_fd < 0)
		return;
	tgt_event_del(ready_timer_fd);
	close(ready_timer_fd);
	ready_timer_fd = -1;
}

/* The readiness timer lives in tgtd's epoll set for tgtd's whole life;
 * it fires only while accepting is paused. */
int rbio_gate_start(void)
{
	ready_timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (ready_timer_fd < 0) {
		log_error("rbio: tcp: cannot create the readiness timer: %m\n");
		return -1;
	}
	if (tgt_event_add(ready_timer_fd, EPOLLIN, ready_timer_handler, NULL)) {
		log_error("rbio: tcp: cannot watch the readiness timer: %m\n");
		close(ready_timer_fd);
		ready_timer_fd = -1;
		return -1;
	}
	return 0;
}
