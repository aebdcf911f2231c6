/* log: stderr and the event log.
 *
 * DESIGN.  A record goes to the event log with one write(2), whole or not
 * at all: a short write (a full disk) is taken back with ftruncate(), so
 * a reader never sees a cut line glued to the next one.  A record that
 * cannot be written is dropped and counted (log_events_dropped(), which
 * /metrics serves); the first drop is said once on stderr, and again only
 * after the log was written again and failed again. */
#include "spot/log.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define LOG_LINE_MAX 8192

static struct {
    enum log_format format;
    enum log_level level;
    int events_fd;
    char *events_path;
    uint64_t dropped;             /* records not written, since the start */
    uint64_t dropping;            /* since the last record written: > 0 while failing */
    bool cut;                     /* a cut line could not be taken back */
    struct {
        log_observer_fn fn;
        void *arg;
    } obs[LOG_OBSERVERS_MAX];
} logger = { .format = LOG_TEXT, .level = LOGL_INFO, .events_fd = -1 };

int log_observe(log_observer_fn fn, void *arg)
{
    for (int i = 0; i < LOG_OBSERVERS_MAX; i++)
        if (!logger.obs[i].fn) {
            logger.obs[i].fn = fn;
            logger.obs[i].arg = arg;
            return 0;
        }
    return -ENOSPC;
}

const char *log_rec_str(const cJSON *rec, const char *key, const char *def)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(rec, key);

    return cJSON_IsString(v) ? v->valuestring : def;
}

bool log_rec_num(const cJSON *rec, const char *key, double *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(rec, key);

    if (!cJSON_IsNumber(v))
        return false;
    *out = v->valuedouble;
    return true;
}

void log_unobserve(log_observer_fn fn, void *arg)
{
    for (int i = 0; i < LOG_OBSERVERS_MAX; i++)
        if (logger.obs[i].fn == fn && logger.obs[i].arg == arg)
            logger.obs[i].fn = NULL;
}

static const char *const level_names[] = { "debug", "info", "warn", "error" };

int log_open(enum log_format format, enum log_level level, const char *events_path)
{
    char *path = NULL;
    int fd = -1;

    if (events_path) {
        if (!(path = strdup(events_path)))
            return -ENOMEM;
        fd = open(events_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0644);
        if (fd < 0) {
            int err = -errno;
            free(path);
            return err;
        }
    }
    log_close();
    logger.format = format;
    logger.level = level;
    logger.events_fd = fd;
    logger.events_path = path;
    return 0;
}

void log_close(void)
{
    if (logger.events_fd >= 0)
        close(logger.events_fd);
    logger.events_fd = -1;
    free(logger.events_path);
    logger.events_path = NULL;
    logger.dropping = 0;
    logger.cut = false;
}

uint64_t log_events_dropped(void)
{
    return logger.dropped;
}

char *log_timestamp(char *buf)
{
    struct timespec ts;
    struct tm tm;

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(buf, LOG_TS_LEN, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, LOG_TS_LEN - n, ".%03dZ", (int)(ts.tv_nsec / 1000000));
    return buf;
}

/* Write a whole line with one write(2); retry only what EINTR interrupted.
 * A log that cannot be written is dropped: there is nobody to tell. */
static void write_line(int fd, const char *s, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, s, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return;
        s += n;
        len -= (size_t)n;
    }
}

static bool needs_quotes(const char *s)
{
    if (!*s)
        return true;
    for (; *s; s++)
        if ((unsigned char)*s <= ' ' || *s == '"' || *s == '=' || *s == '\\' || *s == 0x7f)
            return true;
    return false;
}

struct out {
    char *buf;
    size_t size, len;
};

static void out_putc(struct out *o, char c)
{
    if (o->len + 1 < o->size)
        o->buf[o->len++] = c;
}

static void out_puts(struct out *o, const char *s)
{
    while (*s)
        out_putc(o, *s++);
}

static void out_value(struct out *o, const char *s)
{
    if (!needs_quotes(s)) {
        out_puts(o, s);
        return;
    }
    out_putc(o, '"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char hex[5];
        switch (c) {
        case '"':  out_puts(o, "\\\""); break;
        case '\\': out_puts(o, "\\\\"); break;
        case '\n': out_puts(o, "\\n"); break;
        case '\t': out_puts(o, "\\t"); break;
        default:
            if (c < ' ' || c == 0x7f) {
                snprintf(hex, sizeof(hex), "\\x%02x", c);
                out_puts(o, hex);
            } else {
                out_putc(o, (char)c);
            }
        }
    }
    out_putc(o, '"');
}

