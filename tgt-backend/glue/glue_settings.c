/*
 * The settings rbio's TCP and iSER transports share inside tgtd, and the
 * check that tgtd is the build the module was made for, which both make
 * before they take anything over.
 *
 * One of the few files that include tgt's (version-specific, C) headers.
 */
#include <stdio.h>
#include <string.h>

#include "log.h"

#include "rbio/bs/data_budget.h"
#include "rbio/bs/tcp_transport.h"
#include "glue_settings.h"

#ifndef RBIO_TGTD_BUILD_ID
#define RBIO_TGTD_BUILD_ID ""
#endif
#ifndef RBIO_TGT_VERSION
#define RBIO_TGT_VERSION "unknown"
#endif

/* Read once: both transports start from the same file, read at the same
 * moment (register_bs_module()). */
const struct rbio_tp_settings *rbio_glue_settings(char *err, size_t errlen)
{
	static struct rbio_tp_settings settings;
	static char why[1024];
	static int state; /* 0 unread, 1 good, -1 bad */

	if (!state) {
		state = rbio_tp_load_settings(&settings, why, sizeof(why)) ? -1 : 1;
		if (state > 0) /* both transports' connections count in it */
			rbio_data_total_set_limit_mib(settings.data_budget_total_mib);
	}
	if (state > 0)
		return &settings;
	if (err && errlen)
		snprintf(err, errlen, "%s", why);
	return NULL;
}

/* The running tgtd is the build the module was made for (struct layouts of
 * tgt's core differ between builds); `tag` and `what` name the transport
 * in the log, e.g. "tcp" and "TCP portals". */
int rbio_tgtd_build_matches(const char *tag, const char *what)
{
	char running[128];

	if (!RBIO_TGTD_BUILD_ID[0]) {
		log_error("rbio: %s: the module was built without tgtd's build-id; "
			  "%s stay with tgt's transport\n",
			  tag, what);
		return 0;
	}
	if (rbio_tp_running_build_id(running, sizeof(running))) {
		log_error("rbio: %s: this tgtd has no build-id (the module expects %s, tgt %s); "
			  "%s stay with tgt's transport\n",
			  tag, RBIO_TGTD_BUILD_ID, RBIO_TGT_VERSION, what);
		return 0;
	}
	if (strcmp(running, RBIO_TGTD_BUILD_ID) != 0) {
		log_error("rbio: %s: this tgtd (build-id %s) is not the tgt %s the module was "
			  "built against (build-id %s); %s stay with tgt's transport\n",
			  tag, running, RBIO_TGT_VERSION, RBIO_TGTD_BUILD_ID, what);
		return 0;
	}
	return 1;
}
