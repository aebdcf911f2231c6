/* ckptname: which names in a trainer's checkpoint directory are
 * checkpoints, and of which step.
 *
 * Trainers name their checkpoints in a few ways (docs/methods.md, "dir"):
 *
 *   folders  checkpoint-150/ (Hugging Face Trainer), step-150/ (torchtitan,
 *            DCP), global_step150/ (DeepSpeed)
 *   files    ckpt-000150.pt, model_150.pth, epoch=3-step=150.ckpt (Lightning's
 *            ModelCheckpoint)
 *
 * The step is the number after "step" ("step=150", "step-150", "step150",
 * the last such), else the last number of the name before its extension.
 * A name that is being written and renamed later (tmp-checkpoint-150,
 * ckpt-150.pt.tmp, a dot file) is no checkpoint.  Pure functions, no I/O. */
#ifndef SPOT_CKPTNAME_H
#define SPOT_CKPTNAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum ckpt_layout {
    CKPT_LAYOUT_AUTO,              /* folders and files alike */
    CKPT_LAYOUT_FOLDERS,
    CKPT_LAYOUT_FILES,
};

/* Why a name does not count (ckptname_step). */
enum ckptname_why {
    CKPTNAME_OK,
    CKPTNAME_TEMPORARY,            /* still being written, by its name */
    CKPTNAME_NO_STEP,              /* no number in it */
    CKPTNAME_KIND,                 /* a file where the layout wants folders, or so */
};

/* "auto", "folders", "files": 0, else -EINVAL. */
int ckptname_layout(const char *s, enum ckpt_layout *ret);
const char *ckptname_layout_name(enum ckpt_layout l);

/* The step of name (a folder when is_dir) under layout, or -1 with *why
 * set (why may be NULL). */
int64_t ckptname_step(const char *name, bool is_dir, enum ckpt_layout layout,
                      enum ckptname_why *why);
const char *ckptname_why_text(enum ckptname_why why);

/* Is name, at the top of a checkpoint folder, the file that its writer
 * writes last (.spotd-complete; Hugging Face's trainer_state.json; DCP's
 * .metadata), so that the folder is complete once it is there? */
bool ckptname_last_file(const char *name);

#endif
