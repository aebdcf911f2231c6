#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "spot/jobkey.h"
#include "spot/jobtree.h"
#include "spot/manifest.h"

static char p_a[] = "a", p_model[] = "a/model.pt", p_latest[] = "latest";

static struct manifest sample(struct mf_file *files, struct mf_chunk *chunks)
{
    struct manifest m;

    memset(&m, 0, sizeof(m));
    snprintf(m.job, sizeof(m.job), "llama-ft");
    m.gen = 12;
    m.rank = 3;
    m.step = 123456;
    snprintf(m.method, sizeof(m.method), "app");
    m.created_ms = 1796045255123LL;
    snprintf(m.version, sizeof(m.version), "0.1.0");
    m.chunk_size = 8 << 20;
    memset(chunks, 0, 3 * sizeof(*chunks));
    memset(chunks[0].hash, 0xab, 32);
    chunks[0].len = 8 << 20;
    chunks[1].zero = true;
    chunks[1].len = 8 << 20;
    memset(chunks[2].hash, 0x01, 32);
    chunks[2].len = 5;
    memset(files, 0, 3 * sizeof(*files));
    files[0] = (struct mf_file){ .path = p_a, .type = MF_DIR, .mode = 0755,
                                 .mtime_s = 1700000000 };
    files[1] = (struct mf_file){ .path = p_model, .type = MF_FILE, .mode = 0640,
                                 .mtime_s = 1700000001, .mtime_ns = 999999999,
                                 .size = (16 << 20) + 5, .chunks = chunks, .n_chunks = 3 };
    files[2] = (struct mf_file){ .path = p_latest, .type = MF_SYMLINK, .mode = 0777,
                                 .target = p_model };
    m.files = files;
    m.n_files = 3;
    return m;
}

TEST(manifest_roundtrip)
{
    struct mf_file files[3];
    struct mf_chunk chunks[3];
    struct manifest m = sample(files, chunks), back;
    const char *why = NULL;
    size_t len;
    char *json = manifest_to_json(&m, &len);

    CHECK(json != NULL);
    CHECK_INT(manifest_parse(json, len, &back, &why), 0);
    CHECK_STR(back.job, "llama-ft");
    CHECK_INT(back.gen, 12);
    CHECK_INT(back.rank, 3);
    CHECK_INT(back.step, 123456);
    CHECK_INT(back.created_ms, 1796045255123LL);
    CHECK_INT(back.n_files, 3);
    CHECK_INT(back.files[1].size, (16 << 20) + 5);
    CHECK_INT(back.files[1].mtime_ns, 999999999);
    CHECK_INT(back.files[1].mode, 0640);
    CHECK_INT(back.files[1].n_chunks, 3);
    CHECK(back.files[1].chunks[1].zero);
    CHECK(!back.files[1].chunks[0].zero);
    CHECK(memcmp(back.files[1].chunks[2].hash, chunks[2].hash, 32) == 0);
    CHECK_STR(back.files[2].target, "a/model.pt");
    CHECK_HAS(json, "[8388608]");
    manifest_release(&back);
    free(json);

    /* An empty shard (a rank that saved nothing) is a manifest too. */
    m.n_files = 0;
    m.files = NULL;
    CHECK((json = manifest_to_json(&m, &len)) != NULL);
    CHECK_HAS(json, "\"files\":[]");
    CHECK_INT(manifest_parse(json, len, &back, &why), 0);
    CHECK_INT(back.n_files, 0);
    manifest_release(&back);
    free(json);
}

/* Parse text after replacing the first occurrence of from with to. */
static int mutated(const char *json, const char *from, const char *to, const char **why)
{
    struct manifest m;
    char buf[4096];
    const char *p = strstr(json, from);
    int r;

    if (!p)
        return 1000;
    snprintf(buf, sizeof(buf), "%.*s%s%s", (int)(p - json), json, to, p + strlen(from));
    r = manifest_parse(buf, strlen(buf), &m, why);
    if (r == 0)
        manifest_release(&m);
    return r;
}

