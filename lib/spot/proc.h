/* proc: a process's children and descendants, from Linux's
 * /proc/PID/task/TID/children (every thread's: a child belongs to the
 * thread that forked it).  A process that is gone, or a file that cannot
 * be read, has no children; nothing here fails otherwise. */
#ifndef SPOT_PROC_H
#define SPOT_PROC_H

#include <stddef.h>
#include <sys/types.h>

/* The children of pid, into out (at most max).  Returns how many. */
size_t proc_children(pid_t pid, pid_t *out, size_t max);

/* pid and every descendant, breadth first, into out (at most max; pid
 * first).  Returns how many. */
size_t proc_tree(pid_t pid, pid_t *out, size_t max);

#endif
