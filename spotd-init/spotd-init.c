/* spotd-init: the command of --method criu, in a PID namespace of its own.
 *
 *   spotd-init run -- COMMAND [ARG...]
 *   spotd-init restore [--stream] CRIU IMAGES WORKDIR
 *
 * Three processes, for CRIU's sake (docs/methods.md, "criu"):
 *
 *   outer   spotd's child, in spotd's namespaces.  It is never dumped: it
 *           owns the pipes the command writes its output into and copies
 *           them to its own stdout and stderr, forwards spotd's signals,
 *           and exits with the command's code.
 *   inner   PID 1 of a new PID namespace, a session leader: what CRIU
 *           dumps, with everything below it.  PIDs inside the namespace
 *           are free on any host, so the tree restores anywhere.  It
 *           forwards signals to the command's group (a PID 1 ignores the
 *           signals it has no handler for, the command would not) and
 *           reaps orphans.
 *   command PID 2, in a group of its own.
 *
 * The inner also holds the read end of a lifeline pipe whose write end only
 * the outer has: when the outer is gone (even by SIGKILL), the inner reads
 * EOF and ends, and the namespace with it.
 *
 * restore runs `CRIU restore` on IMAGES as a child subreaper: the restored
 * inner is reparented to the outer when CRIU exits.  The pipes the images
 * name (IMAGES/spotd-criu.pipes: "pipe:[N] pipe:[M] pipe:[L]", output,
 * errors and lifeline, written by spotd at the dump) are replaced by new
 * ones of this outer (--inherit-fd).  CRIU's log is WORKDIR/restore.log.
 * With --stream, CRIU asks spotd for the images (criu restore --stream:
 * spotd serves them at IMAGES/streamer-serve.sock, the pages from the
 * store).
 *
 * Only libc, linked statically: CRIU restores this program's mappings from
 * its path, which must not depend on the host's C library. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* What a signal the outer or the inner gets does: forwarded. */
static const int forwarded[] = { SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 };

#define EXIT_INIT 70 /* EX_SOFTWARE: spotd-init itself failed */

/* "spotd-init: WHAT[ ARG]: the error" and out. */
static void die(const char *what, const char *arg)
{
    fprintf(stderr, "spotd-init: %s%s%s: %s\n", what, arg ? " " : "", arg ? arg : "",
            strerror(errno));
    _exit(EXIT_INIT);
}

static int code_of(int status)
{
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return EXIT_INIT;
}

/* A signalfd for the forwarded signals and SIGCHLD, all blocked. */
static int signals(sigset_t *old)
{
    sigset_t set;
    int fd;

    sigemptyset(&set);
    for (size_t i = 0; i < sizeof(forwarded) / sizeof(forwarded[0]); i++)
        sigaddset(&set, forwarded[i]);
    sigaddset(&set, SIGCHLD);
    if (sigprocmask(SIG_BLOCK, &set, old) < 0 || (fd = signalfd(-1, &set, SFD_CLOEXEC)) < 0)
        die("cannot take signals", NULL);
    return fd;
}

/* Copy what is in from to fd to; 0 at EOF (from is closed then). */
static int relay(int *from, int to)
{
    char buf[65536];
    ssize_t n = read(*from, buf, sizeof(buf));

    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return 1;
    if (n <= 0) {
        close(*from);
        *from = -1;
        return 0;
    }
    for (ssize_t off = 0; off < n;) {
        ssize_t w = write(to, buf + off, (size_t)(n - off));
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            break; /* our output is gone: the command's goes nowhere */
        off += w;
    }
    return 1;
}

/* The outer: relay out and err, forward signals to pid, and exit with its
 * code once it has ended and the pipes are drained. */
static void outer_loop(int sfd, pid_t pid, int out, int err)
{
    int code = -1;

    for (;;) {
        struct pollfd p[3] = { { sfd, POLLIN, 0 }, { out, POLLIN, 0 }, { err, POLLIN, 0 } };

        if (code >= 0 && out < 0 && err < 0)
            _exit(code);
        if (poll(p, 3, -1) < 0) {
            if (errno == EINTR)
                continue;
            die("poll", NULL);
        }
        if (p[1].revents)
            relay(&out, STDOUT_FILENO);
        if (p[2].revents)
            relay(&err, STDERR_FILENO);
        if (p[0].revents & POLLIN) {
            struct signalfd_siginfo si;
            int status;
            pid_t w;

            if (read(sfd, &si, sizeof(si)) != sizeof(si))
                continue;
            if (si.ssi_signo != SIGCHLD) {
                kill(pid, (int)si.ssi_signo);
                continue;
            }
            while ((w = waitpid(-1, &status, WNOHANG)) > 0)
                if (w == pid)
                    code = code_of(status);
        }
    }
}

