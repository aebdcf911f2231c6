/* proc: a process's children and descendants, from Linux's
 * /proc/PID/task/TID/children (every thread's: a child belongs to the
 * thread that forked it); a process's /proc/PID/stat; the members of a
 * process group; and the record spotd keeps of the command's group
 * (STATE/command.json), so that a spotd started after one that died can
 * find what it left running.  A process that is gone, or a file that
 * cannot be read, has no children; nothing here fails otherwise, but for
 * the parsers, which take untrusted bytes. */
#ifndef SPOT_PROC_H
#define SPOT_PROC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The children of pid, into out (at most max).  Returns how many. */
size_t proc_children(pid_t pid, pid_t *out, size_t max);

/* pid and every descendant, breadth first, into out (at most max; pid
 * first).  Returns how many. */
size_t proc_tree(pid_t pid, pid_t *out, size_t max);

/* What spotd needs of /proc/PID/stat. */
struct proc_stat {
    char state;                   /* 'R', 'S', 'D', 'Z', ... */
    pid_t ppid, pgrp, session;
    uint64_t start;               /* field 22: clock ticks after boot */
};

/* Parse the text of /proc/PID/stat ("PID (COMM) STATE PPID PGRP SESSION
 * ..."; COMM may hold spaces and parentheses: the last ')' ends it).
 * Returns 0, or -EINVAL with *out untouched. */
int proc_stat_parse(const char *text, size_t len, struct proc_stat *out);

/* Read and parse /proc/PID/stat.  Returns 0, -ENOENT when pid is gone,
 * -EINVAL. */
int proc_stat_read(pid_t pid, struct proc_stat *out);

/* The signals a process catches: the "SigCgt:" line of the text of
 * /proc/PID/status (16 hex digits, bit N-1 for signal N).  Returns 0, or
 * -EINVAL with *mask untouched. */
int proc_sigcgt_parse(const char *text, size_t len, uint64_t *mask);

/* Does pid catch sig (a handler installed)?  1 or 0, -ENOENT when pid is
 * gone, -EINVAL. */
int proc_catches(pid_t pid, int sig);

/* The live members of process group pgid (zombies aside), into out (at
 * most max).  Returns how many there are (possibly more than max), or
 * -errno when /proc cannot be read.  *ret_oldest (when not NULL) gets the
 * earliest start time among them (UINT64_MAX when none). */
int proc_group_members(pid_t pgid, pid_t *out, size_t max, uint64_t *ret_oldest);

/* This boot's identity (/proc/sys/kernel/random/boot_id): 36 characters
 * into buf (size 37 or more).  Returns 0 or -errno. */
#define PROC_BOOT_ID_LEN 36
int proc_boot_id(char *buf, size_t size);

/* The record of the command's process group: its leader (pid = pgid) and
 * that leader's start time, on this boot, started by spotd spotd_pid. */
struct proc_grouprec {
    pid_t pgid;
    uint64_t start;
    char boot_id[PROC_BOOT_ID_LEN + 1];
    pid_t spotd_pid;
};

/* The record as one JSON line, into buf.  Returns its length, or -ENOSPC. */
int proc_grouprec_format(const struct proc_grouprec *r, char *buf, size_t size);

/* Parse a record: a JSON object of exactly pgid, start, boot_id and
 * spotd_pid (whole numbers, pids above 1 and below 2^22, a boot id of 36
 * hex digits and dashes), at most 1 KiB.  Returns 0, or -EINVAL with a
 * short static reason in *ret_why and *out untouched. */
#define PROC_GROUPREC_MAX 1024
int proc_grouprec_parse(const char *text, size_t len, struct proc_grouprec *out,
                        const char **ret_why);

#endif
