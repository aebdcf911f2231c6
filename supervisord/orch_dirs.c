/* orch_dirs: the folders a checkpoint's files are in: STATE_DIR/work/gen-N,
 * or, with --stage-dir, a memory file system (tmpfs: /dev/shm) where the
 * trainers write a checkpoint at the speed of memory.  The trainer is
 * blocked for its write alone (libckpt's ckpt_saved() does not wait for
 * the upload), so with the folder in memory a periodic checkpoint costs it
 * about a copy of its state; spotd uploads from there as from the state
 * directory, and frees the folder once the generation is committed or has
 * failed (and the post-checkpoint hook, which is told the folder, ended).
 *
 * The folder is STAGE/spotd-H, H a hash of the state directory's real
 * path: two spotds on one node (a world's nodes in tests, two jobs) keep
 * apart, and a spotd that died leaves memory that the next one on the
 * same state directory frees at its start.  A save goes to the state
 * directory instead when the file system has less room than the last
 * checkpoint of this node and an eighth more (a full tmpfs would fail the
 * trainer's write, and with it a notice's checkpoint), and the one after a
 * staged checkpoint that failed.  Before the first commit (or resume) the
 * size is not known: a periodic checkpoint is staged, since one that does
 * not fit costs only a retry, a notice's never. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/vfs.h>

#include "orch_impl.h"
#include "spot/linktree.h"
#include "spot/log.h"

#ifndef TMPFS_MAGIC
#define TMPFS_MAGIC 0x01021994
#endif
#ifndef RAMFS_MAGIC
#define RAMFS_MAGIC 0x858458f6
#endif

/* FNV-1a: a name, not a secret. */
static uint64_t fnv1a(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ULL;

    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
    return h;
}

int orch_stage_open(struct orch *r, char *err, size_t errlen)
{
    const char *top = r->o.stage_dir;
    char real[PATH_MAX], path[4200];
    struct statfs fs;
    struct stat st;
    int e;

    if (!top || !*top)
        return 0;
    if (strcmp(r->o.method, "app") != 0 && strcmp(r->o.method, "criu") != 0) {
        snprintf(err, errlen, "--stage-dir is for the app and criu methods, whose folder spotd "
                 "picks; the %s method's trainer writes into its own --ckpt-dir: put that on "
                 "the memory file system instead", r->o.method);
        return -EINVAL;
    }
    if (stat(top, &st) < 0 || !S_ISDIR(st.st_mode)) {
        e = stat(top, &st) < 0 ? errno : ENOTDIR;
        snprintf(err, errlen, "--stage-dir '%s': %s", top, strerror(e));
        return -e;
    }
    if (!realpath(r->state_dir, real))
        snprintf(real, sizeof(real), "%s", r->state_dir);
    e = snprintf(path, sizeof(path), "%s/spotd-%016" PRIx64, top, fnv1a(real));
    if (e < 0 || (size_t)e >= sizeof(path) || !(r->stage = strdup(path))) {
        snprintf(err, errlen, "--stage-dir '%s': path too long", top);
        return -ENAMETOOLONG;
    }
    /* What a spotd that died here left is memory no one else frees. */
    linktree_remove(r->stage);
    if (mkdir(r->stage, 0700) < 0) {
        e = -errno;
        snprintf(err, errlen, "--stage-dir: cannot create '%s': %s", r->stage, strerror(-e));
        return e;
    }
    if (statfs(top, &fs) == 0 && fs.f_type != TMPFS_MAGIC && fs.f_type != RAMFS_MAGIC)
        log_msg(LOGL_WARN, "--stage-dir '%s' is not a memory file system (tmpfs, ramfs): "
                "checkpoints are written there no faster than to a disk", top);
    return 0;
}

void orch_stage_close(struct orch *r)
{
    if (!r->stage)
        return;
    linktree_remove(r->stage);
    free(r->stage);
    r->stage = NULL;
}

