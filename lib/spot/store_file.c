/* store_file: the file:// backend, for a local disk or a shared mount
 * (NFS, Lustre, CephFS, EFS).
 *
 * DESIGN.  Every operation is a pool job: the I/O runs on a worker, the
 * callback on the loop.  A put writes a temporary file beside the target
 * (same directory, so the same file system), fsyncs it, renames it over
 * the target and fsyncs the directory: after the callback the object is
 * durable and whole, and a crash at any point leaves either the old object
 * or the new one, plus perhaps a temporary file that list() never shows.
 * A conditional put (put_new) links the temporary file into place instead
 * of renaming it: link(2) fails when the name exists, on NFS too. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "spot/bigbuf.h"
#include "spot/pool.h"
#include "spot/store.h"
#include "store_impl.h"

#define TMP_MARK ".tmp."

struct file_store {
    struct store base;
    char *root;                  /* absolute directory, no trailing '/' */
    struct pool *pool;
};

enum op { OP_PUT, OP_PUT_NEW, OP_GET, OP_LIST, OP_DELETE };

struct file_job {
    struct pool_job job;
    struct file_store *fs;
    enum op op;
    char key[STORE_KEY_MAX + 1];
    const void *in;
    size_t in_len, max;
    /* results */
    int err;
    char msg[PATH_MAX + 512];      /* room for a whole path in the message */
    void *out;
    size_t out_len;
    struct store_entry *entries;
    size_t n, cap;
    /* callbacks */
    store_done_fn done;
    store_get_fn got;
    store_list_fn listed;
    void *arg;
};

static atomic_uint tmp_counter;

static int fail(struct file_job *j, int err, const char *what, const char *path)
{
    j->err = err;
    snprintf(j->msg, sizeof(j->msg), "cannot %s '%s': %s", what, path, strerror(-err));
    return err;
}

/* mkdir -p of path's parent directories below the root. */
static int make_parents(struct file_job *j, const char *path)
{
    char buf[PATH_MAX];
    size_t root_len = strlen(j->fs->root);

    if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf))
        return fail(j, -ENAMETOOLONG, "create", path);
    for (char *p = buf + root_len + 1; (p = strchr(p, '/')); p++) {
        *p = '\0';
        if (mkdir(buf, 0755) < 0 && errno != EEXIST)
            return fail(j, -errno, "create directory", buf);
        *p = '/';
    }
    return 0;
}

static int fsync_dir(struct file_job *j, const char *path)
{
    char dir[PATH_MAX];
    char *slash;
    int fd, r = 0;

    snprintf(dir, sizeof(dir), "%s", path);
    slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return fail(j, -errno, "open directory", dir);
    if (fsync(fd) < 0 && errno != EINVAL)
        r = fail(j, -errno, "fsync directory", dir);
    close(fd);
    return r;
}

static void do_put(struct file_job *j, const char *path)
{
    char tmp[PATH_MAX + 64];
    const char *p = j->in;
    size_t left = j->in_len;
    int fd;

    if (make_parents(j, path) < 0)
        return;
    snprintf(tmp, sizeof(tmp), "%s" TMP_MARK "%d.%u", path, (int)getpid(),
             atomic_fetch_add(&tmp_counter, 1));
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        fail(j, -errno, "create", tmp);
        return;
    }
    while (left > 0) {
        ssize_t n = write(fd, p, left < BIGBUF_CACHED_WRITE ? left : BIGBUF_CACHED_WRITE);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            fail(j, n < 0 ? -errno : -EIO, "write", tmp);
            goto out_unlink;
        }
        p += n;
        left -= (size_t)n;
    }
    if (fsync(fd) < 0) {
        fail(j, -errno, "fsync", tmp);
        goto out_unlink;
    }
    if (close(fd) < 0) {
        fd = -1;
        fail(j, -errno, "close", tmp);
        goto out_unlink;
    }
    fd = -1;
    if (j->op == OP_PUT_NEW) {
        /* link(2) fails where a name is: only one of two writers gets it. */
        if (link(tmp, path) < 0) {
            if (errno == EEXIST)
                j->err = -EEXIST, snprintf(j->msg, sizeof(j->msg), "'%s' exists", path);
            else
                fail(j, -errno, "link into place", path);
            goto out_unlink;
        }
        unlink(tmp);
        fsync_dir(j, path);
        return;
    }
    if (rename(tmp, path) < 0) {
        fail(j, -errno, "rename into place", path);
        goto out_unlink;
    }
    fsync_dir(j, path);
    return;

out_unlink:
    if (fd >= 0)
        close(fd);
    unlink(tmp);
}

