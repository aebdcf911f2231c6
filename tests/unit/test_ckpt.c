#include "ckpt.h"
#include "harness.h"

TEST(ckpt_strerror)
{
    CHECK_STR(ckpt_strerror(CKPT_OK), "success");
    CHECK_STR(ckpt_strerror(CKPT_E_CONNECT), "cannot connect to spotd's control socket");
    CHECK_STR(ckpt_strerror(CKPT_E_IO), "system call failed (see errno)");
    CHECK_STR(ckpt_strerror(-9), "unknown error");
    CHECK_STR(ckpt_strerror(1), "unknown error");
    CHECK_STR(ckpt_strerror(-2147483647 - 1), "unknown error");
    CHECK_STR(ckpt_version(), "0.1.0");
}
