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
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include "spot/log.h"
#include "spot/notice.h"
#include "spot/parse.h"

#define BACKOFF_MIN_MS 200
#define BACKOFF_MAX_MS 5000
/* A connection that stayed up this long starts the next redial from
 * BACKOFF_MIN_MS; one cut sooner (a relay that lets handshakes through and
 * cuts them) keeps backing off, so that it cannot make us dial, and log
 * "up" and "down", as fast as it likes. */
#define BACKOFF_RESET_MS 10000
/* Accepted connections whose handshake is not done (no key needed to open
 * one): at most PENDING_PER_SOURCE from one source (an IPv4 address, an
 * IPv6 /64) and PENDING_MAX in all (a quarter of the descriptor limit when
 * that is less); over either, the slowest goes first.  A handshake not
 * done in HANDSHAKE_MS (dead_ms when shorter) closes the connection. */
#define PENDING_PER_SOURCE 8
#define PENDING_MAX 64
#define HANDSHAKE_MS 3000
/* accept() failed (out of descriptors): the listener rests this long
 * instead of spinning on a socket that stays readable. */
#define ACCEPT_PAUSE_MS 1000
/* A line a remote party can cause: at most one a second of each kind. */
#define WARN_EVERY_MS 1000

enum hs {
    HS_HELLO_SENT,                 /* dialer: our hello is out, the acceptor's awaited */
    HS_HELLO_WAIT,                 /* acceptor: the dialer's hello awaited */
    HS_ACK_WAIT,                   /* acceptor: our hello is out, the dialer's ack awaited */
    HS_UP,
};