/* Arrays of strings read best as a command line: sh -c 'exit 3'. */
static bool join_words(const cJSON *arr, struct out *o)
{
    const cJSON *w;
    struct out tmp;
    char buf[1024];

    cJSON_ArrayForEach(w, arr)
        if (!cJSON_IsString(w))
            return false;
    tmp = (struct out){ buf, sizeof(buf), 0 };
    cJSON_ArrayForEach(w, arr) {
        if (tmp.len > 0)
            out_putc(&tmp, ' ');
        if (needs_quotes(w->valuestring) && !strchr(w->valuestring, '\'')) {
            out_putc(&tmp, '\'');
            out_puts(&tmp, w->valuestring);
            out_putc(&tmp, '\'');
        } else {
            out_puts(&tmp, w->valuestring);
        }
    }
    buf[tmp.len] = '\0';
    out_value(o, buf);
    return true;
}

/* key=value for each member; objects flatten to key.member=value, and
 * their null members are left out. */
static void format_members(const cJSON *obj, const char *prefix, const char *skip,
                           struct out *o)
{
    const cJSON *it;

    cJSON_ArrayForEach(it, obj) {
        char num[32], key[128];
        char *json = NULL;
        const char *v;

        if (skip && it->string && strcmp(it->string, skip) == 0)
            continue;
        snprintf(key, sizeof(key), "%s%s%s", prefix, *prefix ? "." : "",
                 it->string ? it->string : "?");
        if (cJSON_IsObject(it)) {
            format_members(it, key, NULL, o);
            continue;
        }
        if (*prefix && cJSON_IsNull(it))
            continue;
        if (o->len > 0)
            out_putc(o, ' ');
        out_puts(o, key);
        out_putc(o, '=');
        if (cJSON_IsArray(it) && join_words(it, o))
            continue;
        if (cJSON_IsString(it)) {
            v = it->valuestring;
        } else if (cJSON_IsNumber(it)) {
            double d = it->valuedouble;
            if (d == (double)(long long)d)
                snprintf(num, sizeof(num), "%lld", (long long)d);
            else
                snprintf(num, sizeof(num), "%.17g", d);
            v = num;
        } else if (cJSON_IsBool(it)) {
            v = cJSON_IsTrue(it) ? "true" : "false";
        } else if (cJSON_IsNull(it)) {
            v = "null";
        } else {
            json = cJSON_PrintUnformatted(it);
            v = json ? json : "?";
        }
        out_value(o, v);
        free(json);
    }
}

size_t log_format_text(const cJSON *rec, char *buf, size_t size)
{
    struct out o = { buf, size, 0 };

    if (size == 0)
        return 0;
    format_members(rec, "", NULL, &o);
    o.buf[o.len] = '\0';
    return o.len;
}

cJSON *log_event_new(const char *event)
{
    char ts[LOG_TS_LEN];
    cJSON *rec = cJSON_CreateObject();

    cJSON_AddStringToObject(rec, "ts", log_timestamp(ts));
    cJSON_AddStringToObject(rec, "event", event);
    return rec;
}

static void stderr_line(const char *s, size_t len)
{
    write_line(STDERR_FILENO, s, len);
}

/* Take back the last n bytes written to fd (O_APPEND: they end at the
 * offset), unless another process (a spotd sharing the file) appended
 * since.  Returns 0 or -errno. */
static int take_back(int fd, ssize_t n)
{
    off_t end = lseek(fd, 0, SEEK_CUR);
    struct stat st;

    if (end < 0 || fstat(fd, &st) < 0)
        return -errno;
    if (end < n || st.st_size != end)
        return -EBUSY;
    return ftruncate(fd, end - n) < 0 ? -errno : 0;
}

/* A record not written, for why (a strerror(), or what a short write took). */
static void events_dropped(const char *why)
{
    logger.dropped++;
    if (logger.dropping++ == 0)
        log_msg(LOGL_WARN, "cannot write the event log '%s': %s; its records are dropped, and "
                "counted in /metrics (spotd_events_dropped_total), until it can be written "
                "again", logger.events_path ? logger.events_path : "?", why);
}

