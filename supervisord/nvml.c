/* nvml: NVIDIA GPUs through NVML, loaded at run time (nvml.h).
 *
 * The declarations below are the few pieces of NVML's ABI spotd uses (the
 * driver's nvml.h), written out so that spotd builds without the CUDA
 * toolkit: the _v2 entry points of initialisation, count and handles, and
 * the device queries in their first versions, which every driver still
 * exports (nvmlMemory_t, not the _v2 struct with its version field). */
#include "nvml.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spot/notice.h"

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;

/* NVML_SUCCESS; NVML_ERROR_NOT_SUPPORTED (3), a query this GPU does not
 * answer, is one of the failures that leave a metric absent. */
enum { NVML_SUCCESS = 0 };
typedef enum { NVML_TEMPERATURE_GPU = 0 } nvmlTemperatureSensors_t;

typedef struct {
    unsigned int gpu;              /* percent of the last sample period a kernel ran */
    unsigned int memory;           /* percent of it device memory was read or written */
} nvmlUtilization_t;

typedef struct {
    unsigned long long total, free, used; /* bytes */
} nvmlMemory_t;

/* NVML_DEVICE_NAME_V2_BUFFER_SIZE, NVML_DEVICE_UUID_V2_BUFFER_SIZE and
 * NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE are 96, 96 and 80: one size holds
 * each. */
#define NVML_STRING 96

struct nvml {
    void *lib;                     /* dlopen's handle, ours */
    nvmlReturn_t (*shutdown)(void);
    const char *(*error_string)(nvmlReturn_t);
    /* The queries of a sample; NULL when this NVML lacks one (absent). */
    nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t *);
    nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t *);
    nvmlReturn_t (*temperature)(nvmlDevice_t, nvmlTemperatureSensors_t, unsigned int *);
    nvmlReturn_t (*power)(nvmlDevice_t, unsigned int *);
    char driver[NVML_STRING];
    unsigned ngpus;
    nvmlDevice_t dev[NVML_GPUS_MAX];
    struct nvml_gpu gpu[NVML_GPUS_MAX]; /* identity only: index, uuid, name */
};

/* A string the driver wrote into raw (size bytes, perhaps unterminated)
 * into out: bounded, terminated, printable, no '"' or '\'. */
static void copy_string(char *out, size_t size, const char *raw, size_t rawsize)
{
    notice_copy(out, size, raw, strnlen(raw, rawsize));
    for (char *p = out; *p; p++)
        if (*p == '"' || *p == '\\')
            *p = '?';
}

static const char *error_of(const struct nvml *n, nvmlReturn_t r)
{
    const char *s = n->error_string ? n->error_string(r) : NULL;

    return s ? s : "unknown NVML error";
}

static void *sym(struct nvml *n, const char *name)
{
    return dlsym(n->lib, name);
}

/* ---- descriptors ------------------------------------------------------------- */

/* The descriptors open now, one bit each (those past the map are left out). */
#define FD_MAP 65536
typedef uint64_t fd_map[FD_MAP / 64];

static void fds_open(fd_map map)
{
    struct dirent *d;
    DIR *dp;

    memset(map, 0, sizeof(fd_map));
    if (!(dp = opendir("/proc/self/fd")))
        return;
    while ((d = readdir(dp))) {
        char *end;
        long fd = strtol(d->d_name, &end, 10);

        /* Not the directory's own: the next open() takes its number. */
        if (end != d->d_name && !*end && fd >= 0 && fd < FD_MAP && fd != dirfd(dp))
            map[fd / 64] |= 1ull << (fd % 64);
    }
    closedir(dp);
}

/* NVML opens /dev/nvidiactl, /dev/nvidia0, ... and does not promise
 * O_CLOEXEC: one inherited by the command would make every process of its
 * tree look like a CUDA process to the criu method (and keep the device
 * open after spotd is done with it).  Whatever was opened since before is
 * made close-on-exec; spotd opens every descriptor of its own with
 * O_CLOEXEC, so another thread's caught on the way loses nothing. */
static void cloexec_since(const fd_map before, fd_map now)
{
    fds_open(now);
    for (int w = 0; w < FD_MAP / 64; w++)
        for (uint64_t fresh = now[w] & ~before[w]; fresh; fresh &= fresh - 1) {
            int fd = w * 64 + __builtin_ctzll(fresh), flags = fcntl(fd, F_GETFD);

            if (flags >= 0 && !(flags & FD_CLOEXEC))
                fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
        }
}

/* ---- open, sample, close ----------------------------------------------------- */

static void list_gpus(struct nvml *n, unsigned count)
{
    nvmlReturn_t (*handle)(unsigned int, nvmlDevice_t *) = NULL;
    nvmlReturn_t (*name)(nvmlDevice_t, char *, unsigned int) = NULL;
    nvmlReturn_t (*uuid)(nvmlDevice_t, char *, unsigned int) = NULL;

    *(void **)&handle = sym(n, "nvmlDeviceGetHandleByIndex_v2");
    *(void **)&name = sym(n, "nvmlDeviceGetName");
    *(void **)&uuid = sym(n, "nvmlDeviceGetUUID");
    for (unsigned i = 0; i < count && n->ngpus < NVML_GPUS_MAX; i++) {
        struct nvml_gpu *g = &n->gpu[n->ngpus];
        char raw[NVML_STRING];
        nvmlDevice_t dev = NULL;

        /* A GPU this process may not use (a container's cgroup) answers
         * no handle: it is not ours to report. */
        if (handle(i, &dev) != NVML_SUCCESS || !dev)
            continue;
        g->index = i;
        memset(raw, 0, sizeof(raw));
        if (name(dev, raw, sizeof(raw)) == NVML_SUCCESS)
            copy_string(g->name, sizeof(g->name), raw, sizeof(raw));
        memset(raw, 0, sizeof(raw));
        if (uuid(dev, raw, sizeof(raw)) == NVML_SUCCESS)
            copy_string(g->uuid, sizeof(g->uuid), raw, sizeof(raw));
        n->dev[n->ngpus++] = dev;
    }
}

