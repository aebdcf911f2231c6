/* dmi: which cloud this machine is, from the firmware's DMI strings. */
#include "spot/dmi.h"

#include <stdio.h>
#include <string.h>

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

const char *dmi_detect(const char *root, char *what, size_t size)
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

