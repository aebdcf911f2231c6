/* Run a fuzz target over every file of the corpus directories given. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf;
    long size;

    if (!f)
        return -1;
    if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return -1;
    }
    buf = malloc((size_t)size + 1);
    if (!buf || fread(buf, 1, (size_t)size, f) != (size_t)size) {
        free(buf);
        fclose(f);
        return -1;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, (size_t)size);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    int inputs = 0, failed = 0;

    for (int i = 1; i < argc; i++) {
        DIR *d = opendir(argv[i]);
        struct dirent *de;
        if (!d) {
            printf("FAIL: fuzz corpus %s cannot be opened\n", argv[i]);
            return 1;
        }
        while ((de = readdir(d))) {
            char path[4096];
            if (de->d_name[0] == '.')
                continue;
            snprintf(path, sizeof(path), "%s/%s", argv[i], de->d_name);
            if (run_file(path) < 0) {
                printf("  cannot read %s\n", path);
                failed++;
            }
            inputs++;
        }
        closedir(d);
    }
    printf("%s: fuzz replay of %d inputs (%s)\n", failed || inputs == 0 ? "FAIL" : "PASS", inputs,
           argc > 1 ? argv[1] : "no corpus");
    return failed || inputs == 0;
}
