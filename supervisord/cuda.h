/* cuda: NVIDIA GPUs for the criu method, through the driver loaded at run
 * time (dlopen of libcuda.so.1 and libnvidia-ml.so.1): spotd runs the same
 * on machines without them.
 *
 * A snapshot of a tree with CUDA processes (each holding /dev/nvidia*):
 *
 *   spotd _cuda checkpoint TIMEOUT_MS PID...   lock each, then checkpoint
 *                                               its GPU memory into host
 *                                               memory; on any failure all
 *                                               are restored and unlocked
 *   criu dump
 *   spotd _cuda restore PID...                 restore and unlock each
 *
 * and after a criu restore, `spotd _cuda restore` on the restored tree.
 * Exit status: 0 done, 1 failed (the processes left running and
 * unlocked), 2 usage, 3 no driver with the checkpoint API (driver 550 or
 * later); what failed on stderr. */
#ifndef SPOTD_CUDA_H
#define SPOTD_CUDA_H

#include <stddef.h>
#include <sys/types.h>

/* `spotd _cuda ...`; argv[1] is "_cuda". */
int cuda_main(int argc, char **argv);

/* The processes of root's tree (root included) that hold an NVIDIA device
 * open, into out (at most max); how many. */
size_t cuda_gpu_processes(pid_t root, pid_t *out, size_t max);

/* Whether pid has NCCL loaded (libnccl in its maps). */
int cuda_uses_nccl(pid_t pid);

/* pid's number in its innermost PID namespace, -1 when unknown. */
int cuda_nspid(pid_t pid);
/* The processes of root's tree whose innermost pids are among nspids
 * (n of them), into out (room for n); how many. */
size_t cuda_find_nspids(pid_t root, const int *nspids, size_t n, pid_t *out);

/* The GPUs through NVML (nvml.h: printable strings), as JSON:
 * {"driver":"550.54","gpus":[{"model":"NVIDIA H100 80GB HBM3","uuid":
 * "GPU-..."}]}.  -ENOENT without NVML, -ENODEV when it does not answer,
 * -ENOSPC when size is too small. */
int cuda_inventory(char *buf, size_t size);

#endif
