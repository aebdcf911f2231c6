/* ckptname: checkpoint names and their steps (see ckptname.h). */
#include "spot/ckptname.h"

#include <errno.h>
#include <string.h>

#define DIGITS_MAX 15

static const char *const layout_names[] = {
    [CKPT_LAYOUT_AUTO] = "auto",
    [CKPT_LAYOUT_FOLDERS] = "folders",
    [CKPT_LAYOUT_FILES] = "files",
    [CKPT_LAYOUT_FIXED] = "fixed",
};

int ckptname_layout(const char *s, enum ckpt_layout *ret)
{
    for (size_t i = 0; i < sizeof(layout_names) / sizeof(layout_names[0]); i++)
        if (s && strcmp(s, layout_names[i]) == 0) {
            *ret = (enum ckpt_layout)i;
            return 0;
        }
    return -EINVAL;
}

const char *ckptname_layout_name(enum ckpt_layout l)
{
    return (size_t)l < sizeof(layout_names) / sizeof(layout_names[0]) ? layout_names[l] : "?";
}

static bool ends_with(const char *s, size_t len, const char *tail)
{
    size_t n = strlen(tail);

    return len >= n && strncmp(s + len - n, tail, n) == 0;
}

/* Written under this name, renamed when done. */
static bool temporary(const char *name)
{
    static const char *const tails[] = { ".tmp", ".temp", ".part", ".partial", ".incomplete",
                                         ".lock", "~" };
    size_t len = strlen(name);

    if (name[0] == '.' || strncmp(name, "tmp", 3) == 0 || strncmp(name, "temp", 4) == 0)
        return true;
    for (size_t i = 0; i < sizeof(tails) / sizeof(tails[0]); i++)
        if (ends_with(name, len, tails[i]))
            return true;
    return false;
}

static bool digit(char c)
{
    return c >= '0' && c <= '9';
}

/* The number of the digits s[0..n), -1 when too long for a step. */
static int64_t number(const char *s, size_t n)
{
    int64_t v = 0;

    if (n == 0 || n > DIGITS_MAX)
        return -1;
    for (size_t i = 0; i < n; i++)
        v = v * 10 + (s[i] - '0');
    return v;
}

/* The number after the last "step" of name[0..len) ("step=150",
 * "step-150", "step_150", "step150"), -1 when none. */
static int64_t after_step(const char *name, size_t len)
{
    int64_t found = -1;

    for (const char *p = name; (p = strstr(p, "step")) && p < name + len; p += 4) {
        const char *q = p + 4;
        size_t n = 0;

        if (q < name + len && (*q == '=' || *q == '-' || *q == '_'))
            q++;
        while (q + n < name + len && digit(q[n]))
            n++;
        if (n > 0)
            found = number(q, n);
    }
    return found;
}

/* The last run of digits in name[0..len), -1 when none. */
static int64_t last_number(const char *name, size_t len)
{
    size_t end = len, start;

    while (end > 0 && !digit(name[end - 1]))
        end--;
    start = end;
    while (start > 0 && digit(name[start - 1]))
        start--;
    return end > start ? number(name + start, end - start) : -1;
}

int64_t ckptname_step(const char *name, bool is_dir, enum ckpt_layout layout,
                      enum ckptname_why *why)
{
    enum ckptname_why w = CKPTNAME_OK;
    const char *dot;
    size_t len;
    int64_t step = -1;

    if ((is_dir && layout == CKPT_LAYOUT_FILES) || (!is_dir && layout == CKPT_LAYOUT_FOLDERS) ||
        (layout == CKPT_LAYOUT_FIXED && (is_dir || (!ckptname_fixed(name) && !temporary(name))))) {
        w = CKPTNAME_KIND;
    } else if (temporary(name)) {
        w = CKPTNAME_TEMPORARY;
    } else if (!is_dir && ckptname_fixed(name)) {
        w = CKPTNAME_FIXED;
    } else {
        /* A file's extension is no part of its step (model.pt2). */
        len = strlen(name);
        if (!is_dir && (dot = strrchr(name, '.')) && dot != name)
            len = (size_t)(dot - name);
        step = after_step(name, len);
        if (step < 0)
            step = last_number(name, len);
        if (step < 0)
            w = CKPTNAME_NO_STEP;
    }
    if (why)
        *why = w;
    return w == CKPTNAME_OK ? step : -1;
}

const char *ckptname_why_text(enum ckptname_why why)
{
    switch (why) {
    case CKPTNAME_OK:
        return "a checkpoint";
    case CKPTNAME_TEMPORARY:
        return "a temporary name";
    case CKPTNAME_NO_STEP:
        return "no step number in the name";
    case CKPTNAME_KIND:
        return "not of the --ckpt-layout";
    case CKPTNAME_FIXED:
        return "a fixed name, rewritten at each save";
    }
    return "?";
}

int64_t ckptname_text_step(const char *s, size_t len)
{
    int64_t found = -1;

    /* As after_step, past the quotes and colon of '"step": 150' too. */
    for (size_t i = 0; i + 4 <= len; i++) {
        size_t q = i + 4, n = 0;

        if (strncmp(s + i, "step", 4) != 0)
            continue;
        while (q < len && q - i < 8 && strchr("\"'=:-_ \t", s[q]) && s[q] != '\0')
            q++;
        while (q + n < len && digit(s[q + n]))
            n++;
        if (n > 0)
            found = number(s + q, n);
    }
    return found >= 0 ? found : last_number(s, len);
}

bool ckptname_fixed(const char *name)
{
    const char *dot = strrchr(name, '.');
    size_t len = dot ? (size_t)(dot - name) : 0;

    /* With an extension: DeepSpeed's "latest" names a folder, it is none. */
    return (len == 4 && strncmp(name, "last", 4) == 0) ||
           (len == 6 && strncmp(name, "latest", 6) == 0);
}

bool ckptname_last_file(const char *name)
{
    return strcmp(name, ".spotd-complete") == 0 || strcmp(name, "trainer_state.json") == 0 ||
           strcmp(name, ".metadata") == 0;
}
