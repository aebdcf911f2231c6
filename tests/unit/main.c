#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"

int harness_failed;

#define T(name) void test_##name(void);
#include "tests.def"
#undef T

static const struct harness_test tests[] = {
#define T(name) { #name, test_##name },
#include "tests.def"
#undef T
};

int main(int argc, char **argv)
{
    int passed = 0, failed = 0;

    /* As spotd: a write to a peer that went away is an error, not a death. */
    signal(SIGPIPE, SIG_IGN);
    for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
        if (argc > 1 && !strstr(tests[i].name, argv[1]))
            continue;
        harness_failed = 0;
        tests[i].fn();
        printf("%s: unit/%s\n", harness_failed ? "FAIL" : "PASS", tests[i].name);
        fflush(stdout);
        if (harness_failed)
            failed++;
        else
            passed++;
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
