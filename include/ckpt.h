/* ckpt.h: libckpt, the trainer's side of spotd.
 *
 * This is the only header a trainer includes.  The library grows with the
 * orchestrator (issue 5): ckpt_open(), ckpt_step(), ckpt_save_dir(),
 * ckpt_saved() and the rest of the training-loop calls.  What is here now
 * is the part every later call relies on: the version and the error table.
 *
 * Every ckpt_* function that can fail returns 0 or a negative ckpt_error. */
#ifndef CKPT_H
#define CKPT_H

#ifdef __cplusplus
extern "C" {
#endif

#define CKPT_VERSION_MAJOR 0
#define CKPT_VERSION_MINOR 1
#define CKPT_VERSION_PATCH 0

/* Errors.  This list only grows; a value never changes meaning.
 *
 *   CKPT_OK           0   success
 *   CKPT_E_INVAL     -1   an argument is invalid (NULL handle, bad step)
 *   CKPT_E_NOMEM     -2   out of memory
 *   CKPT_E_CONNECT   -3   cannot reach spotd's control socket (SPOT_SOCKET)
 *   CKPT_E_PROTOCOL  -4   spotd sent something this library does not understand
 *   CKPT_E_VERSION   -5   spotd speaks a protocol version this library does not
 *   CKPT_E_STATE     -6   the call does not fit the handle's state (saved
 *                         without a save request, for example)
 *   CKPT_E_CLOSED    -7   spotd closed the connection
 *   CKPT_E_IO        -8   a system call failed; errno tells which
 */
enum ckpt_error {
    CKPT_OK = 0,
    CKPT_E_INVAL = -1,
    CKPT_E_NOMEM = -2,
    CKPT_E_CONNECT = -3,
    CKPT_E_PROTOCOL = -4,
    CKPT_E_VERSION = -5,
    CKPT_E_STATE = -6,
    CKPT_E_CLOSED = -7,
    CKPT_E_IO = -8,
};

/* A static, human-readable description of err; "unknown error" for values
 * outside the table.  Never NULL. */
const char *ckpt_strerror(int err);

/* The library's version as "MAJOR.MINOR.PATCH"; it can differ from the
 * CKPT_VERSION_* macros a program was compiled with.  Never NULL. */
const char *ckpt_version(void);

#ifdef __cplusplus
}
#endif

#endif
