/* peer.c on 127.0.0.1: three nodes come up and talk; a node with another
 * key, garbage, an oversized frame and a replayed frame are refused, the
 * connection closed, and the world undisturbed.  A frame recorded on one
 * connection and injected into another, or reflected back to its sender,
 * is refused; connections without a handshake are bounded; accept()
 * out of descriptors neither spins nor floods the log. */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"
#include "../../supervisord/peer.h"
#include "spot/log.h"
#include "spot/notice.h"

struct node {
    struct peers *p;
    unsigned ups, downs, msgs;
    char last[256];
};

static void on_msg(void *arg, uint32_t rank, const char *body, size_t len)
{
    struct node *n = arg;

    n->msgs++;
    snprintf(n->last, sizeof(n->last), "%u %.*s", rank, (int)len, body);
}

static void on_up(void *arg, uint32_t rank)
{
    ((struct node *)arg)->ups++;
}

static void on_down(void *arg, uint32_t rank, const char *why)
{
    ((struct node *)arg)->downs++;
}

static bool run_until(struct event_base *base, bool (*done)(void *), void *arg)
{
    int64_t until = notice_now_ms() + 5000;

    while (!done(arg) && notice_now_ms() < until)
        event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK), usleep(1000);
    return done(arg);
}

static struct node *g_nodes;

static bool all_up(void *arg)
{
    for (uint32_t a = 0; a < 3; a++)
        for (uint32_t b = 0; b < 3; b++)
            if (a != b && !peers_up(g_nodes[a].p, b))
                return false;
    return true;
}

static bool got_msgs(void *arg)
{
    return g_nodes[0].msgs >= 1 && g_nodes[2].msgs >= 1;
}

static uint64_t g_before;

static bool refused_more(void *arg)
{
    return peers_refused(((struct node *)arg)->p) > g_before;
}

/* A node of rank in a world of size, job "j", heartbeats every 100 ms. */
static struct peers *make_node(struct event_base *base, struct node *n, uint32_t rank,
                               uint32_t size, uint64_t dead_ms, const struct frame_key *k)
{
    struct peers_opts o = { .base = base, .key = k, .job = "j", .rank = rank, .world_size = size,
                            .heartbeat_ms = 100, .dead_ms = dead_ms, .on_msg = on_msg,
                            .on_up = on_up, .on_down = on_down, .arg = n };
    char err[256];

    return peers_new(&o, err, sizeof(err));
}

static struct peers *make(struct event_base *base, struct node *n, uint32_t rank,
                          const struct frame_key *k)
{
    return make_node(base, n, rank, 3, 1000, k);
}

/* A TCP connection to 127.0.0.1:port (from the address from, when given),
 * non-blocking; the kernel completes it while the listener has room. */
static int raw_connect(int port, const char *from)
{
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && from) {
        struct sockaddr_in src = { .sin_family = AF_INET };
        inet_pton(AF_INET, from, &src.sin_addr);
        if (bind(fd, (struct sockaddr *)&src, sizeof(src)) < 0) {
            close(fd);
            return -1;
        }
    }
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 && errno != EINPROGRESS) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Wait until fd's connect is done.  Returns 0 or -1. */
static int connected(int fd)
{
    struct pollfd pfd = { .fd = fd, .events = POLLOUT };

    return poll(&pfd, 1, 3000) == 1 && !(pfd.revents & (POLLERR | POLLHUP)) ? 0 : -1;
}

