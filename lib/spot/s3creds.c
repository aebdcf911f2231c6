/* s3creds: the s3:// backend's credentials: static ones found once at
 * open, the instance role's fetched on the loop (a token, the role's
 * name, its document) and again before they expire.  See s3creds.h.
 *
 * A failed fetch keeps credentials that have not expired yet: requests go
 * on with them, and the next one that finds them stale asks again. */
#include "spot/s3creds.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "spot/http.h"
#include "spot/notice.h"

/* Refresh instance-role credentials this long before they expire, as the
 * AWS SDKs do. */
#define REFRESH_BEFORE_MS (5 * 60 * 1000)
/* After a failed credential fetch, fail requests at once for this long
 * rather than asking the metadata service again for each one. */
#define CREDS_RETRY_MS 1000
/* Credentials fetched are not fetched again sooner than this. */
#define REFETCH_MIN_MS (60 * 1000)
#define IMDS_DEFAULT "http://169.254.169.254"
#define IMDS_TIMEOUT_MS 2000

bool s3creds_fresh(const struct s3creds *c, int64_t now_ms)
{
    int64_t exp = c->aws.expiration_ms;

    if (c->state != S3CREDS_OK)
        return false;
    if (exp == 0 || now_ms < exp - REFRESH_BEFORE_MS)
        return true;
    return exp - c->fetched_ms < REFRESH_BEFORE_MS && now_ms - c->fetched_ms < REFETCH_MIN_MS &&
           now_ms < exp;
}

/* End a fetch with the reason every waiting request fails with. */
static void creds_failed(struct s3creds *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void creds_failed(struct s3creds *c, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(c->err, sizeof(c->err), fmt, ap);
    va_end(ap);
    /* Credentials that have not expired yet are kept. */
    if (c->state == S3CREDS_LOADING && c->aws.access_key_id[0] &&
        notice_now_ms() < c->aws.expiration_ms) {
        c->state = S3CREDS_OK;
        c->changed(c->arg);
        return;
    }
    c->state = S3CREDS_FAILED;
    c->failed_ms = notice_now_ms();
    c->changed(c->arg);
}

static void imds_get(struct s3creds *c, const char *path, http_done_fn done);

static void on_imds_creds(void *arg, const struct http_result *res)
{
    struct s3creds *c = arg;
    struct aws_creds got;
    const char *why = NULL;

    c->req = NULL;
    if (res->error || res->status != 200) {
        creds_failed(c, "no S3 credentials: the instance role '%s' answered %s%ld", c->role,
                     res->error ? res->errmsg : "HTTP ", res->error ? 0L : res->status);
        return;
    }
    if (awscreds_parse_imds(res->body, res->len, &got, &why) < 0) {
        creds_failed(c, "no S3 credentials: the instance role document is invalid (%s)",
                     why ? why : "malformed");
        return;
    }
    awscreds_wipe(&c->aws);
    c->aws = got;
    awscreds_wipe(&got);
    c->state = S3CREDS_OK;
    c->fetched_ms = notice_now_ms();
    c->changed(c->arg);
}

static void on_imds_role(void *arg, const struct http_result *res)
{
    struct s3creds *c = arg;
    size_t len = res->len;
    char path[512];

    c->req = NULL;
    if (res->error || res->status != 200) {
        creds_failed(c, "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
                        "write ~/.aws/credentials, or attach an instance role (the metadata "
                        "service has none: %s%ld)",
                     res->error ? res->errmsg : "HTTP ", res->error ? 0L : res->status);
        return;
    }
    /* One role name per line; an instance has at most one. */
    for (size_t i = 0; i < res->len; i++)
        if (res->body[i] == '\n' || res->body[i] == '\r') {
            len = i;
            break;
        }
    if (len == 0 || len >= sizeof(c->role)) {
        creds_failed(c, "no S3 credentials: the metadata service names no usable role");
        return;
    }
    for (size_t i = 0; i < len; i++) {
        char ch = res->body[i];
        /* IAM role names: letters, digits and +=,.@_- */
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              strchr("+=,.@_-", ch))) {
            creds_failed(c, "no S3 credentials: the metadata service sent an invalid role name");
            return;
        }
    }
    memcpy(c->role, res->body, len);
    c->role[len] = '\0';
    snprintf(path, sizeof(path), "/latest/meta-data/iam/security-credentials/%s", c->role);
    imds_get(c, path, on_imds_creds);
}

