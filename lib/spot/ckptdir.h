/* ckptdir: a trainer's own checkpoint folder (--ckpt-dir), as the signal
 * and dir methods share it.  Its checkpoints are named by the trainer
 * (ckptname.h); spotd puts one into a generation by linking it under its
 * name (copying a fixed-name one, which its trainer rewrites in place), tells which appeared or changed since a moment (a signal), and at
 * resume puts the restored one back where the trainer looks for it.
 * Nothing of the trainer's is ever removed or overwritten. */
#ifndef SPOT_CKPTDIR_H
#define SPOT_CKPTDIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "spot/ckptname.h"

/* The folder, inside --ckpt-dir, where checkpoints are linked when the
 * generation's folder is on another file system (a dot name: no trainer
 * takes it for a checkpoint). */
#define CKPTDIR_STAGE ".spotd-stage"

/* A signature of the names, sizes, inodes and mtimes under the folder
 * dirfd (which it closes), DEPTH_MAX levels deep; sets *last (may be NULL)
 * when the file its writer writes last is at its top.  0 on an error. */
uint64_t ckptdir_signature(int dirfd, bool *last);
/* The same for one entry of a folder: a file, or a folder and all below. */
uint64_t ckptdir_entry_signature(int dirfd, const char *name, bool *last);

/* Links dir/name as gen_dir/name, or, when that is another file system,
 * as dir/.spotd-stage/gen-N/name.  out gets the folder that holds the link
 * (gen_dir or the staged one).  Returns 0, or -errno with msg. */
int ckptdir_link(const char *dir, const char *name, const char *gen_dir, uint64_t gen,
                 char *out, size_t outsize, char *msg, size_t msglen);

/* Copies dir/name, a fixed-name file, as gen_dir/name: its trainer
 * rewrites it in place, so a link would change under the upload.  *sig
 * gets the signature of what was copied.  -EAGAIN when it changed while
 * being copied (the copy is removed), else 0 or -errno with msg. */
int ckptdir_copy(const char *dir, const char *name, const char *gen_dir, uint64_t *sig,
                 char *msg, size_t msglen);

/* The step of a fixed-name checkpoint in dir: the number in step_file
 * (relative to dir, or absolute; ckptname_text_step), or -1 with why when
 * it cannot be read or names none. */
int64_t ckptdir_fixed_step(const char *dir, const char *step_file, char *why, size_t whysize);

/* The staged links of every generation but the one in the folder keep
 * (NULL: all) go. */
void ckptdir_unstage(const char *dir, const char *keep);

/* The checkpoint of step in the restored generation resume_dir, linked
 * (or copied) back into dir under its name; one of that name there is
 * kept.  A fixed-name one (under the fixed layout, or auto when the
 * generation holds none with a step in its name) is copied back.  Says
 * what it did, and names the trainer's newer ones. */
void ckptdir_place(const char *dir, const char *resume_dir, int64_t step,
                   enum ckpt_layout layout);

/* What a folder held at a moment: each entry's name and signature. */
#define CKPTDIR_SEEN_MAX 512
struct ckptdir_seen {
    size_t n;
    bool full;                     /* more entries than it could hold */
    struct {
        char name[256];
        uint64_t sig;
    } e[CKPTDIR_SEEN_MAX];
};

/* Records what dir holds now.  Returns 0 or -errno. */
int ckptdir_mark(const char *dir, struct ckptdir_seen *seen);

/* The checkpoint of the highest step in dir that is not in seen, or
 * whose signature changed since: its step, its name in name; -1 when
 * none.  A fixed-name one that changed has fixed_step (-1: it does not
 * count), under the fixed layout, or auto when dir holds no name with a
 * step.  why (may be NULL) gets the names that did not count, and why. */
int64_t ckptdir_newest_since(const char *dir, const struct ckptdir_seen *seen,
                             enum ckpt_layout layout, int64_t fixed_step, char *name,
                             size_t namesize, char *why, size_t whysize);

#endif
