/* peer: authenticated connections between the nodes of a world (peer.h). */
#include "peer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include "spot/log.h"
#include "spot/notice.h"
#include "spot/parse.h"

#define NONCE_LEN 16
#define BACKOFF_MIN_MS 200
#define BACKOFF_MAX_MS 5000

enum hs { HS_HELLO_SENT, HS_ACK_WAIT, HS_UP };

struct conn {
    struct peers *p;
    struct bufferevent *bev;
    bool dialer;
    enum hs hs;
    int64_t rank;                  /* -1 until its hello */
    uint8_t nonce[NONCE_LEN];      /* ours, to be echoed */
    uint64_t seq;                  /* of our last frame */
    struct frame_replay replay;
    int64_t last_rx_ms, since_ms;
    struct conn *next;
};

struct slot {
    struct peers *p;
    uint32_t rank;
    bool has_addr;
    struct sockaddr_storage ss;
    int sslen;
    char addr[80];
    struct conn *up;               /* the connection that is up, if any */
    struct conn *dialing;
    struct event *redial;
    uint64_t backoff_ms;
};

struct peers {
    struct peers_opts o;
    struct frame_key key;
    char *job;
    struct evconnlistener *listener;
    int port;
    struct slot *slots;
    struct conn *conns;            /* every connection, up or not */
    struct event *tick;
    uint64_t refused;
    int64_t last_warn_ms;
    unsigned suppressed;
};

static void conn_close(struct conn *c, const char *why);

static void warn_refused(struct peers *p, const struct conn *c, const char *what)
{
    int64_t now = notice_now_ms();

    p->refused++;
    /* At most one line a second: a flood of garbage must not flood the log. */
    if (now - p->last_warn_ms < 1000) {
        p->suppressed++;
        return;
    }
    if (c->rank >= 0)
        log_msg(LOGL_WARN, "peer rank %lld: %s; connection closed (%u more refused since the "
                "last line)", (long long)c->rank, what, p->suppressed);
    else
        log_msg(LOGL_WARN, "peer connection: %s; connection closed (%u more refused since the "
                "last line)", what, p->suppressed);
    p->last_warn_ms = now;
    p->suppressed = 0;
}

static void hex(const uint8_t *b, size_t n, char *out)
{
    static const char d[] = "0123456789abcdef";

    for (size_t i = 0; i < n; i++) {
        out[2 * i] = d[b[i] >> 4];
        out[2 * i + 1] = d[b[i] & 15];
    }
    out[2 * n] = '\0';
}

static int send_obj(struct conn *c, cJSON *msg)
{
    static uint8_t buf[FRAME_MAX];
    char *text;
    int n;

    if (!cJSON_GetObjectItemCaseSensitive(msg, "v"))
        cJSON_AddNumberToObject(msg, "v", 1);
    text = cJSON_PrintUnformatted(msg);
    if (!text)
        return -ENOMEM;
    n = frame_encode(&c->p->key, ++c->seq, notice_now_ms(), text, strlen(text), buf,
                     sizeof(buf));
    free(text);
    if (n < 0)
        return n;
    if (bufferevent_write(c->bev, buf, (size_t)n) < 0)
        return -EIO;
    /* Out now, not at the loop's next turn: a coordinator's commit must
     * not wait behind its own bookkeeping of the commit.  What the socket
     * does not take stays queued for the bufferevent. */
    if (c->hs == HS_UP)
        evbuffer_write(bufferevent_get_output(c->bev), bufferevent_getfd(c->bev));
    return 0;
}

static int send_hello(struct conn *c, const char *echo)
{
    char nonce[2 * NONCE_LEN + 1];
    cJSON *m = cJSON_CreateObject();
    int r;

    if (!m)
        return -ENOMEM;
    RAND_bytes(c->nonce, NONCE_LEN);
    hex(c->nonce, NONCE_LEN, nonce);
    cJSON_AddStringToObject(m, "type", "hello");
    cJSON_AddStringToObject(m, "job", c->p->job);
    cJSON_AddNumberToObject(m, "rank", c->p->o.rank);
    cJSON_AddStringToObject(m, "nonce", nonce);
    if (echo)
        cJSON_AddStringToObject(m, "echo", echo);
    r = send_obj(c, m);
    cJSON_Delete(m);
    return r;
}