TEST(manifest_rejects)
{
    struct mf_file files[3];
    struct mf_chunk chunks[3];
    struct manifest m = sample(files, chunks);
    const char *why = NULL;
    size_t len;
    char *json = manifest_to_json(&m, &len);

    CHECK_INT(mutated(json, "\"format\":1", "\"format\":2", &why), -ENOTSUP);
    CHECK_HAS(why, "newer");
    CHECK_INT(mutated(json, "\"format\":1", "\"format\":0", &why), -EINVAL);
    CHECK_INT(mutated(json, "\"path\":\"a/model.pt\"", "\"path\":\"../model.pt\"", &why), -EINVAL);
    CHECK_HAS(why, "path");
    CHECK_INT(mutated(json, "\"path\":\"a/model.pt\"", "\"path\":\"/etc/passwd\"", &why), -EINVAL);
    CHECK_INT(mutated(json, "\"path\":\"a/model.pt\"", "\"path\":\"a//b\"", &why), -EINVAL);
    CHECK_INT(mutated(json, "\"path\":\"a/model.pt\"", "\"path\":\"a\\u0000b\"", &why), -EINVAL);
    CHECK_INT(mutated(json, "\"path\":\"a/model.pt\"", "\"path\":\"latest\"", &why), -EINVAL);
    CHECK_HAS(why, "twice");
    CHECK_INT(mutated(json, "\"size\":16777221", "\"size\":16777222", &why), -EINVAL);
    CHECK_HAS(why, "add up");
    CHECK_INT(mutated(json, "\"size\":16777221", "\"size\":-1", &why), -EINVAL);
    CHECK_INT(mutated(json, "\"size\":16777221", "\"size\":1.5", &why), -EINVAL);
    CHECK_INT(mutated(json, "\"mode\":416", "\"mode\":4096", &why), -EINVAL);
    CHECK_INT(mutated(json, "\"job\":\"llama-ft\"", "\"job\":\"../x\"", &why), -EINVAL);
    CHECK_INT(mutated(json, "\"kind\":\"manifest\"", "\"kind\":\"commit\"", &why), -EINVAL);
    CHECK_INT(mutated(json, "abababab", "ABABABAB", &why), -EINVAL);
    CHECK_INT(mutated(json, "\"type\":\"dir\"", "\"type\":\"fifo\"", &why), -EINVAL);
    CHECK_INT(mutated(json, "\"rank\":3", "\"rank\":3,\"rank\":4", &why), -EINVAL);
    CHECK_INT(mutated(json, "\"chunk_size\":8388608", "\"chunk_size\":4", &why), -EINVAL);
    CHECK_INT(mutated(json, "\"gen\":12", "\"gen\":100000000", &why), -EINVAL);
    CHECK_INT(mutated(json, "\"created\":\"", "\"created\":\"x", &why), -EINVAL);
    /* Unknown members are ignored: a minor revision may add some. */
    CHECK_INT(mutated(json, "\"rank\":3", "\"rank\":3,\"host\":\"node-7\"", &why), 0);
    CHECK_INT(manifest_parse("[]", 2, &m, &why), -EINVAL);
    CHECK_INT(manifest_parse("{", 1, &m, &why), -EINVAL);
    free(json);
}

TEST(commit_roundtrip)
{
    struct commit_rank ranks[2] = { { .rank = 0, .bytes = 10 }, { .rank = 1, .bytes = 20 } };
    struct commit c = { .job = "j", .gen = 7, .step = 99, .world_size = 2, .reason = "notice",
                        .method = "app", .created_ms = 1796045255000LL, .version = "0.1.0",
                        .ranks = ranks }, back;
    const char *why = NULL;
    size_t len;
    char *json, buf[2048], *p;

    memset(ranks[1].sha256, 0x5a, 32);
    json = commit_to_json(&c, &len);
    CHECK(json != NULL);
    CHECK_INT(commit_parse(json, len, &back, &why), 0);
    CHECK_INT(back.world_size, 2);
    CHECK_INT(back.ranks[1].bytes, 20);
    CHECK(memcmp(back.ranks[1].sha256, ranks[1].sha256, 32) == 0);
    CHECK_STR(back.reason, "notice");
    commit_release(&back);
    /* A rank twice (so another missing) is refused. */
    snprintf(buf, sizeof(buf), "%s", json);
    p = strstr(buf, "\"rank\":1");
    CHECK(p != NULL);
    if (p)
        p[7] = '0';
    CHECK_INT(commit_parse(buf, strlen(buf), &back, &why), -EINVAL);
    CHECK_HAS(why, "twice");
    snprintf(buf, sizeof(buf), "%s", json);
    p = strstr(buf, "\"world_size\":2");
    if (p)
        p[13] = '3';
    CHECK_INT(commit_parse(buf, strlen(buf), &back, &why), -EINVAL);
    free(json);
}

