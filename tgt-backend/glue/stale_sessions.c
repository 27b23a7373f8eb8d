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

/* Room for `more` entries; 0, or -1 without memory. */
static int reserve(struct rbio_stale_sessions *s, size_t more)
{
	struct rbio_stale_nexus *e = realloc(s->ended, (s->n + more + 1) * sizeof(*e));

	if (!e)
		return -1;
	s->ended = e;
	return 0;
}

static int known(const struct rbio_stale_sessions *s, const struct it_nexus *itn)
{
	size_t i;

	for (i = 0; i < s->n; i++)
		if (s->ended[i].itn_id == itn->itn_id && s->ended[i].ctime == itn->ctime)
			return 1;
	return 0;
}

int rbio_stale_sessions_take(struct rbio_stale_sessions *s, struct target *t)
{
	struct it_nexus *itn;
	size_t n = 0, i;

	list_for_each_entry(itn, &t->it_nexus_list, nexus_siblings) n++;
	if (reserve(s, n))
		return -1;
	list_for_each_entry(itn, &t->it_nexus_list, nexus_siblings)
	{
		if (!known(s, itn))
			s->ended[s->n++] = (struct rbio_stale_nexus){ itn->itn_id, itn->ctime };
	}
	for (i = 0; i < s->n; i++)
		close_session(s->ended[i].itn_id);
	return 0;
}

int rbio_stale_sessions_add(struct rbio_stale_sessions *s, const struct it_nexus *itn)
{
	if (known(s, itn))
		return 0; /* closing already */
	if (reserve(s, 1))
		return -1;
	s->ended[s->n++] = (struct rbio_stale_nexus){ itn->itn_id, itn->ctime };
	close_session(itn->itn_id);
	return 0;
}

int rbio_stale_sessions_has(struct rbio_stale_sessions *s, int tid, uint64_t itn_id)
{
	size_t i = 0;
	int found = 0;

	while (i < s->n) {
		const struct it_nexus *now = it_nexus_lookup(tid, s->ended[i].itn_id);

		if (!now || now->ctime != s->ended[i].ctime) {
			s->ended[i] = s->ended[--s->n];
			continue;
		}
		if (s->ended[i].itn_id == itn_id)
			found = 1;
		i++;
	}
	return found;
}

void rbio_stale_sessions_free(struct rbio_stale_sessions *s)
{
	free(s->ended);
	s->ended = NULL;
	s->n = 0;
}
