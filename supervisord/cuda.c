/* cuda: the CUDA driver's checkpoint API and NVML, loaded at run time
 * (cuda.h).
 *
 * Every call of the driver happens in `spotd _cuda`, a process of its own
 * that the criu method starts: a lock or a checkpoint of GPU memory can
 * take seconds, which spotd's loop must not wait through, and spotd itself
 * never initialises CUDA (a CUDA process that forks is not a place to
 * be).  The declarations below are the driver's ABI (cuda.h of CUDA 12.4
 * and later, driver 550 and later), written out so that spotd builds
 * without the CUDA toolkit. */
#include "cuda.h"
#include "nvml.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "spot/notice.h"
#include "spot/parse.h"
#include "spot/proc.h"

typedef int CUresult; /* CUDA_SUCCESS is 0 */

enum { CU_PROCESS_STATE_RUNNING, CU_PROCESS_STATE_LOCKED, CU_PROCESS_STATE_CHECKPOINTED,
       CU_PROCESS_STATE_FAILED };

typedef struct {
    unsigned int timeoutMs;
    unsigned int reserved0;
    uint64_t reserved1[7];
} CUcheckpointLockArgs;

/* The checkpoint, restore and unlock arguments: 64 reserved bytes, zero. */
typedef struct {
    uint64_t reserved[8];
} CUcheckpointArgs;

static struct {
    void *lib;
    CUresult (*init)(unsigned int);
    CUresult (*version)(int *);
    CUresult (*get_error)(CUresult, const char **);
    CUresult (*state)(int, int *);
    CUresult (*lock)(int, CUcheckpointLockArgs *);
    CUresult (*checkpoint)(int, CUcheckpointArgs *);
    CUresult (*restore)(int, CUcheckpointArgs *);
    CUresult (*unlock)(int, CUcheckpointArgs *);
} cu;

static const char *cu_error(CUresult r)
{
    const char *s = NULL;

    if (cu.get_error && cu.get_error(r, &s) == 0 && s)
        return s;
    return "unknown CUDA error";
}

/* The driver with the checkpoint API: 0, or -1 after saying why. */
static int load(void)
{
    int v = 0;
    CUresult r;

    if (!(cu.lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL))) {
        fprintf(stderr, "no CUDA driver (libcuda.so.1): %s\n", dlerror());
        return -1;
    }
    *(void **)&cu.init = dlsym(cu.lib, "cuInit");
    *(void **)&cu.version = dlsym(cu.lib, "cuDriverGetVersion");
    *(void **)&cu.get_error = dlsym(cu.lib, "cuGetErrorString");
    *(void **)&cu.state = dlsym(cu.lib, "cuCheckpointProcessGetState");
    *(void **)&cu.lock = dlsym(cu.lib, "cuCheckpointProcessLock");
    *(void **)&cu.checkpoint = dlsym(cu.lib, "cuCheckpointProcessCheckpoint");
    *(void **)&cu.restore = dlsym(cu.lib, "cuCheckpointProcessRestore");
    *(void **)&cu.unlock = dlsym(cu.lib, "cuCheckpointProcessUnlock");
    if (!cu.init || !cu.version || !cu.state || !cu.lock || !cu.checkpoint || !cu.restore ||
        !cu.unlock) {
        fprintf(stderr, "the CUDA driver has no checkpoint API (cuCheckpointProcess*: driver "
                "550 or later)\n");
        return -1;
    }
    if ((r = cu.init(0)) != 0) {
        fprintf(stderr, "cuInit: %s\n", cu_error(r));
        return -1;
    }
    if (cu.version(&v) == 0 && v < 12040) {
        fprintf(stderr, "the CUDA driver supports CUDA %d.%d; its checkpoint API needs 12.4 "
                "(driver 550) or later\n", v / 1000, v % 1000 / 10);
        return -1;
    }
    return 0;
}

/* The state of pid, or -1 when it is not a CUDA process. */
static int state_of(pid_t pid)
{
    int s = -1;

    return cu.state((int)pid, &s) == 0 ? s : -1;
}

static const char *state_name(int s)
{
    static const char *const names[] = { "running", "locked", "checkpointed", "failed" };

    return s >= 0 && s <= CU_PROCESS_STATE_FAILED ? names[s] : "not a CUDA process";
}