static void imds_get(struct s3creds *c, const char *path, http_done_fn done)
{
    char url[sizeof(c->imds_url) + 512];
    const char *headers[] = { c->token.header, NULL };
    struct http_req_opts o = {
        .url = url,
        .headers = headers,
        .timeout_ms = IMDS_TIMEOUT_MS,
        .max_body = AWSCREDS_MAX_JSON,
    };

    snprintf(url, sizeof(url), "%s%s", c->imds_url, path);
    c->req = http_start(c->http, &o, done, c);
    if (!c->req)
        creds_failed(c, "no S3 credentials: cannot start a metadata request");
}

static void on_imds_token(void *arg, int r, const struct http_result *res)
{
    struct s3creds *c = arg;

    if (r == -EBADMSG) {
        creds_failed(c, "no S3 credentials: the metadata service sent an invalid token");
        return;
    }
    if (r < 0) {
        creds_failed(c, "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
                        "write ~/.aws/credentials, or run on EC2 with an instance role "
                        "(metadata service %s: %s%ld)",
                     c->imds_url, res->error ? res->errmsg : "HTTP ",
                     res->error ? 0L : res->status);
        return;
    }
    imds_get(c, "/latest/meta-data/iam/security-credentials/", on_imds_role);
}

/* A new token for every fetch: credentials are fetched every few hours at
 * most, and the token is asked for no longer than they take. */
static void fetch_creds(struct s3creds *c)
{
    if (!c->from_role) {
        /* Static credentials never need fetching; state is OK. */
        return;
    }
    if (!c->imds_url[0]) {
        creds_failed(c, "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
                        "or write ~/.aws/credentials (AWS_PROFILE); the instance role is off "
                        "(AWS_EC2_METADATA_DISABLED)");
        return;
    }
    c->state = S3CREDS_LOADING;
    /* A fetch under way (the server called the credentials expired while
     * new ones were coming) brings them: join it.  A second chain beside
     * it would leave a request that close cannot cancel. */
    if (c->req || c->token.req)
        return;
    if (imds_token_fetch(&c->token, on_imds_token, c) < 0)
        creds_failed(c, "no S3 credentials: cannot start a metadata request");
}

enum s3creds_verdict s3creds_ready(struct s3creds *c)
{
    bool usable;

    if (s3creds_fresh(c, notice_now_ms()))
        return S3CREDS_USE;
    /* Old instance-role credentials still work until they expire: keep
     * using them while new ones are fetched. */
    usable = c->state == S3CREDS_OK && notice_now_ms() < c->aws.expiration_ms;
    if (c->state == S3CREDS_FAILED && notice_now_ms() - c->failed_ms < CREDS_RETRY_MS)
        return S3CREDS_FAIL;
    if (c->state != S3CREDS_LOADING) {
        fetch_creds(c);
        /* It may have failed at once. */
        if (c->state == S3CREDS_FAILED)
            return S3CREDS_FAIL;
    }
    return usable ? S3CREDS_USE : S3CREDS_WAIT;
}

bool s3creds_expired(struct s3creds *c)
{
    if (!c->from_role)
        return false;
    c->state = S3CREDS_NONE;
    return true;
}

/* The shared credentials file: 0 when it holds the profile, 1 when there
 * is none or it lacks it, -EINVAL or -ENOMEM with err set. */
