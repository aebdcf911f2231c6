/* supervisord/nvml.c against whatever libnvidia-ml.so.1 this run finds:
 *
 *   none (this machine, CI)     nvml_open() says why, quietly, and leaves
 *                               nothing loaded, open or allocated behind
 *   the test double             exact values (tests/gpu/fake_nvml.c; run
 *                               by tests/integration/t-nvml.sh through
 *                               LD_LIBRARY_PATH)
 *   the real driver's           sane values (tests/gpu/run.sh, on a GPU)
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>

#include "harness.h"
#include "../../supervisord/nvml.h"

#define GIB (1024ull * 1024 * 1024)

static int count_fds(void)
{
    struct dirent *d;
    DIR *dp = opendir("/proc/self/fd");
    int n = 0;

    if (!dp)
        return -1;
    while ((d = readdir(dp)))
        n += d->d_name[0] != '.';
    closedir(dp);
    return n - 1; /* the directory's own */
}

static int printable(const char *s)
{
    for (; *s; s++)
        if (*s < 0x20 || *s > 0x7e || *s == '"' || *s == '\\')
            return 0;
    return 1;
}

/* NVML is not here: NULL, a reason, errno, and nothing left behind. */
static void absent(int fds_before, const char *why, int err)
{
    CHECK(err == ENOENT || err == ENODEV);
    CHECK(why[0] != '\0');
    CHECK(!strchr(why, '\n'));
    if (err == ENOENT) {
        CHECK_HAS(why, "libnvidia-ml.so.1");
        CHECK(dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_NOLOAD) == NULL);
    }
    CHECK_INT(count_fds(), fds_before);
}

static void fake(struct nvml *n)
{
    int (*inits)(void) = NULL, (*fd)(void) = NULL;
    struct nvml_gpu g[3], *a = &g[0], *b = &g[1];
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_NOLOAD);

    *(void **)&inits = dlsym(lib, "fake_nvml_inits");
    *(void **)&fd = dlsym(lib, "fake_nvml_fd");
    CHECK_STR(nvml_driver(n), "555.42.06");
    memset(g, 0xa5, sizeof(g));
    CHECK_INT(nvml_sample(n, g, 3), 2);
    CHECK_INT(a->index, 0);
    CHECK_STR(a->name, "NVIDIA H100 80GB HBM3");
    CHECK_STR(a->uuid, "GPU-00000000-1111-2222-3333-444444444444");
    CHECK(a->has_util && a->has_mem && a->has_temp && a->has_power);
    CHECK(a->util_ratio == 0.87);
    CHECK_INT(a->mem_used, 12 * GIB);
    CHECK_INT(a->mem_total, 80 * GIB);
    CHECK(a->temp_c == 64);
    CHECK(a->power_w == 312.456);
    /* The untrusted strings: printable, bounded, terminated. */
    CHECK_INT(b->index, 1);
    CHECK_STR(b->name, "Fake?GPU ?1? ? 24GB");
    CHECK_INT(strlen(b->uuid), sizeof(b->uuid) - 1);
    CHECK(strncmp(b->uuid, "GPU-ffff", 8) == 0 && printable(b->uuid));
    /* Power NOT_SUPPORTED: absent, the rest there. */
    CHECK(b->has_util && b->has_mem && b->has_temp && !b->has_power);
    CHECK(b->util_ratio == 0.03);
    CHECK_INT(b->mem_used, 1 * GIB);
    CHECK(b->temp_c == 41);
    CHECK_INT(((unsigned char *)&g[2])[0], 0xa5);
    /* Fewer places than GPUs: as many as fit. */
    memset(g, 0xa5, sizeof(g));
    CHECK_INT(nvml_sample(n, g, 1), 1);
    CHECK_STR(g[0].name, "NVIDIA H100 80GB HBM3");
    CHECK_INT(((unsigned char *)&g[1])[0], 0xa5);
    CHECK_INT(nvml_sample(n, NULL, 0), 0);
    CHECK_INT(nvml_sample(n, NULL, 2), -EINVAL);
    /* The descriptor the library opened without O_CLOEXEC has it now. */
    CHECK(fd && fd() >= 0 && (fcntl(fd(), F_GETFD) & FD_CLOEXEC));
    /* Closing shuts NVML down (lib holds the double loaded to look). */
    CHECK(inits && inits() == 1);
    CHECK(nvml_close(n) == NULL);
    CHECK(inits && inits() == 0);
    if (lib)
        dlclose(lib);
}

static void real(struct nvml *n)
{
    struct nvml_gpu g[NVML_GPUS_MAX];
    int k = nvml_sample(n, g, NVML_GPUS_MAX);

    printf("  NVML here: driver %s, %d GPUs\n", nvml_driver(n), k);
    CHECK(k >= 0);
    CHECK(printable(nvml_driver(n)));
    for (int i = 0; i < k; i++) {
        printf("  GPU %u %s %s util %.2f mem %llu/%llu temp %.0f power %.1f\n", g[i].index,
               g[i].uuid, g[i].name, g[i].util_ratio, (unsigned long long)g[i].mem_used,
               (unsigned long long)g[i].mem_total, g[i].temp_c, g[i].power_w);
        CHECK(printable(g[i].name) && printable(g[i].uuid));
        CHECK(!g[i].has_util || (g[i].util_ratio >= 0 && g[i].util_ratio <= 1));
        CHECK(!g[i].has_mem || g[i].mem_used <= g[i].mem_total);
    }
    nvml_close(n);
}

TEST(nvml_open)
{
    int fds = count_fds();
    struct nvml *n;
    char why[512];
    void *lib;

    memset(why, 0, sizeof(why));
    errno = 0;
    n = nvml_open(why, sizeof(why));
    if (!n) {
        absent(fds, why, errno);
    } else {
        lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_NOLOAD);
        if (lib && dlsym(lib, "fake_nvml_inits")) {
            fake(n);
            dlclose(lib);
            /* The real library may stay loaded or keep a descriptor. */
            CHECK(dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_NOLOAD) == NULL);
            CHECK_INT(count_fds(), fds);
        } else {
            real(n);
            if (lib)
                dlclose(lib);
        }
    }
    CHECK(nvml_close(NULL) == NULL);
    CHECK_STR(nvml_driver(NULL), "");
    CHECK_INT(nvml_sample(NULL, NULL, 0), -EINVAL);
    /* No room for a reason is no reason to fail otherwise. */
    if (!n)
        CHECK(nvml_open(NULL, 0) == NULL);
}
