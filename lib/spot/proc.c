#include "spot/proc.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "spot/parse.h"
#include "spot/strict.h"

/* Pids are below 2^22 (the kernel's PID_MAX_LIMIT). */
#define PID_LIMIT (1 << 22)

/* One thread's children file, appended to out[*n..max). */
static void add_children(const char *path, pid_t *out, size_t *n, size_t max)
{
    char buf[4096], *p, *end;
    ssize_t len;
    int fd;

    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return;
    len = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (len <= 0)
        return;
    buf[len] = '\0';
    for (p = buf; *n < max; p = end) {
        long v = strtol(p, &end, 10);

        if (end == p)
            break;
        if (v > 0)
            out[(*n)++] = (pid_t)v;
    }
}

size_t proc_children(pid_t pid, pid_t *out, size_t max)
{
    char path[96];
    struct dirent *d;
    size_t n = 0;
    DIR *dir;

    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    if (!(dir = opendir(path)))
        return 0;
    while (n < max && (d = readdir(dir))) {
        if (!isdigit((unsigned char)d->d_name[0]))
            continue;
        snprintf(path, sizeof(path), "/proc/%d/task/%.16s/children", (int)pid, d->d_name);
        add_children(path, out, &n, max);
    }
    closedir(dir);
    return n;
}

size_t proc_tree(pid_t pid, pid_t *out, size_t max)
{
    size_t n = 0, head = 0;

    if (max)
        out[n++] = pid;
    while (head < n && n < max) {
        pid_t p = out[head++];

        n += proc_children(p, out + n, max - n);
    }
    return n;
}

/* The next space-separated field of [*p, end) as a number. */
static int stat_field(const char **p, const char *end, uint64_t max, uint64_t *ret)
{
    char num[24];
    size_t n = 0;

    while (*p < end && **p == ' ')
        (*p)++;
    while (*p < end && **p != ' ' && **p != '\n') {
        if (n + 1 >= sizeof(num))
            return -EINVAL;
        num[n++] = *(*p)++;
    }
    num[n] = '\0';
    return parse_u64(num, 0, max, ret);
}

int proc_stat_parse(const char *text, size_t len, struct proc_stat *out)
{
    const char *end = text + len, *p = NULL;
    uint64_t ppid, pgrp, session, start;
    char state;

    for (const char *q = text; q < end; q++)
        if (*q == ')')
            p = q;
    /* ") S PPID PGRP SESSION": the state follows the last ')' alone. */
    if (!p || end - p < 4 || p[1] != ' ' || !isalpha((unsigned char)p[2]) || p[3] != ' ')
        return -EINVAL;
    state = p[2];
    p += 3;
    if (stat_field(&p, end, PID_LIMIT, &ppid) < 0 || stat_field(&p, end, PID_LIMIT, &pgrp) < 0 ||
        stat_field(&p, end, PID_LIMIT, &session) < 0)
        return -EINVAL;
    /* Fields 7 to 21 (tty_nr is signed: skipped as text), then 22. */
    for (int f = 7; f <= 21; f++) {
        while (p < end && *p == ' ')
            p++;
        if (p == end)
            return -EINVAL;
        while (p < end && *p != ' ')
            p++;
    }
    if (stat_field(&p, end, UINT64_MAX, &start) < 0)
        return -EINVAL;
    out->state = state;
    out->ppid = (pid_t)ppid;
    out->pgrp = (pid_t)pgrp;
    out->session = (pid_t)session;
    out->start = start;
    return 0;
}

/* Up to size - 1 bytes of path, terminated.  Returns the length or -errno. */
static ssize_t read_small(const char *path, char *buf, size_t size)
{
    ssize_t n;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        return -errno;
    do
        n = read(fd, buf, size - 1);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        n = -errno;
    close(fd);
    if (n >= 0)
        buf[n] = '\0';
    return n;
}

int proc_stat_read(pid_t pid, struct proc_stat *out)
{
    char path[64], buf[1024];
    ssize_t n;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    n = read_small(path, buf, sizeof(buf));
    if (n < 0)
        return n == -ESRCH ? -ENOENT : (int)n;
    return proc_stat_parse(buf, (size_t)n, out);
}

int proc_sigcgt_parse(const char *text, size_t len, uint64_t *mask)
{
    static const char key[] = "\nSigCgt:";
    const char *end = text + len, *p = text;
    uint64_t v = 0;
    int digits = 0;

    for (;; p++) {
        p = memchr(p, '\n', (size_t)(end - p));
        if (!p || (size_t)(end - p) < sizeof(key) - 1)
            return -EINVAL;
        if (memcmp(p, key, sizeof(key) - 1) == 0)
            break;
    }
    for (p += sizeof(key) - 1; p < end && (*p == ' ' || *p == '\t'); p++)
        ;
    for (; p < end && digits < 17; p++, digits++) {
        int d = *p >= '0' && *p <= '9' ? *p - '0'
                : *p >= 'a' && *p <= 'f' ? *p - 'a' + 10
                : *p >= 'A' && *p <= 'F' ? *p - 'A' + 10 : -1;
        if (d < 0)
            break;
        v = v << 4 | (uint64_t)d;
    }
    if (digits == 0 || digits > 16 || (p < end && *p != '\n'))
        return -EINVAL;
    *mask = v;
    return 0;
}