/* Back to running and unlocked, from wherever pid got: best effort. */
static void undo(pid_t pid)
{
    CUcheckpointArgs a = { { 0 } };

    if (state_of(pid) == CU_PROCESS_STATE_CHECKPOINTED)
        cu.restore((int)pid, &a);
    if (state_of(pid) == CU_PROCESS_STATE_LOCKED)
        cu.unlock((int)pid, &a);
}

/* Lock every CUDA process of pids (within timeout_ms in all), then
 * checkpoint each; any failure puts all of them back. */
static int lock_checkpoint(pid_t *pids, size_t n, unsigned timeout_ms)
{
    int64_t end = notice_mono_ms() + timeout_ms;
    size_t done = 0;
    CUresult r;

    for (; done < n; done++) {
        int64_t left = end - notice_mono_ms();
        CUcheckpointLockArgs la = { .timeoutMs = left > 0 ? (unsigned)left : 1 };
        CUcheckpointArgs ca = { { 0 } };
        int64_t t0 = notice_mono_ms(), t1;

        if ((r = cu.lock((int)pids[done], &la)) != 0) {
            fprintf(stderr, "cannot lock CUDA process %d: %s\n", (int)pids[done], cu_error(r));
            break;
        }
        t1 = notice_mono_ms();
        printf("pid %d lock_ms %lld\n", (int)pids[done], (long long)(t1 - t0));
        if ((r = cu.checkpoint((int)pids[done], &ca)) != 0) {
            fprintf(stderr, "cannot checkpoint CUDA process %d: %s\n", (int)pids[done],
                    cu_error(r));
            break;
        }
        printf("pid %d checkpoint_ms %lld\n", (int)pids[done], (long long)(notice_mono_ms() - t1));
        fflush(stdout);
        if (state_of(pids[done]) != CU_PROCESS_STATE_CHECKPOINTED) {
            fprintf(stderr, "CUDA process %d is %s after its checkpoint\n", (int)pids[done],
                    state_name(state_of(pids[done])));
            break;
        }
    }
    if (done == n)
        return 0;
    for (size_t i = 0; i <= done && i < n; i++)
        undo(pids[i]);
    return -1;
}

static int restore_unlock(pid_t *pids, size_t n)
{
    int bad = 0;

    for (size_t i = 0; i < n; i++) {
        CUcheckpointArgs a = { { 0 } };
        int64_t t0 = notice_mono_ms();
        CUresult r;

        if (state_of(pids[i]) == CU_PROCESS_STATE_CHECKPOINTED &&
            (r = cu.restore((int)pids[i], &a)) != 0) {
            fprintf(stderr, "cannot restore CUDA process %d: %s\n", (int)pids[i], cu_error(r));
            bad = 1;
            continue;
        }
        if (state_of(pids[i]) == CU_PROCESS_STATE_LOCKED &&
            (r = cu.unlock((int)pids[i], &a)) != 0) {
            fprintf(stderr, "cannot unlock CUDA process %d: %s\n", (int)pids[i], cu_error(r));
            bad = 1;
            continue;
        }
        if (state_of(pids[i]) != CU_PROCESS_STATE_RUNNING) {
            fprintf(stderr, "CUDA process %d is %s, not running\n", (int)pids[i],
                    state_name(state_of(pids[i])));
            bad = 1;
            continue;
        }
        printf("pid %d restore_ms %lld\n", (int)pids[i], (long long)(notice_mono_ms() - t0));
        fflush(stdout);
    }
    return bad ? -1 : 0;
}

/* ---- which processes hold a GPU --------------------------------------------- */

/* Whether pid has an NVIDIA device open: the sign of a CUDA process, read
 * without the driver. */
static int holds_gpu(pid_t pid)
{
    char path[64], link[256];
    struct dirent *d;
    DIR *dp;
    int found = 0;

    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    if (!(dp = opendir(path)))
        return 0;
    while (!found && (d = readdir(dp))) {
        char fd[340];
        ssize_t len;

        snprintf(fd, sizeof(fd), "%s/%s", path, d->d_name);
        len = readlink(fd, link, sizeof(link) - 1);
        if (len <= 0)
            continue;
        link[len] = '\0';
        found = strncmp(link, "/dev/nvidia", 11) == 0;
    }
    closedir(dp);
    return found;
}

int cuda_uses_nccl(pid_t pid)
{
    char path[64], line[512];
    int found = 0;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
    if (!(f = fopen(path, "re")))
        return 0;
    while (!found && fgets(line, sizeof(line), f))
        found = strstr(line, "libnccl") != NULL;
    fclose(f);
    return found;
}

