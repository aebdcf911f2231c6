/* http: curl multi-socket on libevent, after curl's hiperfifo example,
 * without its globals.
 *
 * DESIGN.  One CURLM per struct http.  curl asks for a socket to be
 * watched through sock_cb(): each socket gets one libevent event, kept in
 * curl's per-socket pointer (curl_multi_assign) and replaced when the
 * wanted direction changes.  curl's timer becomes one libevent timer.
 * Every wake-up calls curl_multi_socket_action() and then drains
 * curl_multi_info_read() for finished transfers, whose callbacks run last,
 * outside any curl call, so a callback may start or cancel requests. */
#include "spot/http.h"
#include "spot/bigbuf.h"

/* curl's headers give the types and constants; the functions come from
 * libcurl loaded at run time (see load_curl), so that a spotd that watches
 * no cloud never loads libcurl and its TLS libraries, whose start-up costs
 * milliseconds of CPU and megabytes of memory. */
#define CURL_DISABLE_TYPECHECK 1
#include <curl/curl.h>
#include <dlfcn.h>
#include <errno.h>
#include <event2/event.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static struct {
    void *lib;
    unsigned users;              /* struct http alive: global init held */
    CURLcode (*global_init)(long flags);
    void (*global_cleanup)(void);
    CURL *(*easy_init)(void);
    void (*easy_cleanup)(CURL *);
    CURLcode (*easy_setopt)(CURL *, CURLoption, ...);
    CURLcode (*easy_getinfo)(CURL *, CURLINFO, ...);
    const char *(*easy_strerror)(CURLcode);
    CURLM *(*multi_init)(void);
    CURLMcode (*multi_cleanup)(CURLM *);
    CURLMcode (*multi_setopt)(CURLM *, CURLMoption, ...);
    CURLMcode (*multi_add_handle)(CURLM *, CURL *);
    CURLMcode (*multi_remove_handle)(CURLM *, CURL *);
    CURLMcode (*multi_socket_action)(CURLM *, curl_socket_t, int, int *);
    CURLMsg *(*multi_info_read)(CURLM *, int *);
    CURLMcode (*multi_assign)(CURLM *, curl_socket_t, void *);
    struct curl_slist *(*slist_append)(struct curl_slist *, const char *);
    void (*slist_free_all)(struct curl_slist *);
} cf;

/* curl.h wraps these three in macros of its own. */
#undef curl_easy_setopt
#undef curl_easy_getinfo
#undef curl_multi_setopt
#define curl_easy_init cf.easy_init
#define curl_easy_cleanup cf.easy_cleanup
#define curl_easy_setopt cf.easy_setopt
#define curl_easy_getinfo cf.easy_getinfo
#define curl_easy_strerror cf.easy_strerror
#define curl_multi_init cf.multi_init
#define curl_multi_cleanup cf.multi_cleanup
#define curl_multi_setopt cf.multi_setopt
#define curl_multi_add_handle cf.multi_add_handle
#define curl_multi_remove_handle cf.multi_remove_handle
#define curl_multi_socket_action cf.multi_socket_action
#define curl_multi_info_read cf.multi_info_read
#define curl_multi_assign cf.multi_assign
#define curl_slist_append cf.slist_append
#define curl_slist_free_all cf.slist_free_all

/* Load libcurl and run its global init, once per first user.  Returns 0,
 * or -ENOENT when libcurl cannot be loaded (the message is in err). */
