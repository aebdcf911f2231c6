#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "spot/linktree.h"

static void put(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");

    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

TEST(linktree)
{
    char top[] = "/tmp/test_linktree.XXXXXX", p[512], q[512], target[64];
    struct stat a, b;
    ssize_t n;

    if (!mkdtemp(top)) {
        CHECK(0);
        return;
    }
    snprintf(p, sizeof(p), "%s/src", top);
    mkdir(p, 0750);
    snprintf(p, sizeof(p), "%s/src/sub", top);
    mkdir(p, 0700);
    snprintf(p, sizeof(p), "%s/src/sub/model.pt", top);
    put(p, "weights");
    snprintf(p, sizeof(p), "%s/src/link", top);
    CHECK_INT(symlink("sub/model.pt", p), 0);

    /* Linked: the same inodes, the folders' modes kept. */
    snprintf(p, sizeof(p), "%s/src", top);
    snprintf(q, sizeof(q), "%s/dst", top);
    CHECK_INT(linktree_link(p, q), 0);
    snprintf(p, sizeof(p), "%s/src/sub/model.pt", top);
    snprintf(q, sizeof(q), "%s/dst/sub/model.pt", top);
    CHECK(stat(p, &a) == 0 && stat(q, &b) == 0 && a.st_ino == b.st_ino);
    snprintf(q, sizeof(q), "%s/dst", top);
    CHECK(stat(q, &b) == 0 && (b.st_mode & 0777) == 0750);
    snprintf(q, sizeof(q), "%s/dst/link", top);
    n = readlink(q, target, sizeof(target) - 1);
    CHECK(n == 12 && memcmp(target, "sub/model.pt", 12) == 0);
    /* The destination must not exist. */
    snprintf(p, sizeof(p), "%s/src", top);
    snprintf(q, sizeof(q), "%s/dst", top);
    CHECK_INT(linktree_link(p, q), -EEXIST);
    /* A file alone. */
    snprintf(p, sizeof(p), "%s/src/sub/model.pt", top);
    snprintf(q, sizeof(q), "%s/one.pt", top);
    CHECK_INT(linktree_copy(p, q), 0);
    CHECK(stat(q, &b) == 0 && b.st_size == 7);
    snprintf(p, sizeof(p), "%s/missing", top);
    snprintf(q, sizeof(q), "%s/two", top);
    CHECK_INT(linktree_link(p, q), -ENOENT);

    snprintf(p, sizeof(p), "rm -rf '%s'", top);
    CHECK_INT(system(p), 0);
}
