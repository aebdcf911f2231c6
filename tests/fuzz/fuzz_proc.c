/* /proc/PID/stat and the record of the command's group
 * (STATE/command.json, which the command could overwrite) on arbitrary
 * bytes: 0, or -EINVAL with *out untouched (and a reason for the record);
 * a record that parses formats back into one that parses the same. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "spot/proc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct proc_grouprec r, again;
    struct proc_stat st;
    const char *why = NULL;
    char text[256];
    int e, n;

    memset(&st, 0xa5, sizeof(st));
    e = proc_stat_parse((const char *)data, size, &st);
    if (e != 0 && (e != -EINVAL || !fuzz_poisoned(&st, sizeof(st))))
        abort();
    if (e == 0 && (st.pgrp < 0 || st.ppid < 0 || st.session < 0))
        abort();

    memset(&r, 0xa5, sizeof(r));
    e = proc_grouprec_parse((const char *)data, size, &r, &why);
    if (e != 0) {
        if (e != -EINVAL || !why || !fuzz_poisoned(&r, sizeof(r)))
            abort();
        return 0;
    }
    if (r.pgid < 2 || r.spotd_pid < 1)
        abort();
    fuzz_check_string(r.boot_id, sizeof(r.boot_id), true, true);
    n = proc_grouprec_format(&r, text, sizeof(text));
    if (n < 0 || proc_grouprec_parse(text, (size_t)n, &again, &why) != 0 ||
        again.pgid != r.pgid || again.start != r.start || again.spotd_pid != r.spotd_pid ||
        strcmp(again.boot_id, r.boot_id) != 0)
        abort();
    return 0;
}
