/* Accepting TCP connections only while tgtd is ready (glue/readiness_gate.c). */
#ifndef RBIO_GLUE_READINESS_GATE_H
#define RBIO_GLUE_READINESS_GATE_H

/* tgtd would serve a login now: State ready and at least one target. */
int rbio_tgtd_ready(void);
/* The readiness timer, in tgtd's epoll set for tgtd's whole life: 0, or -1
 * (logged). rbio_gate_stop() at exit. */
int rbio_gate_start(void);
void rbio_gate_stop(void);
/* A connection came while tgtd is not ready: the taken portals stop
 * accepting until it is (checked every RBIO_READY_POLL_MS). */
void rbio_gate_pause(void);

#endif
