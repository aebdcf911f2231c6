#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "spot/dmi.h"

/* Write name=value pairs as files under a fresh directory; return it. */
static char *fake_dmi(const char *const *kv)
{
    static char dir[64];
    char path[128];

    snprintf(dir, sizeof(dir), "/tmp/spotd-dmi.XXXXXX");
    if (!mkdtemp(dir))
        return NULL;
    for (; kv[0]; kv += 2) {
        FILE *f;
        snprintf(path, sizeof(path), "%s/%s", dir, kv[0]);
        f = fopen(path, "w");
        if (!f)
            return NULL;
        fprintf(f, "%s\n", kv[1]);
        fclose(f);
    }
    return dir;
}

static void remove_dmi(const char *dir)
{
    static const char *const names[] = { "sys_vendor", "product_name", "bios_vendor",
                                         "bios_version", "chassis_asset_tag" };
    char path[128];

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}

TEST(dmi_detect)
{
    static const struct {
        const char *kv[11];
        const char *cloud;
    } cases[] = {
        { { "sys_vendor", "Amazon EC2", "product_name", "g5.xlarge", NULL }, "aws" },
        { { "sys_vendor", "Xen", "product_name", "HVM domU", "bios_version", "4.11.amazon",
            NULL }, "aws" },
        { { "sys_vendor", "Xen", "product_name", "HVM domU", "bios_version", "4.11", NULL },
          NULL },
        { { "sys_vendor", "Google", "product_name", "Google Compute Engine", NULL }, "gcp" },
        { { "sys_vendor", "Microsoft Corporation", "product_name", "Virtual Machine",
            "chassis_asset_tag", "7783-7084-3265-9085-8269-3286-77", NULL }, "azure" },
        /* Hyper-V on premises: the same vendor, not Azure. */
        { { "sys_vendor", "Microsoft Corporation", "product_name", "Virtual Machine",
            "chassis_asset_tag", "None", NULL }, NULL },
        { { "sys_vendor", "Alibaba Cloud", "product_name", "Alibaba Cloud ECS", NULL },
          "alibaba" },
        { { "sys_vendor", "Tencent Cloud", "product_name", "CVM", NULL }, "tencent" },
        { { "sys_vendor", "QEMU", "product_name", "Standard PC (Q35 + ICH9, 2009)", NULL },
          NULL },
        { { NULL }, NULL },
    };
    char what[512];

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *dir = fake_dmi(cases[i].kv);
        const char *got;

        CHECK(dir != NULL);
        if (!dir)
            return;
        got = dmi_detect(dir, what, sizeof(what));
        if ((got == NULL) != (cases[i].cloud == NULL) ||
            (got && strcmp(got, cases[i].cloud) != 0)) {
            printf("  case %zu: got %s, expected %s (%s)\n", i, got ? got : "none",
                   cases[i].cloud ? cases[i].cloud : "none", what);
            harness_failed = 1;
        }
        remove_dmi(dir);
    }
    CHECK(dmi_detect("/nonexistent/dmi", what, sizeof(what)) == NULL);
    CHECK_HAS(what, "sys_vendor=''");
}