/* A raw TCP client to 127.0.0.1:port; writes data, returns the fd. */
static int raw(int port, const void *data, size_t len)
{
    int fd = raw_connect(port, NULL);

    if (fd < 0 || connected(fd) < 0 || write(fd, data, len) != (ssize_t)len) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

TEST(peer_world)
{
    struct event_base *base = event_base_new();
    struct frame_key k = { .k = "the world key of this test, 32B", .len = 32 };
    struct frame_key other = { .k = "not the world key of this test!", .len = 32 };
    struct node nodes[3], intruder;
    char err[256], addr[64];
    uint8_t frame[FRAME_MAX];
    int ports[3], n, fd;

    memset(nodes, 0, sizeof(nodes));
    memset(&intruder, 0, sizeof(intruder));
    g_nodes = nodes;
    for (uint32_t r = 0; r < 3; r++) {
        nodes[r].p = make(base, &nodes[r], r, &k);
        CHECK(nodes[r].p != NULL);
        if (!nodes[r].p)
            return;
        CHECK_INT(peers_listen(nodes[r].p, "127.0.0.1:0", err, sizeof(err)), 0);
        ports[r] = peers_port(nodes[r].p);
        CHECK(ports[r] > 0);
    }
    for (uint32_t a = 0; a < 3; a++)
        for (uint32_t b = 0; b < 3; b++)
            if (a != b) {
                snprintf(addr, sizeof(addr), "127.0.0.1:%d", ports[b]);
                CHECK_INT(peers_set_addr(nodes[a].p, b, addr, err, sizeof(err)), 0);
            }
    CHECK(run_until(base, all_up, NULL));
    CHECK_INT(nodes[0].ups, 2);
    CHECK_INT(nodes[1].ups, 2);

    /* Messages both ways, heartbeats not among them. */
    {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "type", "notice");
        cJSON_AddNumberToObject(m, "gen", 4);
        CHECK_INT(peers_send(nodes[0].p, 2, m), 0);
        CHECK_INT(peers_send(nodes[2].p, 0, m), 0);
        cJSON_Delete(m);
    }
    CHECK(run_until(base, got_msgs, NULL));
    CHECK_STR(nodes[2].last, "0 {\"type\":\"notice\",\"gen\":4,\"v\":1}");
    CHECK_STR(nodes[0].last, "2 {\"type\":\"notice\",\"gen\":4,\"v\":1}");

    /* A node with another key claims rank 1 at rank 2: refused. */
    intruder.p = make(base, &intruder, 1, &other);
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", ports[2]);
    g_before = peers_refused(nodes[2].p);
    CHECK_INT(peers_set_addr(intruder.p, 2, addr, err, sizeof(err)), 0);
    CHECK(run_until(base, refused_more, &nodes[2]));
    CHECK_INT(intruder.ups, 0);

    /* Garbage, an oversized frame, a replayed frame: each refused. */
    g_before = peers_refused(nodes[2].p);
    fd = raw(ports[2], "GET / HTTP/1.1\r\n\r\n", 18);
    CHECK(run_until(base, refused_more, &nodes[2]));
    close(fd);
    memcpy(frame, "SPF1\x01\0\0\0\x7f\0\0\0", 12);
    g_before = peers_refused(nodes[2].p);
    fd = raw(ports[2], frame, FRAME_HEADER);
    CHECK(run_until(base, refused_more, &nodes[2]));
    close(fd);
    {
        /* A valid hello (it claims rank 1 to rank 2), and the same bytes
         * again: the second is a replay. */
        static const char hello[] = "{\"v\":1,\"type\":\"hello\",\"job\":\"j\",\"rank\":1,"
                                    "\"nonce\":\"00112233445566778899aabbccddeeff\"}";
        struct frame_key hk;

        CHECK_INT(frame_key_handshake(&k, &hk), 0);
        n = frame_encode(&hk, 1, hello, strlen(hello), frame, sizeof(frame));
        memcpy(frame + n, frame, (size_t)n);
    }
    g_before = peers_refused(nodes[2].p);
    fd = raw(ports[2], frame, 2 * (size_t)n);
    CHECK(run_until(base, refused_more, &nodes[2]));
    close(fd);

    /* Through all of it the world stayed up, and no one went down. */
    CHECK(all_up(NULL));
    CHECK_INT(nodes[0].downs + nodes[1].downs + nodes[2].downs, 0);

    /* A node that goes away is down for the others. */
    nodes[1].p = peers_free(nodes[1].p);
    {
        int64_t until = notice_now_ms() + 3000;
        while ((peers_up(nodes[0].p, 1) || peers_up(nodes[2].p, 1)) && notice_now_ms() < until)
            event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK), usleep(1000);
    }
    CHECK(!peers_up(nodes[0].p, 1));
    CHECK(!peers_up(nodes[2].p, 1));
    CHECK_INT(nodes[0].downs, 1);
    CHECK_INT(nodes[2].downs, 1);

    intruder.p = peers_free(intruder.p);
    nodes[0].p = peers_free(nodes[0].p);
    nodes[2].p = peers_free(nodes[2].p);
    event_base_free(base);
}

/* ---- the test's own side of a connection ----------------------------------------- */

/* A dialer that speaks the protocol by hand (frame.h), with the world key:
 * to record, inject and reflect frames. */
struct raw {
    int fd;
    uint8_t nd[FRAME_NONCE_LEN], na[FRAME_NONCE_LEN];
    struct frame_key tx, rx;
    uint64_t seq;
    uint8_t in[2 * FRAME_MAX];
    size_t len;
    uint8_t last[512];             /* the last frame received, as it came */
    size_t last_len;
    uint64_t last_seq;
};

