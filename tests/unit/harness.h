/* A small unit-test harness.  Each test is a function; CHECK_* report the
 * values that differ and mark the current test failed; the runner prints
 * "PASS: unit/NAME" or "FAIL: unit/NAME" per test and a summary line. */
#ifndef HARNESS_H
#define HARNESS_H

#include <stdio.h>
#include <string.h>

extern int harness_failed;

#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (!(cond)) {                                                                \
            printf("  %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond);         \
            harness_failed = 1;                                                       \
        }                                                                             \
    } while (0)

#define CHECK_INT(a, b)                                                               \
    do {                                                                              \
        long long a_ = (long long)(a), b_ = (long long)(b);                           \
        if (a_ != b_) {                                                               \
            printf("  %s:%d: %s == %lld, expected %s == %lld\n", __FILE__, __LINE__,  \
                   #a, a_, #b, b_);                                                   \
            harness_failed = 1;                                                       \
        }                                                                             \
    } while (0)

#define CHECK_STR(a, b)                                                               \
    do {                                                                              \
        const char *a_ = (a), *b_ = (b);                                              \
        if (!a_ || !b_ || strcmp(a_, b_) != 0) {                                      \
            printf("  %s:%d: %s == \"%s\", expected \"%s\"\n", __FILE__, __LINE__,    \
                   #a, a_ ? a_ : "(null)", b_ ? b_ : "(null)");                       \
            harness_failed = 1;                                                       \
        }                                                                             \
    } while (0)

/* Substring check, for messages. */
#define CHECK_HAS(hay, needle)                                                        \
    do {                                                                              \
        const char *h_ = (hay), *n_ = (needle);                                       \
        if (!h_ || !strstr(h_, n_)) {                                                 \
            printf("  %s:%d: \"%s\" does not contain \"%s\"\n", __FILE__, __LINE__,   \
                   h_ ? h_ : "(null)", n_);                                           \
            harness_failed = 1;                                                       \
        }                                                                             \
    } while (0)

struct harness_test {
    const char *name;
    void (*fn)(void);
};

#define TEST(name) void test_##name(void); void test_##name(void)

#endif
