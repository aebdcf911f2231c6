/* nvml: the node's NVIDIA GPUs through NVML (libnvidia-ml.so.1), loaded at
 * run time and never linked: spotd runs the same on machines without it,
 * where nvml_open() says why and nothing else happens.
 *
 * The GPUs are listed once, at open (index, UUID and name do not change
 * while the driver is loaded); each sample then asks NVML for every GPU's
 * utilization, memory, temperature and power.  A metric a GPU does not
 * report (NVML_ERROR_NOT_SUPPORTED, or any other failure of that one
 * query: a GPU fallen off the bus, a permission) is absent from that
 * sample, never made up and never an error: a gauge should disappear, not
 * lie.
 *
 * Names and UUIDs come from the driver and are treated as untrusted:
 * copied bounded, always terminated, printable ASCII with '"' and '\'
 * turned into '?', so they can go into JSON strings and Prometheus label
 * values without further thought.
 *
 * NVML's calls block: nvml_open() can take seconds (the driver brings the
 * GPUs up when no persistence daemon holds them), a sample about a
 * millisecond per GPU.  Open once, sample at most about once a second.
 * Every file descriptor the library opens during nvml_open() is made
 * close-on-exec, so the command spotd starts never inherits /dev/nvidia*
 * (the criu method takes a process holding one for a CUDA process). */
#ifndef SPOTD_NVML_H
#define SPOTD_NVML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The most GPUs nvml_open() records (the criu method's inventory holds as
 * many); the rest of a larger machine is left out. */
#define NVML_GPUS_MAX 64

struct nvml;

struct nvml_gpu {
    unsigned index;                /* NVML's index of the GPU */
    char uuid[96];                 /* "GPU-...", printable; "" when NVML had none */
    char name[96];                 /* "NVIDIA H100 80GB HBM3", printable; "" when none */
    bool has_util, has_mem, has_temp, has_power;
    double util_ratio;             /* 0..1: nvmlDeviceGetUtilizationRates' .gpu / 100 */
    uint64_t mem_used, mem_total;  /* bytes: nvmlDeviceGetMemoryInfo */
    double temp_c;                 /* degrees Celsius: the GPU die's sensor */
    double power_w;                /* watts: nvmlDeviceGetPowerUsage's milliwatts / 1000 */
};

/* Load NVML, initialise it and list the GPUs.  NULL when NVML is absent
 * (errno ENOENT: libnvidia-ml.so.1 cannot be loaded) or does not answer
 * (ENODEV: a symbol missing, no driver loaded, the count refused; ENOMEM),
 * with the reason in why (size bytes, always terminated when size > 0);
 * nothing is printed, and nothing stays loaded or open.  A machine with
 * the library and no GPU opens with 0 GPUs.  The caller owns the result
 * and closes it with nvml_close(). */
struct nvml *nvml_open(char *why, size_t size);

/* The driver's version ("550.54.15"), printable; "" when NVML did not say. */
const char *nvml_driver(const struct nvml *n);

/* Sample the GPUs listed at open, in NVML's index order, into out (at
 * most max of them).  Returns how many were written, or -EINVAL when n is
 * NULL or out is NULL with max > 0 (out untouched). */
int nvml_sample(struct nvml *n, struct nvml_gpu *out, unsigned max);

/* nvmlShutdown() and unload.  Takes NULL; returns NULL. */
struct nvml *nvml_close(struct nvml *n);

#endif