static void do_get(struct file_job *j, const char *path)
{
    struct stat st;
    size_t len = 0;
    uint8_t *buf;
    int fd;

    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        fail(j, -errno, "open", path);
        return;
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        fail(j, -EINVAL, "read (not a regular file)", path);
        goto out;
    }
    if ((uint64_t)st.st_size > j->max) {
        fail(j, -EFBIG, "read (larger than allowed)", path);
        goto out;
    }
    /* Aligned, so that a restore can write a chunk with O_DIRECT. */
    if (!(buf = bigbuf_alloc((size_t)st.st_size + 1))) {
        fail(j, -ENOMEM, "read", path);
        goto out;
    }
    /* Read to EOF, not to st_size: a file that grows is an error too. */
    for (;;) {
        ssize_t n = read(fd, buf + len, (size_t)st.st_size + 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            fail(j, -errno, "read", path);
            bigbuf_free(buf);
            goto out;
        }
        if (n == 0)
            break;
        len += (size_t)n;
        if (len > (size_t)st.st_size) {
            fail(j, -EAGAIN, "read (it changed while read)", path);
            bigbuf_free(buf);
            goto out;
        }
    }
    j->out = buf;
    j->out_len = len;
out:
    close(fd);
}

static int add_entry(struct file_job *j, const char *key, const struct stat *st)
{
    if (j->n == j->cap) {
        size_t cap = j->cap ? j->cap * 2 : 64;
        struct store_entry *e = realloc(j->entries, cap * sizeof(*e));
        if (!e)
            return -ENOMEM;
        j->entries = e;
        j->cap = cap;
    }
    j->entries[j->n].key = strdup(key);
    if (!j->entries[j->n].key)
        return -ENOMEM;
    j->entries[j->n].size = (uint64_t)st->st_size;
    j->entries[j->n].mtime_ms = (int64_t)st->st_mtim.tv_sec * 1000 + st->st_mtim.tv_nsec / 1000000;
    j->n++;
    return 0;
}

/* Folders below the root a listing follows at most (links included). */
#define WALK_DEPTH_MAX 16

/* Walk dir (a path below the root, key form rel) and collect files whose
 * key starts with the prefix.  Anything that cannot be read fails the
 * listing: a part of the store left out would read as generations that
 * are not there.  Links are followed (a job's folder may live on another
 * mount); one that leads nowhere is an error too. */
static int walk(struct file_job *j, const char *dir, const char *rel, int depth)
{
    DIR *d = depth <= WALK_DEPTH_MAX ? opendir(dir) : NULL;
    size_t kl, pl = strlen(j->key);
    struct dirent *de;
    int r = 0;

    if (!d && depth > WALK_DEPTH_MAX)
        return fail(j, -ELOOP, "list (nested too deep)", dir);
    if (!d)
        return errno == ENOENT ? 0 : fail(j, -errno, "list", dir);
    while (r == 0 && (errno = 0, de = readdir(d))) {
        char path[PATH_MAX], key[STORE_KEY_MAX + 2];
        struct stat st;

        if (de->d_name[0] == '.' && (!de->d_name[1] || (de->d_name[1] == '.' && !de->d_name[2])))
            continue;
        if (strstr(de->d_name, TMP_MARK))
            continue;
        if (snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) >= (int)sizeof(path) ||
            snprintf(key, sizeof(key), "%s%s%s", rel, *rel ? "/" : "", de->d_name) >
                STORE_KEY_MAX)
            continue;
        /* Neither below the prefix nor on the way to it: not even a stat
         * (a listing of one generation skips the others' folders). */
        kl = strlen(key);
        if (strncmp(key, j->key, kl < pl ? kl : pl) != 0)
            continue;
        if (stat(path, &st) < 0) {
            /* Gone since readdir() (a delete, a rename into place): fine. */
            if (errno == ENOENT && lstat(path, &st) < 0)
                continue;
            r = fail(j, errno == ENOENT ? -ENOLINK : -errno, "list", path);
            break;
        }
        if (S_ISDIR(st.st_mode)) {
            r = walk(j, path, key, depth + 1);
        } else if (S_ISREG(st.st_mode) && kl >= pl) {
            r = add_entry(j, key, &st);
            if (r < 0)
                fail(j, r, "list", dir);
        }
    }
    if (r == 0 && errno != 0)
        r = fail(j, -errno, "list", dir);
    closedir(d);
    return r;
}

static void file_work(struct pool_job *job)
{
    struct file_job *j = (struct file_job *)job;
    char path[PATH_MAX];

    if (snprintf(path, sizeof(path), "%s/%s", j->fs->root, j->key) >= (int)sizeof(path)) {
        fail(j, -ENAMETOOLONG, "use key", j->key);
        return;
    }
    switch (j->op) {
    case OP_PUT:
    case OP_PUT_NEW:
        do_put(j, path);
        break;
    case OP_GET:
        do_get(j, path);
        break;
    case OP_LIST:
        walk(j, j->fs->root, "", 0);
        break;
    case OP_DELETE:
        if (unlink(path) == 0)
            fsync_dir(j, path);
        else if (errno != ENOENT)
            fail(j, -errno, "delete", path);
        break;
    }
}

