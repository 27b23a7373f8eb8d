/* The once-a-second tick and the statistics file (glue/stats_tick.c). */
#ifndef RBIO_GLUE_STATS_TICK_H
#define RBIO_GLUE_STATS_TICK_H

#include <stddef.h>

struct rbio_tp_settings;

/* The TCP transport's share of a tick, before the file is written. */
typedef void (*rbio_tick_fn)(void);
/* Fills out with one line per connection for the statistics file, as many
 * as fit (NUL-terminated); returns the length. */
typedef size_t (*rbio_describe_conns_fn)(char *out, size_t len);

/* Runs `each_second` once a second, then rewrites the statistics file of
 * `s` (which must outlive tgtd's event loop); writes the file once now. */
void rbio_stats_tick_start(const struct rbio_tp_settings *s, rbio_tick_fn each_second,
			   rbio_describe_conns_fn describe_conns);
/* Rewrites the statistics file now (if one is configured). */
void rbio_stats_write(void);
/* tgtd is exiting: removes the statistics file. */
void rbio_stats_remove(void);

#endif