/* Send body as our next frame; the frame's bytes in out (when given). */
static int raw_send(struct raw *r, const char *body, uint8_t *out, size_t *outlen)
{
    uint8_t buf[1024];
    int n = frame_encode(&r->tx, ++r->seq, body, strlen(body), buf, sizeof(buf));

    if (n < 0 || write(r->fd, buf, (size_t)n) != n)
        return -1;
    if (out) {
        memcpy(out, buf, (size_t)n);
        *outlen = (size_t)n;
    }
    return 0;
}

/* The next frame from the node, the loop turning meanwhile; its body
 * NUL-terminated in body.  Returns 1, 0 when the node closed the
 * connection, -1 on time-out or a frame that does not check. */
static int raw_recv(struct raw *r, struct event_base *base, char *body, size_t size)
{
    int64_t until = notice_mono_ms() + 3000;

    while (notice_mono_ms() < until) {
        struct frame f;
        ssize_t got;
        int d = r->len ? frame_decode(&r->rx, r->in, r->len, &f) : 0;

        if (d < 0)
            return -1;
        if (d == 1) {
            snprintf(body, size, "%.*s", (int)f.body_len, f.body);
            r->last_len = f.size < sizeof(r->last) ? f.size : 0;
            memcpy(r->last, r->in, r->last_len);
            r->last_seq = f.seq;
            memmove(r->in, r->in + f.size, r->len - f.size);
            r->len -= f.size;
            return 1;
        }
        event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
        got = recv(r->fd, r->in + r->len, sizeof(r->in) - r->len, MSG_DONTWAIT);
        if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
            return 0;
        if (got > 0)
            r->len += (size_t)got;
        else
            usleep(1000);
    }
    return -1;
}

/* Dial port as rank of job "j", through the whole handshake.  Returns 0. */
static int raw_dial(struct raw *r, struct event_base *base, int port, const struct frame_key *k,
                    uint32_t rank)
{
    char body[512], nonce[2 * FRAME_NONCE_LEN + 1], echo[2 * FRAME_NONCE_LEN + 1];
    cJSON *m;
    const cJSON *na;

    memset(r, 0, sizeof(*r));
    for (int i = 0; i < FRAME_NONCE_LEN; i++)
        r->nd[i] = (uint8_t)(rand() & 0xff);
    for (int i = 0; i < FRAME_NONCE_LEN; i++)
        snprintf(nonce + 2 * i, 3, "%02x", r->nd[i]);
    if ((r->fd = raw_connect(port, NULL)) < 0 || connected(r->fd) < 0 ||
        frame_key_handshake(k, &r->tx) < 0)
        return -1;
    r->rx = r->tx;
    snprintf(body, sizeof(body), "{\"v\":1,\"type\":\"hello\",\"job\":\"j\",\"rank\":%u,"
             "\"nonce\":\"%s\"}", rank, nonce);
    if (raw_send(r, body, NULL, NULL) < 0 || raw_recv(r, base, body, sizeof(body)) != 1)
        return -1;
    m = cJSON_Parse(body);
    na = cJSON_GetObjectItemCaseSensitive(m, "nonce");
    if (!cJSON_IsString(na) || strlen(na->valuestring) != 2 * FRAME_NONCE_LEN) {
        cJSON_Delete(m);
        return -1;
    }
    snprintf(echo, sizeof(echo), "%s", na->valuestring);
    for (int i = 0; i < FRAME_NONCE_LEN; i++) {
        unsigned v = 0;
        sscanf(echo + 2 * i, "%2x", &v);
        r->na[i] = (uint8_t)v;
    }
    cJSON_Delete(m);
    if (frame_key_connection(k, r->nd, r->na, FRAME_DIALER_TO_ACCEPTOR, &r->tx) < 0 ||
        frame_key_connection(k, r->nd, r->na, FRAME_ACCEPTOR_TO_DIALER, &r->rx) < 0)
        return -1;
    snprintf(body, sizeof(body), "{\"v\":1,\"type\":\"ack\",\"echo\":\"%s\"}", echo);
    return raw_send(r, body, NULL, NULL);
}

static struct peers *make2(struct event_base *base, struct node *n, uint32_t rank,
                           const struct frame_key *k)
{
    return make_node(base, n, rank, 2, 3000, k);
}

