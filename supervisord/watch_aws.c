/* watch_aws: EC2's instance metadata service, IMDSv2.
 *
 * Spot interruption (2 minutes), rebalance recommendation (advisory),
 * scheduled maintenance events, and Auto Scaling's target lifecycle state.
 * Sessions: PUT /latest/api/token, then the token on every GET. */
#include "spot/cloudparse.h"
#include "watch_poll.h"

static int instance_action(const char *b, size_t len, struct notice *out, size_t max,
                           const char **why)
{
    return aws_parse_instance_action(b, len, out, why);
}

static int rebalance(const char *b, size_t len, struct notice *out, size_t max, const char **why)
{
    return aws_parse_rebalance(b, len, out, why);
}

static int maintenance(const char *b, size_t len, struct notice *out, size_t max,
                       const char **why)
{
    size_t n = 0;
    int r = aws_parse_maintenance(b, len, notice_now_ms(), out, max, &n, why);

    return r < 0 ? r : (int)n;
}

static int lifecycle(const char *b, size_t len, struct notice *out, size_t max, const char **why)
{
    return aws_parse_lifecycle(b, len, out, why);
}

static const struct poll_endpoint endpoints[] = {
    { "/latest/meta-data/spot/instance-action", instance_action, 120 * 1000 },
    { "/latest/meta-data/events/recommendations/rebalance", rebalance, 0 },
    { "/latest/meta-data/events/maintenance/scheduled", maintenance, 0 },
    /* Without a lifecycle hook, termination follows at once: a short window. */
    { "/latest/meta-data/autoscaling/target-lifecycle-state", lifecycle, 30 * 1000 },
};

static const struct poll_cloud aws = {
    .name = "aws",
    .token_path = "/latest/api/token",
    .ttl_header = "X-aws-ec2-metadata-token-ttl-seconds",
    .token_header = "X-aws-ec2-metadata-token",
    .token_optional = false,
    .token_hint = "in a container the token's reply needs a second network hop: set the "
                  "instance's hop limit to 2 (aws ec2 modify-instance-metadata-options "
                  "--instance-id ID --http-put-response-hop-limit 2 --http-endpoint enabled), "
                  "or allow IMDSv1 with --aws-imdsv1 true",
    .backoff_cap_ms = WATCH_CAP_2MIN_MS,
    .endpoints = endpoints,
    .n_endpoints = sizeof(endpoints) / sizeof(endpoints[0]),
};

static struct watcher *start(const struct watch_ctx *ctx)
{
    return poll_start(&aws, ctx);
}

const struct watcher_ops watch_aws = {
    .name = "aws",
    .default_url = "http://169.254.169.254",
    .start = start,
    .stop = poll_stop,
};
