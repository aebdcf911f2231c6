/* gpuinv: the criu method's GPU record (see gpuinv.h). */
#include "spot/gpuinv.h"
#include "spot/strict.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

static int inventory(const cJSON *o, struct gpuinv *g, const char **why)
{
    const cJSON *gpus = cJSON_GetObjectItemCaseSensitive(o, "gpus"), *e;
    char uuid[96];

    if (!cJSON_IsObject(o) ||
        strict_json_copy(o, "driver", g->driver, sizeof(g->driver), true) < 0 ||
        !cJSON_IsArray(gpus)) {
        *why = "the inventory is not {\"driver\": string, \"gpus\": [...]}";
        return -EINVAL;
    }
    cJSON_ArrayForEach(e, gpus) {
        if (g->ngpus == GPUINV_MAX_GPUS) {
            *why = "more GPUs than spotd records";
            return -EINVAL;
        }
        if (!cJSON_IsObject(e) ||
            strict_json_copy(e, "model", g->model[g->ngpus], sizeof(g->model[0]), true) != 1 ||
            !g->model[g->ngpus][0] || strict_json_copy(e, "uuid", uuid, sizeof(uuid), true) < 0) {
            *why = "a GPU is not {\"model\": string, \"uuid\": string}";
            return -EINVAL;
        }
        g->ngpus++;
    }
    g->known = true;
    return 0;
}

int gpuinv_parse_inventory(const char *text, size_t len, struct gpuinv *ret, const char **why)
{
    cJSON *o = cJSON_ParseWithLength(text, len);
    struct gpuinv g;
    int r;

    memset(&g, 0, sizeof(g));
    *why = NULL;
    r = inventory(o, &g, why);
    cJSON_Delete(o);
    if (r == 0)
        *ret = g;
    return r;
}

int gpuinv_parse_images(const char *text, size_t len, struct gpuinv *ret, const char **why)
{
    cJSON *o = cJSON_ParseWithLength(text, len);
    const cJSON *procs = cJSON_GetObjectItemCaseSensitive(o, "processes"), *p;
    const cJSON *inv = cJSON_GetObjectItemCaseSensitive(o, "inventory");
    struct gpuinv g;
    int r = -EINVAL;

    memset(&g, 0, sizeof(g));
    *why = NULL;
    if (!cJSON_IsObject(o) || !cJSON_IsArray(procs) || !inv) {
        *why = "not {\"processes\": [...], \"inventory\": ...}";
        goto out;
    }
    cJSON_ArrayForEach(p, procs) {
        if (g.nprocs == GPUINV_MAX_PROCS || !cJSON_IsNumber(p) || p->valuedouble < 1 ||
            p->valuedouble > 2147483647.0 || p->valuedouble != (double)(int)p->valuedouble) {
            *why = "a process is not a pid";
            goto out;
        }
        g.procs[g.nprocs++] = (int)p->valuedouble;
    }
    if (!cJSON_IsNull(inv) && inventory(inv, &g, why) < 0)
        goto out;
    *ret = g;
    r = 0;
out:
    cJSON_Delete(o);
    return r;
}

/* "N GPUs (MODEL, ...)". */
static void describe(const struct gpuinv *g, char *out, size_t size)
{
    size_t len;

    if (!g->ngpus) {
        snprintf(out, size, "no NVIDIA GPU");
        return;
    }
    len = (size_t)snprintf(out, size, "%u GPU%s (", g->ngpus, g->ngpus == 1 ? "" : "s");
    for (uint32_t i = 0; i < g->ngpus && len < size; i++)
        len += (size_t)snprintf(out + len, size - len, "%s%s", i ? ", " : "", g->model[i]);
    if (len < size)
        snprintf(out + len, size - len, ")");
}

int gpuinv_compare(const struct gpuinv *saved, const struct gpuinv *here, char *msg,
                   size_t size)
{
    char was[512], now[512];
    bool same;

    if (!saved->known)
        return 0;
    same = here && here->known && here->ngpus == saved->ngpus;
    for (uint32_t i = 0; same && i < saved->ngpus; i++)
        same = strcmp(saved->model[i], here->model[i]) == 0;
    if (same)
        return 0;
    describe(saved, was, sizeof(was));
    if (here && here->known)
        describe(here, now, sizeof(now));
    else
        snprintf(now, sizeof(now), "no NVIDIA driver (NVML does not answer)");
    snprintf(msg, size, "the images' CUDA processes ran on %s; this machine has %s", was, now);
    return -1;
}