/* A world of two: a (rank 0) and b (rank 1), b listening.  Returns b's
 * port, or -1. */
static int pair(struct event_base *base, struct node *a, struct node *b,
                const struct frame_key *k)
{
    char err[256];

    memset(a, 0, sizeof(*a));
    memset(b, 0, sizeof(*b));
    b->p = make2(base, b, 1, k);
    a->p = make2(base, a, 0, k);
    CHECK(a->p && b->p);
    if (!a->p || !b->p)
        return -1;
    CHECK_INT(peers_listen(b->p, "127.0.0.1:0", err, sizeof(err)), 0);
    return peers_port(b->p);
}

static void spin(struct event_base *base, int ms)
{
    int64_t until = notice_mono_ms() + ms;

    while (notice_mono_ms() < until)
        event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK), usleep(1000);
}

static bool node_up(void *arg)
{
    return peers_up(((struct node *)arg)->p, 0);
}

/* A frame is valid on one connection, one way: the relay attack of issue
 * 16 (a notice recorded on one connection, injected into the next, at the
 * very sequence number the next expects) and a frame reflected back. */
TEST(peer_bound_to_connection)
{
    struct event_base *base = event_base_new();
    struct frame_key k = { .k = "the world key of this test, 32B", .len = 32 };
    static const char notice[] = "{\"v\":1,\"type\":\"notice\",\"kind\":\"checkpoint\"}";
    struct node b;
    struct raw a1, a2, a3;
    uint8_t recorded[512];
    size_t recorded_len = 0;
    char err[256], body[512];
    uint64_t refused;
    int port;

    memset(&b, 0, sizeof(b));
    b.p = make2(base, &b, 1, &k);
    CHECK(b.p != NULL);
    if (!b.p)
        return;
    CHECK_INT(peers_listen(b.p, "127.0.0.1:0", err, sizeof(err)), 0);
    port = peers_port(b.p);

    /* Connection 1: the handshake by hand, then a notice, recorded. */
    CHECK_INT(raw_dial(&a1, base, port, &k, 0), 0);
    CHECK(run_until(base, node_up, &b));
    CHECK_INT(raw_send(&a1, notice, recorded, &recorded_len), 0);
    CHECK_INT((int)a1.seq, 3);
    spin(base, 100);
    CHECK_INT(b.msgs, 1);
    CHECK_HAS(b.last, "\"type\":\"notice\"");

    /* Connection 2 (it replaces the first): the recorded notice comes
     * where connection 2's own third frame belongs, and is refused. */
    CHECK_INT(raw_dial(&a2, base, port, &k, 0), 0);
    spin(base, 100);
    CHECK(peers_up(b.p, 0));
    refused = peers_refused(b.p);
    CHECK_INT((int)a2.seq, 2);
    CHECK(write(a2.fd, recorded, recorded_len) == (ssize_t)recorded_len);
    while (raw_recv(&a2, base, body, sizeof(body)) == 1)
        ;
    CHECK_INT(b.msgs, 1);
    CHECK_INT((int)(peers_refused(b.p) - refused), 1);
    CHECK(!peers_up(b.p, 0));

    /* Connection 3: a frame of the node's own, reflected back at the
     * sequence number ours has next (3): refused. */
    CHECK_INT(raw_dial(&a3, base, port, &k, 0), 0);
    CHECK(run_until(base, node_up, &b));
    refused = peers_refused(b.p);
    do
        CHECK_INT(raw_recv(&a3, base, body, sizeof(body)), 1);
    while (a3.last_seq < a3.seq + 1 && a3.last_seq < 50);
    CHECK_INT((int)a3.last_seq, 3);
    CHECK(a3.last_len > 0);
    CHECK(write(a3.fd, a3.last, a3.last_len) == (ssize_t)a3.last_len);
    while (raw_recv(&a3, base, body, sizeof(body)) == 1)
        ;
    CHECK_INT((int)(peers_refused(b.p) - refused), 1);
    CHECK(!peers_up(b.p, 0));
    CHECK_INT(b.msgs, 1);

    close(a1.fd);
    close(a2.fd);
    close(a3.fd);
    b.p = peers_free(b.p);
    event_base_free(base);
}

/* How many of fds the node has closed (EOF or reset). */
static int closed_count(const int *fds, int n)
{
    int closed = 0;

    for (int i = 0; i < n; i++) {
        char c;
        ssize_t got = recv(fds[i], &c, 1, MSG_DONTWAIT);
        closed += got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
    }
    return closed;
}