static bool echoes(const struct conn *c, const cJSON *m)
{
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(m, "echo");
    char want[2 * NONCE_LEN + 1];

    hex(c->nonce, NONCE_LEN, want);
    return cJSON_IsString(e) && strcmp(e->valuestring, want) == 0;
}

static void went_up(struct conn *c)
{
    struct slot *s = &c->p->slots[c->rank];

    if (s->up && s->up != c)
        conn_close(s->up, "replaced by a new connection");
    c->hs = HS_UP;
    s->up = c;
    s->backoff_ms = BACKOFF_MIN_MS;
    log_msg(LOGL_INFO, "peer rank %lld is up (%s)", (long long)c->rank,
            c->dialer ? "dialed" : "accepted");
    if (c->p->o.on_up)
        c->p->o.on_up(c->p->o.arg, (uint32_t)c->rank);
}

/* The handshake's messages.  Returns 0, or -1 with *why set. */
static int handshake(struct conn *c, const cJSON *m, const char *type, const char **why)
{
    struct peers *p = c->p;
    const cJSON *job = cJSON_GetObjectItemCaseSensitive(m, "job");
    const cJSON *rank = cJSON_GetObjectItemCaseSensitive(m, "rank");
    const cJSON *nonce = cJSON_GetObjectItemCaseSensitive(m, "nonce");

    if (c->dialer && c->hs == HS_HELLO_SENT && strcmp(type, "hello") == 0) {
        if (!echoes(c, m)) {
            *why = "its hello does not echo our nonce";
            return -1;
        }
    } else if (!c->dialer && c->rank < 0 && strcmp(type, "hello") == 0) {
        /* fine: the first frame of an accepted connection */
    } else if (!c->dialer && c->hs == HS_ACK_WAIT && strcmp(type, "ack") == 0) {
        if (!echoes(c, m)) {
            *why = "its ack does not echo our nonce";
            return -1;
        }
        went_up(c);
        return 0;
    } else {
        *why = "a message out of the handshake's order";
        return -1;
    }
    if (!cJSON_IsString(job) || strcmp(job->valuestring, p->job) != 0) {
        *why = "a hello for another job";
        return -1;
    }
    if (!cJSON_IsNumber(rank) || rank->valuedouble < 0 || rank->valuedouble >= p->o.world_size ||
        rank->valuedouble != (double)(uint32_t)rank->valuedouble ||
        (uint32_t)rank->valuedouble == p->o.rank ||
        (c->dialer ? (int64_t)rank->valuedouble != c->rank
                   : (uint32_t)rank->valuedouble > p->o.rank)) {
        *why = "a hello with a rank that does not fit";
        return -1;
    }
    if (!cJSON_IsString(nonce) || strlen(nonce->valuestring) != 2 * NONCE_LEN) {
        *why = "a hello without a nonce";
        return -1;
    }
    if (c->dialer) {
        cJSON *ack = cJSON_CreateObject();
        int r;

        cJSON_AddStringToObject(ack, "type", "ack");
        cJSON_AddStringToObject(ack, "echo", nonce->valuestring);
        r = send_obj(c, ack);
        cJSON_Delete(ack);
        if (r < 0) {
            *why = "cannot answer";
            return -1;
        }
        went_up(c);
        return 0;
    }
    c->rank = (int64_t)rank->valuedouble;
    if (send_hello(c, nonce->valuestring) < 0) {
        *why = "cannot answer";
        return -1;
    }
    c->hs = HS_ACK_WAIT;
    return 0;
}