static int load_curl(char *err, size_t errlen)
{
    static const struct {
        const char *name;
        size_t offset;
    } syms[] = {
#define SYM(field, name) { name, offsetof(__typeof__(cf), field) }
        SYM(global_init, "curl_global_init"),
        SYM(global_cleanup, "curl_global_cleanup"),
        SYM(easy_init, "curl_easy_init"),
        SYM(easy_cleanup, "curl_easy_cleanup"),
        SYM(easy_setopt, "curl_easy_setopt"),
        SYM(easy_getinfo, "curl_easy_getinfo"),
        SYM(easy_strerror, "curl_easy_strerror"),
        SYM(multi_init, "curl_multi_init"),
        SYM(multi_cleanup, "curl_multi_cleanup"),
        SYM(multi_setopt, "curl_multi_setopt"),
        SYM(multi_add_handle, "curl_multi_add_handle"),
        SYM(multi_remove_handle, "curl_multi_remove_handle"),
        SYM(multi_socket_action, "curl_multi_socket_action"),
        SYM(multi_info_read, "curl_multi_info_read"),
        SYM(multi_assign, "curl_multi_assign"),
        SYM(slist_append, "curl_slist_append"),
        SYM(slist_free_all, "curl_slist_free_all"),
#undef SYM
    };

    if (cf.users > 0) {
        cf.users++;
        return 0;
    }
    if (!cf.lib) {
        cf.lib = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
        if (!cf.lib) {
            snprintf(err, errlen, "cannot load libcurl (%s); install the libcurl4 package",
                     dlerror());
            return -ENOENT;
        }
        for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
            void *f = dlsym(cf.lib, syms[i].name);
            if (!f) {
                snprintf(err, errlen, "libcurl lacks %s; it is too old", syms[i].name);
                dlclose(cf.lib);
                cf.lib = NULL;
                return -ENOENT;
            }
            memcpy((char *)&cf + syms[i].offset, &f, sizeof(f));
        }
    }
    if (cf.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        snprintf(err, errlen, "libcurl's global initialisation failed");
        return -EIO;
    }
    cf.users = 1;
    return 0;
}

/* libcurl stays loaded: unloading a library with TLS state is not safe. */
static void unload_curl(void)
{
    if (cf.users > 0 && --cf.users == 0)
        cf.global_cleanup();
}

#define DEFAULT_MAX_BODY (64 * 1024)

struct http {
    struct event_base *base;
    CURLM *multi;
    struct event *timer;
    struct http_req *reqs;      /* in flight, doubly linked */
};

struct http_req {
    struct http *h;
    CURL *easy;
    struct curl_slist *headers;
    http_done_fn done;
    void *arg;
    char *body;                 /* response, terminated */
    size_t len, cap, max;
    bool too_big;
    char *etag;
    char *req_body;             /* our copy of the request body */
    const char *upload;         /* borrowed PUT body, and how much has been sent */
    size_t upload_len, upload_off;
    char errbuf[CURL_ERROR_SIZE];
    struct http_req *prev, *next;
};

/* The event watching one socket; curl's socket pointer. */
struct sock {
    struct event *ev;
    int what;
};

static void req_free(struct http_req *r)
{
    struct http *h = r->h;

    if (r->prev)
        r->prev->next = r->next;
    else
        h->reqs = r->next;
    if (r->next)
        r->next->prev = r->prev;
    curl_multi_remove_handle(h->multi, r->easy);
    curl_easy_cleanup(r->easy);
    curl_slist_free_all(r->headers);
    bigbuf_free(r->body);
    free(r->etag);
    free(r->req_body);
    free(r);
}

static int map_error(CURLcode c)
{
    switch (c) {
    case CURLE_OK:
        return 0;
    case CURLE_OPERATION_TIMEDOUT:
        return -ETIMEDOUT;
    case CURLE_COULDNT_CONNECT:
        return -ECONNREFUSED;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
        return -EHOSTUNREACH;
    case CURLE_WRITE_ERROR:
        return -EMSGSIZE; /* only write_cb fails a write */
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
        return -ECONNRESET;
    /* The server's certificate was refused: a CA we were not given, a
     * host name it does not name, expired (since 7.62 all are code 60).
     * No retry changes that. */
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_INVALIDCERTSTATUS:
        return -EKEYREJECTED;
    /* Our own TLS setup cannot be used: the CA file, a CRL, a client
     * certificate, a cipher list or an engine. */
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CRL_BADFILE:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_ENGINE_NOTFOUND:
    case CURLE_SSL_ENGINE_SETFAILED:
    case CURLE_SSL_ENGINE_INITFAILED:
        return -ENOKEY;
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_URL_MALFORMAT:
    case CURLE_NOT_BUILT_IN:
        return -EPROTONOSUPPORT;
    /* CURLE_SSL_CONNECT_ERROR stays -EIO, retried: a handshake cut short
     * by a reset or an overloaded TLS front lands there (and so, alas,
     * does https:// to a plain-http port). */
    default:
        return -EIO;
    }
}