/* Connections that never say anything: at most 8 from one source and 64
 * in all are kept, the slowest closed first; a real peer still gets in. */
TEST(peer_bounds)
{
    struct event_base *base = event_base_new();
    struct frame_key k = { .k = "the world key of this test, 32B", .len = 32 };
    struct node a, b;
    int one[20], many[10 * 7], port;
    char err[256], addr[64];

    if ((port = pair(base, &a, &b, &k)) < 0)
        return;
    /* 20 from one source: 12 are closed. */
    for (int i = 0; i < 20; i++) {
        one[i] = raw_connect(port, "127.0.0.2");
        CHECK(one[i] >= 0);
        spin(base, 2);
    }
    spin(base, 100);
    CHECK_INT(closed_count(one, 20), 12);
    /* 7 from each of 10 more sources: 64 in all are kept, the oldest
     * closed (the first source's 8, then 6 of the next). */
    for (int i = 0; i < 70; i++) {
        char src[32];
        snprintf(src, sizeof(src), "127.0.1.%d", 1 + i / 7);
        many[i] = raw_connect(port, src);
        CHECK(many[i] >= 0);
        spin(base, 1);
    }
    spin(base, 100);
    CHECK_INT(closed_count(one, 20) + closed_count(many, 70), 12 + 14);
    /* A real peer, now: it sends its hello at once, the silent ones are
     * closed before it. */
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
    CHECK_INT(peers_set_addr(a.p, 1, addr, err, sizeof(err)), 0);
    CHECK(run_until(base, node_up, &b));
    /* What is left goes when the handshake time is over (3 s). */
    spin(base, 4200);
    CHECK_INT(closed_count(one, 20) + closed_count(many, 70), 90);
    CHECK(peers_up(b.p, 0));
    for (int i = 0; i < 20; i++)
        close(one[i]);
    for (int i = 0; i < 70; i++)
        close(many[i]);
    a.p = peers_free(a.p);
    b.p = peers_free(b.p);
    event_base_free(base);
}

/* Out of descriptors, accept() fails while the listener stays readable:
 * the listener rests, one line a second says so, no busy loop of
 * libevent's "Error from accept() call". */
TEST(peer_accept_emfile)
{
    struct event_base *base = event_base_new();
    struct frame_key k = { .k = "the world key of this test, 32B", .len = 32 };
    struct node a, b;
    struct rlimit old, low;
    char err[256], addr[64], path[] = "/tmp/spotd-unit-peer.XXXXXX", text[65536];
    int fds[40], port, out, saved, probe, lines = 0;
    ssize_t got;

    /* Its lines are what is counted: at info, on stderr (test_log leaves
     * the threshold elsewhere). */
    CHECK_INT(log_open(LOG_TEXT, LOGL_INFO, NULL), 0);
    if ((port = pair(base, &a, &b, &k)) < 0)
        return;
    for (int i = 0; i < 40; i++)
        fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    out = mkstemp(path);
    saved = dup(2);
    CHECK(out >= 0 && saved >= 0);
    dup2(out, 2);
    probe = dup(0);
    close(probe);
    getrlimit(RLIMIT_NOFILE, &old);
    low = old;
    low.rlim_cur = (rlim_t)probe + 3;
    CHECK_INT(setrlimit(RLIMIT_NOFILE, &low), 0);
    for (int i = 0; i < 40; i++) {
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        connect(fds[i], (struct sockaddr *)&sa, sizeof(sa));
    }
    spin(base, 1500);
    setrlimit(RLIMIT_NOFILE, &old);
    dup2(saved, 2);
    close(saved);
    got = pread(out, text, sizeof(text) - 1, 0);
    text[got > 0 ? got : 0] = '\0';
    close(out);
    unlink(path);
    for (const char *l = text; (l = strstr(l, "cannot accept")); l++)
        lines++;
    CHECK(lines >= 1 && lines <= 3);
    CHECK(!strstr(text, "Error from accept"));
    CHECK_HAS(text, "raise the descriptor limit");
    if (lines > 3)
        printf("  %zd bytes of log, %d lines\n", got, lines);
    /* The descriptors back: the listener accepts again, a peer gets in. */
    for (int i = 0; i < 40; i++)
        close(fds[i]);
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
    CHECK_INT(peers_set_addr(a.p, 1, addr, err, sizeof(err)), 0);
    CHECK(run_until(base, node_up, &b));
    a.p = peers_free(a.p);
    b.p = peers_free(b.p);
    event_base_free(base);
}
