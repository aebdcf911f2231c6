#include "spot/proc.h"

#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

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