static void finish_transfers(struct http *h)
{
    CURLMsg *msg;
    int left;

    while ((msg = curl_multi_info_read(h->multi, &left))) {
        struct http_req *r = NULL;
        struct http_result res;
        double total = 0;

        if (msg->msg != CURLMSG_DONE)
            continue;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&r);
        memset(&res, 0, sizeof(res));
        res.error = map_error(msg->data.result);
        if (r->too_big)
            res.error = -EMSGSIZE;
        res.errmsg = res.error ? (r->errbuf[0] ? r->errbuf : curl_easy_strerror(msg->data.result))
                               : "";
        curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &res.status);
        curl_easy_getinfo(r->easy, CURLINFO_TOTAL_TIME, &total);
        res.total_s = total;
        res.body = r->body ? r->body : "";
        res.len = r->len;
        res.etag = r->etag;
        res.req = r;
        /* Out of the list before the callback, so it can start others. */
        curl_multi_remove_handle(h->multi, r->easy);
        r->done(r->arg, &res);
        req_free(r);
    }
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct http *h = arg;
    int running;

    curl_multi_socket_action(h->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    finish_transfers(h);
}

static void on_socket(evutil_socket_t fd, short what, void *arg)
{
    struct http *h = arg;
    int running, flags = 0;

    if (what & EV_READ)
        flags |= CURL_CSELECT_IN;
    if (what & EV_WRITE)
        flags |= CURL_CSELECT_OUT;
    curl_multi_socket_action(h->multi, fd, flags, &running);
    /* No evtimer_del() when nothing runs, unlike hiperfifo: a callback in
     * finish_transfers() may just have started a request and its timer. */
    finish_transfers(h);
}

static int timer_cb(CURLM *multi, long timeout_ms, void *arg)
{
    struct http *h = arg;
    struct timeval tv;

    if (timeout_ms < 0) {
        evtimer_del(h->timer);
        return 0;
    }
    /* Even timeout 0 goes through the loop: curl must not be re-entered
     * from inside its own callback. */
    tv.tv_sec = timeout_ms / 1000;
    tv.tv_usec = (timeout_ms % 1000) * 1000;
    evtimer_add(h->timer, &tv);
    return 0;
}

static int sock_cb(CURL *easy, curl_socket_t s, int what, void *arg, void *sockp)
{
    struct http *h = arg;
    struct sock *sk = sockp;
    short kind;

    if (what == CURL_POLL_REMOVE) {
        if (sk) {
            event_free(sk->ev);
            free(sk);
            curl_multi_assign(h->multi, s, NULL);
        }
        return 0;
    }
    kind = (short)(EV_PERSIST | ((what & CURL_POLL_IN) ? EV_READ : 0) |
                   ((what & CURL_POLL_OUT) ? EV_WRITE : 0));
    if (!sk) {
        sk = calloc(1, sizeof(*sk));
        if (!sk)
            return -1;
        curl_multi_assign(h->multi, s, sk);
    } else if (sk->what == what) {
        return 0;
    } else {
        event_free(sk->ev);
    }
    sk->what = what;
    sk->ev = event_new(h->base, s, kind, on_socket, h);
    if (!sk->ev || event_add(sk->ev, NULL) < 0)
        return -1;
    return 0;
}

static size_t write_cb(char *data, size_t size, size_t nmemb, void *arg)
{
    struct http_req *r = arg;
    size_t n = size * nmemb;

    if (r->len + n > r->max) {
        r->too_big = true;
        return 0; /* curl fails the transfer with CURLE_WRITE_ERROR */
    }
    if (r->len + n + 1 > r->cap) {
        size_t cap = r->cap ? r->cap : 1024;
        while (cap < r->len + n + 1)
            cap *= 2;
        char *b = realloc(r->body, cap);
        if (!b)
            return 0;
        r->body = b;
        r->cap = cap;
    }
    memcpy(r->body + r->len, data, n);
    r->len += n;
    r->body[r->len] = '\0';
    return n;
}

static size_t read_cb(char *buf, size_t size, size_t nmemb, void *arg)
{
    struct http_req *r = arg;
    size_t n = size * nmemb;

    if (n > r->upload_len - r->upload_off)
        n = r->upload_len - r->upload_off;
    memcpy(buf, r->upload + r->upload_off, n);
    r->upload_off += n;
    return n;
}

/* curl rewinds a borrowed body to send it again (a redirect, a reused
 * connection that closed under it, a 100-continue refused). */
static int seek_cb(void *arg, curl_off_t offset, int origin)
{
    struct http_req *r = arg;

    if (origin != SEEK_SET || offset < 0 || (size_t)offset > r->upload_len)
        return CURL_SEEKFUNC_FAIL;
    r->upload_off = (size_t)offset;
    return CURL_SEEKFUNC_OK;
}

/* Make room for a body whose length the server announced, so a large one
 * is not copied by repeated doubling.  A lying length costs at most the
 * cap. */
