/* peer.c on 127.0.0.1: three nodes come up and talk; a node with another
 * key, garbage, an oversized frame and a replayed frame are refused, the
 * connection closed, and the world undisturbed. */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"
#include "../../supervisord/peer.h"
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

static struct peers *make(struct event_base *base, struct node *n, uint32_t rank,
                          const struct frame_key *k)
{
    struct peers_opts o = { .base = base, .key = k, .job = "j", .rank = rank, .world_size = 3,
                            .heartbeat_ms = 100, .dead_ms = 1000, .on_msg = on_msg,
                            .on_up = on_up, .on_down = on_down, .arg = n };
    char err[256];

    return peers_new(&o, err, sizeof(err));
}

/* A raw TCP client to 127.0.0.1:port; writes data, returns the fd. */
static int raw(int port, const void *data, size_t len)
{
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        write(fd, data, len) != (ssize_t)len) {
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
    n = frame_encode(&k, 1, notice_now_ms(), "{\"v\":1,\"type\":\"heartbeat\"}", 26, frame,
                     sizeof(frame));
    memcpy(frame + n, frame, (size_t)n);
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
