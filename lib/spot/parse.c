#include "spot/parse.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

int parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *ret)
{
    uint64_t v = 0;
    const char *p = s;

    if (!s || !*s)
        return -EINVAL;
    for (; *p; p++) {
        if (*p < '0' || *p > '9')
            return -EINVAL;
        if (v > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
            return -ERANGE;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    if (v < min || v > max)
        return -ERANGE;
    *ret = v;
    return 0;
}

static const struct {
    const char *suffix;
    uint64_t ms;
} duration_units[] = {
    { "ms", 1 },
    { "s", 1000 },
    { "m", 60 * 1000 },
    { "h", 3600 * 1000 },
};

int parse_duration(const char *s, uint64_t *ret_ms)
{
    char digits[21];
    size_t n = 0;
    uint64_t v;
    int r;

    if (!s)
        return -EINVAL;
    while (s[n] >= '0' && s[n] <= '9')
        n++;
    if (n == 0 || n >= sizeof(digits))
        return n == 0 ? -EINVAL : -ERANGE;
    memcpy(digits, s, n);
    digits[n] = '\0';
    r = parse_u64(digits, 0, UINT64_MAX, &v);
    if (r < 0)
        return r;

    if (s[n] == '\0') {
        /* A bare number is ambiguous; only zero means the same in every unit. */
        if (v != 0)
            return -EINVAL;
        *ret_ms = 0;
        return 0;
    }
    for (size_t i = 0; i < sizeof(duration_units) / sizeof(duration_units[0]); i++) {
        if (strcmp(s + n, duration_units[i].suffix) != 0)
            continue;
        if (v > PARSE_DURATION_MAX_MS / duration_units[i].ms)
            return -ERANGE;
        *ret_ms = v * duration_units[i].ms;
        return 0;
    }
    return -EINVAL;
}

char *parse_format_duration(uint64_t ms, char *buf, size_t size)
{
    if (ms == 0)
        snprintf(buf, size, "0s");
    else if (ms % (3600 * 1000) == 0)
        snprintf(buf, size, "%lluh", (unsigned long long)(ms / (3600 * 1000)));
    else if (ms % (60 * 1000) == 0)
        snprintf(buf, size, "%llum", (unsigned long long)(ms / (60 * 1000)));
    else if (ms % 1000 == 0)
        snprintf(buf, size, "%llus", (unsigned long long)(ms / 1000));
    else
        snprintf(buf, size, "%llums", (unsigned long long)ms);
    return buf;
}

static const struct {
    int sig;
    const char *name;
} signal_names[] = {
    { SIGHUP, "HUP" },   { SIGINT, "INT" },     { SIGQUIT, "QUIT" }, { SIGILL, "ILL" },
    { SIGTRAP, "TRAP" }, { SIGABRT, "ABRT" },   { SIGBUS, "BUS" },   { SIGFPE, "FPE" },
    { SIGKILL, "KILL" }, { SIGUSR1, "USR1" },   { SIGSEGV, "SEGV" }, { SIGUSR2, "USR2" },
    { SIGPIPE, "PIPE" }, { SIGALRM, "ALRM" },   { SIGTERM, "TERM" }, { SIGCHLD, "CHLD" },
    { SIGCONT, "CONT" }, { SIGSTOP, "STOP" },   { SIGTSTP, "TSTP" }, { SIGTTIN, "TTIN" },
    { SIGTTOU, "TTOU" }, { SIGURG, "URG" },     { SIGXCPU, "XCPU" }, { SIGXFSZ, "XFSZ" },
    { SIGVTALRM, "VTALRM" }, { SIGPROF, "PROF" }, { SIGWINCH, "WINCH" }, { SIGIO, "IO" },
    { SIGPWR, "PWR" },   { SIGSYS, "SYS" },
};

#define N_SIGNAL_NAMES (sizeof(signal_names) / sizeof(signal_names[0]))

int parse_signal(const char *s)
{
    uint64_t n;

    if (!s)
        return -EINVAL;
    if (parse_u64(s, 1, 64, &n) == 0)
        return (int)n;
    if (strncasecmp(s, "SIG", 3) == 0)
        s += 3;
    for (size_t i = 0; i < N_SIGNAL_NAMES; i++)
        if (strcasecmp(s, signal_names[i].name) == 0)
            return signal_names[i].sig;
    return -EINVAL;
}

const char *parse_signal_name(int sig)
{
    for (size_t i = 0; i < N_SIGNAL_NAMES; i++)
        if (signal_names[i].sig == sig)
            return signal_names[i].name;
    return NULL;
}

/* "ADDR:PORT" or "[V6]:PORT", numeric, port 0 to 65535.  Returns 0 or
 * -EINVAL. */
int parse_sockaddr(const char *text, struct sockaddr_storage *ss, int *len)
{
    char host[64];
    const char *colon = strrchr(text, ':');
    uint64_t port;
    size_t hl;

    if (!colon || parse_u64(colon + 1, 0, 65535, &port) < 0)
        return -EINVAL;
    hl = (size_t)(colon - text);
    if (hl >= 2 && text[0] == '[' && text[hl - 1] == ']')
        text++, hl -= 2;
    if (hl == 0 || hl >= sizeof(host))
        return -EINVAL;
    memcpy(host, text, hl);
    host[hl] = '\0';
    memset(ss, 0, sizeof(*ss));
    if (inet_pton(AF_INET, host, &((struct sockaddr_in *)ss)->sin_addr) == 1) {
        ((struct sockaddr_in *)ss)->sin_family = AF_INET;
        ((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
        *len = sizeof(struct sockaddr_in);
        return 0;
    }
    if (inet_pton(AF_INET6, host, &((struct sockaddr_in6 *)ss)->sin6_addr) == 1) {
        ((struct sockaddr_in6 *)ss)->sin6_family = AF_INET6;
        ((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)port);
        *len = sizeof(struct sockaddr_in6);
        return 0;
    }
    return -EINVAL;
}
