/* frame: the peer protocol's frames, encoded and checked, and the keys
 * they are sealed with (no I/O).
 *
 *   offset  size  field
 *        0     4  magic "SPF1"
 *        4     1  version (2)
 *        5     1  flags (0; frames with unknown flags are refused)
 *        6     2  reserved (0)
 *        8     4  body length, big-endian, at most FRAME_BODY_MAX
 *       12     8  sequence number, big-endian: 1, 2, 3... per connection and direction
 *       20     n  body: one JSON object, UTF-8
 *     20+n    32  HMAC-SHA256 over bytes 0 .. 20+n-1, with the key of the
 *                 connection and direction (below)
 *
 * Keys.  Each frame is sealed with a key derived from the world key, so
 * that it is valid on exactly one connection, in one direction:
 *
 *   handshake key   HMAC-SHA256(world key, "spotd peer v2 handshake")
 *                   for the two hellos, sent before the nonces are known;
 *   connection key  HMAC-SHA256(world key, "spotd peer v2" || dialer nonce ||
 *                   acceptor nonce || label), label "dialer to acceptor" or
 *                   "acceptor to dialer" (the nonces raw, 16 bytes each)
 *                   for every frame after the hellos, the dialer's ack first.
 *
 * The nonces are fresh on every connection, so a frame recorded on one
 * connection fails the MAC on any other, and a frame reflected back to its
 * sender fails it too (the receiver checks with the other direction's key).
 *
 * Every byte from a peer is untrusted: the length is checked before the
 * body is waited for, the MAC before the body is looked at (in constant
 * time), and the sequence number against the sender's last frame
 * (frame_replay) before the frame is acted on.  No clock is involved: the
 * sequence number and the connection's key make a replay impossible, and a
 * clock would only let an NTP step part live peers. */
#ifndef SPOT_FRAME_H
#define SPOT_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FRAME_MAGIC "SPF1"
#define FRAME_VERSION 2
#define FRAME_HEADER 20
#define FRAME_MAC 32
#define FRAME_BODY_MAX 65536
#define FRAME_MAX (FRAME_HEADER + FRAME_BODY_MAX + FRAME_MAC)
#define FRAME_NONCE_LEN 16
/* World keys: at least FRAME_KEY_MIN bytes (after hex decoding, when the
 * key file holds hex); the empty key only with --insecure. */
#define FRAME_KEY_MIN 16
#define FRAME_KEY_MAX 256

struct frame_key {
    uint8_t k[FRAME_KEY_MAX];
    size_t len;                    /* 0: insecure (MACs still computed, with no key) */
};

/* Which way a connection key seals: from the side that dialed, or back. */
enum frame_dir { FRAME_DIALER_TO_ACCEPTOR, FRAME_ACCEPTOR_TO_DIALER };

struct frame {
    uint64_t seq;
    const char *body;              /* points into the decoded buffer, not NUL-terminated */
    size_t body_len;
    size_t size;                   /* of the whole frame */
};

/* A sender's replay state, kept per connection and direction. */
struct frame_replay {
    uint64_t last_seq;             /* 0: none yet */
};

/* The key from a key file's text (or SPOTD_WORLD_KEY): surrounding
 * whitespace dropped; 64 or more hex digits (an even number) are decoded,
 * anything else is used as bytes.  Returns 0, or -EINVAL with the reason
 * in *why (a static string). */
int frame_key_parse(const char *text, size_t len, struct frame_key *ret, const char **why);

/* The handshake key of world (above) into *ret.  Returns 0 or -EIO. */
int frame_key_handshake(const struct frame_key *world, struct frame_key *ret);

/* The key of the connection whose hellos carried these nonces, for frames
 * sent in direction dir (above), into *ret.  Returns 0 or -EIO. */
int frame_key_connection(const struct frame_key *world, const uint8_t dialer[FRAME_NONCE_LEN],
                         const uint8_t acceptor[FRAME_NONCE_LEN], enum frame_dir dir,
                         struct frame_key *ret);

/* Encode a frame of body into out (FRAME_HEADER + len + FRAME_MAC bytes),
 * sealed with key.  Returns the frame's size, or -EMSGSIZE (body too long)
 * / -ENOBUFS / -EIO. */
int frame_encode(const struct frame_key *key, uint64_t seq, const char *body, size_t len,
                 uint8_t *out, size_t outlen);

/* Decode the frame at the start of buf (len bytes arrived so far).
 * Returns 0 when more bytes are needed, 1 with *f set (f->size bytes
 * consumed; f->body points into buf), or an error: -EPROTO (not a frame:
 * magic, flags, reserved), -EPROTONOSUPPORT (a frame of another version,
 * in buf[4]: an older or newer spotd), -EMSGSIZE (body over
 * FRAME_BODY_MAX), -EBADMSG (its MAC does not match: another key, another
 * connection or direction, or altered).  *f is untouched unless 1 is
 * returned. */
int frame_decode(const struct frame_key *key, const uint8_t *buf, size_t len, struct frame *f);

/* Accept f from a sender only when its sequence number is the one after
 * the last accepted (1 first).  Returns 0 (and remembers f), or -EALREADY
 * (replayed or reordered) / -ENOMSG (a frame before it is missing). */
int frame_replay_check(struct frame_replay *r, const struct frame *f);

#endif
