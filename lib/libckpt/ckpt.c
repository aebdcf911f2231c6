#include "ckpt.h"

#define CKPT_API __attribute__((visibility("default")))

#define STR_(x) #x
#define STR(x) STR_(x)

static const char *const messages[] = {
    [0] = "success",
    [1] = "invalid argument",
    [2] = "out of memory",
    [3] = "cannot connect to spotd's control socket",
    [4] = "protocol error: unexpected message from spotd",
    [5] = "spotd speaks an unsupported protocol version",
    [6] = "call not valid in the current state",
    [7] = "spotd closed the connection",
    [8] = "system call failed (see errno)",
};

CKPT_API const char *ckpt_strerror(int err)
{
    unsigned idx = err <= 0 ? (unsigned)-(long)err : ~0u;

    if (idx < sizeof(messages) / sizeof(messages[0]) && messages[idx])
        return messages[idx];
    return "unknown error";
}

CKPT_API const char *ckpt_version(void)
{
    return STR(CKPT_VERSION_MAJOR) "." STR(CKPT_VERSION_MINOR) "." STR(CKPT_VERSION_PATCH);
}
