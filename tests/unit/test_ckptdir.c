#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "spot/ckptdir.h"

static void put(const char *dir, const char *name, const char *text)
{
    char path[1200];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    if ((f = fopen(path, "w"))) {
        fputs(text, f);
        fclose(f);
    }
}

static bool exists(const char *dir, const char *name)
{
    char path[1200];
    struct stat st;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return lstat(path, &st) == 0;
}

/* A scratch folder top with a trainer's folder top/ck and a generation's
 * top/gen-0000000N.  false when they cannot be made. */
static bool scratch(char *top, char *ck, char *gen, size_t size, unsigned n)
{
    if (!mkdtemp(top))
        return false;
    snprintf(ck, size, "%s/ck", top);
    snprintf(gen, size, "%s/gen-%08u", top, n);
    return mkdir(ck, 0755) == 0 && mkdir(gen, 0700) == 0;
}

/* What appeared or changed after a mark, as "saved, then exited" takes it. */
TEST(ckptdir_newest_since)
{
    static struct ckptdir_seen seen;
    char top[] = "/tmp/test_ckptdir.XXXXXX", name[256], why[512], p[512];

    if (!mkdtemp(top)) {
        CHECK(0);
        return;
    }
    put(top, "ckpt-00000100.pt", "old");
    put(top, "ckpt-00000200.pt", "older than the signal");
    put(top, "notes.txt", "x");
    CHECK_INT(ckptdir_mark(top, &seen), 0);
    CHECK_INT(seen.n, 3);
    /* Nothing new: none. */
    CHECK_INT(ckptdir_newest_since(top, &seen, CKPT_LAYOUT_AUTO, -1, name, sizeof(name), why,
                                   sizeof(why)),
              -1);
    /* A lower step written after the mark still counts: it is what the
     * trainer saved on the signal (the names need not grow). */
    put(top, "ckpt-00000150.pt", "new");
    put(top, "ckpt-00000900.pt.tmp", "half");
    CHECK_INT(ckptdir_newest_since(top, &seen, CKPT_LAYOUT_AUTO, -1, name, sizeof(name), why,
                                   sizeof(why)),
              150);
    CHECK_STR(name, "ckpt-00000150.pt");
    CHECK(strstr(why, "'ckpt-00000900.pt.tmp' (a temporary name)") != NULL);
    /* Rewritten in place (another size): changed, so it counts. */
    put(top, "ckpt-00000200.pt", "rewritten after the signal");
    CHECK_INT(ckptdir_newest_since(top, &seen, CKPT_LAYOUT_AUTO, -1, name, sizeof(name), NULL, 0),
              200);
    /* A folder that appeared, under folders and files layouts. */
    snprintf(p, sizeof(p), "%s/checkpoint-300", top);
    CHECK_INT(mkdir(p, 0755), 0);
    put(p, "model.pt", "w");
    CHECK_INT(ckptdir_newest_since(top, &seen, CKPT_LAYOUT_AUTO, -1, name, sizeof(name), NULL, 0),
              300);
    CHECK_INT(ckptdir_newest_since(top, &seen, CKPT_LAYOUT_FILES, -1, name, sizeof(name), NULL, 0),
              200);
    /* A fixed name that changed is fixed_step, but only where nothing has
     * a step in its name, or under the fixed layout. */
    put(top, "last.pt", "v1");
    CHECK_INT(ckptdir_newest_since(top, &seen, CKPT_LAYOUT_FIXED, 301, name, sizeof(name), NULL,
                                   0),
              301);
    CHECK_STR(name, "last.pt");
    CHECK_INT(ckptdir_newest_since(top, &seen, CKPT_LAYOUT_AUTO, 301, name, sizeof(name), NULL, 0),
              300);
    /* ... beside an unchanged one with a step: not taken, and said why. */
    snprintf(p, sizeof(p), "cd %s && rm -r checkpoint-300 ckpt-00000150.pt ckpt-00000200.pt", top);
    CHECK_INT(system(p), 0);
    CHECK_INT(ckptdir_newest_since(top, &seen, CKPT_LAYOUT_AUTO, 301, name, sizeof(name), why,
                                   sizeof(why)),
              -1);
    CHECK(strstr(why, "'last.pt' (a fixed name beside names with a step") != NULL);
    CHECK_INT(ckptdir_newest_since(top, &seen, CKPT_LAYOUT_FIXED, -1, name, sizeof(name), why,
                                   sizeof(why)),
              -1);
    CHECK(strstr(why, "'last.pt' (a fixed name") != NULL);
    /* Nothing there: none, and no crash. */
    CHECK_INT(ckptdir_mark("/nonexistent/ckptdir", &seen), -ENOENT);
    CHECK_INT(ckptdir_newest_since("/nonexistent/ckptdir", &seen, CKPT_LAYOUT_AUTO, -1, name,
                                   sizeof(name), why, sizeof(why)),
              -1);
    snprintf(p, sizeof(p), "rm -rf '%s'", top);
    CHECK_INT(system(p), 0);
}