/* The inner, PID 1: start the command, forward, reap; end with it, or
 * with the outer (its lifeline, fd life, reads EOF then). */
static void inner(char **argv, const sigset_t *old, int sfd, int life)
{
    int status;
    pid_t cmd, w;

    if (setsid() < 0)
        die("setsid", NULL);
    cmd = fork();
    if (cmd < 0)
        die("fork", NULL);
    if (cmd == 0) {
        setpgid(0, 0);
        sigprocmask(SIG_SETMASK, old, NULL);
        close(sfd);
        close(life);
        execvp(argv[0], argv);
        fprintf(stderr, "spotd-init: cannot execute %s: %s\n", argv[0], strerror(errno));
        _exit(errno == ENOENT ? 127 : 126);
    }
    setpgid(cmd, cmd);
    for (;;) {
        struct pollfd p[2] = { { sfd, POLLIN, 0 }, { life, POLLIN, 0 } };
        struct signalfd_siginfo si;

        if (poll(p, 2, -1) < 0)
            continue;
        if (p[1].revents)
            _exit(EXIT_INIT); /* the outer is gone: nobody would reap or relay us */
        if (!(p[0].revents & POLLIN) || read(sfd, &si, sizeof(si)) != sizeof(si))
            continue;
        if (si.ssi_signo != SIGCHLD) {
            if (kill(-cmd, (int)si.ssi_signo) < 0)
                kill(cmd, (int)si.ssi_signo);
            continue;
        }
        while ((w = waitpid(-1, &status, WNOHANG)) > 0)
            if (w == cmd)
                _exit(code_of(status)); /* the namespace's other processes go with us */
    }
}

static void make_pipe(int p[2])
{
    if (pipe2(p, O_CLOEXEC) < 0)
        die("pipe", NULL);
}

static int run(char **argv)
{
    int out[2], err[2], life[2], sfd, null;
    sigset_t old;
    pid_t pid;

    make_pipe(out);
    make_pipe(err);
    make_pipe(life);
    sfd = signals(&old);
    if (unshare(CLONE_NEWPID) < 0)
        die("cannot make a PID namespace (CAP_SYS_ADMIN is needed)", NULL);
    pid = fork();
    if (pid < 0)
        die("fork", NULL);
    if (pid == 0) {
        /* 0 /dev/null, 1 and 2 the output pipes, 3 the lifeline, 4 the
         * signals (all above the pipes), and nothing else of spotd's:
         * CRIU would have to restore it. */
        null = open("/dev/null", O_RDONLY);
        if (null < 0 || dup2(null, STDIN_FILENO) < 0 || dup2(out[1], STDOUT_FILENO) < 0 ||
            dup2(err[1], STDERR_FILENO) < 0 || dup2(life[0], 3) < 0 || dup2(sfd, 4) < 0)
            die("cannot set up the command's stdio", NULL);
        close_range(5, ~0u, 0);
        inner(argv, &old, 4, 3);
    }
    close(out[1]);
    close(err[1]);
    close(life[0]);
    outer_loop(sfd, pid, out[0], err[0]);
    return EXIT_INIT;
}

/* The pipe ids the images name, "pipe:[N]": output, errors, lifeline. */
static int read_pipes(const char *images, char ids[3][64])
{
    char path[4200];
    FILE *f;
    int n;

    snprintf(path, sizeof(path), "%s/spotd-criu.pipes", images);
    if (!(f = fopen(path, "re")))
        return -1;
    n = fscanf(f, "%63s %63s %63s", ids[0], ids[1], ids[2]);
    fclose(f);
    for (int i = 0; i < 3; i++)
        if (n != 3 || strncmp(ids[i], "pipe:[", 6) != 0)
            return -1;
    return 0;
}

