#include <errno.h>
#include <signal.h>
#include <stdint.h>

#include "harness.h"
#include "spot/parse.h"

TEST(parse_u64)
{
    uint64_t v = 7;

    CHECK_INT(parse_u64("0", 0, 10, &v), 0);
    CHECK_INT(v, 0);
    CHECK_INT(parse_u64("10", 0, 10, &v), 0);
    CHECK_INT(v, 10);
    CHECK_INT(parse_u64("11", 0, 10, &v), -ERANGE);
    CHECK_INT(parse_u64("18446744073709551615", 0, UINT64_MAX, &v), 0);
    CHECK(v == UINT64_MAX);
    CHECK_INT(parse_u64("18446744073709551616", 0, UINT64_MAX, &v), -ERANGE);
    v = 5;
    CHECK_INT(parse_u64("", 0, 10, &v), -EINVAL);
    CHECK_INT(parse_u64("-1", 0, 10, &v), -EINVAL);
    CHECK_INT(parse_u64("+1", 0, 10, &v), -EINVAL);
    CHECK_INT(parse_u64(" 1", 0, 10, &v), -EINVAL);
    CHECK_INT(parse_u64("1 ", 0, 10, &v), -EINVAL);
    CHECK_INT(parse_u64("0x1", 0, 10, &v), -EINVAL);
    CHECK_INT(parse_u64(NULL, 0, 10, &v), -EINVAL);
    CHECK_INT(v, 5); /* untouched on failure */
}

TEST(parse_duration)
{
    static const struct {
        const char *in;
        int ret;
        uint64_t ms;
    } cases[] = {
        { "500ms", 0, 500 },     { "30s", 0, 30000 },        { "5m", 0, 300000 },
        { "1h", 0, 3600000 },    { "0", 0, 0 },              { "0s", 0, 0 },
        { "720h", 0, 2592000000ULL },
        { "721h", -ERANGE, 0 },  { "99999999999999999999999h", -ERANGE, 0 },
        { "5", -EINVAL, 0 },     { "", -EINVAL, 0 },         { "s", -EINVAL, 0 },
        { "5x", -EINVAL, 0 },    { "5 s", -EINVAL, 0 },      { "5S", -EINVAL, 0 },
        { "1.5s", -EINVAL, 0 },  { "-1s", -EINVAL, 0 },      { "5sec", -EINVAL, 0 },
        { "1h30m", -EINVAL, 0 }, { "ms", -EINVAL, 0 },
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint64_t ms = 12345;
        int r = parse_duration(cases[i].in, &ms);
        if (r != cases[i].ret || (r == 0 && ms != cases[i].ms) || (r != 0 && ms != 12345)) {
            printf("  parse_duration(\"%s\") = %d, %llu; expected %d, %llu\n", cases[i].in, r,
                   (unsigned long long)ms, cases[i].ret, (unsigned long long)cases[i].ms);
            harness_failed = 1;
        }
    }
}

TEST(parse_duration_format)
{
    char buf[32];
    static const uint64_t round_trip[] = { 0, 1, 999, 1000, 1500, 60000, 90000, 3600000,
                                           5400000, PARSE_DURATION_MAX_MS };

    CHECK_STR(parse_format_duration(0, buf, sizeof(buf)), "0s");
    CHECK_STR(parse_format_duration(500, buf, sizeof(buf)), "500ms");
    CHECK_STR(parse_format_duration(30000, buf, sizeof(buf)), "30s");
    CHECK_STR(parse_format_duration(90000, buf, sizeof(buf)), "90s");
    CHECK_STR(parse_format_duration(300000, buf, sizeof(buf)), "5m");
    CHECK_STR(parse_format_duration(3600000, buf, sizeof(buf)), "1h");
    for (size_t i = 0; i < sizeof(round_trip) / sizeof(round_trip[0]); i++) {
        uint64_t back = 0;
        CHECK_INT(parse_duration(parse_format_duration(round_trip[i], buf, sizeof(buf)), &back), 0);
        CHECK_INT(back, round_trip[i]);
    }
}

TEST(parse_signal)
{
    CHECK_INT(parse_signal("TERM"), SIGTERM);
    CHECK_INT(parse_signal("SIGTERM"), SIGTERM);
    CHECK_INT(parse_signal("term"), SIGTERM);
    CHECK_INT(parse_signal("sigint"), SIGINT);
    CHECK_INT(parse_signal("USR2"), SIGUSR2);
    CHECK_INT(parse_signal("9"), 9);
    CHECK_INT(parse_signal("64"), 64);
    CHECK_INT(parse_signal("65"), -EINVAL);
    CHECK_INT(parse_signal("0"), -EINVAL);
    CHECK_INT(parse_signal("SIG"), -EINVAL);
    CHECK_INT(parse_signal("TERMINATE"), -EINVAL);
    CHECK_INT(parse_signal(""), -EINVAL);
    CHECK_STR(parse_signal_name(SIGKILL), "KILL");
    CHECK_STR(parse_signal_name(SIGUSR1), "USR1");
    CHECK(parse_signal_name(0) == NULL);
    for (int s = 1; s < 32; s++) {
        const char *n = parse_signal_name(s);
        if (n)
            CHECK_INT(parse_signal(n), s);
    }
}