/* A fixed-name one alone in a folder: auto takes it; its step from a step
 * file; copied, not linked, into a generation and back at resume. */
TEST(ckptdir_fixed)
{
    static struct ckptdir_seen seen;
    char top[] = "/tmp/test_ckptdir.XXXXXX", name[700], why[4500], ck[512], gen[512], p[600];
    struct stat a, b;
    uint64_t sig = 0;

    if (!scratch(top, ck, gen, sizeof(ck), 4)) {
        CHECK(0);
        return;
    }
    CHECK_INT(ckptdir_mark(ck, &seen), 0);
    put(ck, "last.pt", "weights");
    put(ck, "notes.txt", "x");
    CHECK_INT(ckptdir_newest_since(ck, &seen, CKPT_LAYOUT_AUTO, 5, name, sizeof(name), NULL, 0),
              5);
    CHECK_STR(name, "last.pt");
    /* Its step file: absent, then naming one. */
    CHECK_INT(ckptdir_fixed_step(ck, "step.txt", why, sizeof(why)), -1);
    CHECK(strstr(why, "step.txt") && strstr(why, "No such file"));
    put(ck, "step.txt", "{\"global_step\": 250}\n");
    CHECK_INT(ckptdir_fixed_step(ck, "step.txt", why, sizeof(why)), 250);
    put(ck, "step.txt", "nothing");
    CHECK_INT(ckptdir_fixed_step(ck, "step.txt", why, sizeof(why)), -1);
    CHECK(strstr(why, "names no step") != NULL);
    /* Copied: another inode, the same bytes, its signature given. */
    CHECK_INT(ckptdir_copy(ck, "last.pt", gen, &sig, why, sizeof(why)), 0);
    CHECK(sig != 0);
    snprintf(p, sizeof(p), "%s/last.pt", ck);
    CHECK(stat(p, &a) == 0);
    snprintf(p, sizeof(p), "%s/last.pt", gen);
    CHECK(stat(p, &b) == 0 && a.st_ino != b.st_ino && b.st_size == 7);
    CHECK_INT(ckptdir_copy(ck, "gone.pt", gen, &sig, why, sizeof(why)), -ENOENT);
    /* Back at resume: copied into an empty folder; the trainer's own kept. */
    snprintf(p, sizeof(p), "%s/new", top);
    CHECK_INT(mkdir(p, 0755), 0);
    ckptdir_place(p, gen, 5, CKPT_LAYOUT_AUTO);
    snprintf(name, sizeof(name), "%s/last.pt", p);
    CHECK(stat(name, &a) == 0 && a.st_ino != b.st_ino && a.st_size == 7);
    put(p, "last.pt", "the trainer's own");
    ckptdir_place(p, gen, 5, CKPT_LAYOUT_FIXED);
    CHECK(stat(name, &a) == 0 && a.st_size == 17);
    /* Not under the files layout. */
    snprintf(p, sizeof(p), "%s/files", top);
    CHECK_INT(mkdir(p, 0755), 0);
    ckptdir_place(p, gen, 5, CKPT_LAYOUT_FILES);
    CHECK(!exists(p, "last.pt"));
    snprintf(p, sizeof(p), "rm -rf '%s'", top);
    CHECK_INT(system(p), 0);
}

