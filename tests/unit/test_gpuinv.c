#include <errno.h>
#include <string.h>

#include "harness.h"
#include "spot/gpuinv.h"

#define H100 "{\"model\":\"NVIDIA H100 80GB HBM3\",\"uuid\":\"GPU-1\"}"
#define A100 "{\"model\":\"NVIDIA A100-SXM4-80GB\",\"uuid\":\"GPU-2\"}"

static int images(const char *text, struct gpuinv *g, const char **why)
{
    return gpuinv_parse_images(text, strlen(text), g, why);
}

static int inv(const char *text, struct gpuinv *g, const char **why)
{
    return gpuinv_parse_inventory(text, strlen(text), g, why);
}

TEST(gpuinv_parse)
{
    struct gpuinv g;
    const char *why;

    CHECK_INT(images("{\"processes\":[2,7],\"inventory\":{\"driver\":\"550.54.15\",\"gpus\":["
                     H100 "," H100 "]}}", &g, &why), 0);
    CHECK_INT((int)g.nprocs, 2);
    CHECK_INT(g.procs[1], 7);
    CHECK(g.known);
    CHECK_INT((int)g.ngpus, 2);
    CHECK_STR(g.model[1], "NVIDIA H100 80GB HBM3");
    CHECK_STR(g.driver, "550.54.15");
    CHECK_INT(images("{\"processes\":[],\"inventory\":null}", &g, &why), 0);
    CHECK(!g.known);
    CHECK_INT(inv("{\"driver\":\"560.1\",\"gpus\":[]}", &g, &why), 0);
    CHECK(g.known);
    CHECK_INT((int)g.ngpus, 0);
}

TEST(gpuinv_refused)
{
    static const char *const bad[] = {
        "", "[]", "{}", "{\"processes\":[2]}",                     /* no inventory */
        "{\"processes\":[0],\"inventory\":null}",
        "{\"processes\":[2.5],\"inventory\":null}",
        "{\"processes\":[\"2\"],\"inventory\":null}",
        "{\"processes\":[2147483648],\"inventory\":null}",
        "{\"processes\":2,\"inventory\":null}",
        "{\"processes\":[],\"inventory\":{\"gpus\":{}}}",
        "{\"processes\":[],\"inventory\":{\"driver\":5,\"gpus\":[]}}",
        "{\"processes\":[],\"inventory\":{\"gpus\":[{\"uuid\":\"GPU-1\"}]}}",
        "{\"processes\":[],\"inventory\":{\"gpus\":[{\"model\":\"a\\u0007b\"}]}}",
        "{\"processes\":[],\"inventory\":{\"gpus\":[{\"model\":\"x\",\"uuid\":1}]}}",
    };
    struct gpuinv g;
    const char *why;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memset(&g, 0xa5, sizeof(g));
        why = NULL;
        CHECK_INT(images(bad[i], &g, &why), -EINVAL);
        CHECK(why != NULL);
        CHECK_INT(((unsigned char *)&g)[0], 0xa5);
    }
}

TEST(gpuinv_compare)
{
    struct gpuinv saved, here;
    const char *why;
    char msg[512];

    CHECK_INT(images("{\"processes\":[2],\"inventory\":{\"driver\":\"550\",\"gpus\":[" H100
                     "," H100 "]}}", &saved, &why), 0);
    /* The same models, other UUIDs and driver: the same. */
    CHECK_INT(inv("{\"driver\":\"560\",\"gpus\":[" H100 "," H100 "]}", &here, &why), 0);
    CHECK_INT(gpuinv_compare(&saved, &here, msg, sizeof(msg)), 0);
    /* One GPU fewer. */
    CHECK_INT(inv("{\"driver\":\"550\",\"gpus\":[" H100 "]}", &here, &why), 0);
    CHECK_INT(gpuinv_compare(&saved, &here, msg, sizeof(msg)), -1);
    CHECK_STR(msg, "the images' CUDA processes ran on 2 GPUs (NVIDIA H100 80GB HBM3, NVIDIA "
                   "H100 80GB HBM3); this machine has 1 GPU (NVIDIA H100 80GB HBM3)");
    /* Another model. */
    CHECK_INT(inv("{\"driver\":\"550\",\"gpus\":[" H100 "," A100 "]}", &here, &why), 0);
    CHECK_INT(gpuinv_compare(&saved, &here, msg, sizeof(msg)), -1);
    CHECK(strstr(msg, "this machine has 2 GPUs (NVIDIA H100 80GB HBM3, NVIDIA A100-SXM4-80GB)"));
    /* No driver here. */
    CHECK_INT(gpuinv_compare(&saved, NULL, msg, sizeof(msg)), -1);
    CHECK(strstr(msg, "this machine has no NVIDIA driver"));
    /* Nothing recorded at the dump: nothing to hold against. */
    CHECK_INT(images("{\"processes\":[2],\"inventory\":null}", &saved, &why), 0);
    CHECK_INT(gpuinv_compare(&saved, NULL, msg, sizeof(msg)), 0);
}