struct conn {
    struct peers *p;
    struct bufferevent *bev;
    bool dialer;
    enum hs hs;
    int64_t rank;                  /* -1 until its hello */
    uint8_t nonce[FRAME_NONCE_LEN];    /* ours, to be echoed */
    struct frame_key tx, rx;       /* what our frames and the peer's are sealed with */
    uint64_t seq;                  /* of our last frame */
    struct frame_replay replay;
    bool heard;                    /* some bytes came */
    struct sockaddr_storage from;  /* accepted: the peer's address */
    int64_t last_rx_ms, since_ms, up_ms;   /* notice_mono_ms() */
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

/* One kind of line a remote party can cause. */
struct ratelimit {
    int64_t last_ms;               /* notice_mono_ms() of the last line; 0: none yet */
    unsigned held;                 /* lines held back since */
};

struct peers {
    struct peers_opts o;
    struct frame_key key;          /* the world's */
    struct frame_key hs_key;       /* the hellos' (frame.h) */
    char *job;
    struct evconnlistener *listener;
    struct event *relisten;
    int port;
    unsigned pending_max;
    struct slot *slots;
    struct conn *conns;            /* every connection, up or not */
    struct event *tick;
    uint64_t refused;
    struct ratelimit warn_refused, warn_listener;
};

static void conn_close(struct conn *c, const char *why);

/* True when a line may go out now (at most one every WARN_EVERY_MS);
 * *held: how many were held back since the last. */
static bool ratelimit_ok(struct ratelimit *r, unsigned *held)
{
    int64_t now = notice_mono_ms();

    if (r->last_ms && now - r->last_ms < WARN_EVERY_MS) {
        r->held++;
        return false;
    }
    *held = r->held;
    r->held = 0;
    r->last_ms = now;
    return true;
}

static void addr_text(const struct sockaddr_storage *ss, char *out, size_t size)
{
    const void *a = ss->ss_family == AF_INET6
                        ? (const void *)&((const struct sockaddr_in6 *)ss)->sin6_addr
                        : (const void *)&((const struct sockaddr_in *)ss)->sin_addr;

    if ((ss->ss_family != AF_INET && ss->ss_family != AF_INET6) ||
        !inet_ntop(ss->ss_family, a, out, (socklen_t)size))
        snprintf(out, size, "?");
}

static void warn_refused(struct peers *p, const struct conn *c, const char *what)
{
    char from[INET6_ADDRSTRLEN];
    unsigned held;

    p->refused++;
    /* At most one line a second: a flood of garbage must not flood the log. */
    if (!ratelimit_ok(&p->warn_refused, &held))
        return;
    if (c->rank >= 0) {
        log_msg(LOGL_WARN, "peer rank %lld: %s; connection closed (%u more refused since the "
                "last line)", (long long)c->rank, what, held);
        return;
    }
    addr_text(&c->from, from, sizeof(from));
    log_msg(LOGL_WARN, "peer connection: %s (from %s); connection closed (%u more refused "
            "since the last line)", what, from, held);
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

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* A nonce as hello carries it: exactly 2 * FRAME_NONCE_LEN lowercase hex digits. */
static bool nonce_parse(const char *s, uint8_t out[FRAME_NONCE_LEN])
{
    if (strlen(s) != 2 * FRAME_NONCE_LEN)
        return false;
    for (size_t i = 0; i < FRAME_NONCE_LEN; i++) {
        int hi = hex_digit(s[2 * i]), lo = hex_digit(s[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return false;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return true;
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
    n = frame_encode(&c->tx, ++c->seq, text, strlen(text), buf, sizeof(buf));
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
    char nonce[2 * FRAME_NONCE_LEN + 1];
    cJSON *m;
    int r;

    if (RAND_bytes(c->nonce, FRAME_NONCE_LEN) != 1)
        return -EIO;
    if (!(m = cJSON_CreateObject()))
        return -ENOMEM;
    hex(c->nonce, FRAME_NONCE_LEN, nonce);
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
    char want[2 * FRAME_NONCE_LEN + 1];

    hex(c->nonce, FRAME_NONCE_LEN, want);
    return cJSON_IsString(e) && strcmp(e->valuestring, want) == 0;
}

/* Both hellos are known: from now on the frames of c are sealed with the
 * keys of this connection (frame.h), ours with our direction's. */
static int connection_keys(struct conn *c, const uint8_t theirs[FRAME_NONCE_LEN])
{
    const struct frame_key *world = &c->p->key;
    const uint8_t *dialer = c->dialer ? c->nonce : theirs;
    const uint8_t *acceptor = c->dialer ? theirs : c->nonce;
    enum frame_dir out = c->dialer ? FRAME_DIALER_TO_ACCEPTOR : FRAME_ACCEPTOR_TO_DIALER;
    enum frame_dir in = c->dialer ? FRAME_ACCEPTOR_TO_DIALER : FRAME_DIALER_TO_ACCEPTOR;

    if (frame_key_connection(world, dialer, acceptor, out, &c->tx) < 0 ||
        frame_key_connection(world, dialer, acceptor, in, &c->rx) < 0)
        return -EIO;
    return 0;
}

static void went_up(struct conn *c)
{
    struct slot *s = &c->p->slots[c->rank];

    if (s->up && s->up != c)
        conn_close(s->up, "replaced by a new connection");
    c->hs = HS_UP;
    c->up_ms = notice_mono_ms();
    s->up = c;
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
    uint8_t theirs[FRAME_NONCE_LEN];

    if (c->hs == HS_ACK_WAIT) {
        if (strcmp(type, "ack") != 0) {
            *why = "a message out of the handshake's order";
            return -1;
        }
        if (!echoes(c, m)) {
            *why = "its ack does not echo our nonce";
            return -1;
        }
        went_up(c);
        return 0;
    }
    if (strcmp(type, "hello") != 0) {
        *why = "a message out of the handshake's order";
        return -1;
    }
    if (c->dialer && !echoes(c, m)) {
        *why = "its hello does not echo our nonce";
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
    if (!cJSON_IsString(nonce) || !nonce_parse(nonce->valuestring, theirs)) {
        *why = "a hello without a nonce";
        return -1;
    }
    if (c->dialer) {
        cJSON *ack = cJSON_CreateObject();
        int r = ack && connection_keys(c, theirs) == 0 ? 0 : -1;

        if (r == 0) {
            cJSON_AddStringToObject(ack, "type", "ack");
            cJSON_AddStringToObject(ack, "echo", nonce->valuestring);
            r = send_obj(c, ack);
        }
        cJSON_Delete(ack);
        if (r < 0) {
            *why = "cannot answer";
            return -1;
        }
        went_up(c);
        return 0;
    }
    c->rank = (int64_t)rank->valuedouble;
    /* Our hello still goes with the handshake key; the ack and everything
     * after with this connection's. */
    if (send_hello(c, nonce->valuestring) < 0 || connection_keys(c, theirs) < 0) {
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
        char version[160];
        const char *why = NULL;
        int r;

        if (!data)
            return;
        c->heard = true;
        /* The keys change after the hellos: one frame at a time. */
        r = frame_decode(&c->rx, data, want, &f);
        if (r == 0)
            return;
        if (r == -EPROTO) {
            why = "not a frame of the peer protocol";
        } else if (r == -EPROTONOSUPPORT) {
            snprintf(version, sizeof(version), "a frame of peer protocol version %u (this "
                     "spotd speaks %d): every node of a world must run a spotd of the same "
                     "protocol", data[4], FRAME_VERSION);
            why = version;
        } else if (r == -EMSGSIZE) {
            why = "a frame over 64 KiB";
        } else if (r == -EBADMSG) {
            why = c->hs == HS_HELLO_SENT || c->hs == HS_HELLO_WAIT
                      ? "a frame with a wrong MAC (another world key, or altered)"
                      : "a frame with a wrong MAC for this connection (recorded on another, "
                        "reflected back, or altered)";
        } else if ((r = frame_replay_check(&c->replay, &f)) == -EALREADY) {
            why = "a replayed frame (its sequence number is not new)";
        } else if (r == -ENOMSG) {
            why = "a frame out of sequence (one before it is missing)";
        }
        if (why) {
            warn_refused(c->p, c, why);
            conn_close(c, why);
            return;
        }
        c->last_rx_ms = notice_mono_ms();
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
    c->hs = dialer ? HS_HELLO_SENT : HS_HELLO_WAIT;
    c->rank = rank;
    c->tx = c->rx = p->hs_key;
    c->last_rx_ms = c->since_ms = notice_mono_ms();
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
        if (s->up == c) {
            s->up = NULL;
            if (notice_mono_ms() - c->up_ms >= BACKOFF_RESET_MS)
                s->backoff_ms = BACKOFF_MIN_MS;
        }
        if (s->dialing == c)
            s->dialing = NULL;
    }
    bufferevent_free(c->bev);
    memset(c, 0, sizeof(*c)); /* the keys */
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

/* ---- connections without a handshake ----------------------------------------- */

/* One source: the same IPv4 address, or the same IPv6 /64 (what one host
 * is usually given; a v4-mapped address is one host). */
static bool same_source(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    const struct in6_addr *x = &((const struct sockaddr_in6 *)a)->sin6_addr;
    const struct in6_addr *y = &((const struct sockaddr_in6 *)b)->sin6_addr;

    if (a->ss_family != b->ss_family)
        return false;
    if (a->ss_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
               ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    if (a->ss_family == AF_INET6)
        return memcmp(x, y, IN6_IS_ADDR_V4MAPPED(x) ? 16 : 8) == 0;
    return false;
}

static bool pending(const struct conn *c)
{
    return !c->dialer && c->hs != HS_UP;
}

/* How far a connection without a handshake has come: its hello checked
 * (2), bytes that came or wait in the kernel (1), nothing (0).  A peer
 * sends its hello at once, a flood sends nothing. */
static int progress(const struct conn *c)
{
    int n = 0;

    if (c->hs == HS_ACK_WAIT)
        return 2;
    if (c->heard ||
        (ioctl(bufferevent_getfd(c->bev), FIONREAD, &n) == 0 && n > 0))
        return 1;
    return 0;
}

/* The slowest accepted connection without a handshake, from src's source
 * unless src is NULL: the least progress, then the oldest. */
static struct conn *slowest(struct peers *p, const struct sockaddr_storage *src)
{
    struct conn *best = NULL;
    int best_progress = 3;

    /* (newest first: "<=" keeps the oldest of equals) */
    for (struct conn *c = p->conns; c; c = c->next) {
        int g;

        if (!pending(c) || (src && !same_source(&c->from, src)))
            continue;
        g = progress(c);
        if (g < best_progress || (g == best_progress && c->since_ms <= best->since_ms)) {
            best = c;
            best_progress = g;
        }
    }
    return best;
}

/* Close the slowest connection without a handshake (of src's source, or
 * of all) to make room; what is the line's reason. */
static void make_room(struct peers *p, const struct sockaddr_storage *src, const char *what)
{
    struct conn *c = slowest(p, src);
    unsigned held;

    if (!c)
        return;
    p->refused++;
    if (ratelimit_ok(&p->warn_listener, &held))
        log_msg(LOGL_WARN, "peer listener on port %d: %s; the slowest is closed (%u more "
                "closed since the last line)", p->port, what, held);
    conn_close(c, "closed to make room");
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int len,
                      void *arg)
{
    struct peers *p = arg;
    struct sockaddr_storage from;
    unsigned n_src = 0, n_all = 0;
    struct conn *c;
    char what[160], addr[INET6_ADDRSTRLEN];

    memset(&from, 0, sizeof(from));
    memcpy(&from, sa, (size_t)len < sizeof(from) ? (size_t)len : sizeof(from));
    for (c = p->conns; c; c = c->next)
        if (pending(c)) {
            n_all++;
            n_src += same_source(&c->from, &from);
        }
    if (n_src >= PENDING_PER_SOURCE) {
        addr_text(&from, addr, sizeof(addr));
        snprintf(what, sizeof(what), "%u connections from %s without a handshake (at most %d "
                 "from one source)", n_src + 1, addr, PENDING_PER_SOURCE);
        make_room(p, &from, what);
    } else if (n_all >= p->pending_max) {
        snprintf(what, sizeof(what), "%u connections without a handshake (at most %u)",
                 n_all + 1, p->pending_max);
        make_room(p, NULL, what);
    }
    if (!(c = conn_new(p, fd, false, -1))) {
        evutil_closesocket(fd);
        return;
    }
    c->from = from;
}

/* accept() failed, out of descriptors most likely: the listener stays
 * readable, so rest it (libevent would retry, and log, in a loop), and
 * give a descriptor back. */
static void on_accept_error(struct evconnlistener *l, void *arg)
{
    struct peers *p = arg;
    int err = EVUTIL_SOCKET_ERROR();
    struct timeval tv = { ACCEPT_PAUSE_MS / 1000, (ACCEPT_PAUSE_MS % 1000) * 1000 };
    struct conn *c = slowest(p, NULL);
    unsigned held;

    evconnlistener_disable(l);
    evtimer_add(p->relisten, &tv);
    if (c) {
        p->refused++;
        conn_close(c, "closed to free a descriptor");
    }
    if (ratelimit_ok(&p->warn_listener, &held))
        log_msg(LOGL_WARN, "peer listener on port %d: cannot accept a connection: %s; "
                "accepting again in %d ms%s (%u more since the last line)", p->port,
                strerror(err), ACCEPT_PAUSE_MS,
                err == EMFILE || err == ENFILE ? "; raise the descriptor limit (ulimit -n, "
                                                 "LimitNOFILE=)" : "", held);
}

static void on_relisten(evutil_socket_t fd, short what, void *arg)
{
    struct peers *p = arg;

    if (p->listener)
        evconnlistener_enable(p->listener);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    struct peers *p = arg;
    int64_t now = notice_mono_ms();
    int64_t hs_ms = p->o.dead_ms < HANDSHAKE_MS ? (int64_t)p->o.dead_ms : HANDSHAKE_MS;
    struct conn *c = p->conns, *next;

    for (; c; c = next) {
        next = c->next;
        if (c->hs != HS_UP) {
            if (now - c->since_ms > hs_ms) {
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
    evconnlistener_set_error_cb(p->listener, on_accept_error);
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
    struct rlimit rl;
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
    p->key = *o->key;
    p->pending_max = PENDING_MAX;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        rl.rlim_cur / 4 < PENDING_MAX)
        p->pending_max = rl.rlim_cur >= 8 ? (unsigned)(rl.rlim_cur / 4) : 2;
    if (o->world_size == 0 || o->world_size > PEER_RANKS_MAX || o->rank >= o->world_size) {
        snprintf(err, errlen, "rank %u does not fit a world of %u (at most %d)", o->rank,
                 o->world_size, PEER_RANKS_MAX);
        free(p);
        return NULL;
    }
    p->job = strdup(o->job);
    p->slots = calloc(o->world_size, sizeof(*p->slots));
    p->tick = event_new(o->base, -1, EV_PERSIST, on_tick, p);
    p->relisten = evtimer_new(o->base, on_relisten, p);
    if (!p->job || !p->slots || !p->tick || !p->relisten ||
        frame_key_handshake(&p->key, &p->hs_key) < 0) {
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
        memset(c, 0, sizeof(*c));
        free(c);
    }
    if (p->listener)
        evconnlistener_free(p->listener);
    if (p->tick)
        event_free(p->tick);
    if (p->relisten)
        event_free(p->relisten);
    for (uint32_t r = 0; p->slots && r < p->o.world_size; r++)
        if (p->slots[r].redial)
            event_free(p->slots[r].redial);
    free(p->slots);
    free(p->job);
    memset(&p->key, 0, sizeof(p->key));
    memset(&p->hs_key, 0, sizeof(p->hs_key));
    free(p);
    return NULL;
}