int proc_catches(pid_t pid, int sig)
{
    char path[64], buf[4096];
    uint64_t mask;
    ssize_t n;

    if (sig < 1 || sig > 64)
        return -EINVAL;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    /* SigCgt comes before the long lists at the end: 4 KiB hold it. */
    n = read_small(path, buf, sizeof(buf));
    if (n < 0)
        return n == -ESRCH ? -ENOENT : (int)n;
    if (proc_sigcgt_parse(buf, (size_t)n, &mask) < 0)
        return -EINVAL;
    return (int)(mask >> (sig - 1) & 1);
}

int proc_group_members(pid_t pgid, pid_t *out, size_t max, uint64_t *ret_oldest)
{
    uint64_t oldest = UINT64_MAX;
    struct dirent *d;
    int n = 0;
    DIR *dir;

    if (!(dir = opendir("/proc")))
        return -errno;
    while ((d = readdir(dir))) {
        struct proc_stat st;
        uint64_t pid;

        if (parse_u64(d->d_name, 1, PID_LIMIT, &pid) < 0 ||
            proc_stat_read((pid_t)pid, &st) < 0 || st.pgrp != pgid || st.state == 'Z')
            continue;
        if ((size_t)n < max)
            out[n] = (pid_t)pid;
        n++;
        if (st.start < oldest)
            oldest = st.start;
    }
    closedir(dir);
    if (ret_oldest)
        *ret_oldest = oldest;
    return n;
}

int proc_boot_id(char *buf, size_t size)
{
    char text[64];
    ssize_t n = read_small("/proc/sys/kernel/random/boot_id", text, sizeof(text));

    if (n < 0)
        return (int)n;
    if (n < PROC_BOOT_ID_LEN || size <= PROC_BOOT_ID_LEN)
        return -EINVAL;
    memcpy(buf, text, PROC_BOOT_ID_LEN);
    buf[PROC_BOOT_ID_LEN] = '\0';
    return 0;
}

int proc_grouprec_format(const struct proc_grouprec *r, char *buf, size_t size)
{
    int n = snprintf(buf, size, "{\"pgid\":%d,\"start\":%llu,\"boot_id\":\"%s\",\"spotd_pid\":%d}\n",
                     (int)r->pgid, (unsigned long long)r->start, r->boot_id, (int)r->spotd_pid);

    return n < 0 || (size_t)n >= size ? -ENOSPC : n;
}

/* A whole number member of o within [min, max]. */
static int rec_number(const cJSON *o, const char *key, double min, double max, uint64_t *ret,
                      const char **ret_why)
{
    const cJSON *it;
    double d;

    if (strict_json_member(o, key, &it, ret_why) < 0)
        return -EINVAL;
    if (!it || !cJSON_IsNumber(it))
        return strict_garbage(ret_why, "a member is missing or not a number");
    d = cJSON_GetNumberValue(it);
    if (d < min || d > max || d != (double)(uint64_t)d)
        return strict_garbage(ret_why, "a number is out of range or not whole");
    *ret = (uint64_t)d;
    return 0;
}

int proc_grouprec_parse(const char *text, size_t len, struct proc_grouprec *out,
                        const char **ret_why)
{
    struct proc_grouprec r = { 0 };
    uint64_t pgid, start, spotd;
    const char *end = NULL;
    cJSON *root, *it;
    int e = -EINVAL;

    if (len > PROC_GROUPREC_MAX)
        return strict_garbage(ret_why, "longer than 1 KiB");
    if (memchr(text, '\0', len) || strict_json_has_escaped_nul(text, len))
        return strict_garbage(ret_why, "it holds a NUL");
    root = cJSON_ParseWithLengthOpts(text, len, &end, false);
    if (!root)
        return strict_garbage(ret_why, "not JSON");
    while (end && end < text + len && isspace((unsigned char)*end))
        end++;
    if (!cJSON_IsObject(root) || end != text + len) {
        strict_garbage(ret_why, "not one JSON object");
        goto out;
    }
    cJSON_ArrayForEach(it, root) {
        const cJSON *once;

        if (strcmp(it->string, "pgid") != 0 && strcmp(it->string, "start") != 0 &&
            strcmp(it->string, "boot_id") != 0 && strcmp(it->string, "spotd_pid") != 0) {
            strict_garbage(ret_why, "an unknown member");
            goto out;
        }
        if (strict_json_member(root, it->string, &once, ret_why) < 0)
            goto out;
    }
    if (rec_number(root, "pgid", 2, PID_LIMIT - 1, &pgid, ret_why) < 0 ||
        rec_number(root, "start", 0, 9007199254740991.0, &start, ret_why) < 0 ||
        rec_number(root, "spotd_pid", 1, PID_LIMIT - 1, &spotd, ret_why) < 0)
        goto out;
    if (strict_json_copy(root, "boot_id", r.boot_id, sizeof(r.boot_id), true) != 1 ||
        strlen(r.boot_id) != PROC_BOOT_ID_LEN ||
        strspn(r.boot_id, "0123456789abcdef-") != PROC_BOOT_ID_LEN) {
        strict_garbage(ret_why, "boot_id is missing or not a boot id");
        goto out;
    }
    r.pgid = (pid_t)pgid;
    r.start = start;
    r.spotd_pid = (pid_t)spotd;
    *out = r;
    e = 0;
out:
    cJSON_Delete(root);
    return e;
}
