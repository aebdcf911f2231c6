// devmem: state in GPU memory, for tests/gpu/run.sh.
//
//   devmem MIB STEPS
//
// Keeps MIB MiB in device memory, updated by a kernel at each step, and
// prints "done STEPS sum S" at the end: S the same for every run that was
// not damaged, whether or not the process was checkpointed and restored on
// the way.  Each step lasts about 20 ms.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
#include <unistd.h>

__global__ void step(unsigned long long *v, size_t n, unsigned long long s)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n)
        v[i] = v[i] * 6364136223846793005ull + s + i;
}

__global__ void fold(const unsigned long long *v, size_t n, unsigned long long *out)
{
    unsigned long long acc = 0;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x)
        acc ^= v[i] + i;
    atomicXor(out, acc);
}

static void check(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) {
        fprintf(stderr, "devmem: %s: %s\n", what, cudaGetErrorString(e));
        exit(1);
    }
}

int main(int argc, char **argv)
{
    size_t mib = argc == 3 ? atol(argv[1]) : 0, n = mib << 17;
    long steps = argc == 3 ? atol(argv[2]) : 0;
    unsigned long long *v, *out, sum = 0;

    if (!mib || steps <= 0) {
        fprintf(stderr, "usage: devmem MIB STEPS\n");
        return 2;
    }
    check(cudaMalloc(&v, n * sizeof(*v)), "cudaMalloc");
    check(cudaMalloc(&out, sizeof(*out)), "cudaMalloc");
    check(cudaMemset(v, 0, n * sizeof(*v)), "cudaMemset");
    printf("devmem: %zu MiB on the GPU\n", mib);
    fflush(stdout);
    for (long s = 0; s < steps; s++) {
        step<<<(unsigned)((n + 255) / 256), 256>>>(v, n, (unsigned long long)s);
        check(cudaDeviceSynchronize(), "step");
        if (s % 100 == 0) {
            printf("step %ld\n", s);
            fflush(stdout);
        }
        usleep(20000);
    }
    check(cudaMemset(out, 0, sizeof(*out)), "cudaMemset");
    fold<<<1, 256>>>(v, n, out);
    check(cudaMemcpy(&sum, out, sizeof(sum), cudaMemcpyDeviceToHost), "cudaMemcpy");
    printf("done %ld sum %016llx\n", steps, sum);
    return 0;
}
