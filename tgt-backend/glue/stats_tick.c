/*
 * Once a second inside tgtd: the TCP transport's share (NOP-In pings, new
 * portals), then the statistics file: the process totals of both
 * transports (rbio_tp_stats_write) and one line per TCP connection.
 *
 * One of the few files that include tgt's (version-specific, C) headers.
 */
#include <stdio.h>

#include "iscsid.h"
#include "work.h"

#include "rbio/bs/tcp_transport.h"
#include "stats_tick.h"

static const struct rbio_tp_settings *settings;
static rbio_tick_fn tick_share;
static rbio_describe_conns_fn describe;
static struct tgt_work tick_work;

void rbio_stats_write(void)
{
	/* per-connection lines, for the first connections that fit */
	static char conns[64 * 1024];
	static int warned;
	char err[512];

	if (!settings || !settings->stats_file[0])
		return;
	describe(conns, sizeof(conns));
	if (rbio_tp_stats_write(settings->stats_file, conns, err, sizeof(err))) {
		if (!warned)
			log_error("rbio: tcp: cannot write statistics: %s\n", err);
		warned = 1;
	}
}

/* A statistics file of a process that is gone would mislead. */
void rbio_stats_remove(void)
{
	if (settings && settings->stats_file[0])
		rbio_tp_stats_remove(settings->stats_file);
}

static void tick(void *data)
{
	(void)data;
	tick_share();
	rbio_stats_write();
	add_work(&tick_work, 1);
}

void rbio_stats_tick_start(const struct rbio_tp_settings *s, rbio_tick_fn each_second,
			   rbio_describe_conns_fn describe_conns)
{
	settings = s;
	tick_share = each_second;
	describe = describe_conns;
	tick_work.func = tick;
	tick_work.data = NULL;
	add_work(&tick_work, 1);
	rbio_stats_write();
}
