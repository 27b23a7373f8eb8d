/* The transports' settings inside tgtd, read once (glue/glue_settings.c). */
#ifndef RBIO_GLUE_SETTINGS_H
#define RBIO_GLUE_SETTINGS_H

#include <stddef.h>

struct rbio_tp_settings;

/* /etc/rbio/tgtd.conf and the environment as the transports read them
 * (rbio_tp_load_settings), read on the first call; every call returns the
 * same. NULL, and why in err, when they are bad. */
const struct rbio_tp_settings *rbio_glue_settings(char *err, size_t errlen);
/* The running tgtd is the build the module was made for; logs why not. */
int rbio_tgtd_build_matches(const char *tag, const char *what);

#endif
