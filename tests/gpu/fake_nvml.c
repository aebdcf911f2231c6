/* A TEST DOUBLE of the NVIDIA driver's libnvidia-ml.so.1, built only for
 * the tests (make builds it as $(O)/tests/gpu/fake/libnvidia-ml.so.1; it is
 * never installed).  Loaded through LD_LIBRARY_PATH in place of the real
 * library, it lets the parsing path of supervisord/nvml.c and `spotd _cuda
 * inventory` run on machines without a GPU (tests/integration/t-nvml.sh).
 * It proves nothing about the real driver: that path is checked by
 * tests/gpu/run.sh on a machine with an NVIDIA GPU.
 *
 * It exports the NVML symbols spotd uses, with the signatures of NVML's
 * nvml.h, and answers fixed values for two GPUs:
 *
 *   0  "NVIDIA H100 80GB HBM3", GPU-00000000-1111-2222-3333-444444444444:
 *      87 % busy, 12 GiB of 80 GiB used, 64 C, 312456 mW
 *   1  a name with a tab, quotes and a backslash, and a UUID that fills the
 *      whole buffer without a terminator (untrusted strings); 3 % busy,
 *      1 GiB of 24 GiB used, 41 C, power NVML_ERROR_NOT_SUPPORTED
 *
 * Like NVML it counts nvmlInit_v2 against nvmlShutdown, refuses queries
 * when not initialised and handles that are not its own, and it opens
 * /dev/null without O_CLOEXEC at the first initialisation (as the driver's
 * library opens /dev/nvidiactl), closed at the last shutdown:
 * fake_nvml_inits() and fake_nvml_fd() let a test look. */
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;

enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
};

EXPORT nvmlReturn_t nvmlInit_v2(void);
EXPORT nvmlReturn_t nvmlShutdown(void);
EXPORT const char *nvmlErrorString(nvmlReturn_t r);
EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length);
EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count);
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device);
EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length);
EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length);
EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *u);
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory);
EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor, unsigned int *temp);
EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power);
/* Not NVML's: for the tests to look inside. */
EXPORT int fake_nvml_inits(void);
EXPORT int fake_nvml_fd(void);

#define GIB (1024ull * 1024 * 1024)

struct nvmlDevice_st {
    const char *name, *uuid;
    unsigned util, temp, power_mw; /* power_mw 0: NOT_SUPPORTED */
    unsigned long long total, used;
};

static struct nvmlDevice_st gpus[2] = {
    { "NVIDIA H100 80GB HBM3", "GPU-00000000-1111-2222-3333-444444444444", 87, 64, 312456,
      80 * GIB, 12 * GIB },
    { "Fake\tGPU \"1\" \\ 24GB", NULL /* the whole buffer, unterminated */, 3, 41, 0, 24 * GIB,
      1 * GIB },
};
static int inits, fd = -1;

nvmlReturn_t nvmlInit_v2(void)
{
    if (inits++ == 0)
        fd = open("/dev/null", O_RDONLY); /* no O_CLOEXEC, on purpose */
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlShutdown(void)
{
    if (inits > 0 && --inits == 0) {
        close(fd);
        fd = -1;
    }
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t r)
{
    switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    default: return "Unknown Error";
    }
}

static nvmlReturn_t copy(const char *s, char *out, unsigned int length)
{
    if (!out)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(s) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(out, s, strlen(s) + 1);
    return NVML_SUCCESS;
}

/* The device, when d is one of ours and NVML is initialised. */
static nvmlReturn_t check(nvmlDevice_t d, const void *out)
{
    if (!inits)
        return NVML_ERROR_UNINITIALIZED;
    return (d == &gpus[0] || d == &gpus[1]) && out ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    return inits ? copy("555.42.06", version, length) : NVML_ERROR_UNINITIALIZED;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
    if (!inits)
        return NVML_ERROR_UNINITIALIZED;
    *count = 2;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    if (!inits)
        return NVML_ERROR_UNINITIALIZED;
    if (index >= 2 || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = &gpus[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int length)
{
    nvmlReturn_t r = check(d, name);

    return r != NVML_SUCCESS ? r : copy(d->name, name, length);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int length)
{
    nvmlReturn_t r = check(d, uuid);

    if (r != NVML_SUCCESS)
        return r;
    if (d->uuid)
        return copy(d->uuid, uuid, length);
    /* A driver that does not terminate: "GPU-ffff...", every byte given. */
    memset(uuid, 'f', length);
    memcpy(uuid, "GPU-", length < 4 ? length : 4);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u)
{
    nvmlReturn_t r = check(d, u);

    if (r == NVML_SUCCESS)
        *u = (nvmlUtilization_t){ .gpu = d->util, .memory = d->util / 2 };
    return r;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m)
{
    nvmlReturn_t r = check(d, m);

    if (r == NVML_SUCCESS)
        *m = (nvmlMemory_t){ .total = d->total, .free = d->total - d->used, .used = d->used };
    return r;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned int *temp)
{
    nvmlReturn_t r = check(d, temp);

    if (r == NVML_SUCCESS && sensor != 0) /* NVML_TEMPERATURE_GPU only */
        return NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        *temp = d->temp;
    return r;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *power)
{
    nvmlReturn_t r = check(d, power);

    if (r == NVML_SUCCESS && !d->power_mw)
        return NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS)
        *power = d->power_mw;
    return r;
}

int fake_nvml_inits(void)
{
    return inits;
}

int fake_nvml_fd(void)
{
    return fd;
}
