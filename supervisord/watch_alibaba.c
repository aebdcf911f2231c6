/* watch_alibaba: Alibaba Cloud ECS metadata, spot termination time (about
 * five minutes of notice).  Hardened mode wants a session token, like
 * IMDSv2; in normal mode the GET works without one. */
#include "spot/cloudparse.h"
#include "watch_poll.h"

static int termination(const char *b, size_t len, struct notice *out, size_t max,
                       const char **why)
{
    return alibaba_parse_termination(b, len, out, why);
}

static const struct poll_endpoint endpoints[] = {
    { "/latest/meta-data/instance/spot/termination-time", termination, 5 * 60 * 1000 },
};

static const struct poll_cloud alibaba = {
    .name = "alibaba",
    .token_path = "/latest/api/token",
    .ttl_header = "X-aliyun-ecs-metadata-token-ttl-seconds",
    .token_header = "X-aliyun-ecs-metadata-token",
    .token_optional = true,
    .token_hint = "check that the metadata service is reachable from here (a container may "
                  "need host networking)",
    .backoff_cap_ms = WATCH_CAP_2MIN_MS,
    .endpoints = endpoints,
    .n_endpoints = sizeof(endpoints) / sizeof(endpoints[0]),
};

static struct watcher *start(const struct watch_ctx *ctx)
{
    return poll_start(&alibaba, ctx);
}

const struct watcher_ops watch_alibaba = {
    .name = "alibaba",
    .default_url = "http://100.100.100.200",
    .start = start,
    .stop = poll_stop,
};
