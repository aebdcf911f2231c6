/* watch_tencent: Tencent Cloud CVM metadata, spot termination time.  The
 * time has no zone marker and is China Standard Time (UTC+8). */
#include "spot/cloudparse.h"
#include "watch_poll.h"

static int termination(const char *b, size_t len, struct notice *out, size_t max,
                       const char **why)
{
    return tencent_parse_termination(b, len, out, why);
}

static const struct poll_endpoint endpoints[] = {
    { "/latest/meta-data/spot/termination-time", termination, 2 * 60 * 1000 },
};

static const struct poll_cloud tencent = {
    .name = "tencent",
    .backoff_cap_ms = WATCH_CAP_2MIN_MS,
    .endpoints = endpoints,
    .n_endpoints = sizeof(endpoints) / sizeof(endpoints[0]),
};

static struct watcher *start(const struct watch_ctx *ctx)
{
    return poll_start(&tencent, ctx);
}

const struct watcher_ops watch_tencent = {
    .name = "tencent",
    .default_url = "http://metadata.tencentyun.com",
    .start = start,
    .stop = poll_stop,
};