static struct jobkey key_of(const char *text)
{
    struct frame_key k = { .len = strlen(text) };
    struct jobkey jk;

    memcpy(k.k, text, k.len);
    CHECK_INT(jobkey_init(&jk, &k), 0);
    return jk;
}

static enum jobkey_auth auth_of(const struct jobkey *jk, const struct commit *c)
{
    enum jobkey_auth a = (enum jobkey_auth)-1;

    CHECK_INT(jobkey_check(jk, c, &a), 0);
    return a;
}

TEST(commit_signed)
{
    struct commit_rank ranks[2] = { { .rank = 0, .bytes = 10 }, { .rank = 1, .bytes = 20 } };
    struct commit c = { .job = "j", .gen = 7, .step = 99, .world_size = 2, .reason = "notice",
                        .method = "app", .created_ms = 1796045255000LL, .version = "0.1.0",
                        .ranks = ranks }, back;
    struct jobkey a = key_of("the job key of this unit test!!!");
    struct jobkey b = key_of("another job key, 32 bytes long!!");
    char hex[65], buf[2048], *json, *p;
    const char *why = NULL;
    size_t len;

    memset(ranks[1].sha256, 0x5a, 32);
    /* The key id and the MAC as docs/store-format.md defines them,
     * computed apart (Python's hmac) over the documented canonical bytes. */
    CHECK_STR(a.id, "729985ee02541bcc");
    CHECK(strcmp(a.id, b.id) != 0);
    CHECK_INT(auth_of(&a, &c), JOBKEY_UNSIGNED);
    CHECK_INT(auth_of(NULL, &c), JOBKEY_UNSIGNED);
    CHECK_INT(jobkey_sign(&a, &c), 0);
    hash_hex(c.mac, hex);
    CHECK_STR(hex, "85dc0615eec8c1565b2a03e937c90a507e526ad0cd120533789f0d56f3289c17");
    CHECK_STR(c.key_id, a.id);

    /* Written and read back: the signature comes along and checks. */
    json = commit_to_json(&c, &len);
    CHECK(json != NULL);
    CHECK_HAS(json, "\"mac_alg\":\"hmac-sha256\",\"key_id\":\"729985ee02541bcc\",\"mac\":\"85dc");
    CHECK_INT(commit_parse(json, len, &back, &why), 0);
    CHECK(back.has_mac);
    CHECK_INT(auth_of(&a, &back), JOBKEY_AUTHENTIC);
    CHECK_INT(auth_of(&b, &back), JOBKEY_OTHER_KEY);
    CHECK_INT(auth_of(NULL, &back), JOBKEY_UNCHECKED);

    /* Every field a reader acts on is covered. */
#define ALTERED(stmt)                                                                     \
    do {                                                                                  \
        struct commit x = back;                                                           \
        struct commit_rank xr[2] = { back.ranks[0], back.ranks[1] };                      \
        x.ranks = xr;                                                                     \
        stmt;                                                                             \
        if (auth_of(&a, &x) != JOBKEY_BAD_MAC)                                            \
            printf("  not caught: %s\n", #stmt);                                          \
        CHECK_INT(auth_of(&a, &x), JOBKEY_BAD_MAC);                                       \
    } while (0)
    ALTERED(x.gen = 8);
    ALTERED(snprintf(x.job, sizeof(x.job), "k"));
    ALTERED(x.step = 100);
    ALTERED(snprintf(x.reason, sizeof(x.reason), "manual"));
    ALTERED(snprintf(x.method, sizeof(x.method), "criu"));
    ALTERED(x.created_ms += 1);
    ALTERED(snprintf(x.version, sizeof(x.version), "0.1.1"));
    ALTERED(xr[1].sha256[31] ^= 1);
    ALTERED(xr[0].bytes = 11);
    ALTERED(x.mac[0] ^= 1);
    ALTERED(x.world_size = 1);
#undef ALTERED
    {
        struct commit x = back;

        snprintf(x.mac_alg, sizeof(x.mac_alg), "hmac-sha3-256");
        CHECK_INT(auth_of(&a, &x), JOBKEY_OTHER_KEY);
        jobkey_refusal(buf, sizeof(buf), &a, &x, JOBKEY_OTHER_KEY);
        CHECK_HAS(buf, "cannot check");
    }
    jobkey_refusal(buf, sizeof(buf), &a, &back, JOBKEY_UNSIGNED);
    CHECK_HAS(buf, "generation 7 of job 'j' is not signed, and job key 729985ee02541bcc is set: "
                   "refusing it; it may be forged by someone who can write the store");
    jobkey_refusal(buf, sizeof(buf), &b, &back, JOBKEY_OTHER_KEY);
    CHECK_HAS(buf, "signed by another key (id 729985ee02541bcc, not ");
    jobkey_refusal(buf, sizeof(buf), &a, &back, JOBKEY_BAD_MAC);
    CHECK_HAS(buf, "WRONG signature for key 729985ee02541bcc");
    commit_release(&back);

    /* The three members go together, each strictly spelled. */
#define REFUSED(from, to, reason)                                                           \
    do {                                                                                    \
        snprintf(buf, sizeof(buf), "%s", json);                                             \
        CHECK((p = strstr(buf, from)) != NULL);                                             \
        if (p) {                                                                            \
            memmove(p + strlen(to), p + strlen(from), strlen(p + strlen(from)) + 1);        \
            memcpy(p, to, strlen(to));                                                      \
        }                                                                                   \
        why = NULL;                                                                         \
        CHECK_INT(commit_parse(buf, strlen(buf), &back, &why), -EINVAL);                    \
        CHECK_HAS(why, reason);                                                             \
    } while (0)
    REFUSED(",\"mac_alg\":\"hmac-sha256\"", "", "go together");
    REFUSED("\"key_id\":\"7299", "\"key_idx\":\"7299", "go together");
    REFUSED("\"key_id\":\"7299", "\"key_id\":\"A299", "key_id invalid");
    REFUSED("\"key_id\":\"7299", "\"key_id\":\"72990", "key_id invalid");
    REFUSED("\"mac\":\"85dc", "\"mac\":\"85d", "mac invalid");
    REFUSED("\"mac\":\"85dc", "\"mac\":1,\"x\":\"85dc", "mac invalid");
    REFUSED("\"mac_alg\":\"hmac-sha256\"", "\"mac_alg\":\"\"", "mac_alg invalid");
    REFUSED("\"mac\":\"", "\"mac\":\"00\",\"mac\":\"", "twice");
#undef REFUSED
    free(json);
    jobkey_clear(&a);
    jobkey_clear(&b);
}

TEST(jobkey_file)
{
    char dir[] = "/tmp/spotd-unit-jobkey.XXXXXX", path[256], err[512], warn[512];
    struct frame_key k;
    FILE *f;

    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof(path), "%s/key", dir);
    f = fopen(path, "w");
    fprintf(f, "  %s\n", "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff");
    fclose(f);
    chmod(path, 0600);
    CHECK_INT(jobkey_read_file(path, "job key", "--job-key-file", &k, err, sizeof(err), warn,
                               sizeof(warn)), 0);
    CHECK_INT(k.len, 32);
    CHECK_INT(k.k[31], 0xff);
    CHECK_STR(warn, "");
    chmod(path, 0644);
    CHECK_INT(jobkey_read_file(path, "job key", "--job-key-file", &k, err, sizeof(err), warn,
                               sizeof(warn)), 0);
    CHECK_HAS(warn, "can be read by other users (mode 0644): chmod 600 it");
    f = fopen(path, "w");
    fprintf(f, "short");
    fclose(f);
    CHECK_INT(jobkey_read_file(path, "job key", "--job-key-file", &k, err, sizeof(err), warn,
                               sizeof(warn)), -EINVAL);
    CHECK_HAS(err, "invalid job key in '");
    CHECK_HAS(err, "(from --job-key-file): the key is shorter than 16 bytes");
    unlink(path);
    CHECK_INT(jobkey_read_file(path, "job key", "--job-key-file", &k, err, sizeof(err), warn,
                               sizeof(warn)), -ENOENT);
    CHECK_HAS(err, "cannot read the job key file '");
    rmdir(dir);
}

