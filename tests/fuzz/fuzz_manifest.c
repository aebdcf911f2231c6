/* The manifest and commit-record parsers on arbitrary bytes.  Besides the
 * sanitizers, it aborts when a promise of manifest.h is broken: 0,
 * -EINVAL, -ENOTSUP or -ENOMEM with a reason for the errors, *out
 * untouched on failure, the same answer twice, and a parsed document that
 * is written back and parses to the same fields: sorted unique valid
 * paths, chunks that add up to each file's size, ranks each at its own
 * index, a signature that comes back the same; and every path and link
 * target escaped for printing whole and without a control byte. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "spot/jobkey.h"
#include "spot/manifest.h"

static bool ends_in_dots(const char *s)
{
    size_t n = strlen(s);

    return n >= 3 && strcmp(s + n - 3, "...") == 0;
}

/* What spotctl prints of a stored string: whole (never cut: paths and
 * targets are at most MANIFEST_PATH_MAX bytes), no control byte. */
static void escaped_printable(const char *s)
{
    static char buf[MANIFEST_ESCAPED_MAX];

    manifest_escape(s, buf, sizeof(buf));
    if (strlen(buf) > 4 * strlen(s) || strlen(buf) < strlen(s) ||
        ends_in_dots(buf) != ends_in_dots(s))
        abort();
    for (const char *p = buf; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            abort();
}

static void check_manifest(const struct manifest *m)
{
    if (!manifest_job_valid(m->job) || m->gen > GEN_MAX || m->rank >= WORLD_MAX ||
        m->chunk_size == 0 || m->chunk_size > CHUNK_MAX_PLAIN)
        abort();
    for (size_t i = 0; i < m->n_files; i++) {
        const struct mf_file *f = &m->files[i];
        uint64_t total = 0;

        if (!manifest_path_valid(f->path) || f->mode > 07777 ||
            (i > 0 && strcmp(m->files[i - 1].path, f->path) >= 0))
            abort();
        if ((f->type == MF_SYMLINK) != (f->target != NULL))
            abort();
        escaped_printable(f->path);
        if (f->target) {
            escaped_printable(f->target);
            manifest_link_inside(f->path, f->target);
        }
        for (size_t c = 0; c < f->n_chunks; c++) {
            if (f->chunks[c].len == 0 || f->chunks[c].len > m->chunk_size)
                abort();
            total += f->chunks[c].len;
        }
        if (f->type == MF_FILE && total != f->size)
            abort();
    }
}

static void same_manifest(const struct manifest *a, const struct manifest *b)
{
    if (strcmp(a->job, b->job) || a->gen != b->gen || a->rank != b->rank || a->step != b->step ||
        strcmp(a->method, b->method) || a->chunk_size != b->chunk_size ||
        a->n_files != b->n_files || strcmp(a->version, b->version) ||
        a->created_ms / 1000 != b->created_ms / 1000)
        abort();
    for (size_t i = 0; i < a->n_files; i++) {
        const struct mf_file *x = &a->files[i], *y = &b->files[i];

        if (strcmp(x->path, y->path) || x->type != y->type || x->mode != y->mode ||
            x->mtime_s != y->mtime_s || x->mtime_ns != y->mtime_ns || x->size != y->size ||
            x->n_chunks != y->n_chunks || (x->target && strcmp(x->target, y->target)))
            abort();
        for (size_t c = 0; c < x->n_chunks; c++)
            if (x->chunks[c].len != y->chunks[c].len || x->chunks[c].zero != y->chunks[c].zero ||
                (!x->chunks[c].zero && memcmp(x->chunks[c].hash, y->chunks[c].hash, 32)))
                abort();
    }
}

static void fuzz_manifest(const char *text, size_t size)
{
    struct manifest m, m2, again;
    const char *why = NULL;
    int r, r2;

    memset(&m, 0xa5, sizeof(m));
    r = manifest_parse(text, size, &m, &why);
    if (r < 0) {
        if ((r != -EINVAL && r != -ENOTSUP && r != -ENOMEM) || !fuzz_poisoned(&m, sizeof(m)) ||
            (r != -ENOMEM && (!why || !*why)))
            abort();
        return;
    }
    check_manifest(&m);
    r2 = manifest_parse(text, size, &again, NULL);
    if (r2 != 0)
        abort();
    same_manifest(&m, &again);
    manifest_release(&again);
    {
        size_t len;
        char *json = manifest_to_json(&m, &len);

        if (json) {
            if (manifest_parse(json, len, &m2, &why) != 0)
                abort();
            same_manifest(&m, &m2);
            manifest_release(&m2);
            free(json);
        }
    }
    manifest_release(&m);
}

static void fuzz_commit(const char *text, size_t size)
{
    struct commit c, c2;
    const char *why = NULL;
    int r;

    memset(&c, 0xa5, sizeof(c));
    r = commit_parse(text, size, &c, &why);
    if (r < 0) {
        if ((r != -EINVAL && r != -ENOTSUP && r != -ENOMEM) || !fuzz_poisoned(&c, sizeof(c)) ||
            (r != -ENOMEM && (!why || !*why)))
            abort();
        return;
    }
    if (c.world_size == 0 || c.world_size > WORLD_MAX || !manifest_job_valid(c.job))
        abort();
    for (uint32_t i = 0; i < c.world_size; i++)
        if (c.ranks[i].rank != i)
            abort();
    {
        /* Whatever it says, its signature can be checked; signed with a
         * key, it checks with that key alone. */
        static const struct frame_key fk = { .k = "fuzzing job key, 32 bytes long!", .len = 32 };
        struct jobkey jk;
        struct commit s = c;
        enum jobkey_auth a;

        if (jobkey_init(&jk, &fk) < 0 || jobkey_check(&jk, &c, &a) < 0 ||
            (c.has_mac ? a == JOBKEY_UNSIGNED || a == JOBKEY_UNCHECKED : a != JOBKEY_UNSIGNED))
            abort();
        if (jobkey_sign(&jk, &s) < 0 || jobkey_check(&jk, &s, &a) < 0 || a != JOBKEY_AUTHENTIC)
            abort();
        s.gen ^= 1;
        if (jobkey_check(&jk, &s, &a) < 0 || a != JOBKEY_BAD_MAC)
            abort();
    }
    {
        size_t len;
        char *json = commit_to_json(&c, &len);

        if (json) {
            if (commit_parse(json, len, &c2, &why) != 0 || c2.world_size != c.world_size ||
                c2.gen != c.gen || c2.step != c.step || strcmp(c2.reason, c.reason) ||
                memcmp(c2.ranks, c.ranks, c.world_size * sizeof(*c.ranks)) ||
                c2.has_mac != c.has_mac ||
                (c.has_mac && (strcmp(c2.mac_alg, c.mac_alg) || strcmp(c2.key_id, c.key_id) ||
                               memcmp(c2.mac, c.mac, sizeof(c.mac)))))
                abort();
            commit_release(&c2);
            free(json);
        }
    }
    commit_release(&c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_manifest((const char *)data, size);
    fuzz_commit((const char *)data, size);
    return 0;
}
