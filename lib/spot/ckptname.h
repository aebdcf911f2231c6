/* ckptname: which names in a trainer's checkpoint directory are
 * checkpoints, and of which step.
 *
 * Trainers name their checkpoints in a few ways (docs/methods.md, "dir"):
 *
 *   folders  checkpoint-150/ (Hugging Face Trainer), step-150/ (torchtitan,
 *            DCP), global_step150/ (DeepSpeed)
 *   files    ckpt-000150.pt, model_150.pth, epoch=3-step=150.ckpt (Lightning's
 *            ModelCheckpoint)
 *   fixed    last.pt, last.ckpt, latest.pth: one file rewritten at each save,
 *            its step not in its name (ckptdir_fixed_step says where it is)
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
    CKPT_LAYOUT_FIXED,
};

/* Why a name does not count (ckptname_step). */
enum ckptname_why {
    CKPTNAME_OK,
    CKPTNAME_TEMPORARY,            /* still being written, by its name */
    CKPTNAME_NO_STEP,              /* no number in it */
    CKPTNAME_KIND,                 /* a file where the layout wants folders, or so */
    CKPTNAME_FIXED,                /* a fixed name (last.pt): no step in it */
};

/* "auto", "folders", "files", "fixed": 0, else -EINVAL. */
int ckptname_layout(const char *s, enum ckpt_layout *ret);
const char *ckptname_layout_name(enum ckpt_layout l);

/* The step of name (a folder when is_dir) under layout, or -1 with *why
 * set (why may be NULL).  A fixed name is -1 with CKPTNAME_FIXED under
 * the auto, files and fixed layouts: it is a checkpoint under fixed, and
 * under auto when nothing in the folder has a step in its name. */
int64_t ckptname_step(const char *name, bool is_dir, enum ckpt_layout layout,
                      enum ckptname_why *why);
const char *ckptname_why_text(enum ckptname_why why);

/* The step a text names ("150", "global_step150", '{"global_step": 150}'):
 * the number after the last "step" (past quotes, '=', ':', '-', '_' and
 * blanks), else the last number; -1 when none. */
int64_t ckptname_text_step(const char *s, size_t len);

/* Why a fixed name does not count under auto. */
#define CKPTNAME_FIXED_BESIDE "a fixed name beside names with a step: --ckpt-layout fixed takes it"

/* Is name a fixed one: last or latest, with an extension (last.pt)? */
bool ckptname_fixed(const char *name);

/* Is name, at the top of a checkpoint folder, the file that its writer
 * writes last (.spotd-complete; Hugging Face's trainer_state.json; DCP's
 * .metadata), so that the folder is complete once it is there? */
bool ckptname_last_file(const char *name);

#endif