TEST(manifest_paths)
{
    CHECK(manifest_path_valid("a"));
    CHECK(manifest_path_valid("a b/c.pt"));
    CHECK(manifest_path_valid("..a/b.."));
    CHECK(!manifest_path_valid(""));
    CHECK(!manifest_path_valid("/a"));
    CHECK(!manifest_path_valid("a/"));
    CHECK(!manifest_path_valid("a/./b"));
    CHECK(!manifest_path_valid("a/../b"));
    CHECK(!manifest_path_valid("a\nb"));
    {
        /* A name is at most NAME_MAX (255) bytes, whatever the path's length. */
        char name[300], n255[256], n256[257];

        memset(n255, 'n', 255);
        n255[255] = '\0';
        memset(n256, 'n', 256);
        n256[256] = '\0';
        snprintf(name, sizeof(name), "x/%s/y", n255);
        CHECK(manifest_path_valid(name));
        snprintf(name, sizeof(name), "x/%s/y", n256);
        CHECK(!manifest_path_valid(name));
        snprintf(name, sizeof(name), "x/%s", n256);
        CHECK(!manifest_path_valid(name));
        CHECK(!manifest_path_valid(n256));
    }
    CHECK(manifest_job_valid("llama-ft.v2_1"));
    CHECK(!manifest_job_valid("a/b"));
    CHECK(!manifest_job_valid(".."));
    CHECK(!manifest_job_valid(""));
}