/* One GPU's metrics into g (its identity already there): each one NVML
 * answers, and answers sensibly. */
static void sample_gpu(const struct nvml *n, nvmlDevice_t dev, struct nvml_gpu *g)
{
    nvmlUtilization_t u;
    nvmlMemory_t mem;
    unsigned int v;

    if (n->utilization && n->utilization(dev, &u) == NVML_SUCCESS && u.gpu <= 100) {
        g->has_util = true;
        g->util_ratio = u.gpu / 100.0;
    }
    if (n->memory && n->memory(dev, &mem) == NVML_SUCCESS && mem.used <= mem.total) {
        g->has_mem = true;
        g->mem_used = mem.used;
        g->mem_total = mem.total;
    }
    if (n->temperature && n->temperature(dev, NVML_TEMPERATURE_GPU, &v) == NVML_SUCCESS) {
        g->has_temp = true;
        g->temp_c = v;
    }
    if (n->power && n->power(dev, &v) == NVML_SUCCESS) {
        g->has_power = true;
        g->power_w = v / 1000.0;
    }
}

struct nvml *nvml_open(char *why, size_t size)
{
    static const char *const required[] = {
        "nvmlInit_v2", "nvmlShutdown", "nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex_v2",
        "nvmlDeviceGetName", "nvmlDeviceGetUUID",
    };
    nvmlReturn_t (*init)(void) = NULL;
    nvmlReturn_t (*count)(unsigned int *) = NULL;
    nvmlReturn_t (*driver)(char *, unsigned int) = NULL;
    fd_map *fds = NULL;            /* before the library, and after */
    struct nvml *n;
    char raw[NVML_STRING];
    unsigned total = 0;
    const char *dl;
    nvmlReturn_t r;
    int err = ENODEV;

    if (size)
        why[0] = '\0';
    if (!(n = calloc(1, sizeof(*n))) || !(fds = malloc(2 * sizeof(fd_map)))) {
        snprintf(why, size, "no memory for NVML's GPUs");
        err = ENOMEM;
        goto out_free;
    }
    fds_open(fds[0]);
    if (!(n->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL))) {
        dl = dlerror();
        snprintf(why, size, "NVML (libnvidia-ml.so.1) is not installed: %s",
                 dl ? dl : "dlopen failed");
        err = ENOENT;
        goto out_free;
    }
    for (size_t i = 0; i < sizeof(required) / sizeof(required[0]); i++)
        if (!sym(n, required[i])) {
            snprintf(why, size, "libnvidia-ml.so.1 has no %s: too old an NVIDIA driver?",
                     required[i]);
            goto out_close;
        }
    *(void **)&init = sym(n, "nvmlInit_v2");
    *(void **)&count = sym(n, "nvmlDeviceGetCount_v2");
    *(void **)&driver = sym(n, "nvmlSystemGetDriverVersion");
    *(void **)&n->shutdown = sym(n, "nvmlShutdown");
    *(void **)&n->error_string = sym(n, "nvmlErrorString");
    *(void **)&n->utilization = sym(n, "nvmlDeviceGetUtilizationRates");
    *(void **)&n->memory = sym(n, "nvmlDeviceGetMemoryInfo");
    *(void **)&n->temperature = sym(n, "nvmlDeviceGetTemperature");
    *(void **)&n->power = sym(n, "nvmlDeviceGetPowerUsage");
    if ((r = init()) != NVML_SUCCESS) {
        snprintf(why, size, "NVML does not start (nvmlInit_v2: %s): no NVIDIA driver loaded?",
                 error_of(n, r));
        goto out_close;
    }
    if ((r = count(&total)) != NVML_SUCCESS) {
        snprintf(why, size, "NVML does not count the GPUs (nvmlDeviceGetCount_v2: %s)",
                 error_of(n, r));
        goto out_shutdown;
    }
    list_gpus(n, total);
    memset(raw, 0, sizeof(raw));
    if (driver && driver(raw, sizeof(raw)) == NVML_SUCCESS)
        copy_string(n->driver, sizeof(n->driver), raw, sizeof(raw));
    /* A first round of queries inside the window: a descriptor NVML opens
     * on its first query is caught too. */
    for (unsigned k = 0; k < n->ngpus; k++) {
        struct nvml_gpu scratch = n->gpu[k];

        sample_gpu(n, n->dev[k], &scratch);
    }
    cloexec_since(fds[0], fds[1]);
    free(fds);
    return n;

out_shutdown:
    n->shutdown();
out_close:
    dlclose(n->lib);
out_free:
    free(fds);
    free(n);
    errno = err;
    return NULL;
}

const char *nvml_driver(const struct nvml *n)
{
    return n ? n->driver : "";
}

int nvml_sample(struct nvml *n, struct nvml_gpu *out, unsigned max)
{
    unsigned k;

    if (!n || (!out && max))
        return -EINVAL;
    for (k = 0; k < n->ngpus && k < max; k++) {
        out[k] = n->gpu[k];
        sample_gpu(n, n->dev[k], &out[k]);
    }
    return (int)k;
}

struct nvml *nvml_close(struct nvml *n)
{
    if (!n)
        return NULL;
    n->shutdown();
    dlclose(n->lib);
    free(n);
    return NULL;
}