/* Into a generation under its name, and back into the trainer's folder at
 * resume without touching what the trainer has there. */
TEST(ckptdir_link_place)
{
    char top[] = "/tmp/test_ckptdir.XXXXXX", ck[512], gen[512], out[4400], msg[1200], p[600];
    struct stat a, b;

    if (!scratch(top, ck, gen, sizeof(ck), 3)) {
        CHECK(0);
        return;
    }
    put(ck, "ckpt-00000150.pt", "weights");
    CHECK_INT(ckptdir_link(ck, "ckpt-00000150.pt", gen, 3, out, sizeof(out), msg, sizeof(msg)),
              0);
    CHECK_STR(out, gen);
    snprintf(p, sizeof(p), "%s/ckpt-00000150.pt", ck);
    CHECK(stat(p, &a) == 0);
    snprintf(p, sizeof(p), "%s/ckpt-00000150.pt", gen);
    CHECK(stat(p, &b) == 0 && a.st_ino == b.st_ino);
    /* Linked twice: refused, said. */
    CHECK_INT(ckptdir_link(ck, "ckpt-00000150.pt", gen, 3, out, sizeof(out), msg, sizeof(msg)),
              -EEXIST);
    CHECK(strstr(msg, "cannot link") != NULL);
    /* The stage goes, but for the one kept. */
    snprintf(p, sizeof(p), "%s/" CKPTDIR_STAGE, ck);
    CHECK_INT(mkdir(p, 0700), 0);
    snprintf(p, sizeof(p), "%s/" CKPTDIR_STAGE "/gen-00000001", ck);
    CHECK_INT(mkdir(p, 0700), 0);
    snprintf(p, sizeof(p), "%s/" CKPTDIR_STAGE "/gen-00000002", ck);
    CHECK_INT(mkdir(p, 0700), 0);
    ckptdir_unstage(ck, p);
    CHECK(exists(ck, CKPTDIR_STAGE "/gen-00000002"));
    CHECK(!exists(ck, CKPTDIR_STAGE "/gen-00000001"));

    /* Resume into an empty folder of the trainer's: it is put back. */
    snprintf(p, sizeof(p), "%s/new", top);
    CHECK_INT(mkdir(p, 0755), 0);
    ckptdir_place(p, gen, 150, CKPT_LAYOUT_AUTO);
    CHECK(exists(p, "ckpt-00000150.pt"));
    /* One of the same name is the trainer's own: kept as it is. */
    snprintf(p, sizeof(p), "%s/mine", top);
    CHECK_INT(mkdir(p, 0755), 0);
    put(p, "ckpt-00000150.pt", "the trainer's own");
    put(p, "ckpt-00000300.pt", "newer");
    ckptdir_place(p, gen, 150, CKPT_LAYOUT_AUTO);
    snprintf(msg, sizeof(msg), "%s/ckpt-00000150.pt", p);
    CHECK(stat(msg, &b) == 0 && b.st_size == 17);
    CHECK(exists(p, "ckpt-00000300.pt"));
    /* Another step than the generation's: nothing placed. */
    snprintf(p, sizeof(p), "%s/other", top);
    CHECK_INT(mkdir(p, 0755), 0);
    ckptdir_place(p, gen, 151, CKPT_LAYOUT_AUTO);
    CHECK(!exists(p, "ckpt-00000150.pt"));
    snprintf(p, sizeof(p), "rm -rf '%s'", top);
    CHECK_INT(system(p), 0);
}
