/* s3creds: the credential chain of the s3:// backend (store_s3.c), in the
 * AWS tools' order: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and
 * AWS_SESSION_TOKEN); the shared credentials file
 * (AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials, profile AWS_PROFILE
 * or "default"); the EC2 instance role through IMDSv2
 * (AWS_EC2_METADATA_SERVICE_ENDPOINT, unless AWS_EC2_METADATA_DISABLED is
 * true), fetched when the first request needs them and again five minutes
 * before they expire.
 *
 * Everything runs on the loop; the owner embeds a struct s3creds and is
 * told through its changed callback when a fetch ended, either way.  The
 * parsing is awscreds.c's; the metadata token is imds.c's. */
#ifndef SPOT_S3CREDS_H
#define SPOT_S3CREDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "spot/awscreds.h"
#include "spot/imds.h"

struct http;
struct http_req;

enum s3creds_state { S3CREDS_NONE, S3CREDS_LOADING, S3CREDS_OK, S3CREDS_FAILED };

/* What a request waiting for credentials does now (s3creds_ready()). */
enum s3creds_verdict {
    S3CREDS_USE,        /* sign with aws */
    S3CREDS_WAIT,       /* a fetch is under way and nothing usable is held */
    S3CREDS_FAIL,       /* fail it at once with err */
};

/* Read by the owner, written only here. */
struct s3creds {
    struct aws_creds aws;          /* what requests are signed with */
    enum s3creds_state state;
    bool from_role;                /* the instance role: fetched, and again */
    char err[512];                 /* why the last fetch failed, for messages */
    int64_t failed_ms, fetched_ms; /* wall clock */
    char imds_url[256];            /* "" when the instance role is off */
    char role[256];
    struct imds_token token;
    struct http *http;             /* not owned */
    struct http_req *req;          /* a metadata GET in flight */
    void (*changed)(void *arg);
    void *arg;
};

/* Find static credentials (the environment, then the file), or set up the
 * instance role when there are none.  No request yet.  Returns 0, or
 * -EINVAL (a broken file, values too long) or -ENOMEM with err set; c
 * then needs no release. */
int s3creds_init(struct s3creds *c, char *err, size_t errlen);

/* Fetches go through http (which must outlive them); changed(arg) is
 * called when one ends, even inside s3creds_ready(). */
void s3creds_attach(struct s3creds *c, struct http *http, void (*changed)(void *arg), void *arg);

/* Cancel a fetch in flight (no callback) and wipe the secrets.  A zeroed
 * struct is fine. */
void s3creds_release(struct s3creds *c);

/* Good enough not to fetch again at now_ms (wall clock): static, or more
 * than five minutes from expiring.  Credentials that arrived with less
 * than five minutes to live are kept for a minute (and until they
 * expire), so that such a role is not asked again for every request. */
bool s3creds_fresh(const struct s3creds *c, int64_t now_ms);

/* For a request about to be sent: starts a fetch when one is due (old
 * role credentials are used until they expire, meanwhile); after a failed
 * fetch, requests fail at once for a second rather than asking the
 * metadata service again for each one. */
enum s3creds_verdict s3creds_ready(struct s3creds *c);

/* The server said the credentials expired early (ExpiredToken): role
 * credentials are fetched again before the next request, and true is
 * returned; static ones cannot be (false). */
bool s3creds_expired(struct s3creds *c);

#endif