TEST(manifest_links)
{
    CHECK(manifest_link_inside("l", "model.bin"));
    CHECK(manifest_link_inside("l", "./sub/model.bin"));
    CHECK(manifest_link_inside("a/l", "../b"));
    CHECK(manifest_link_inside("a/b/l", "../../c//d/"));
    CHECK(manifest_link_inside("a/l", "."));
    CHECK(manifest_link_inside("a/l", ".."));
    CHECK(manifest_link_inside("l", "..a"));
    CHECK(!manifest_link_inside("l", "/etc/passwd"));
    CHECK(!manifest_link_inside("l", "//x"));
    CHECK(!manifest_link_inside("l", ".."));
    CHECK(!manifest_link_inside("l", "../x"));
    CHECK(!manifest_link_inside("a/l", "../../x"));
    CHECK(!manifest_link_inside("a/b/l", "./../.././../x"));
    /* d may be a link to ".": "d/.." is the parent of the tree. */
    CHECK(!manifest_link_inside("q", "d/.."));
    CHECK(!manifest_link_inside("a/q", "../d/../x"));
    CHECK(!manifest_link_inside("l", ""));
}

TEST(manifest_bytes)
{
    struct mf_file files[3] = { { .type = MF_FILE, .size = UINT64_MAX / 2 },
                                { .type = MF_DIR, .size = UINT64_MAX },
                                { .type = MF_FILE, .size = UINT64_MAX / 2 + 1 } };
    struct manifest m = { .files = files, .n_files = 3 };
    uint64_t total = 7;

    CHECK_INT(manifest_bytes(&m, &total), 0);
    CHECK(total == UINT64_MAX);
    files[2].size++;
    total = 7;
    CHECK_INT(manifest_bytes(&m, &total), -EOVERFLOW);
    CHECK_INT(total, 7);
}