size_t cuda_gpu_processes(pid_t root, pid_t *out, size_t max)
{
    pid_t all[4096];
    size_t n = proc_tree(root, all, sizeof(all) / sizeof(all[0])), k = 0;

    for (size_t i = 0; i < n && k < max; i++)
        if (holds_gpu(all[i]))
            out[k++] = all[i];
    return k;
}

int cuda_nspid(pid_t pid)
{
    char path[64], line[256];
    int v = -1;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    if (!(f = fopen(path, "re")))
        return -1;
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, "NSpid:", 6) == 0) {
            /* The last field: the pid in the innermost namespace. */
            for (char *p = line + 6, *e; *p; p = e) {
                long x = strtol(p, &e, 10);
                if (e == p)
                    break;
                v = (int)x;
            }
            break;
        }
    fclose(f);
    return v;
}

size_t cuda_find_nspids(pid_t root, const int *nspids, size_t n, pid_t *out)
{
    pid_t all[4096];
    size_t m = proc_tree(root, all, sizeof(all) / sizeof(all[0])), k = 0;

    for (size_t i = 0; i < m && k < n; i++) {
        int ns = cuda_nspid(all[i]);
        for (size_t j = 0; j < n; j++)
            if (ns == nspids[j]) {
                out[k++] = all[i];
                break;
            }
    }
    return k;
}

/* ---- the inventory (NVML: nvml.c) ---------------------------------------------- */

int cuda_inventory(char *buf, size_t size)
{
    struct nvml_gpu gpu[NVML_GPUS_MAX];
    struct nvml *n;
    char why[256];
    size_t len = 0;
    int count;

    if (!(n = nvml_open(why, sizeof(why))))
        return errno == ENOENT ? -ENOENT : -ENODEV;
    count = nvml_sample(n, gpu, NVML_GPUS_MAX);
    /* nvml.h's strings hold no '"' or '\': they go into JSON as they are. */
    len += (size_t)snprintf(buf + len, size - len, "{\"driver\":\"%s\",\"gpus\":[",
                            nvml_driver(n));
    for (int i = 0; i < count && len < size; i++)
        len += (size_t)snprintf(buf + len, size - len, "%s{\"model\":\"%s\",\"uuid\":\"%s\"}",
                                i ? "," : "", gpu[i].name, gpu[i].uuid);
    if (len < size)
        len += (size_t)snprintf(buf + len, size - len, "]}");
    nvml_close(n);
    return len < size ? 0 : -ENOSPC;
}

/* ---- spotd _cuda ------------------------------------------------------------------ */

int cuda_main(int argc, char **argv)
{
    uint64_t v, timeout = 0;
    pid_t pids[256];
    size_t n = 0;

    if (argc >= 3 && strcmp(argv[2], "inventory") == 0) {
        char buf[8192];
        int r = cuda_inventory(buf, sizeof(buf));
        if (r < 0) {
            fprintf(stderr, "no NVIDIA GPU inventory: %s\n",
                    r == -ENOENT ? "NVML (libnvidia-ml.so.1) is not installed" : strerror(-r));
            return 3;
        }
        printf("%s\n", buf);
        return 0;
    }
    if (argc < 4 || (strcmp(argv[2], "checkpoint") != 0 && strcmp(argv[2], "restore") != 0)) {
        fprintf(stderr, "usage: spotd _cuda checkpoint TIMEOUT_MS PID...\n"
                        "       spotd _cuda restore PID...\n"
                        "       spotd _cuda inventory\n");
        return 2;
    }
    for (int i = strcmp(argv[2], "checkpoint") == 0 ? 4 : 3; i < argc && n < 256; i++) {
        if (parse_u64(argv[i], 1, INT32_MAX, &v) < 0) {
            fprintf(stderr, "spotd _cuda: '%s' is not a pid\n", argv[i]);
            return 2;
        }
        pids[n++] = (pid_t)v;
    }
    if (strcmp(argv[2], "checkpoint") == 0 && parse_u64(argv[3], 1, UINT32_MAX, &timeout) < 0) {
        fprintf(stderr, "spotd _cuda: '%s' is not a timeout in ms\n", argv[3]);
        return 2;
    }
    if (load() < 0)
        return 3;
    if (strcmp(argv[2], "checkpoint") == 0)
        return lock_checkpoint(pids, n, (unsigned)timeout) < 0 ? 1 : 0;
    return restore_unlock(pids, n) < 0 ? 1 : 0;
}
