/* method: the table of methods, by name (method.h), and the few steps
 * that the signal and dir methods share.  Each method is its own file. */
#include "method.h"

#include <errno.h>
#include <string.h>

#include "child.h"

/* The code torchrun exits with when a worker failed, whatever its code. */
#define LAUNCHER_FAILED 1

const struct method_ops *method_find(const char *name)
{
    static const struct method_ops *const all[] = { &method_app, &method_signal, &method_dir,
                                                    &method_criu };

    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        if (strcmp(all[i]->name, name) == 0)
            return all[i];
    return NULL;
}

int method_send_signal(struct child *c, int sig, bool *sent, bool *launcher)
{
    bool l = child_runs_launcher(c);
    int r = child_signal_workers(c, sig);

    if ((r == -ESRCH && l) || r == -EAGAIN) {
        *sent = false;
        return 0;
    }
    if (r < 0)
        return r;
    *sent = true;
    *launcher = l;
    return 0;
}

bool method_exit_counts(int code, int exit_code, bool launcher)
{
    return code == 0 || code == exit_code || (launcher && code == LAUNCHER_FAILED);
}