static int file_creds(struct s3creds *c, char *err, size_t errlen)
{
    const char *file = getenv("AWS_SHARED_CREDENTIALS_FILE"), *profile = getenv("AWS_PROFILE");
    const char *home = getenv("HOME"), *why = NULL;
    char path[4096], *text;
    struct stat st;
    ssize_t n;
    int fd, r;

    if (file && *file)
        snprintf(path, sizeof(path), "%s", file);
    else if (home && *home)
        snprintf(path, sizeof(path), "%s/.aws/credentials", home);
    else
        return 1;
    if (!profile || !*profile)
        profile = "default";
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        /* A missing file is no credentials, as for the AWS CLI. */
        if (errno == ENOENT)
            return 1;
        snprintf(err, errlen, "cannot read the credentials file '%s': %s", path, strerror(errno));
        return -EINVAL;
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > AWSCREDS_MAX_FILE) {
        close(fd);
        snprintf(err, errlen, "credentials file '%s' is not a regular file under 1 MiB", path);
        return -EINVAL;
    }
    text = malloc((size_t)st.st_size + 1);
    if (!text) {
        close(fd);
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    n = read(fd, text, (size_t)st.st_size);
    close(fd);
    if (n != st.st_size) {
        free(text);
        snprintf(err, errlen, "cannot read the credentials file '%s'", path);
        return -EINVAL;
    }
    r = awscreds_parse(text, (size_t)n, profile, &c->aws, &why);
    memset(text, 0, (size_t)n);
    free(text);
    if (r == -ENOENT)
        return 1;
    if (r < 0) {
        snprintf(err, errlen, "credentials file '%s': %s", path, why ? why : "malformed");
        return -EINVAL;
    }
    return 0;
}

/* Static credentials: the environment, then the shared file.  Returns 0
 * when found, 1 when there are none (the instance role is next), -EINVAL
 * with err set for a broken file. */
static int static_creds(struct s3creds *c, char *err, size_t errlen)
{
    const char *id = getenv("AWS_ACCESS_KEY_ID"), *secret = getenv("AWS_SECRET_ACCESS_KEY");
    const char *token = getenv("AWS_SESSION_TOKEN");

    if (id && *id && secret && *secret) {
        if (strlen(id) > AWS_KEY_ID_MAX || strlen(secret) > AWS_SECRET_MAX ||
            (token && strlen(token) > AWS_TOKEN_MAX)) {
            snprintf(err, errlen, "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY or AWS_SESSION_TOKEN "
                                  "is too long");
            return -EINVAL;
        }
        snprintf(c->aws.access_key_id, sizeof(c->aws.access_key_id), "%s", id);
        snprintf(c->aws.secret_access_key, sizeof(c->aws.secret_access_key), "%s", secret);
        snprintf(c->aws.session_token, sizeof(c->aws.session_token), "%s", token ? token : "");
        return 0;
    }
    return file_creds(c, err, errlen);
}

int s3creds_init(struct s3creds *c, char *err, size_t errlen)
{
    const char *v;
    size_t len;
    int r;

    *c = (struct s3creds){ .state = S3CREDS_NONE };
    r = static_creds(c, err, errlen);
    if (r < 0) {
        awscreds_wipe(&c->aws);
        return r;
    }
    if (r == 0) {
        c->state = S3CREDS_OK;
        return 0;
    }
    c->from_role = true;
    v = getenv("AWS_EC2_METADATA_DISABLED");
    if (!(v && strcasecmp(v, "true") == 0)) {
        v = getenv("AWS_EC2_METADATA_SERVICE_ENDPOINT");
        snprintf(c->imds_url, sizeof(c->imds_url), "%s", v && *v ? v : IMDS_DEFAULT);
        len = strlen(c->imds_url);
        while (len > 0 && c->imds_url[len - 1] == '/')
            c->imds_url[--len] = '\0';
    }
    return 0;
}

void s3creds_attach(struct s3creds *c, struct http *http, void (*changed)(void *arg), void *arg)
{
    char url[sizeof(c->imds_url) + 32];
    /* No renew_ms: the store never reuses a token (fetch_creds()). */
    struct imds_token_opts o = {
        .url = url,
        .ttl_header = "X-aws-ec2-metadata-token-ttl-seconds",
        .token_header = "X-aws-ec2-metadata-token",
        .ttl_s = IMDS_TOKEN_TTL_S,
        .timeout_ms = IMDS_TIMEOUT_MS,
    };

    c->http = http;
    c->changed = changed;
    c->arg = arg;
    snprintf(url, sizeof(url), "%s/latest/api/token", c->imds_url);
    imds_token_init(&c->token, http, &o);
}

void s3creds_release(struct s3creds *c)
{
    http_cancel(c->req);
    c->req = NULL;
    imds_token_release(&c->token);
    awscreds_wipe(&c->aws);
}