/* One record, a whole line, to the event log: whole or not at all. */
static void events_line(const char *s, size_t len)
{
    int fd = logger.events_fd;
    char why[96];
    ssize_t n;

    /* A cut line left by a write that could not be taken back ends here,
     * so that it stays one bad line and the next record starts a line. */
    if (logger.cut) {
        if (write(fd, "\n", 1) != 1) {
            events_dropped(strerror(errno));
            return;
        }
        logger.cut = false;
    }
    do
        n = write(fd, s, len);
    while (n < 0 && errno == EINTR);
    if (n == (ssize_t)len) {
        if (logger.dropping)
            log_msg(LOGL_INFO, "the event log '%s' is written again; %llu record%s dropped",
                    logger.events_path ? logger.events_path : "?",
                    (unsigned long long)logger.dropping,
                    logger.dropping == 1 ? " was" : "s were");
        logger.dropping = 0;
        return;
    }
    if (n < 0) {
        events_dropped(strerror(errno));
        return;
    }
    /* A short write: the disk is full (or a size limit reached). */
    if (take_back(fd, n) < 0)
        logger.cut = true;
    snprintf(why, sizeof(why), "it took %zd of a record's %zu bytes (a full disk?)", n, len);
    events_dropped(why);
}

/* Print rec as one JSON line and hand it to put. */
static void write_json(cJSON *rec, void (*put)(const char *s, size_t len))
{
    char buf[LOG_LINE_MAX];
    char *s = buf;

    if (!cJSON_PrintPreallocated(rec, buf, sizeof(buf) - 1, false)) {
        s = cJSON_PrintUnformatted(rec);
        if (!s) {
            if (put == events_line)
                events_dropped(strerror(ENOMEM));
            return;
        }
    }
    size_t len = strlen(s);
    if (s == buf) {
        buf[len++] = '\n';
        put(buf, len);
        return;
    }
    char *line = realloc(s, len + 2);
    if (line) {
        line[len] = '\n';
        put(line, len + 1);
        s = line;
    } else if (put == events_line) {
        events_dropped(strerror(ENOMEM));
    }
    free(s);
}

/* Write rec to stderr in the chosen format, with level and message; in
 * text, level follows ts since it is what a reader scans for. */
static void emit_stderr(enum log_level level, cJSON *rec, const char *msg)
{
    char buf[LOG_LINE_MAX];
    struct out o = { buf, sizeof(buf) - 1, 0 };
    const char *ts;

    if (level < logger.level)
        return;
    if (msg && *msg)
        cJSON_AddStringToObject(rec, "msg", msg);
    if (logger.format == LOG_JSON) {
        cJSON_AddStringToObject(rec, "level", level_names[level]);
        write_json(rec, stderr_line);
        return;
    }
    ts = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(rec, "ts"));
    out_puts(&o, "ts=");
    out_puts(&o, ts ? ts : "?");
    out_puts(&o, " level=");
    out_puts(&o, level_names[level]);
    format_members(rec, "", "ts", &o);
    buf[o.len++] = '\n';
    write_line(STDERR_FILENO, buf, o.len);
}

void log_event(enum log_level level, cJSON *rec, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;

    if (!rec)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (logger.events_fd >= 0)
        write_json(rec, events_line);
    emit_stderr(level, rec, msg);
    for (int i = 0; i < LOG_OBSERVERS_MAX; i++)
        if (logger.obs[i].fn)
            logger.obs[i].fn(logger.obs[i].arg, rec, level);
    cJSON_Delete(rec);
}

void log_msg(enum log_level level, const char *fmt, ...)
{
    char ts[LOG_TS_LEN], msg[1024];
    va_list ap;
    cJSON *rec;

    if (level < logger.level)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    rec = cJSON_CreateObject();
    cJSON_AddStringToObject(rec, "ts", log_timestamp(ts));
    if (!rec) {
        /* Out of memory: still say it, plainly. */
        write_line(STDERR_FILENO, msg, strlen(msg));
        write_line(STDERR_FILENO, "\n", 1);
        return;
    }
    emit_stderr(level, rec, msg);
    cJSON_Delete(rec);
}