/* One frame's body.  Returns 0, or -1 after closing c. */
static int on_body(struct conn *c, const struct frame *f)
{
    cJSON *m = cJSON_ParseWithLength(f->body, f->body_len);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, "v");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(m, "type");
    const char *why = NULL;

    if (!cJSON_IsObject(m) || !cJSON_IsNumber(v) || v->valuedouble != 1 || !cJSON_IsString(t)) {
        why = "a frame whose body is not a version 1 message";
    } else if (c->hs != HS_UP) {
        handshake(c, m, t->valuestring, &why);
    } else if (strcmp(t->valuestring, "hello") == 0 || strcmp(t->valuestring, "ack") == 0) {
        why = "a second handshake";
    } else if (strcmp(t->valuestring, "heartbeat") != 0 && c->p->o.on_msg) {
        c->p->o.on_msg(c->p->o.arg, (uint32_t)c->rank, f->body, f->body_len);
    }
    cJSON_Delete(m);
    if (why) {
        warn_refused(c->p, c, why);
        conn_close(c, why);
        return -1;
    }
    return 0;
}

static void on_read(struct bufferevent *bev, void *arg)
{
    struct conn *c = arg;
    struct evbuffer *in = bufferevent_get_input(bev);

    for (;;) {
        size_t len = evbuffer_get_length(in);
        size_t want = len < FRAME_MAX ? len : FRAME_MAX;
        const uint8_t *data = len ? evbuffer_pullup(in, (ev_ssize_t)want) : NULL;
        struct frame f;
        const char *why = NULL;
        int r;

        if (!data)
            return;
        r = frame_decode(&c->p->key, data, want, &f);
        if (r == 0)
            return;
        if (r == -EPROTO)
            why = "not a frame of the peer protocol";
        else if (r == -EMSGSIZE)
            why = "a frame over 64 KiB";
        else if (r == -EBADMSG)
            why = "a frame with a wrong MAC (another world key, or altered)";
        else if ((r = frame_replay_check(&c->replay, &f, notice_now_ms(),
                                         (int64_t)c->p->o.clock_window_ms)) == -EALREADY)
            why = "a replayed frame (its sequence number is not new)";
        else if (r == -ETIME)
            why = "a frame whose clock is outside the window (replayed, or clocks apart)";
        if (why) {
            warn_refused(c->p, c, why);
            conn_close(c, why);
            return;
        }
        c->last_rx_ms = notice_now_ms();
        if (on_body(c, &f) < 0)
            return;
        evbuffer_drain(in, f.size);
    }
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
    struct conn *c = arg;

    if (what & BEV_EVENT_CONNECTED) {
        if (send_hello(c, NULL) < 0)
            conn_close(c, "cannot send hello");
        return;
    }
    conn_close(c, what & BEV_EVENT_EOF ? "closed by the peer"
                                       : evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
}

/* Frames are small and answered at once: without this, Nagle holds a
 * frame sent just after another until the peer's delayed ACK (40 ms), and
 * a round's commit waited that long behind its saved. */
static void no_delay(struct bufferevent *bev)
{
    evutil_socket_t fd = bufferevent_getfd(bev);
    int one = 1;

    if (fd >= 0)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static struct conn *conn_new(struct peers *p, evutil_socket_t fd, bool dialer, int64_t rank)
{
    struct conn *c = calloc(1, sizeof(*c));

    if (!c)
        return NULL;
    c->bev = bufferevent_socket_new(p->o.base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (!c->bev) {
        free(c);
        return NULL;
    }
    c->p = p;
    c->dialer = dialer;
    c->rank = rank;
    c->last_rx_ms = c->since_ms = notice_now_ms();
    bufferevent_setcb(c->bev, on_read, NULL, on_event, c);
    bufferevent_setwatermark(c->bev, EV_READ, 0, FRAME_MAX * 2);
    no_delay(c->bev);
    bufferevent_enable(c->bev, EV_READ | EV_WRITE);
    c->next = p->conns;
    p->conns = c;
    return c;
}

static void schedule_dial(struct peers *p, uint32_t rank)
{
    struct slot *s = &p->slots[rank];
    struct timeval tv = { (time_t)(s->backoff_ms / 1000),
                          (suseconds_t)(s->backoff_ms % 1000) * 1000 };

    evtimer_add(s->redial, &tv);
    s->backoff_ms = s->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : s->backoff_ms * 2;
}

static void conn_close(struct conn *c, const char *why)
{
    struct peers *p = c->p;
    bool was_up = c->hs == HS_UP;
    int64_t rank = c->rank;

    for (struct conn **pp = &p->conns; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    if (rank >= 0) {
        struct slot *s = &p->slots[rank];
        if (s->up == c)
            s->up = NULL;
        if (s->dialing == c)
            s->dialing = NULL;
    }
    bufferevent_free(c->bev);
    free(c);
    if (was_up) {
        log_msg(LOGL_WARN, "peer rank %lld is down: %s", (long long)rank, why);
        if (p->o.on_down)
            p->o.on_down(p->o.arg, (uint32_t)rank, why);
    }
    if (rank > (int64_t)p->o.rank && p->slots[rank].has_addr && !p->slots[rank].up &&
        !evtimer_pending(p->slots[rank].redial, NULL))
        schedule_dial(p, (uint32_t)rank);
}

static void on_redial(evutil_socket_t fd, short what, void *arg);

static void dial(struct peers *p, uint32_t rank)
{
    struct slot *s = &p->slots[rank];
    struct conn *c;

    if (s->up || s->dialing || !s->has_addr)
        return;
    if (!(c = conn_new(p, -1, true, rank))) {
        schedule_dial(p, rank);
        return;
    }
    s->dialing = c;
    if (bufferevent_socket_connect(c->bev, (struct sockaddr *)&s->ss, s->sslen) < 0)
        conn_close(c, "cannot connect");
    else
        no_delay(c->bev);
}

static void on_redial(evutil_socket_t fd, short what, void *arg)
{
    struct slot *s = arg;

    dial(s->p, s->rank);
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int len,
                      void *arg)
{
    struct peers *p = arg;

    if (!conn_new(p, fd, false, -1))
        evutil_closesocket(fd);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    struct peers *p = arg;
    int64_t now = notice_now_ms();
    struct conn *c = p->conns, *next;

    for (; c; c = next) {
        next = c->next;
        if (c->hs != HS_UP) {
            if (now - c->since_ms > (int64_t)p->o.dead_ms) {
                warn_refused(p, c, "no handshake in time");
                conn_close(c, "no handshake in time");
            }
            continue;
        }
        if (now - c->last_rx_ms > (int64_t)p->o.dead_ms) {
            char why[96];
            snprintf(why, sizeof(why), "silent for %lld ms", (long long)(now - c->last_rx_ms));
            conn_close(c, why);
            continue;
        }
        {
            cJSON *hb = cJSON_CreateObject();
            cJSON_AddStringToObject(hb, "type", "heartbeat");
            send_obj(c, hb);
            cJSON_Delete(hb);
        }
    }
}

/* ---- the API --------------------------------------------------------------- */

int peers_listen(struct peers *p, const char *addr, char *err, size_t errlen)
{
    struct sockaddr_storage ss;
    int len = sizeof(ss);

    if (parse_sockaddr(addr, &ss, &len) < 0) {
        snprintf(err, errlen, "invalid listen address '%s': expected ADDR:PORT, numeric "
                 "(10.0.0.5:7070, [::1]:7070)", addr);
        return -EINVAL;
    }
    p->listener = evconnlistener_new_bind(p->o.base, on_accept, p,
                                          LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE |
                                              LEV_OPT_CLOSE_ON_EXEC,
                                          64, (struct sockaddr *)&ss, len);
    if (!p->listener) {
        snprintf(err, errlen, "cannot listen on '%s': %s; check --listen (is the port in use?)",
                 addr, strerror(errno));
        return -errno;
    }
    {
        struct sockaddr_storage bound;
        socklen_t bl = sizeof(bound);
        evutil_socket_t fd = evconnlistener_get_fd(p->listener);

        if (getsockname(fd, (struct sockaddr *)&bound, &bl) == 0)
            p->port = ntohs(bound.ss_family == AF_INET6
                                ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                : ((struct sockaddr_in *)&bound)->sin_port);
    }
    return 0;
}

int peers_port(const struct peers *p)
{
    return p->port;
}

int peers_set_addr(struct peers *p, uint32_t rank, const char *addr, char *err, size_t errlen)
{
    struct slot *s;
    int len;

    if (rank >= p->o.world_size || rank == p->o.rank) {
        snprintf(err, errlen, "rank %u is not a peer of rank %u in a world of %u", rank,
                 p->o.rank, p->o.world_size);
        return -EINVAL;
    }
    s = &p->slots[rank];
    len = sizeof(s->ss);
    /* (sin_port and sin6_port are at the same place) */
    if (parse_sockaddr(addr, &s->ss, &len) < 0 ||
        ntohs(((struct sockaddr_in *)&s->ss)->sin_port) == 0) {
        snprintf(err, errlen, "invalid address '%s' for rank %u: expected ADDR:PORT, numeric",
                 addr, rank);
        return -EINVAL;
    }
    s->sslen = len;
    s->has_addr = true;
    snprintf(s->addr, sizeof(s->addr), "%s", addr);
    if (rank > p->o.rank)
        dial(p, rank);
    return 0;
}

int peers_send(struct peers *p, uint32_t rank, cJSON *msg)
{
    if (rank >= p->o.world_size || !p->slots[rank].up)
        return -ENOTCONN;
    return send_obj(p->slots[rank].up, msg);
}

bool peers_up(const struct peers *p, uint32_t rank)
{
    return rank < p->o.world_size && p->slots[rank].up != NULL;
}

uint64_t peers_refused(const struct peers *p)
{
    return p->refused;
}

struct peers *peers_new(const struct peers_opts *o, char *err, size_t errlen)
{
    struct peers *p = calloc(1, sizeof(*p));
    struct timeval tv;

    if (!p) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    p->o = *o;
    if (!p->o.heartbeat_ms)
        p->o.heartbeat_ms = 1000;
    if (!p->o.dead_ms)
        p->o.dead_ms = 5000;
    if (!p->o.clock_window_ms)
        p->o.clock_window_ms = 30000;
    p->key = *o->key;
    if (o->world_size == 0 || o->world_size > PEER_RANKS_MAX || o->rank >= o->world_size) {
        snprintf(err, errlen, "rank %u does not fit a world of %u (at most %d)", o->rank,
                 o->world_size, PEER_RANKS_MAX);
        free(p);
        return NULL;
    }
    p->job = strdup(o->job);
    p->slots = calloc(o->world_size, sizeof(*p->slots));
    p->tick = event_new(o->base, -1, EV_PERSIST, on_tick, p);
    if (!p->job || !p->slots || !p->tick) {
        snprintf(err, errlen, "out of memory");
        return peers_free(p);
    }
    for (uint32_t r = 0; r < o->world_size; r++) {
        p->slots[r].p = p;
        p->slots[r].rank = r;
        p->slots[r].backoff_ms = BACKOFF_MIN_MS;
        if (!(p->slots[r].redial = evtimer_new(o->base, on_redial, &p->slots[r]))) {
            snprintf(err, errlen, "out of memory");
            return peers_free(p);
        }
    }
    tv = (struct timeval){ (time_t)(p->o.heartbeat_ms / 1000),
                           (suseconds_t)(p->o.heartbeat_ms % 1000) * 1000 };
    event_add(p->tick, &tv);
    return p;
}

struct peers *peers_free(struct peers *p)
{
    if (!p)
        return NULL;
    while (p->conns) {
        struct conn *c = p->conns;
        p->conns = c->next;
        bufferevent_free(c->bev);
        free(c);
    }
    if (p->listener)
        evconnlistener_free(p->listener);
    if (p->tick)
        event_free(p->tick);
    for (uint32_t r = 0; p->slots && r < p->o.world_size; r++)
        if (p->slots[r].redial)
            event_free(p->slots[r].redial);
    free(p->slots);
    free(p->job);
    memset(&p->key, 0, sizeof(p->key));
    free(p);
    return NULL;
}
