/* spotctl resume: the generation to resume from, found in the store
 * (--gen, else the newest committed; one that is not signed by the job
 * key is refused), then `spotd run --resume GEN` in spotctl's place, with
 * the same store, job and configuration. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "spot/snap.h"
#include "spotctl.h"

static void on_resume_gens(void *arg, int err, const char *msg, struct snap_gen *gens, size_t n)
{
    struct resume *rs = arg;
    struct ctl *c = rs->c;
    const struct snap_gen *found = NULL;

    if (err) {
        ctl_fail(c, err, msg);
        ctl_stop(c);
        return;
    }
    for (size_t i = 0; i < n; i++)
        if (c->gen ? gens[i].gen == c->gen : gens[i].committed || gens[i].unauthentic)
            found = &gens[i];
    if (found && found->unauthentic) {
        char why[1024];

        snap_refusal(c->snap, found, why, sizeof(why));
        ctl_fail(c, -EKEYREJECTED, why);
        found = NULL;
    } else if (!found && !c->gen)
        ctl_fail(c, -ENOENT, "the job has no committed generation to resume from; 'spotctl ls' "
                 "lists what the store holds");
    else if (!found)
        ctl_fail(c, -ENOENT, "the job has no generation of that number; 'spotctl ls' lists them");
    else if (!found->committed)
        ctl_fail(c, -ENOENT, "that generation was never committed: it cannot be resumed from; "
                 "'spotctl ls' shows the committed ones");
    if (found && found->committed) {
        rs->gen = found->gen;
        snprintf(rs->method, sizeof(rs->method), "%s", found->commit.method);
    }
    snap_gens_free(gens, n);
    ctl_stop(c);
}

static void on_resume_newest(void *arg, int err, const char *msg, struct snap_gen *gens,
                             size_t n, bool all)
{
    on_resume_gens(arg, err, msg, gens, n);
}

/* The newest through <job>/LATEST (a few requests whatever the number of
 * generations), a named one from the whole listing. */
void resume_find(struct resume *rs)
{
    if (rs->c->gen)
        snap_gens(rs->c->snap, on_resume_gens, rs);
    else
        snap_gens_newest(rs->c->snap, on_resume_newest, rs);
}

/* The spotd beside this spotctl, else the one in PATH. */
static void find_spotd(char *buf, size_t size)
{
    char self[3800];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    char *slash;

    if (n > 0) {
        self[n] = '\0';
        if ((slash = strrchr(self, '/'))) {
            *slash = '\0';
            snprintf(buf, size, "%s/spotd", self);
            if (access(buf, X_OK) == 0)
                return;
        }
    }
    snprintf(buf, size, "spotd");
}

/* The argument list of resume_exec(), copied. */
struct args {
    char **v;
    int n, cap;
    bool oom;
};

static void arg(struct args *a, const char *s)
{
    if (a->oom)
        return;
    if (a->n + 2 > a->cap) {
        int cap = a->cap ? a->cap * 2 : 32;
        char **v = realloc(a->v, (size_t)cap * sizeof(*v));

        if (!v) {
            a->oom = true;
            return;
        }
        a->v = v;
        a->cap = cap;
    }
    if (!(a->v[a->n] = strdup(s))) {
        a->oom = true;
        return;
    }
    a->v[++a->n] = NULL;
}

/* spotd run --resume GEN with this store and job, the command after
 * them; spotctl becomes it. */
int resume_exec(const struct ctl *c, const struct resume *rs, const char *config_file,
                const char *state_dir, const char *spotd, char **cmd, int n_cmd)
{
    struct args a = { NULL, 0, 0, false };
    char gen[32], path[4000];

    if (spotd)
        snprintf(path, sizeof(path), "%s", spotd);
    else
        find_spotd(path, sizeof(path));
    snprintf(gen, sizeof(gen), "%" PRIu64, rs->gen);
    arg(&a, path);
    arg(&a, "run");
    if (config_file) {
        arg(&a, "--config");
        arg(&a, config_file);
    }
    arg(&a, "--store");
    arg(&a, c->url);
    arg(&a, "--job");
    arg(&a, c->job);
    arg(&a, "--resume");
    arg(&a, gen);
    /* A CRIU generation is restored by the criu method alone; the others
     * all reach the command through SPOT_RESUME_DIR, whatever method the
     * configuration sets for its next checkpoints. */
    if (!strcmp(rs->method, "criu")) {
        arg(&a, "--method");
        arg(&a, "criu");
    }
    if (state_dir) {
        arg(&a, "--state-dir");
        arg(&a, state_dir);
    }
    if (rs->key_file) {
        arg(&a, "--job-key-file");
        arg(&a, rs->key_file);
    }
    if (c->preserve)
        arg(&a, "--preserve-special-modes");
    if (c->json) {
        arg(&a, "--log-format");
        arg(&a, "json");
    }
    if (n_cmd) {
        arg(&a, "--");
        for (int k = 0; k < n_cmd; k++)
            arg(&a, cmd[k]);
    }
    if (a.oom) {
        spotctl_bad("out of memory");
    } else {
        if (!c->json)
            fprintf(stderr, "spotctl: resuming job %s from generation %s (%s) with %s\n", c->job,
                    gen, rs->method, path);
        fflush(NULL);
        execvp(a.v[0], a.v);
        spotctl_bad("cannot execute %s: %s; give --spotd PATH", path, strerror(errno));
    }
    for (int k = 0; k < a.n; k++)
        free(a.v[k]);
    free(a.v);
    return 1;
}
