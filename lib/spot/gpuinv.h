/* gpuinv: which CUDA processes the criu method dumped, and on which GPUs
 * (spotd-gpu.json in the images), against the GPUs of the machine that
 * restores them.  Parsers and a comparison, no I/O; the images come from
 * the store, so every byte is checked.
 *
 *   {"processes":[2,7],"inventory":{"driver":"550.54.15","gpus":[
 *     {"model":"NVIDIA H100 80GB HBM3","uuid":"GPU-..."}]}}
 *
 * "inventory" is null when NVML did not answer at the dump. */
#ifndef SPOT_GPUINV_H
#define SPOT_GPUINV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GPUINV_MAX_GPUS 64
#define GPUINV_MAX_PROCS 256

struct gpuinv {
    bool known;                    /* an inventory is there */
    char driver[32];               /* printable */
    uint32_t ngpus;
    char model[GPUINV_MAX_GPUS][96]; /* printable */
    uint32_t nprocs;
    int procs[GPUINV_MAX_PROCS];   /* pids in the command's namespace, > 0 */
};

/* The images' record.  Returns 0 with *ret set, or -EINVAL with the reason
 * in *why (static) and *ret untouched. */
int gpuinv_parse_images(const char *text, size_t len, struct gpuinv *ret, const char **why);

/* An inventory alone, as `spotd _cuda inventory` prints it; the same
 * contract. */
int gpuinv_parse_inventory(const char *text, size_t len, struct gpuinv *ret, const char **why);

/* The same GPUs, model for model (UUIDs and drivers may differ): 0.
 * Otherwise -1, with "N GPUs (MODEL, ...)" of each side in msg; here NULL
 * or not known means the machine has no NVIDIA driver.  A saved record
 * without an inventory compares equal (there is nothing to hold against). */
int gpuinv_compare(const struct gpuinv *saved, const struct gpuinv *here, char *msg,
                   size_t size);

#endif