static int restore(const char *criu, const char *images_arg, const char *work_arg, bool stream)
{
    char ids[3][64], inherit[3][96], pidfile[4200], log[4200], buf[32], *end;
    char images[4096], work[4096];
    int out[2], err[2], life[2], sfd, status, fd;
    sigset_t old;
    pid_t pid, w;
    ssize_t n;
    long lpid;

    /* CRIU works in WORKDIR: what it is given must not be relative. */
    if (!realpath(images_arg, images) || !realpath(work_arg, work))
        die("no such directory:", !realpath(images_arg, images) ? images_arg : work_arg);
    if (read_pipes(images, ids) < 0) {
        fprintf(stderr, "spotd-init: %s/spotd-criu.pipes is missing or not three pipe ids: "
                "these are not images spotd dumped\n", images);
        return EXIT_INIT;
    }
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0)
        die("cannot become a subreaper", NULL);
    make_pipe(out);
    make_pipe(err);
    make_pipe(life);
    sfd = signals(&old);
    snprintf(pidfile, sizeof(pidfile), "%s/restored.pid", work);
    snprintf(log, sizeof(log), "%s/restore.log", work);
    unlink(pidfile);
    snprintf(inherit[0], sizeof(inherit[0]), "fd[3]:%s", ids[0]);
    snprintf(inherit[1], sizeof(inherit[1]), "fd[4]:%s", ids[1]);
    snprintf(inherit[2], sizeof(inherit[2]), "fd[5]:%s", ids[2]);
    pid = fork();
    if (pid < 0)
        die("fork", NULL);
    if (pid == 0) {
        char exe[4096], a_restore[] = "restore", a_d[] = "-D", a_w[] = "-W", a_o[] = "-o";
        char a_v[] = "-v2", a_detach[] = "-d", a_pidfile[] = "--pidfile";
        char a_inherit[] = "--inherit-fd", a_stream[] = "--stream";
        char *argv[] = { exe, a_restore, a_d, images, a_w, work, a_o, log, a_v, a_detach,
                         a_pidfile, pidfile, a_inherit, inherit[0], a_inherit, inherit[1],
                         a_inherit, inherit[2], stream ? a_stream : NULL, NULL };

        snprintf(exe, sizeof(exe), "%s", criu);
        /* fds 3, 4 and 5, inherited by CRIU, become the restored pipes. */
        if (dup2(out[1], 3) < 0 || dup2(err[1], 4) < 0 || dup2(life[0], 5) < 0)
            die("dup2", NULL);
        fd = open("/dev/null", O_RDWR);
        if (fd >= 0) {
            dup2(fd, STDIN_FILENO);
            dup2(fd, STDOUT_FILENO);
        }
        sigprocmask(SIG_SETMASK, &old, NULL);
        execv(exe, argv);
        die("cannot execute", criu);
    }
    close(out[1]);
    close(err[1]);
    close(life[0]);
    while ((w = waitpid(pid, &status, 0)) < 0 && errno == EINTR)
        ;
    if (w < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "spotd-init: criu restore failed (code %d); its log: %s\n",
                w < 0 ? -1 : code_of(status), log);
        return EXIT_INIT;
    }
    fd = open(pidfile, O_RDONLY | O_CLOEXEC);
    n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
    if (fd >= 0)
        close(fd);
    if (n <= 0) {
        fprintf(stderr, "spotd-init: criu restore wrote no %s\n", pidfile);
        return EXIT_INIT;
    }
    buf[n] = '\0';
    errno = 0;
    lpid = strtol(buf, &end, 10);
    pid = errno || end == buf || (*end && *end != '\n') || lpid > INT32_MAX ? 0 : (pid_t)lpid;
    if (pid <= 1) {
        fprintf(stderr, "spotd-init: %s holds no pid\n", pidfile);
        return EXIT_INIT;
    }
    outer_loop(sfd, pid, out[0], err[0]);
    return EXIT_INIT;
}

int main(int argc, char **argv)
{
    if (argc >= 4 && strcmp(argv[1], "run") == 0 && strcmp(argv[2], "--") == 0)
        return run(argv + 3);
    if (argc == 5 && strcmp(argv[1], "restore") == 0)
        return restore(argv[2], argv[3], argv[4], false);
    if (argc == 6 && strcmp(argv[1], "restore") == 0 && strcmp(argv[2], "--stream") == 0)
        return restore(argv[3], argv[4], argv[5], true);
    fprintf(stderr, "usage: spotd-init run -- COMMAND [ARG...]\n"
                    "       spotd-init restore [--stream] CRIU IMAGES WORKDIR\n");
    return 2;
}