static void file_done(struct pool_job *job)
{
    struct file_job *j = (struct file_job *)job;

    if (job->cancelled)
        fail(j, -ECANCELED, "finish (the store was closed)", j->key);
    switch (j->op) {
    case OP_PUT:
    case OP_PUT_NEW:
    case OP_DELETE:
        j->done(j->arg, j->err, j->msg);
        break;
    case OP_GET:
        if (j->err) {
            free(j->out);
            j->out = NULL;
            j->out_len = 0;
        }
        j->got(j->arg, j->err, j->msg, j->out, j->out_len);
        break;
    case OP_LIST:
        if (j->err) {
            store_entries_free(j->entries, j->n);
            j->entries = NULL;
            j->n = 0;
        }
        j->listed(j->arg, j->err, j->msg, j->entries, j->n);
        break;
    }
    free(j);
}

static struct file_job *new_job(struct store *s, enum op op, const char *key)
{
    struct file_job *j = calloc(1, sizeof(*j));

    if (!j)
        return NULL;
    j->job.work = file_work;
    j->job.done = file_done;
    j->fs = (struct file_store *)s;
    j->op = op;
    snprintf(j->key, sizeof(j->key), "%s", key);
    return j;
}

static int file_put(struct store *s, const char *key, const void *data, size_t len,
                    const uint8_t *sha256, store_done_fn done, void *arg)
{
    struct file_job *j = new_job(s, OP_PUT, key);

    if (!j)
        return -ENOMEM;
    j->in = data;
    j->in_len = len;
    j->done = done;
    j->arg = arg;
    pool_submit(j->fs->pool, &j->job);
    return 0;
}

static int file_put_new(struct store *s, const char *key, const void *data, size_t len,
                        const uint8_t *sha256, store_done_fn done, void *arg)
{
    struct file_job *j = new_job(s, OP_PUT_NEW, key);

    if (!j)
        return -ENOMEM;
    j->in = data;
    j->in_len = len;
    j->done = done;
    j->arg = arg;
    pool_submit(j->fs->pool, &j->job);
    return 0;
}

static int file_get(struct store *s, const char *key, size_t max, store_get_fn got, void *arg)
{
    struct file_job *j = new_job(s, OP_GET, key);

    if (!j)
        return -ENOMEM;
    j->max = max;
    j->got = got;
    j->arg = arg;
    pool_submit(j->fs->pool, &j->job);
    return 0;
}

static int file_list(struct store *s, const char *prefix, store_list_fn listed, void *arg)
{
    struct file_job *j = new_job(s, OP_LIST, prefix);

    if (!j)
        return -ENOMEM;
    j->listed = listed;
    j->arg = arg;
    pool_submit(j->fs->pool, &j->job);
    return 0;
}

static int file_delete(struct store *s, const char *key, store_done_fn done, void *arg)
{
    struct file_job *j = new_job(s, OP_DELETE, key);

    if (!j)
        return -ENOMEM;
    j->done = done;
    j->arg = arg;
    pool_submit(j->fs->pool, &j->job);
    return 0;
}

static void file_close(struct store *s)
{
    struct file_store *fs = (struct file_store *)s;

    free(fs->root);
    free(fs);
}


static int file_open(const char *url, const struct store_ctx *ctx, struct store **ret,
                     char *err, size_t errlen)
{
    const char *path = url + strlen("file://");
    struct file_store *fs;
    struct stat st;
    size_t len;

    if (path[0] != '/') {
        snprintf(err, errlen, "invalid store '%s': a file store needs an absolute path, like "
                 "file:///var/lib/spotd/store", url);
        return -EINVAL;
    }
    if (!ctx->pool) {
        snprintf(err, errlen, "file store '%s' needs the worker pool", url);
        return -EINVAL;
    }
    if (stat(path, &st) < 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "store '%s': '%s' is not a directory (%s); create it first", url,
                 path, stat(path, &st) < 0 ? strerror(errno) : "another kind of file");
        return -ENOENT;
    }
    fs = calloc(1, sizeof(*fs));
    if (!fs || !(fs->root = strdup(path))) {
        free(fs);
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    len = strlen(fs->root);
    while (len > 1 && fs->root[len - 1] == '/')
        fs->root[--len] = '\0';
    fs->pool = ctx->pool;
    fs->base.backend = &store_file_backend;
    *ret = &fs->base;
    return 0;
}

const struct store_backend store_file_backend = {
    .scheme = "file://",
    .open = file_open,
    .put = file_put,
    .put_new = file_put_new,
    .put_new_trusted = true,
    .get = file_get,
    .list = file_list,
    .del = file_delete,
    .close = file_close,
};
