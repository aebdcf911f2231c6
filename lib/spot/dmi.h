/* dmi: which cloud this machine runs on, from the DMI strings the
 * firmware exposes in sysfs.  Only files are read: no network probe. */
#ifndef SPOT_DMI_H
#define SPOT_DMI_H

#include <stddef.h>

/* The cloud ("aws", "gcp", "azure", "alibaba", "tencent") that the DMI
 * files under root (NULL: /sys/class/dmi/id) name, or NULL.  what receives
 * the strings read, for the log. */
const char *dmi_detect(const char *root, char *what, size_t size);

#endif