static void reserve(struct http_req *r, const char *v, size_t n)
{
    char num[24];
    unsigned long long len;
    char *end;
    void *b;

    if (n == 0 || n >= sizeof(num) || r->body)
        return;
    memcpy(num, v, n);
    num[n] = '\0';
    errno = 0;
    len = strtoull(num, &end, 10);
    if (errno || *end || num[0] < '0' || num[0] > '9' || len == 0 || len > r->max)
        return;
    /* A chunk's body starts on a page (a restore writes it with O_DIRECT,
     * snap_fetch.c) and on huge pages where it can. */
    if (!(b = bigbuf_alloc(len + 1)))
        return;
    r->body = b;
    r->cap = len + 1;
}

/* Keep the ETag, and size the body buffer from Content-Length; every
 * other header is ignored. */
static size_t header_cb(char *data, size_t size, size_t nmemb, void *arg)
{
    struct http_req *r = arg;
    size_t n = size * nmemb, v;

    if (n >= 5 && strncasecmp(data, "HTTP/", 5) == 0) {
        /* A new response (after a 100 Continue, or a retry): forget the
         * headers of the one before. */
        free(r->etag);
        r->etag = NULL;
        return n;
    }
    if (n > 15 && strncasecmp(data, "Content-Length:", 15) == 0) {
        for (v = 15; v < n && (data[v] == ' ' || data[v] == '\t'); v++)
            ;
        while (n > v && (data[n - 1] == '\r' || data[n - 1] == '\n' || data[n - 1] == ' '))
            n--;
        reserve(r, data + v, n - v);
        return size * nmemb;
    }

    if (n > 5 && strncasecmp(data, "ETag:", 5) == 0) {
        for (v = 5; v < n && (data[v] == ' ' || data[v] == '\t'); v++)
            ;
        while (n > v && (data[n - 1] == '\r' || data[n - 1] == '\n' || data[n - 1] == ' '))
            n--;
        free(r->etag);
        r->etag = strndup(data + v, n - v);
    }
    return size * nmemb;
}