TEST(manifest_escape)
{
    char buf[64], small[12], big[MANIFEST_ESCAPED_MAX], path[MANIFEST_PATH_MAX + 1];

    CHECK_STR(manifest_escape("a/b c.pt", buf, sizeof(buf)), "a/b c.pt");
    CHECK_STR(manifest_escape("caf\xc3\xa9/\xe6\x97\xa5", buf, sizeof(buf)),
              "caf\xc3\xa9/\xe6\x97\xa5");
    /* Control bytes, the terminal's escape above all, and a backslash. */
    CHECK_STR(manifest_escape("x\x1b[2Jy\tz\x7f\\", buf, sizeof(buf)),
              "x\\x1b[2Jy\\x09z\\x7f\\\\");
    /* Not UTF-8: a lone byte, an overlong '/', a surrogate, a cut sequence. */
    CHECK_STR(manifest_escape("\xff\xc0\xaf\xed\xa0\x80\xe6\x97", buf, sizeof(buf)),
              "\\xff\\xc0\\xaf\\xed\\xa0\\x80\\xe6\\x97");
    /* C1 (CSI) and a right-to-left override, valid UTF-8 both. */
    CHECK_STR(manifest_escape("\xc2\x9b" "1m\xe2\x80\xae" "exe", buf, sizeof(buf)),
              "\\xc2\\x9b1m\\xe2\\x80\\xaeexe");
    /* Cut to fit, never inside a piece, marked; what fits is whole. */
    CHECK_STR(manifest_escape("abcdefghijklmnop", small, sizeof(small)), "abcdefgh...");
    CHECK_STR(manifest_escape("abcdefgh\x01", small, sizeof(small)), "abcdefgh...");
    CHECK_STR(manifest_escape("abcdefg\x01", small, sizeof(small)), "abcdefg\\x01");
    CHECK_STR(manifest_escape("abcdefghijk", small, sizeof(small)), "abcdefghijk");
    /* Any path, every byte escaped, fits MANIFEST_ESCAPED_MAX whole. */
    memset(path, 0x80, MANIFEST_PATH_MAX);
    path[MANIFEST_PATH_MAX] = '\0';
    CHECK_INT(strlen(manifest_escape(path, big, sizeof(big))), 4 * MANIFEST_PATH_MAX);
}

/* The store format's own names below a job, exactly; everything else is
 * foreign (an operator's backup, a stray upload), never a generation's. */