static int add_blocks(const char *path, uint64_t *sum, int depth)
{
    char sub[4200];
    struct stat st;
    DIR *d;
    struct dirent *de;

    if (lstat(path, &st) < 0)
        return -errno;
    *sum += (uint64_t)st.st_blocks * 512;
    if (!S_ISDIR(st.st_mode) || depth > 16 || !(d = opendir(path)))
        return 0;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0 &&
            snprintf(sub, sizeof(sub), "%s/%s", path, de->d_name) < (int)sizeof(sub))
            add_blocks(sub, sum, depth + 1);
    closedir(d);
    return 0;
}

void orch_stage_measure(struct orch *r, const char *dir)
{
    uint64_t sum = 0;

    if (r->stage && dir && *dir && add_blocks(dir, &sum, 0) == 0)
        r->stage_need = sum;
}

/* This node's last checkpoint (or the one it resumed from); 0: unknown. */
static uint64_t last_size(const struct orch *r)
{
    return r->fig.bytes > r->stage_need ? r->fig.bytes : r->stage_need;
}

/* Why the checkpoint under way is not staged, into why; "" when it is. */
static void why_not(const struct orch *r, char *why, size_t size)
{
    uint64_t last = last_size(r), need = last + last / 8, avail;
    struct statvfs vs;

    why[0] = '\0';
    if (r->stage_failed) {
        /* Full, as a rule: a commit and its size decide again. */
        snprintf(why, size, "the last checkpoint written there failed");
    } else if (last == 0 && (r->terminating || r->round_last)) {
        /* A periodic one that does not fit costs a retry, a notice's the
         * notice: it is staged only when it is known to fit. */
        snprintf(why, size, "this node's checkpoints are of a size not known yet, and a "
                 "notice's is not risked on it");
    } else if (statvfs(r->o.stage_dir, &vs) < 0) {
        snprintf(why, size, "its room cannot be read: %s", strerror(errno));
    } else if ((avail = (uint64_t)vs.f_bavail * vs.f_frsize) <= need) {
        snprintf(why, size, "it has %llu MiB free, and this checkpoint needs about %llu MiB "
                 "(this node's last and an eighth)", (unsigned long long)(avail >> 20),
                 (unsigned long long)(need >> 20));
    }
}

void orch_work_dir(struct orch *r)
{
    char why[256] = "";

    r->staged = false;
    if (r->stage)
        why_not(r, why, sizeof(why));
    if (r->stage && !why[0]) {
        snprintf(r->dir, sizeof(r->dir), "%s/gen-%08llu", r->stage, (unsigned long long)r->gen);
        r->staged = true;
        return;
    }
    snprintf(r->dir, sizeof(r->dir), "%s/work/gen-%08llu", r->state_dir,
             (unsigned long long)r->gen);
    if (r->stage)
        log_msg(LOGL_WARN, "generation %llu is written to the state directory, not to "
                "--stage-dir '%s': %s", (unsigned long long)r->gen, r->o.stage_dir, why);
}

char *orch_unstage_take(struct orch *r, int err)
{
    char *dir = r->staged ? strdup(r->dir) : NULL;

    if (err && r->staged)
        r->stage_failed = true;
    r->staged = false;
    return dir;
}

void orch_unstage(void *arg, int code, const char *msg)
{
    char *dir = arg;

    (void)code, (void)msg;
    if (!dir)
        return;
    linktree_remove(dir);
    log_msg(LOGL_DEBUG, "'%s' freed", dir);
    free(dir);
}

/* mkdir -p */
int orch_make_dirs(const char *path)
{
    char buf[4096];

    if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf))
        return -ENAMETOOLONG;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0700) < 0 && errno != EEXIST)
            return -errno;
        *p = '/';
    }
    if (mkdir(buf, 0700) < 0 && errno != EEXIST)
        return -errno;
    return 0;
}

/* rm -rf path */
void orch_remove_tree(const char *path)
{
    linktree_remove(path);
}

/* Remove the entries "gen-*" of STATE/sub except keep (a path or NULL). */
void orch_prune_local(struct orch *r, const char *sub, const char *keep)
{
    char dir[4200];

    snprintf(dir, sizeof(dir), "%s/%s", r->state_dir, sub);
    linktree_prune_gens(dir, keep);
}
