#include <dirent.h>
#include <errno.h>
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "spot/genclaim.h"
#include "spot/pool.h"
#include "spot/store.h"

/* One operation's outcome, and the loop stopped when it came. */
struct outcome {
    struct event_base *base;
    int calls, err;
    char msg[256];
    void *data;
    size_t len;
    struct store_entry *entries;
    size_t n;
};

static void done_cb(void *arg, int err, const char *msg)
{
    struct outcome *o = arg;

    o->calls++;
    o->err = err;
    snprintf(o->msg, sizeof(o->msg), "%s", msg);
    event_base_loopbreak(o->base);
}

static void get_cb(void *arg, int err, const char *msg, void *data, size_t len)
{
    struct outcome *o = arg;

    free(o->data);
    o->data = data;
    o->len = len;
    done_cb(arg, err, msg);
}

static void list_cb(void *arg, int err, const char *msg, struct store_entry *e, size_t n)
{
    struct outcome *o = arg;

    store_entries_free(o->entries, o->n);
    o->entries = e;
    o->n = n;
    done_cb(arg, err, msg);
}

static bool listed(const struct outcome *o, const char *key, uint64_t size)
{
    for (size_t i = 0; i < o->n; i++)
        if (strcmp(o->entries[i].key, key) == 0 && o->entries[i].size == size)
            return true;
    return false;
}