TEST(jobtree_names)
{
    static const struct {
        const char *key;
        enum jobtree_kind kind;
        uint64_t gen;
    } cases[] = {
        { "j/gens/00000009/COMMIT.json", JOBTREE_COMMIT, 9 },
        { "j/gens/00000012/rank-0.json", JOBTREE_MANIFEST, 12 },
        { "j/gens/00000012/rank-65535.json", JOBTREE_MANIFEST, 12 },
        { "j/gens/99999999/CLAIM.json", JOBTREE_CLAIM, 99999999 },
        { "j/gens/00000001/claim-0123456789abcdef.json", JOBTREE_WRITER_CLAIM, 1 },
        { "j/writers/probe-0123456789abcdef.json", JOBTREE_PROBE, 0 },
        { "j/world/rank-3.json", JOBTREE_WORLD, 0 },
        { "j/world/join-0123456789abcdef.json", JOBTREE_WORLD, 0 },
        { "j/world/assign-00112233445566778899aabbccddeeff.json", JOBTREE_WORLD, 0 },
        { "j/LATEST", JOBTREE_LATEST, 0 },
        { "j/gens/00000009/COMMIT.json.bak", JOBTREE_FOREIGN, 0 },
        { "j/gens/00000009/commit.json", JOBTREE_FOREIGN, 0 },
        { "j/gens/00000009/rank-01.json", JOBTREE_FOREIGN, 0 },
        { "j/gens/00000009/rank-65536.json", JOBTREE_FOREIGN, 0 },
        { "j/gens/00000009/rank-.json", JOBTREE_FOREIGN, 0 },
        { "j/gens/00000009/rank-1.json/x", JOBTREE_FOREIGN, 0 },
        { "j/gens/00000009/sub/COMMIT.json", JOBTREE_FOREIGN, 0 },
        { "j/gens/00000009/claim-0123456789ABCDEF.json", JOBTREE_FOREIGN, 0 },
        { "j/gens/00000009/claim-0123456789abcde.json", JOBTREE_FOREIGN, 0 },
        { "j/gens/00000000/COMMIT.json", JOBTREE_FOREIGN, 0 },
        { "j/gens/0000009/COMMIT.json", JOBTREE_FOREIGN, 0 },
        { "j/gens/000000009/COMMIT.json", JOBTREE_FOREIGN, 0 },
        { "j/gens/notes.txt", JOBTREE_FOREIGN, 0 },
        { "j/gens/00000009", JOBTREE_FOREIGN, 0 },
        { "j/LATEST.bak", JOBTREE_FOREIGN, 0 },
        { "j/README", JOBTREE_FOREIGN, 0 },
        { "j/writers/probe-0123456789abcdef.json.1", JOBTREE_FOREIGN, 0 },
        { "j/world/join-0123.json", JOBTREE_FOREIGN, 0 },
        { "j/world/notes", JOBTREE_FOREIGN, 0 },
        { "jj/gens/00000009/COMMIT.json", JOBTREE_FOREIGN, 0 },
        { "j", JOBTREE_FOREIGN, 0 },
        { "", JOBTREE_FOREIGN, 0 },
        { "j/chunks/zz", JOBTREE_FOREIGN, 0 },
    };
    char key[256], hex[65];
    struct jobtree_name n;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        enum jobtree_kind k = jobtree_parse("j", cases[i].key, &n);

        if (k != cases[i].kind || n.gen != cases[i].gen)
            printf("  key \"%s\": kind %d gen %llu, expected kind %d gen %llu\n", cases[i].key,
                   (int)k, (unsigned long long)n.gen, (int)cases[i].kind,
                   (unsigned long long)cases[i].gen);
        CHECK(k == cases[i].kind && n.gen == cases[i].gen);
    }
    CHECK_INT((int)jobtree_parse("j", "j/gens/00000012/rank-4095.json", &n), JOBTREE_MANIFEST);
    CHECK_INT((int)n.rank, 4095);
    /* What the writers make is what the parser takes. */
    manifest_key(key, sizeof(key), "j", 77, 12);
    CHECK_INT((int)jobtree_parse("j", key, NULL), JOBTREE_MANIFEST);
    commit_key(key, sizeof(key), "j", 77);
    CHECK_INT((int)jobtree_parse("j", key, NULL), JOBTREE_COMMIT);
    memset(hex, 'a', 64);
    hex[64] = '\0';
    hex[63] = '7';
    snprintf(key, sizeof(key), "j/chunks/aa/%s", hex);
    CHECK_INT((int)jobtree_parse("j", key, &n), JOBTREE_CHUNK);
    CHECK_INT(n.hash[0], 0xaa);
    CHECK_INT(n.hash[31], 0xa7);
    /* Every digit lowercase hex; the folder is the first two. */
    snprintf(key, sizeof(key), "j/chunks/ab/%s", hex);
    CHECK_INT((int)jobtree_parse("j", key, NULL), JOBTREE_FOREIGN);
    hex[1] = 'A';
    snprintf(key, sizeof(key), "j/chunks/aA/%s", hex);
    CHECK_INT((int)jobtree_parse("j", key, NULL), JOBTREE_FOREIGN);
    hex[1] = 'a';
    hex[33] = 'g';
    snprintf(key, sizeof(key), "j/chunks/aa/%s", hex);
    CHECK_INT((int)jobtree_parse("j", key, &n), JOBTREE_FOREIGN);
    CHECK_INT(n.hash[0], 0);
    snprintf(key, sizeof(key), "j/chunks/aa/%s0", hex);
    CHECK_INT((int)jobtree_parse("j", key, NULL), JOBTREE_FOREIGN);
}
