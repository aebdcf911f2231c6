/* dircheck: does a local directory hold exactly what a manifest describes?
 *
 * A command restarted after a crash resumes from spotd's own copy of the
 * newest committed generation; before it does, that copy is held against
 * the generation's manifest, byte for byte: every file's type, permission
 * bits, size and chunks (SHA-256, or zeros where the manifest says zeros),
 * every link's target, and nothing more than the manifest lists.  A copy
 * that a trainer, an operator or a disk changed is then restored again
 * from the store instead of being trusted.
 *
 * Blocking (it reads every byte): call it from a worker (pool.h). */
#ifndef SPOT_DIRCHECK_H
#define SPOT_DIRCHECK_H

#include <stddef.h>

struct manifest;

/* Returns 0 when dir matches m; -EBADMSG when it does not (why names the
 * first difference: "'a/b.pt' changed (chunk 3 at offset 25165824)");
 * -ENOENT when dir is missing; -ENOMEM, or another -errno when it cannot
 * be read, with why set. */
int dircheck_manifest(const struct manifest *m, const char *dir, char *why, size_t whylen);

#endif
