#include "stale_sessions.h"

#include <stdlib.h>

#include "conn_pass.h" /* iscsid.h, after stdio.h */
#include "list.h"
#include "target.h"
#include "tgtd.h"

/* Each connection is asked to close the way tgtadm's "delete connection"
 * does (ep_force_close): rbio's transports close it from a pass of its
 * own, so nothing is freed while the session's list is walked. A command
 * it still brings before that is refused by rbio_stale_sessions_has. */
static void close_session(uint64_t itn_id)
{
	for (;;) {
		/* Looked up again after each close: tgt's own iSER closes at
		 * once, which may free the connection and its session. */
		struct iscsi_session *session = session_lookup_by_tsih((uint16_t)itn_id);
		struct iscsi_connection *conn, *open = NULL;

		if (!session)
			return;
		list_for_each_entry(conn, &session->conn_list, clist)
		{
			if (!conn->closed && conn->state != STATE_CLOSE &&
			    conn->tp->ep_force_close) {
				open = conn;
				break;
			}
		}
		if (!open)
			return;
		open->tp->ep_force_close(open);
	}
}

int rbio_stale_sessions_take(struct rbio_stale_sessions *s, struct target *t)
{
	struct it_nexus *itn;
	uint64_t *ids;
	size_t n = 0, i = 0;

	list_for_each_entry(itn, &t->it_nexus_list, nexus_siblings) n++;
	ids = realloc(s->itn_ids, (s->n + n + 1) * sizeof(*ids));
	if (!ids)
		return -1;
	s->itn_ids = ids;
	list_for_each_entry(itn, &t->it_nexus_list, nexus_siblings) s->itn_ids[s->n + i++] =
		itn->itn_id;
	s->n += n;
	for (i = 0; i < s->n; i++)
		close_session(s->itn_ids[i]);
	return 0;
}

int rbio_stale_sessions_add(struct rbio_stale_sessions *s, uint64_t itn_id)
{
	uint64_t *ids;
	size_t i;

	for (i = 0; i < s->n; i++)
		if (s->itn_ids[i] == itn_id)
			return 0; /* closing already */
	ids = realloc(s->itn_ids, (s->n + 1) * sizeof(*ids));
	if (!ids)
		return -1;
	s->itn_ids = ids;
	s->itn_ids[s->n++] = itn_id;
	close_session(itn_id);
	return 0;
}

int rbio_stale_sessions_has(struct rbio_stale_sessions *s, int tid, uint64_t itn_id)
{
	size_t i = 0;
	int found = 0;

	while (i < s->n) {
		if (!it_nexus_lookup(tid, s->itn_ids[i])) {
			s->itn_ids[i] = s->itn_ids[--s->n];
			continue;
		}
		if (s->itn_ids[i] == itn_id)
			found = 1;
		i++;
	}
	return found;
}

void rbio_stale_sessions_free(struct rbio_stale_sessions *s)
{
	free(s->itn_ids);
	s->itn_ids = NULL;
	s->n = 0;
}
