/* snap_fetch: what reads a committed generation back: restore, check and
 * verify (snap_restore(), snap_check(), snap_verify()), and its manifests
 * alone (snap_manifests()).
 *
 * DESIGN.  A restore first refuses a manifest it cannot reproduce exactly
 * and safely (restore_check(): the manifest is anyone's who can write the
 * store), creates the files (sparse, at their final sizes) beside the
 * destination, below a descriptor of that folder, then runs a window of
 * chunk tasks (get, then in the pool: decode, hash check, pwrite: with
 * O_DIRECT where the buffer, offset and filesystem allow, the kernel then
 * asked to read it back, write_chunk()), makes
 * the links, sets modes and mtimes, and renames the whole tree into
 * place.  Verify is a restore that writes nothing; a check compares a
 * local copy with its manifest (dircheck.h). */
#include "spot/snap.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <ftw.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "spot/bigbuf.h"
#include "spot/dircheck.h"
#include "spot/pool.h"
#include "spot/store.h"

#include "snap_impl.h"

#define REFETCH_MAX 2             /* a chunk that arrives corrupt is fetched again */

/* A restore from a remote store writes chunks with O_DIRECT where their
 * bytes, offset and length allow it: no copy into the page cache, which
 * on a machine where the store's servers share the cores was most of a
 * restore's CPU (tests/bench/README.md, store.sh).  From a file store
 * the chunks come off the same disks through the page cache: writing
 * them directly, and reading them back, only made the disk busier. */
#define DIRECT_ALIGN 4096

/* Room a restore leaves free on dest's filesystem, besides its files. */
#define RESTORE_SPACE_MARGIN (64ULL * 1024 * 1024)

struct fetch;

struct ftask {
    struct pool_job job;
    struct fetch *fe;
    const struct manifest *m;
    size_t file, idx;
    uint64_t off;
    const struct mf_chunk *ch;
    char key[STORE_KEY_MAX + 1];
    void *data;
    size_t len;
    unsigned refetch;
    size_t direct;                /* of its bytes, written with O_DIRECT */
    int err;
    char msg[MSG_MAX];
};

struct fetch {
    struct snap *s;
    bool verify;
    bool check;                   /* snap_check: dest against the manifest */
    snap_manifests_fn shown;      /* snap_manifests: the manifests are all it wants */
    uint64_t gen;
    uint32_t rank;                /* restore: the rank; verify: all */
    char *dest, *tmp;
    char *leave;                  /* snap_restore_leaving(): files not restored */
    int tmpfd;                    /* restore: tmp, once made; every path is below it */
    bool made_tmp;
    bool no_direct;               /* a file store, or dest's filesystem refused O_DIRECT */
    struct snap_counters *c, own;
    snap_done_fn done;
    snap_verify_fn verified;
    void *arg;
    struct gens_op *g;
    struct commit commit;
    struct mf_fetch *f;
    uint32_t cur_rank;            /* verify walks the ranks */
    size_t next_file, next_chunk;
    uint64_t next_off;
    unsigned alive;
    bool all_started, finishing;
    struct hset seen;             /* verify: chunks checked already */
    struct pool_job prep;         /* restore: layout, then finishing touches */
    int err;
    char msg[MSG_MAX];
    struct snap_verify_report report;
};

/* bsearch() over the sorted paths for the first len bytes of s. */
struct prefix {
    const char *s;
    size_t len;
};

static void early_verified(struct early *e);
static void early_shown(struct early *e);
static struct fetch *fetch_new(struct snap *s, uint64_t gen, struct snap_counters *c);
static void on_fetch_gens(struct gens_op *g);
static struct gens_op *fetch_gens(struct snap *s, struct fetch *fe);
static void on_fetch_manifests(struct mf_fetch *f);
static void check_work(struct pool_job *job);
static void check_done(struct pool_job *job);
static void prep_work(struct pool_job *job);
static int restore_check(struct fetch *fe, const struct manifest *m);
static int cmp_prefix(const void *key, const void *elem);
static int restore_space(struct fetch *fe, const struct manifest *m, uint64_t bytes);
static void prep_done(struct pool_job *job);
static void fetch_pump(struct fetch *fe);
static void ftask_get(struct ftask *t);
static void on_chunk_got(void *arg, int err, const char *msg, void *data, size_t len);
static void ftask_work(struct pool_job *job);
static void ftask_done(struct pool_job *job);
static int write_chunk(struct fetch *fe, const char *rel, const void *plain, size_t len,
                       uint64_t off, size_t *direct_done);
static void ftask_end(struct ftask *t);
static void finish_work(struct pool_job *job);
static mode_t restore_mode(const struct fetch *fe, const struct mf_file *f);
static void finish_done(struct pool_job *job);
static void fetch_end(struct fetch *fe);
static void cleanup_work(struct pool_job *job);
static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw);
static void cleanup_done(struct pool_job *job);
static void fetch_report(struct fetch *fe);
static bool left_out(const struct fetch *fe, const struct mf_file *f);
static void leave_out(struct fetch *fe);

