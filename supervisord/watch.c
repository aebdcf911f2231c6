/* watch: the table of clouds and what the watchers share. */
#include "watch.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "spot/log.h"
#include "spot/parse.h"

static const struct watcher_ops *const watchers[] = {
    &watch_aws, &watch_gcp, &watch_azure, &watch_alibaba, &watch_tencent,
};

const struct watcher_ops *watch_find(const char *name)
{
    for (size_t i = 0; i < sizeof(watchers) / sizeof(watchers[0]); i++)
        if (strcmp(watchers[i]->name, name) == 0)
            return watchers[i];
    return NULL;
}

/* Read the first line of a small sysfs file into buf; "" when absent. */
static void read_line(const char *root, const char *name, char *buf, size_t size)
{
    char path[512];
    FILE *f;

    buf[0] = '\0';
    snprintf(path, sizeof(path), "%s/%s", root, name);
    f = fopen(path, "re");
    if (!f)
        return;
    if (fgets(buf, (int)size, f))
        buf[strcspn(buf, "\r\n")] = '\0';
    fclose(f);
}

/* What each provider writes into DMI (docs/clouds.md says where from). */
static const struct {
    const char *field;
    const char *prefix;
    const char *cloud;
} dmi_table[] = {
    { "sys_vendor", "Amazon EC2", "aws" },
    { "bios_vendor", "Amazon EC2", "aws" },
    { "product_name", "Google Compute Engine", "gcp" },
    { "sys_vendor", "Google", "gcp" },
    { "sys_vendor", "Alibaba Cloud", "alibaba" },
    { "product_name", "Alibaba Cloud ECS", "alibaba" },
    { "sys_vendor", "Tencent Cloud", "tencent" },
};

const char *watch_detect(const char *root, char *what, size_t size)
{
    char vendor[128], product[128], bios[128], chassis[128], bios_version[128];

    if (!root)
        root = "/sys/class/dmi/id";
    read_line(root, "sys_vendor", vendor, sizeof(vendor));
    read_line(root, "product_name", product, sizeof(product));
    read_line(root, "bios_vendor", bios, sizeof(bios));
    read_line(root, "chassis_asset_tag", chassis, sizeof(chassis));
    read_line(root, "bios_version", bios_version, sizeof(bios_version));
    snprintf(what, size, "sys_vendor='%s' product_name='%s' bios_vendor='%s' bios_version='%s' "
             "chassis_asset_tag='%s'", vendor, product, bios, bios_version, chassis);
    for (size_t i = 0; i < sizeof(dmi_table) / sizeof(dmi_table[0]); i++) {
        const char *v = strcmp(dmi_table[i].field, "sys_vendor") == 0   ? vendor
                        : strcmp(dmi_table[i].field, "product_name") == 0 ? product
                                                                          : bios;
        if (strncmp(v, dmi_table[i].prefix, strlen(dmi_table[i].prefix)) == 0)
            return dmi_table[i].cloud;
    }
    /* Older AWS instance types run on Xen: "4.2.amazon" and the like. */
    if (strcmp(vendor, "Xen") == 0 && strstr(bios_version, "amazon"))
        return "aws";
    /* Azure: Hyper-V's vendor string on any Hyper-V host; Azure alone sets
     * this chassis asset tag. */
    if (strcmp(vendor, "Microsoft Corporation") == 0 &&
        strcmp(chassis, "7783-7084-3265-9085-8269-3286-77") == 0)
        return "azure";
    return NULL;
}

void watch_complain(struct watch_complaint *c, const char *source, const char *kind,
                    const char *fmt, ...)
{
    char msg[768];
    va_list ap;

    if (strcmp(c->last, kind) == 0)
        return;
    snprintf(c->last, sizeof(c->last), "%s", kind);
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    log_msg(LOGL_WARN, "%s: %s (said once until it changes)", source, msg);
}

void watch_ok(struct watch_complaint *c, const char *source)
{
    if (!c->last[0])
        return;
    log_msg(LOGL_INFO, "%s: the metadata service answers again", source);
    c->last[0] = '\0';
}

uint64_t watch_backoff(uint64_t poll_ms, unsigned failures)
{
    uint64_t d = poll_ms ? poll_ms : 1000;

    for (unsigned i = 0; i < failures && d < 30000; i++)
        d *= 2;
    return d < 30000 ? d : 30000;
}

int watch_parse_drill(const char *s, uint64_t *ret_ms, int *ret_kind)
{
    const char *colon = strchr(s, ':');
    char dur[32];
    uint64_t ms;
    int kind = NOTICE_DRILL;

    if (colon) {
        if ((size_t)(colon - s) >= sizeof(dur))
            return -EINVAL;
        memcpy(dur, s, (size_t)(colon - s));
        dur[colon - s] = '\0';
        kind = notice_kind_parse(colon + 1);
        if (kind < 0)
            return -EINVAL;
    } else {
        if (strlen(s) >= sizeof(dur))
            return -EINVAL;
        strcpy(dur, s);
    }
    if (parse_duration(dur, &ms) < 0)
        return -EINVAL;
    *ret_ms = ms;
    *ret_kind = kind;
    return 0;
}
