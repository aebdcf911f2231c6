/* frame: the peer protocol's frames, encoded and checked (no I/O).
 *
 *   offset  size  field
 *        0     4  magic "SPF1"
 *        4     1  version (1)
 *        5     1  flags (0; frames with unknown flags are refused)
 *        6     2  reserved (0)
 *        8     4  body length, big-endian, at most FRAME_BODY_MAX
 *       12     8  sequence number, big-endian: strictly increasing per sender
 *       20     8  sender's wall clock, ms since the epoch, big-endian
 *       28     n  body: one JSON object, UTF-8
 *     28+n    32  HMAC-SHA256 with the world key over bytes 0 .. 28+n-1
 *
 * Every byte from a peer is untrusted: the length is checked before the
 * body is waited for, the MAC before the body is looked at (in constant
 * time), and the sequence number and clock against the sender's last
 * frame and a window (frame_replay) before the frame is acted on. */
#ifndef SPOT_FRAME_H
#define SPOT_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FRAME_MAGIC "SPF1"
#define FRAME_VERSION 1
#define FRAME_HEADER 28
#define FRAME_MAC 32
#define FRAME_BODY_MAX 65536
#define FRAME_MAX (FRAME_HEADER + FRAME_BODY_MAX + FRAME_MAC)
/* World keys: at least FRAME_KEY_MIN bytes (after hex decoding, when the
 * key file holds hex); the empty key only with --insecure. */
#define FRAME_KEY_MIN 16
#define FRAME_KEY_MAX 256

struct frame_key {
    uint8_t k[FRAME_KEY_MAX];
    size_t len;                    /* 0: insecure (MACs still computed, with no key) */
};

struct frame {
    uint64_t seq;
    int64_t ts_ms;
    const char *body;              /* points into the decoded buffer, not NUL-terminated */
    size_t body_len;
    size_t size;                   /* of the whole frame */
};

/* A sender's replay state, kept per connection. */
struct frame_replay {
    bool seen;
    uint64_t last_seq;
};

/* The key from a key file's text (or SPOTD_WORLD_KEY): surrounding
 * whitespace dropped; 64 or more hex digits (an even number) are decoded,
 * anything else is used as bytes.  Returns 0, or -EINVAL with the reason
 * in *why (a static string). */
int frame_key_parse(const char *text, size_t len, struct frame_key *ret, const char **why);

/* Encode a frame of body into out (FRAME_HEADER + len + FRAME_MAC bytes).
 * Returns the frame's size, or -EMSGSIZE (body too long) / -ENOBUFS. */
int frame_encode(const struct frame_key *key, uint64_t seq, int64_t ts_ms, const char *body,
                 size_t len, uint8_t *out, size_t outlen);

/* Decode the frame at the start of buf (len bytes arrived so far).
 * Returns 0 when more bytes are needed, 1 with *f set (f->size bytes
 * consumed; f->body points into buf), or an error: -EPROTO (not a frame:
 * magic, version, flags, reserved), -EMSGSIZE (body over FRAME_BODY_MAX),
 * -EBADMSG (its MAC does not match: another key, or altered).  *f is
 * untouched unless 1 is returned. */
int frame_decode(const struct frame_key *key, const uint8_t *buf, size_t len, struct frame *f);

/* Accept f from a sender only when its sequence number is above the last
 * one accepted and its clock within window_ms of now_ms.  Returns 0 (and
 * remembers f), or -EALREADY (replayed or reordered) / -ETIME (clock out of
 * the window). */
int frame_replay_check(struct frame_replay *r, const struct frame *f, int64_t now_ms,
                       int64_t window_ms);

#endif