/* Count files whose name has ".tmp." anywhere below dir. */
static int tmp_files(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    int n = 0;

    if (!d)
        return 0;
    while ((de = readdir(d))) {
        char path[1024];
        struct stat st;
        if (de->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        if (strstr(de->d_name, ".tmp."))
            n++;
        else if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
            n += tmp_files(path);
    }
    closedir(d);
    return n;
}

#define RUN(o) event_base_dispatch((o).base)

TEST(store_file_ops)
{
    char root[] = "/tmp/spotd-store.XXXXXX", url[128], err[512];
    struct event_base *base = event_base_new();
    struct pool *pool = pool_new(base, 2);
    struct store_ctx ctx = { .base = base, .pool = pool };
    struct outcome o = { .base = base };
    struct store *s = NULL;
    char *big;

    CHECK(mkdtemp(root) != NULL);
    snprintf(url, sizeof(url), "file://%s/", root);
    CHECK_INT(store_open(url, &ctx, &s, err, sizeof(err)), 0);
    if (!s)
        return;
    CHECK_STR(store_url(s), url);

    store_put(s, "job/chunks/ab/abcd", "hello", 5, done_cb, &o);
    RUN(o);
    CHECK_INT(o.err, 0);
    store_get(s, "job/chunks/ab/abcd", 1024, get_cb, &o);
    RUN(o);
    CHECK_INT(o.err, 0);
    CHECK(o.len == 5 && memcmp(o.data, "hello", 5) == 0);

    /* Overwrite, bigger. */
    big = malloc(3 << 20);
    memset(big, 'x', 3 << 20);
    store_put(s, "job/chunks/ab/abcd", big, 3 << 20, done_cb, &o);
    RUN(o);
    CHECK_INT(o.err, 0);
    store_get(s, "job/chunks/ab/abcd", 1024, get_cb, &o);
    RUN(o);
    CHECK_INT(o.err, -EFBIG);
    CHECK(o.data == NULL);
    CHECK_HAS(o.msg, "larger than allowed");
    store_get(s, "job/chunks/ab/abcd", 4 << 20, get_cb, &o);
    RUN(o);
    CHECK(o.err == 0 && o.len == (3u << 20) && memcmp(o.data, big, o.len) == 0);

    store_put(s, "job/gens/00000001/rank-0.json", "{}", 2, done_cb, &o);
    RUN(o);
    store_put(s, "other/x", "1", 1, done_cb, &o);
    RUN(o);
    store_list(s, "job/", list_cb, &o);
    RUN(o);
    CHECK_INT(o.err, 0);
    CHECK_INT(o.n, 2);
    CHECK(listed(&o, "job/chunks/ab/abcd", 3u << 20));
    CHECK(listed(&o, "job/gens/00000001/rank-0.json", 2));
    store_list(s, "job/gens/0000", list_cb, &o);
    RUN(o);
    CHECK(o.n == 1 && listed(&o, "job/gens/00000001/rank-0.json", 2));
    CHECK(o.n == 0 || o.entries[0].mtime_ms > 1700000000000LL);
    store_list(s, "", list_cb, &o);
    RUN(o);
    CHECK_INT(o.n, 3);
    store_list(s, "nothing/", list_cb, &o);
    RUN(o);
    CHECK(o.err == 0 && o.n == 0);

    store_get(s, "job/missing", 1024, get_cb, &o);
    RUN(o);
    CHECK_INT(o.err, -ENOENT);
    CHECK_HAS(o.msg, "job/missing");

    store_delete(s, "other/x", done_cb, &o);
    RUN(o);
    CHECK_INT(o.err, 0);
    store_delete(s, "other/x", done_cb, &o);
    RUN(o);
    CHECK_INT(o.err, 0); /* deleting what is not there succeeds */
    store_get(s, "other/x", 1024, get_cb, &o);
    RUN(o);
    CHECK_INT(o.err, -ENOENT);

    /* Keys that could escape the root never reach the file system, and the
     * error still comes through the callback. */
    static const char *const bad[] = { "../etc/passwd", "/etc/passwd", "job/../../x", "job//x",
                                       "job/./x", "job/x/", "", "job/x\ny", "job/x y", "ж" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int calls = o.calls;
        store_put(s, bad[i], "z", 1, done_cb, &o);
        RUN(o);
        if (o.err != -EINVAL || o.calls != calls + 1) {
            printf("  key \"%s\" was not refused (%d)\n", bad[i], o.err);
            harness_failed = 1;
        }
    }
    CHECK(store_key_valid("job/chunks/ab/ab12-_.x"));
    CHECK(!store_key_valid("job/.."));
    CHECK_INT(tmp_files(root), 0);

    free(o.data);
    store_entries_free(o.entries, o.n);
    free(big);
    store_close(s);
    CHECK_INT(store_open("file://relative/path", &ctx, &s, err, sizeof(err)), -EINVAL);
    CHECK_HAS(err, "absolute path");
    CHECK_INT(store_open("file:///nonexistent/store", &ctx, &s, err, sizeof(err)), -ENOENT);
    CHECK_HAS(err, "create it first");
    CHECK_INT(store_open("s3://", &ctx, &s, err, sizeof(err)), -EINVAL);
    CHECK_HAS(err, "s3://bucket");
    CHECK_INT(store_open("s3://b%d/x", &ctx, &s, err, sizeof(err)), -EINVAL);
    CHECK_INT(store_open("s3://bucket/../x", &ctx, &s, err, sizeof(err)), -EINVAL);
    CHECK_HAS(err, "prefix");
    ctx.s3_endpoint = "ftp://host";
    CHECK_INT(store_open("s3://bucket/x", &ctx, &s, err, sizeof(err)), -EINVAL);
    CHECK_HAS(err, "endpoint");
    /* A path below the host is a gateway's prefix: path-style only, and
     * plain segments (it is signed as sent). */
    ctx.s3_endpoint = "http://host/s3/v1/";
    s = NULL;
    CHECK_INT(store_open("s3://bucket/x", &ctx, &s, err, sizeof(err)), 0);
    if (s)
        store_close(s);
    static const char *const bad_ep[] = { "http://host/a/../b", "http://host/a/./b",
                                          "http://host/a//b", "http://host/s%203",
                                          "http://host/s3?x=1", "http://host/s3#f",
                                          "http://host/s 3", "http://host/.." };
    for (size_t i = 0; i < sizeof(bad_ep) / sizeof(bad_ep[0]); i++) {
        ctx.s3_endpoint = bad_ep[i];
        err[0] = '\0';
        if (store_open("s3://bucket/x", &ctx, &s, err, sizeof(err)) != -EINVAL ||
            !strstr(err, "invalid S3 endpoint")) {
            printf("  endpoint \"%s\" was not refused (%s)\n", bad_ep[i], err);
            harness_failed = 1;
        }
    }
    ctx.s3_endpoint = "http://host:9000/s3";
    ctx.s3_path_style_set = true;
    ctx.s3_path_style = 0;
    CHECK_INT(store_open("s3://bucket/x", &ctx, &s, err, sizeof(err)), -EINVAL);
    CHECK_HAS(err, "has a path ('/s3'), which takes path-style addressing");
    ctx.s3_path_style_set = false;
    ctx.s3_endpoint = "http://host";
    setenv("SPOTD_TEST_S3_MAX_KEYS", "0", 1);
    CHECK_INT(store_open("s3://bucket/x", &ctx, &s, err, sizeof(err)), -EINVAL);
    CHECK_HAS(err, "invalid SPOTD_TEST_S3_MAX_KEYS '0'");
    setenv("SPOTD_TEST_S3_MAX_KEYS", "1000", 1);
    s = NULL;
    CHECK_INT(store_open("s3://bucket/x", &ctx, &s, err, sizeof(err)), 0);
    if (s)
        store_close(s);
    unsetenv("SPOTD_TEST_S3_MAX_KEYS");
    ctx.s3_endpoint = NULL;
    ctx.s3_region = "US EAST";
    CHECK_INT(store_open("s3://bucket/x", &ctx, &s, err, sizeof(err)), -EINVAL);
    CHECK_HAS(err, "region");
    ctx.s3_region = NULL;
    CHECK_INT(store_open("ftp://x", &ctx, &s, err, sizeof(err)), -EINVAL);
    pool_free(pool);
    event_base_free(base);
    {
        char cmd[160];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
        CHECK_INT(system(cmd), 0);
    }
}

/* A conditional put creates once; the second finds it and writes nothing. */
TEST(store_file_put_new)
{
    char root[] = "/tmp/spotd-store.XXXXXX", url[128], err[512], path[256];
    struct event_base *base = event_base_new();
    struct pool *pool = pool_new(base, 2);
    struct store_ctx ctx = { .base = base, .pool = pool };
    struct outcome o = { .base = base };
    struct store *s = NULL;

    CHECK(mkdtemp(root) != NULL);
    snprintf(url, sizeof(url), "file://%s", root);
    CHECK_INT(store_open(url, &ctx, &s, err, sizeof(err)), 0);
    if (!s)
        return;
    CHECK(store_put_new_trusted(s));
    store_put_new(s, "job/gens/00000001/CLAIM.json", "first", 5, NULL, done_cb, &o);
    RUN(o);
    CHECK_INT(o.err, 0);
    store_put_new(s, "job/gens/00000001/CLAIM.json", "second", 6, NULL, done_cb, &o);
    RUN(o);
    CHECK_INT(o.err, -EEXIST);
    store_get(s, "job/gens/00000001/CLAIM.json", 64, get_cb, &o);
    RUN(o);
    CHECK(o.err == 0 && o.len == 5 && memcmp(o.data, "first", 5) == 0);
    CHECK_INT(tmp_files(root), 0);

    /* A listing that meets what it cannot read fails: a link to nothing,
     * a loop.  Left out, the generations below would read as missing. */
    snprintf(path, sizeof(path), "%s/job/gens/00000002", root);
    CHECK_INT(symlink("/nonexistent/spotd-store", path), 0);
    store_list(s, "job/gens/", list_cb, &o);
    RUN(o);
    CHECK_INT(o.err, -ENOLINK);
    CHECK_HAS(o.msg, "00000002");
    unlink(path);
    CHECK_INT(symlink("00000002", path), 0);
    store_list(s, "job/gens/", list_cb, &o);
    RUN(o);
    CHECK_INT(o.err, -ELOOP);
    unlink(path);
    /* A link to a folder elsewhere is followed. */
    snprintf(path, sizeof(path), "%s/job/gens/00000003", root);
    CHECK_INT(symlink("00000001", path), 0);
    store_list(s, "job/gens/", list_cb, &o);
    RUN(o);
    CHECK(o.err == 0 && o.n == 2 && listed(&o, "job/gens/00000003/CLAIM.json", 5));

    free(o.data);
    store_entries_free(o.entries, o.n);
    store_close(s);
    pool_free(pool);
    event_base_free(base);
    snprintf(path, sizeof(path), "rm -rf '%s'", root);
    CHECK_INT(system(path), 0);
}

struct claimed {
    struct event_base *base;
    int err;
    char msg[512];
    uint64_t gen;
};

static void claimed_cb(void *arg, int err, const char *msg, uint64_t gen)
{
    struct claimed *c = arg;

    c->err = err;
    c->gen = gen;
    snprintf(c->msg, sizeof(c->msg), "%s", msg);
    event_base_loopbreak(c->base);
}

/* Two writers of one job never get the same generation number. */
TEST(genclaim_two_writers)
{
    char root[] = "/tmp/spotd-store.XXXXXX", url[128], err[512], cmd[256];
    struct event_base *base = event_base_new();
    struct pool *pool = pool_new(base, 2);
    struct store_ctx ctx = { .base = base, .pool = pool };
    struct claimed c = { .base = base };
    struct outcome o = { .base = base };
    struct genclaim *a, *b;
    struct store *s = NULL;

    CHECK(mkdtemp(root) != NULL);
    snprintf(url, sizeof(url), "file://%s", root);
    CHECK_INT(store_open(url, &ctx, &s, err, sizeof(err)), 0);
    if (!s)
        return;
    a = genclaim_new(base, s, "job");
    b = genclaim_new(base, s, "job");
    CHECK(a && b && strcmp(genclaim_writer(a), genclaim_writer(b)) != 0);
    genclaim_claim(a, 1, claimed_cb, &c);
    event_base_dispatch(base);
    CHECK(c.err == 0 && c.gen == 1);
    CHECK(genclaim_conditional(a));
    /* b saw the same newest (none): it takes the next, and says so. */
    genclaim_claim(b, 1, claimed_cb, &c);
    event_base_dispatch(base);
    CHECK(c.err == 0 && c.gen == 2);
    CHECK_INT(genclaim_lost(b), 1);
    /* a again from a stale newest: its own earlier claim is used, not ours. */
    genclaim_claim(a, 1, claimed_cb, &c);
    event_base_dispatch(base);
    CHECK(c.err == 0 && c.gen == 3);
    store_get(s, "job/gens/00000002/CLAIM.json", 4096, get_cb, &o);
    RUN(o);
    CHECK(o.err == 0 && o.data && strstr(o.data, genclaim_writer(b)));

    free(o.data);
    genclaim_free(a);
    genclaim_free(b);
    store_close(s);
    pool_free(pool);
    event_base_free(base);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    CHECK_INT(system(cmd), 0);
}