static void fetch_fail(struct fetch *fe, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fetch_fail(struct fetch *fe, int err, const char *fmt, ...)
{
    va_list ap;

    if (fe->err)
        return;
    fe->err = err;
    va_start(ap, fmt);
    vsnprintf(fe->msg, sizeof(fe->msg), fmt, ap);
    va_end(ap);
}

static const struct manifest *cur_manifest(const struct fetch *fe)
{
    return &fe->f->mfs[fe->cur_rank];
}

/* A stored string, escaped and cut short, for a message. */
#define SHOWN_MAX 160
static const char *shown(const char *s, char buf[SHOWN_MAX])
{
    return manifest_escape(s, buf, SHOWN_MAX);
}

void snap_restore(struct snap *s, uint64_t gen, uint32_t rank, const char *dest,
                  struct snap_counters *c, snap_done_fn done, void *arg)
{
    snap_restore_leaving(s, gen, rank, dest, NULL, c, done, arg);
}

void snap_restore_leaving(struct snap *s, uint64_t gen, uint32_t rank, const char *dest,
                          const char *leave, struct snap_counters *c, snap_done_fn done,
                          void *arg)
{
    struct fetch *fe = fetch_new(s, gen, c);
    size_t len = dest ? strlen(dest) : 0;

    while (len > 1 && dest[len - 1] == '/')
        len--;
    if (!fe || !len || len > PATH_MAX - 64 || !(fe->dest = strndup(dest, len)) ||
        asprintf(&fe->tmp, "%s.spotd-partial.%ld", fe->dest, (long)getpid()) < 0 ||
        (leave && !(fe->leave = strdup(leave)))) {
        if (fe) {
            free(fe->dest);
            free(fe->tmp);
        }
        free(fe);
        snap_early(s, snap_early_done, (union snap_cb){ .done = done }, arg,
                   len ? -ENOMEM : -EINVAL, len ? "out of memory" : "no destination directory");
        return;
    }
    fe->rank = rank;
    fe->done = done;
    fe->arg = arg;
    if (!(fe->g = fetch_gens(s, fe))) {
        free(fe->dest);
        free(fe->tmp);
        free(fe->leave);
        free(fe);
        snap_early(s, snap_early_done, (union snap_cb){ .done = done }, arg, -ENOMEM,
                   "out of memory");
    }
}

void snap_check(struct snap *s, uint64_t gen, uint32_t rank, const char *dir,
                snap_done_fn done, void *arg)
{
    snap_check_leaving(s, gen, rank, dir, NULL, done, arg);
}

void snap_check_leaving(struct snap *s, uint64_t gen, uint32_t rank, const char *dir,
                        const char *leave, snap_done_fn done, void *arg)
{
    struct fetch *fe = fetch_new(s, gen, NULL);

    if (!fe || !(fe->dest = strdup(dir)) || (leave && !(fe->leave = strdup(leave)))) {
        if (fe)
            free(fe->dest);
        free(fe);
        snap_early(s, snap_early_done, (union snap_cb){ .done = done }, arg, -ENOMEM,
                   "out of memory");
        return;
    }
    fe->check = true;
    fe->rank = rank;
    fe->done = done;
    fe->arg = arg;
    if (!(fe->g = fetch_gens(s, fe))) {
        free(fe->dest);
        free(fe->leave);
        free(fe);
        snap_early(s, snap_early_done, (union snap_cb){ .done = done }, arg, -ENOMEM,
                   "out of memory");
    }
}

void snap_verify(struct snap *s, uint64_t gen, struct snap_counters *c, snap_verify_fn done,
                 void *arg)
{
    struct fetch *fe = fetch_new(s, gen, c);

    if (!fe) {
        snap_early(s, early_verified, (union snap_cb){ .verified = done }, arg, -ENOMEM,
                   "out of memory");
        return;
    }
    fe->verify = true;
    fe->verified = done;
    fe->arg = arg;
    if (!(fe->g = fetch_gens(s, fe))) {
        free(fe);
        snap_early(s, early_verified, (union snap_cb){ .verified = done }, arg, -ENOMEM,
                   "out of memory");
    }
}

static void early_verified(struct early *e)
{
    struct snap_verify_report r = { 0 };

    e->cb.verified(e->arg, e->err, e->msg, &r);
}

void snap_manifests(struct snap *s, uint64_t gen, snap_manifests_fn done, void *arg)
{
    struct fetch *fe = fetch_new(s, gen, NULL);

    if (!fe) {
        snap_early(s, early_shown, (union snap_cb){ .shown = done }, arg, -ENOMEM, "out of memory");
        return;
    }
    fe->verify = true;            /* every rank, nothing written */
    fe->shown = done;
    fe->arg = arg;
    if (!(fe->g = fetch_gens(s, fe))) {
        free(fe);
        snap_early(s, early_shown, (union snap_cb){ .shown = done }, arg, -ENOMEM, "out of memory");
    }
}

static void early_shown(struct early *e)
{
    e->cb.shown(e->arg, e->err, e->msg, NULL, NULL);
}

/* The generation fe wants: that number's objects alone, or the newest
 * ones (through the pointer, snap_latest.c): a few requests however many
 * generations the job keeps. */
static struct gens_op *fetch_gens(struct snap *s, struct fetch *fe)
{
    return fe->gen ? snap_gens_op_one(s, fe->gen, on_fetch_gens, fe)
                   : snap_gens_op_newest(s, on_fetch_gens, fe);
}

static struct fetch *fetch_new(struct snap *s, uint64_t gen, struct snap_counters *c)
{
    struct fetch *fe = calloc(1, sizeof(*fe));

    if (!fe)
        return NULL;
    fe->s = s;
    fe->gen = gen;
    fe->tmpfd = -1;
    fe->c = c ? c : &fe->own;
    fe->no_direct = !store_remote(s->store);
    return fe;
}

static void on_fetch_gens(struct gens_op *g)
{
    struct fetch *fe = g->owner;
    struct snap_gen *found = NULL;

    fe->g = NULL;
    if (g->err) {
        fetch_fail(fe, g->err, "%s", g->msg);
        snap_gens_op_free(g);
        fetch_report(fe);
        return;
    }
    for (size_t i = 0; i < g->n; i++) {
        if (fe->gen ? g->gens[i].gen == fe->gen
                    : g->gens[i].committed || g->gens[i].unauthentic)
            found = &g->gens[i];
    }
    if (found && (found->committed || found->unauthentic)) {
        fe->report.auth_known = true;
        fe->report.auth = found->auth;
        snprintf(fe->report.key_id, sizeof(fe->report.key_id), "%s",
                 found->commit.has_mac ? found->commit.key_id : "");
    }
    if (found && found->unauthentic) {
        char why[MSG_MAX];

        snap_refusal(fe->s, found, why, sizeof(why));
        fetch_fail(fe, -EKEYREJECTED, "%s", why);
        snap_gens_op_free(g);
        fetch_report(fe);
        return;
    }
    if (!found || !found->committed) {
        if (!fe->gen)
            fetch_fail(fe, -ENOENT, "job '%s' has no committed generation in %s", fe->s->job,
                       store_url(fe->s->store));
        else if (!found)
            fetch_fail(fe, -ENOENT, "job '%s' has no generation %llu in %s", fe->s->job,
                       (unsigned long long)fe->gen, store_url(fe->s->store));
        else if (found->corrupt)
            fetch_fail(fe, -EBADMSG, "generation %llu: its commit record is unreadable",
                       (unsigned long long)fe->gen);
        else
            fetch_fail(fe, -ENOENT, "generation %llu was never committed (no commit record): "
                                    "it cannot be restored", (unsigned long long)fe->gen);
        snap_gens_op_free(g);
        fetch_report(fe);
        return;
    }
    fe->gen = found->gen;
    fe->commit = found->commit;
    memset(&found->commit, 0, sizeof(found->commit));
    snap_gens_op_free(g);
    if (!fe->verify && fe->rank >= fe->commit.world_size) {
        fetch_fail(fe, -ENOENT, "generation %llu has ranks 0 to %u, not %u",
                   (unsigned long long)fe->gen, fe->commit.world_size - 1, fe->rank);
        fetch_report(fe);
        return;
    }
    if (!snap_mf_fetch_start(fe->s, &fe->commit, fe->verify ? UINT32_MAX : fe->rank, true,
                             on_fetch_manifests, fe)) {
        fetch_fail(fe, -ENOMEM, "out of memory");
        fetch_report(fe);
    }
}

static void on_fetch_manifests(struct mf_fetch *f)
{
    struct fetch *fe = f->owner;

    fe->f = f;
    if (f->err) {
        fetch_fail(fe, f->err, "%s", f->msg);
        fetch_report(fe);
        return;
    }
    if (fe->shown) {
        fetch_report(fe);
        return;
    }
    if (fe->check) {
        fe->prep.work = check_work;
        fe->prep.done = check_done;
        pool_submit(fe->s->pool, &fe->prep);
        return;
    }
    if (fe->verify) {
        for (uint32_t r = 0; r < fe->commit.world_size; r++)
            for (size_t i = 0; i < f->mfs[r].n_files; i++)
                if (f->mfs[r].files[i].type == MF_FILE)
                    fe->c->bytes_total += f->mfs[r].files[i].size;
        fe->cur_rank = 0;
        fetch_pump(fe);
        return;
    }
    fe->cur_rank = fe->rank;
    for (size_t i = 0; i < f->mfs[fe->rank].n_files; i++)
        if (f->mfs[fe->rank].files[i].type == MF_FILE) {
            const struct mf_file *mf = &f->mfs[fe->rank].files[i];

            if (left_out(fe, mf))
                continue;
            fe->c->files++;
            fe->c->bytes_total += mf->size;
            for (size_t j = 0; j < mf->n_chunks; j++)
                fe->c->chunks += !mf->chunks[j].zero; /* stored ones: what a fetch gets */
        }
    fe->prep.work = prep_work;
    fe->prep.done = prep_done;
    pool_submit(fe->s->pool, &fe->prep);
}

/* Pool: snap_check's comparison. */
static void check_work(struct pool_job *job)
{
    struct fetch *fe = (struct fetch *)((char *)job - offsetof(struct fetch, prep));
    char why[MSG_MAX - 64];
    int r;

    leave_out(fe);
    r = dircheck_manifest(&fe->f->mfs[fe->rank], fe->dest, why, sizeof(why));

    if (r < 0)
        fetch_fail(fe, r, "the copy of generation %llu in '%s' does not match it: %s",
                   (unsigned long long)fe->gen, fe->dest, why);
}

static void check_done(struct pool_job *job)
{
    fetch_report((struct fetch *)((char *)job - offsetof(struct fetch, prep)));
}

/* Pool: lay the restored tree out beside dest, files at their sizes.
 * Every path is made and opened below tmpfd, without following links (no
 * link exists yet: finish_work() makes them), so a path is bounded by
 * what fits under dest, not by tmp's longer name. */
static void prep_work(struct pool_job *job)
{
    struct fetch *fe = (struct fetch *)((char *)job - offsetof(struct fetch, prep));
    const struct manifest *m = cur_manifest(fe);
    struct stat st;
    char path[PATH_MAX], name[SHOWN_MAX];

    if (lstat(fe->dest, &st) == 0) {
        DIR *d = S_ISDIR(st.st_mode) ? opendir(fe->dest) : NULL;
        struct dirent *de;
        bool empty = d != NULL;

        while (d && (de = readdir(d)))
            if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
                empty = false;
        if (d)
            closedir(d);
        if (!empty) {
            fetch_fail(fe, -EEXIST, "'%s' exists and is not an empty directory: restore into "
                                    "a new one", fe->dest);
            return;
        }
    }
    if (restore_check(fe, m) < 0)
        return;
    leave_out(fe);
    if (mkdir(fe->tmp, 0700) < 0) {
        fetch_fail(fe, -errno, "cannot create '%s': %s", fe->tmp, strerror(errno));
        return;
    }
    fe->made_tmp = true;
    if ((fe->tmpfd = open(fe->tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
        fetch_fail(fe, -errno, "cannot open '%s': %s", fe->tmp, strerror(errno));
        return;
    }
    for (size_t i = 0; i < m->n_files && !fe->err; i++) {
        const struct mf_file *f = &m->files[i];
        int fd;

        /* restore_check() made sure it fits. */
        snprintf(path, sizeof(path), "%s", f->path);
        shown(f->path, name);
        /* Parents that the manifest does not list (it need not). */
        for (char *p = path; (p = strchr(p, '/')); p++) {
            *p = '\0';
            if (mkdirat(fe->tmpfd, path, 0700) < 0 && errno != EEXIST)
                fetch_fail(fe, -errno, "cannot create the directory above '%s' in '%s': %s",
                           name, fe->tmp, strerror(errno));
            *p = '/';
        }
        if (f->type == MF_DIR) {
            if (mkdirat(fe->tmpfd, path, 0700) < 0 && errno != EEXIST)
                fetch_fail(fe, -errno, "cannot create '%s' in '%s': %s", name, fe->tmp,
                           strerror(errno));
            continue;
        }
        if (f->type != MF_FILE)
            continue;
        fd = openat(fe->tmpfd, path, O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0) {
            fetch_fail(fe, -errno, "cannot create '%s' in '%s': %s", name, fe->tmp,
                       strerror(errno));
            break;
        }
        /* The size first: what no chunk covers stays a hole. */
        if (ftruncate(fd, (off_t)f->size) < 0)
            fetch_fail(fe, -errno, "cannot size '%s' in '%s': %s", name, fe->tmp,
                       strerror(errno));
        close(fd);
    }
}

/* Pool: refuse, before anything is written, a manifest that the restore
 * cannot reproduce exactly and safely under dest (see snap_restore()). */
static int restore_check(struct fetch *fe, const struct manifest *m)
{
    size_t dest_len = strlen(fe->dest);
    uint64_t bytes, declared = fe->commit.ranks[m->rank].bytes;
    char path[SHOWN_MAX], other[SHOWN_MAX];

    for (size_t i = 0; i < m->n_files; i++) {
        const struct mf_file *f = &m->files[i];
        size_t len = dest_len + 1 + strlen(f->path);

        if (len >= PATH_MAX) {
            fetch_fail(fe, -ENAMETOOLONG, "generation %llu, rank %u: cannot restore '%s' "
                       "exactly: its path under '%s' would be %zu bytes, more than PATH_MAX "
                       "(%d) allows; restore into a shorter destination",
                       (unsigned long long)fe->gen, m->rank, shown(f->path, path), fe->dest,
                       len, PATH_MAX - 1);
            return fe->err;
        }
        if (f->type == MF_SYMLINK && !manifest_link_inside(f->path, f->target)) {
            fetch_fail(fe, -EPERM, "generation %llu, rank %u: refusing the link '%s' -> '%s': "
                       "it leads out of the restored directory (an absolute target, or '..' "
                       "above it, or after a name)", (unsigned long long)fe->gen, m->rank,
                       shown(f->path, path), shown(f->target, other));
            return fe->err;
        }
        /* Every directory above it is one (a link there would lead
         * wherever it points). */
        for (const char *slash = f->path; (slash = strchr(slash, '/')); slash++) {
            const struct mf_file *up =
                bsearch(&(struct prefix){ f->path, (size_t)(slash - f->path) }, m->files,
                        m->n_files, sizeof(*m->files), cmp_prefix);

            if (up && up->type != MF_DIR) {
                fetch_fail(fe, -EINVAL, "generation %llu, rank %u: '%s' lies below '%s', "
                           "which the manifest says is not a directory",
                           (unsigned long long)fe->gen, m->rank, shown(f->path, path),
                           shown(up->path, other));
                return fe->err;
            }
        }
    }
    if (manifest_bytes(m, &bytes) < 0) {
        fetch_fail(fe, -EFBIG, "generation %llu, rank %u: the manifest's files add up to more "
                   "than 2^64 bytes", (unsigned long long)fe->gen, m->rank);
        return fe->err;
    }
    if (bytes != declared) {
        fetch_fail(fe, -EBADMSG, "generation %llu, rank %u: the manifest's files add up to "
                   "%llu bytes, its commit record says %llu: refusing both",
                   (unsigned long long)fe->gen, m->rank, (unsigned long long)bytes,
                   (unsigned long long)declared);
        return fe->err;
    }
    return restore_space(fe, m, bytes);
}

static int cmp_prefix(const void *key, const void *elem)
{
    const struct prefix *k = key;
    const char *path = ((const struct mf_file *)elem)->path;
    int c = strncmp(k->s, path, k->len);

    return c ? c : path[k->len] ? -1 : 0;
}

/* Pool: whether dest's filesystem holds m's files: bytes as the manifest
 * declares them, each file rounded up to whole blocks, a block per entry
 * and RESTORE_SPACE_MARGIN, against the blocks and inodes left to an
 * unprivileged user.  Declared, not allocated: runs of zeros restore as
 * holes that cost nothing now, but the manifest's author chooses how
 * much of a file is holes, and the trainer that reads the files, or a
 * copy without --sparse, fills them; a generation that cannot land whole
 * on this disk is refused before it half fills it. */
static int restore_space(struct fetch *fe, const struct manifest *m, uint64_t bytes)
{
    char dir[PATH_MAX], have[32], want[32];
    const char *slash = strrchr(fe->dest, '/');
    struct statvfs sv;
    uint64_t need = RESTORE_SPACE_MARGIN, avail, block;

    if (!slash)
        snprintf(dir, sizeof(dir), ".");
    else
        snprintf(dir, sizeof(dir), "%.*s", slash == fe->dest ? 1 : (int)(slash - fe->dest),
                 fe->dest);
    if (statvfs(dir, &sv) < 0) {
        fetch_fail(fe, -errno, "cannot tell the free space in '%s': %s", dir, strerror(errno));
        return fe->err;
    }
    block = sv.f_frsize ? sv.f_frsize : 4096;
    for (size_t i = 0; i < m->n_files && need != UINT64_MAX; i++) {
        uint64_t size = m->files[i].type == MF_FILE ? m->files[i].size : 0;
        uint64_t blocks = size / block + (size % block != 0) + 1;

        need = blocks > (UINT64_MAX - need) / block ? UINT64_MAX : need + blocks * block;
    }
    avail = sv.f_bavail > UINT64_MAX / block ? UINT64_MAX : (uint64_t)sv.f_bavail * block;
    snprintf(have, sizeof(have), "%.1f GiB", (double)avail / (1 << 30));
    snprintf(want, sizeof(want), "%.1f GiB", (double)bytes / (1 << 30));
    if (need > avail) {
        fetch_fail(fe, -ENOSPC, "generation %llu, rank %u: its files declare %llu bytes (%s, "
                   "runs of zeros included), more than '%s' has free (%s, less a 64 MiB "
                   "margin): free space there or restore elsewhere",
                   (unsigned long long)fe->gen, m->rank, (unsigned long long)bytes, want, dir,
                   have);
        return fe->err;
    }
    if (sv.f_files && sv.f_favail < (fsfilcnt_t)m->n_files + 1) {
        fetch_fail(fe, -ENOSPC, "generation %llu, rank %u: %zu files and directories, and "
                   "'%s' has %llu inodes free: free some or restore elsewhere",
                   (unsigned long long)fe->gen, m->rank, m->n_files, dir,
                   (unsigned long long)sv.f_favail);
        return fe->err;
    }
    return 0;
}

static void prep_done(struct pool_job *job)
{
    struct fetch *fe = (struct fetch *)((char *)job - offsetof(struct fetch, prep));

    if (fe->err) {
        fetch_end(fe);
        return;
    }
    fetch_pump(fe);
}

static void fetch_pump(struct fetch *fe)
{
    struct snap *s = fe->s;

    while (!fe->err && !fe->all_started && fe->alive < s->max_tasks) {
        const struct manifest *m = cur_manifest(fe);
        const struct mf_file *f;
        struct ftask *t;

        if (fe->next_file >= m->n_files) {
            /* Verify goes on with the next rank. */
            if (fe->verify && fe->cur_rank + 1 < fe->commit.world_size) {
                fe->cur_rank++;
                fe->next_file = fe->next_chunk = 0;
                fe->next_off = 0;
                continue;
            }
            fe->all_started = true;
            break;
        }
        f = &m->files[fe->next_file];
        if (fe->next_chunk == 0 && f->type == MF_FILE) {
            fe->report.files++;
        }
        if (f->type != MF_FILE || fe->next_chunk >= f->n_chunks) {
            fe->next_file++;
            fe->next_chunk = 0;
            fe->next_off = 0;
            continue;
        }
        if (f->chunks[fe->next_chunk].zero) {
            fe->c->bytes_zero += f->chunks[fe->next_chunk].len;
            fe->next_off += f->chunks[fe->next_chunk].len;
            fe->next_chunk++;
            continue;
        }
        if (fe->verify) {
            const uint8_t *h = f->chunks[fe->next_chunk].hash;
            if (hset_find(&fe->seen, h)) {
                fe->next_off += f->chunks[fe->next_chunk].len;
                fe->next_chunk++;
                continue;
            }
            if (!hset_add(&fe->seen, h, SLOT_KNOWN)) {
                fetch_fail(fe, -ENOMEM, "out of memory");
                break;
            }
        }
        if (!(t = calloc(1, sizeof(*t)))) {
            fetch_fail(fe, -ENOMEM, "out of memory");
            break;
        }
        t->fe = fe;
        t->m = m;
        t->file = fe->next_file;
        t->idx = fe->next_chunk;
        t->ch = &f->chunks[fe->next_chunk];
        t->off = fe->next_off;
        t->job.work = ftask_work;
        t->job.done = ftask_done;
        snap_chunk_key(s, t->ch->hash, t->key, sizeof(t->key));
        fe->next_chunk++;
        fe->next_off += t->ch->len;
        fe->alive++;
        ftask_get(t);
    }
    if (fe->alive > 0 || fe->finishing)
        return;
    fe->finishing = true;
    if (fe->verify || fe->err) {
        fetch_end(fe);
        return;
    }
    fe->prep.work = finish_work;
    fe->prep.done = finish_done;
    fe->prep.cancelled = false;
    pool_submit(s->pool, &fe->prep);
}

static void ftask_get(struct ftask *t)
{
    struct snap *s = t->fe->s;

    /* A stored chunk is at most its plaintext and its trailer (raw), or
     * less (zstd, kept only when smaller). */
    store_get(s->store, t->key, (size_t)t->ch->len + CHUNK_TRAILER_LEN, on_chunk_got, t);
}

static void on_chunk_got(void *arg, int err, const char *msg, void *data, size_t len)
{
    struct ftask *t = arg;
    struct fetch *fe = t->fe;
    char hex[2 * CHUNK_HASH_LEN + 1], path[SHOWN_MAX];

    if (err) {
        hash_hex(t->ch->hash, hex);
        if (err == -ENOENT || err == -EFBIG)
            fe->report.bad_chunks++;
        if (err == -ENOENT)
            fetch_fail(fe, -EBADMSG,
                       "generation %llu, rank %u: chunk %s of '%s' is missing from the store",
                       (unsigned long long)fe->gen, t->m->rank, hex,
                       shown(t->m->files[t->file].path, path));
        else
            fetch_fail(fe, err == -EFBIG ? -EBADMSG : err, "%s", msg);
        bigbuf_free(data);
        ftask_end(t);
        return;
    }
    fe->c->bytes_received += len;
    t->data = data;
    t->len = len;
    pool_submit(fe->s->pool, &t->job);
}

static void ftask_work(struct pool_job *job)
{
    struct ftask *t = (struct ftask *)job;
    struct fetch *fe = t->fe;
    const struct mf_file *f = &t->m->files[t->file];
    const void *plain;
    size_t len;
    void *owned = NULL;
    char path[SHOWN_MAX];
    int r;

    r = chunk_decode_view(t->data, t->len, t->ch->hash, &plain, &len, &owned);
    if (r == 0 && len != t->ch->len)
        r = -EBADMSG;
    if (r < 0) {
        t->err = r;
        snprintf(t->msg, sizeof(t->msg), "%s", r == -ENOMEM ? "out of memory" : "corrupt");
        bigbuf_free(owned);
        return;
    }
    if (fe->verify) {
        bigbuf_free(owned);
        return;
    }
    shown(f->path, path);
    r = write_chunk(fe, f->path, plain, len, t->off, &t->direct);
    if (r < 0) {
        t->err = r;
        snprintf(t->msg, sizeof(t->msg), "cannot write '%s' in '%s': %s", path, fe->tmp,
                 strerror(-r));
    }
    bigbuf_free(owned);
}

/* All len bytes of buf at off, at most piece bytes a call, or -errno;
 * *done says how many went. */
static int pwrite_all(int fd, const void *buf, size_t len, uint64_t off, size_t piece,
                      size_t *done)
{
    while (*done < len) {
        size_t want = len - *done < piece ? len - *done : piece;
        ssize_t n = pwrite(fd, (const char *)buf + *done, want, (off_t)(off + *done));

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? -errno : -EIO;
        *done += (size_t)n;
    }
    return 0;
}

/* Pool: len bytes at off of the file at rel below fe->tmpfd.  The whole
 * blocks go with O_DIRECT when plain is aligned for it (the stores'
 * buffers are) and the filesystem takes it; the rest, and everything on
 * one that does not, through the page cache.  0 or -errno; *direct_done
 * says how many bytes went with O_DIRECT. */
static int write_chunk(struct fetch *fe, const char *rel, const void *plain, size_t len,
                       uint64_t off, size_t *direct_done)
{
    size_t direct = 0, done = 0;
    int fd = -1, r = 0;

    *direct_done = 0;
    if (!__atomic_load_n(&fe->no_direct, __ATOMIC_RELAXED) &&
        (uintptr_t)plain % DIRECT_ALIGN == 0 && off % DIRECT_ALIGN == 0)
        direct = len - len % DIRECT_ALIGN;
    if (direct) {
        fd = openat(fe->tmpfd, rel, O_WRONLY | O_NOFOLLOW | O_CLOEXEC | O_DIRECT);
        if (fd < 0 && errno != EINVAL)
            return -errno;
        if (fd < 0) {
            __atomic_store_n(&fe->no_direct, true, __ATOMIC_RELAXED);
            direct = 0;
        }
    }
    if (direct && (r = pwrite_all(fd, plain, direct, off, direct, &done)) == -EINVAL &&
        done == 0) {
        /* Alignment the device wants more of: buffered from here on. */
        __atomic_store_n(&fe->no_direct, true, __ATOMIC_RELAXED);
        r = 0;
    }
    /* Read back into the page cache by the kernel, without a copy of
     * ours: the trainer loads these bytes next. */
    if (fd >= 0 && done)
        posix_fadvise(fd, (off_t)off, (off_t)done, POSIX_FADV_WILLNEED);
    *direct_done = done;
    if (fd >= 0)
        close(fd);
    if (r < 0 || done == len)
        return r;
    if ((fd = openat(fe->tmpfd, rel, O_WRONLY | O_NOFOLLOW | O_CLOEXEC)) < 0)
        return -errno;
    r = pwrite_all(fd, plain, len, off, BIGBUF_CACHED_WRITE, &done);
    close(fd);
    return r;
}

static void ftask_done(struct pool_job *job)
{
    struct ftask *t = (struct ftask *)job;
    struct fetch *fe = t->fe;
    const struct mf_file *f = &t->m->files[t->file];
    char hex[2 * CHUNK_HASH_LEN + 1], path[SHOWN_MAX];

    if (job->cancelled) {
        fetch_fail(fe, -ECANCELED, "cancelled");
    } else if (t->err == -EBADMSG && t->refetch < REFETCH_MAX) {
        /* Damaged on the way, perhaps: fetch it again before calling the
         * stored copy corrupt. */
        t->refetch++;
        fe->c->retries++;
        bigbuf_free(t->data);
        t->data = NULL;
        t->err = 0;
        ftask_get(t);
        return;
    } else if (t->err == -EBADMSG) {
        hash_hex(t->ch->hash, hex);
        fe->report.bad_chunks++;
        fetch_fail(fe, -EBADMSG,
                   "generation %llu, rank %u: chunk %s of '%s' (offset %llu) is corrupt in the "
                   "store", (unsigned long long)fe->gen, t->m->rank, hex, shown(f->path, path),
                   (unsigned long long)t->off);
    } else if (t->err) {
        fetch_fail(fe, t->err, "%s", t->msg);
    } else {
        fe->c->bytes_hashed += t->ch->len;
        if (!fe->verify) {
            fe->c->bytes_written += t->ch->len;
            fe->c->bytes_direct += t->direct;
        }
        fe->report.chunks++;
        fe->report.bytes += t->ch->len;
    }
    ftask_end(t);
}

static void ftask_end(struct ftask *t)
{
    struct fetch *fe = t->fe;

    bigbuf_free(t->data);
    free(t);
    fe->alive--;
    fetch_pump(fe);
}

/* Pool: the finishing touches of a restore, then the rename into place.
 * Each file is opened without following links and checked to be what
 * the manifest declares (a regular file of its size) before its mode and
 * times are set through the descriptor. */
static void finish_work(struct pool_job *job)
{
    struct fetch *fe = (struct fetch *)((char *)job - offsetof(struct fetch, prep));
    const struct manifest *m = cur_manifest(fe);
    char path[SHOWN_MAX], target[SHOWN_MAX];

    /* Links, then files, then directories deepest first (reverse order of
     * the sorted paths), so setting a directory's mtime comes last. */
    for (size_t i = m->n_files; i-- > 0 && !fe->err;) {
        const struct mf_file *f = &m->files[i];
        struct timespec ts[2] = { { f->mtime_s, f->mtime_ns }, { f->mtime_s, f->mtime_ns } };
        struct stat st;
        int fd;

        shown(f->path, path);
        if (f->type == MF_SYMLINK) {
            if (symlinkat(f->target, fe->tmpfd, f->path) < 0) {
                fetch_fail(fe, -errno, "cannot create the link '%s' -> '%s' in '%s': %s", path,
                           shown(f->target, target), fe->tmp, strerror(errno));
                break;
            }
            utimensat(fe->tmpfd, f->path, ts, AT_SYMLINK_NOFOLLOW);
            continue;
        }
        fd = openat(fe->tmpfd, f->path,
                    O_RDONLY | O_NOFOLLOW | O_CLOEXEC | (f->type == MF_DIR ? O_DIRECTORY : 0));
        if (fd < 0 || fstat(fd, &st) < 0) {
            fetch_fail(fe, -errno, "cannot open '%s' in '%s': %s", path, fe->tmp,
                       strerror(errno));
        } else if (f->type == MF_FILE && (!S_ISREG(st.st_mode) || (uint64_t)st.st_size != f->size)) {
            fetch_fail(fe, -EIO, "'%s' in '%s' is %lld bytes once written, not the %llu its "
                       "manifest declares", path, fe->tmp, (long long)st.st_size,
                       (unsigned long long)f->size);
        } else if (fchmod(fd, restore_mode(fe, f)) < 0 || futimens(fd, ts) < 0) {
            fetch_fail(fe, -errno, "cannot set the mode or time of '%s' in '%s': %s", path,
                       fe->tmp, strerror(errno));
        }
        if (fd >= 0)
            close(fd);
    }
    if (fe->err)
        return;
    /* An empty directory in the way goes; anything else stays and fails. */
    rmdir(fe->dest);
    if (rename(fe->tmp, fe->dest) < 0)
        fetch_fail(fe, -errno, "cannot move the restored files to '%s': %s", fe->dest,
                   strerror(errno));
}

/* The mode a restore gives f: as stored with preserve_special_modes;
 * else without setuid, setgid, sticky and others' write.  The manifest
 * comes from whoever can write the store, and spotd restores as root:
 * setuid-root programs and directories anyone can change files in (the
 * checkpoint the trainer loads next) are not its to hand out. */
static mode_t restore_mode(const struct fetch *fe, const struct mf_file *f)
{
    if (fe->s->preserve_special_modes)
        return (mode_t)f->mode;
    return (mode_t)f->mode & ~(mode_t)(S_ISUID | S_ISGID | S_ISVTX | S_IWOTH);
}

static void finish_done(struct pool_job *job)
{
    fetch_end((struct fetch *)((char *)job - offsetof(struct fetch, prep)));
}

static void fetch_end(struct fetch *fe)
{
    if (fe->err && fe->made_tmp && !fe->verify && fe->f) {
        fe->prep.work = cleanup_work;
        fe->prep.done = cleanup_done;
        pool_submit(fe->s->pool, &fe->prep);
        return;
    }
    fetch_report(fe);
}

/* Pool: undo a failed restore: what the manifest names, deepest first,
 * with the directories made above it, through tmpfd (a path may fit under
 * dest and not under tmp, which is longer); then tmp itself, and whatever
 * else is left in it. */
static void cleanup_work(struct pool_job *job)
{
    struct fetch *fe = (struct fetch *)((char *)job - offsetof(struct fetch, prep));
    const struct manifest *m = cur_manifest(fe);
    char path[PATH_MAX];

    if (!fe->made_tmp)
        return;
    for (size_t i = m->n_files; fe->tmpfd >= 0 && i-- > 0;) {
        const struct mf_file *f = &m->files[i];
        char *slash;

        if ((size_t)snprintf(path, sizeof(path), "%s", f->path) >= sizeof(path))
            continue;
        unlinkat(fe->tmpfd, path, f->type == MF_DIR ? AT_REMOVEDIR : 0);
        while ((slash = strrchr(path, '/'))) {
            *slash = '\0';
            if (unlinkat(fe->tmpfd, path, AT_REMOVEDIR) < 0 && errno != ENOENT)
                break;
        }
    }
    if (rmdir(fe->tmp) < 0 && errno != ENOENT)
        nftw(fe->tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    remove(path);
    return 0;
}

static void cleanup_done(struct pool_job *job)
{
    fetch_report((struct fetch *)((char *)job - offsetof(struct fetch, prep)));
}

static void fetch_report(struct fetch *fe)
{
    if (fe->shown) {
        fe->shown(fe->arg, fe->err, fe->err ? fe->msg : "", fe->err ? NULL : &fe->commit,
                  fe->err || !fe->f ? NULL : fe->f->mfs);
    } else if (fe->verify) {
        fe->verified(fe->arg, fe->err, fe->err ? fe->msg : "", &fe->report);
    } else {
        fe->done(fe->arg, fe->err, fe->err ? fe->msg : "");
    }
    if (fe->f)
        snap_mf_fetch_free(fe->f);
    commit_release(&fe->commit);
    hset_clear(&fe->seen);
    if (fe->tmpfd >= 0)
        close(fe->tmpfd);
    free(fe->dest);
    free(fe->tmp);
    free(fe->leave);
    free(fe);
}

/* snap_restore_leaving(): whether f is one of the files left out. */
static bool left_out(const struct fetch *fe, const struct mf_file *f)
{
    return fe->leave && f->type == MF_FILE && fnmatch(fe->leave, f->path, FNM_PATHNAME) == 0;
}

/* Drop the files left out from the rank's manifest, once restore_check()
 * has held it whole against the commit record: what follows (the layout,
 * the chunks, the finishing touches, a check) never sees them. */
static void leave_out(struct fetch *fe)
{
    struct manifest *m = &fe->f->mfs[fe->rank];
    size_t k = 0;

    if (!fe->leave)
        return;
    for (size_t i = 0; i < m->n_files; i++) {
        struct mf_file *f = &m->files[i];

        if (left_out(fe, f)) {
            free(f->path);
            free(f->target);
            free(f->chunks);
            continue;
        }
        m->files[k++] = *f;
    }
    m->n_files = k;
}