struct http_req *http_start(struct http *h, const struct http_req_opts *o, http_done_fn done,
                            void *arg)
{
    struct http_req *r = calloc(1, sizeof(*r));
    const char *method = o->method ? o->method : "GET";
    CURLcode c = CURLE_OK;

    if (!r)
        return NULL;
    r->h = h;
    r->done = done;
    r->arg = arg;
    r->max = o->max_body ? o->max_body : DEFAULT_MAX_BODY;
    r->easy = curl_easy_init();
    if (!r->easy)
        goto out_free;
    for (const char *const *hd = o->headers; hd && *hd; hd++) {
        struct curl_slist *l = curl_slist_append(r->headers, *hd);
        if (!l)
            goto out_free;
        r->headers = l;
    }
    /* An empty Expect: keeps curl from waiting for 100-continue.  Not on
     * signed requests: curl 7.88 would sign the header it then leaves
     * out, and the server would refuse the signature. */
    if (o->body && !o->aws_sigv4) {
        struct curl_slist *l = curl_slist_append(r->headers, "Expect:");
        if (!l)
            goto out_free;
        r->headers = l;
        r->req_body = malloc(o->body_len ? o->body_len : 1);
        if (!r->req_body)
            goto out_free;
        memcpy(r->req_body, o->body, o->body_len);
    }

    c |= curl_easy_setopt(r->easy, CURLOPT_URL, o->url);
    c |= curl_easy_setopt(r->easy, CURLOPT_PRIVATE, r);
    c |= curl_easy_setopt(r->easy, CURLOPT_ERRORBUFFER, r->errbuf);
    c |= curl_easy_setopt(r->easy, CURLOPT_NOSIGNAL, 1L);
    c |= curl_easy_setopt(r->easy, CURLOPT_WRITEFUNCTION, write_cb);
    c |= curl_easy_setopt(r->easy, CURLOPT_WRITEDATA, r);
    c |= curl_easy_setopt(r->easy, CURLOPT_HEADERFUNCTION, header_cb);
    c |= curl_easy_setopt(r->easy, CURLOPT_HEADERDATA, r);
    c |= curl_easy_setopt(r->easy, CURLOPT_HTTPHEADER, r->headers);
    c |= curl_easy_setopt(r->easy, CURLOPT_PROTOCOLS_STR, "http,https");
    if (!o->proxy)
        c |= curl_easy_setopt(r->easy, CURLOPT_NOPROXY, "*");
    if (o->timeout_ms > 0)
        c |= curl_easy_setopt(r->easy, CURLOPT_TIMEOUT_MS, o->timeout_ms);
    if (o->connect_timeout_ms > 0)
        c |= curl_easy_setopt(r->easy, CURLOPT_CONNECTTIMEOUT_MS, o->connect_timeout_ms);
    if (strcmp(method, "GET") != 0)
        c |= curl_easy_setopt(r->easy, CURLOPT_CUSTOMREQUEST, method);
    if (o->upload) {
        r->upload = o->upload;
        r->upload_len = o->upload_len;
        c |= curl_easy_setopt(r->easy, CURLOPT_UPLOAD, 1L);
        c |= curl_easy_setopt(r->easy, CURLOPT_READFUNCTION, read_cb);
        c |= curl_easy_setopt(r->easy, CURLOPT_READDATA, r);
        c |= curl_easy_setopt(r->easy, CURLOPT_SEEKFUNCTION, seek_cb);
        c |= curl_easy_setopt(r->easy, CURLOPT_SEEKDATA, r);
        c |= curl_easy_setopt(r->easy, CURLOPT_INFILESIZE_LARGE, (curl_off_t)o->upload_len);
    }
    if (o->aws_sigv4) {
        c |= curl_easy_setopt(r->easy, CURLOPT_AWS_SIGV4, o->aws_sigv4);
        c |= curl_easy_setopt(r->easy, CURLOPT_USERNAME, o->username);
        c |= curl_easy_setopt(r->easy, CURLOPT_PASSWORD, o->password);
    }
    if (o->ca_file)
        c |= curl_easy_setopt(r->easy, CURLOPT_CAINFO, o->ca_file);
    if (o->low_speed_time_s > 0) {
        c |= curl_easy_setopt(r->easy, CURLOPT_LOW_SPEED_LIMIT, 1024L);
        c |= curl_easy_setopt(r->easy, CURLOPT_LOW_SPEED_TIME, o->low_speed_time_s);
    }
    if (o->body) {
        c |= curl_easy_setopt(r->easy, CURLOPT_POSTFIELDS, r->req_body);
        c |= curl_easy_setopt(r->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)o->body_len);
    }
    if (c != CURLE_OK)
        goto out_free;

    r->next = h->reqs;
    if (h->reqs)
        h->reqs->prev = r;
    h->reqs = r;
    if (curl_multi_add_handle(h->multi, r->easy) != CURLM_OK) {
        req_free(r);
        return NULL;
    }
    return r;

out_free:
    if (r->easy)
        curl_easy_cleanup(r->easy);
    curl_slist_free_all(r->headers);
    free(r->req_body);
    free(r);
    return NULL;
}

char *http_take_body(const struct http_result *res)
{
    struct http_req *r = res->req;
    char *b = r->body;

    if (!b)
        return calloc(1, 1);
    r->body = NULL;
    r->len = r->cap = 0;
    return b;
}

void http_set_max_host_connections(struct http *h, long n)
{
    curl_multi_setopt(h->multi, CURLMOPT_MAX_HOST_CONNECTIONS, n);
}

void http_cancel(struct http_req *r)
{
    if (r)
        req_free(r);
}

struct http *http_new(struct event_base *base, char *err, size_t errlen)
{
    struct http *h;

    if (load_curl(err, errlen) < 0)
        return NULL;
    h = calloc(1, sizeof(*h));
    if (!h) {
        unload_curl();
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    h->base = base;
    h->multi = curl_multi_init();
    h->timer = evtimer_new(base, on_timer, h);
    if (!h->multi || !h->timer) {
        snprintf(err, errlen, "out of memory");
        return http_free(h);
    }
    curl_multi_setopt(h->multi, CURLMOPT_SOCKETFUNCTION, sock_cb);
    curl_multi_setopt(h->multi, CURLMOPT_SOCKETDATA, h);
    curl_multi_setopt(h->multi, CURLMOPT_TIMERFUNCTION, timer_cb);
    curl_multi_setopt(h->multi, CURLMOPT_TIMERDATA, h);
    return h;
}

struct http *http_free(struct http *h)
{
    if (!h)
        return NULL;
    while (h->reqs)
        req_free(h->reqs);
    if (h->multi)
        curl_multi_cleanup(h->multi);
    if (h->timer)
        event_free(h->timer);
    free(h);
    unload_curl();
    return NULL;
}
