/* imgstream: CRIU's images through spotd, not through files (imgstream.h).
 *
 * DESIGN.  One listening socket, one connection from CRIU, one struct
 * image per image it opens (several are open at once: CRIU writes a
 * process's core beside its pages).  On the connection come, for each
 * image, a record (a 32-bit length in the host's order, then the protobuf
 * message img_streamer_request_entry, whose field 1 is the file name)
 * and one byte that carries the pipe's read end (SCM_RIGHTS).  The
 * connection is read piece by piece (the length, the record, the byte),
 * never past the byte a descriptor comes with.  A pages image fills one
 * chunk buffer at a time and puts it; reading every pages image pauses
 * while IMGSTREAM_PUTS puts are in flight.  Freed with puts in flight,
 * a stream lingers, closed, until they end. */
#include "imgstream.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "spot/log.h"
#include "spot/notice.h"

#define NAME_MAX_LEN 128
#define IMAGES_MAX 4096

/* ---- CRIU's one connection, for a capture or a restore ------------------ */

/* The socket CRIU connects to once, then the connection, read a piece at
 * a time: a record's length (32 bits, the host's order), the record (the
 * protobuf message img_streamer_request_entry, whose field 1 is the
 * name), and, for an image with a pipe, one byte that carries the pipe's
 * descriptor (SCM_RIGHTS); never past the byte a descriptor comes with. */
struct conn {
    struct event_base *base;
    char sock[sizeof(((struct sockaddr_un *)0)->sun_path)];
    int lfd, cfd;
    struct event *lev, *cev;
    event_callback_fn on_read;     /* the owner's, for the connection */
    void *arg;
    int piece;                     /* 0 the length, 1 the record, 2 the byte */
    uint8_t len[4], rec[256], byte;
    uint32_t rec_len, need, got;
    int fd_in;                     /* a descriptor received with the byte */
    char name[NAME_MAX_LEN + 1];   /* the last request's image */
};

/* What conn_read() found. */
enum { CONN_MORE, CONN_NAME, CONN_PIPE, CONN_END };

static void on_conn_accept(evutil_socket_t fd, short what, void *arg);

/* The listening socket goes (and its name, so that a save does not find
 * it in the directory). */
static void conn_unlisten(struct conn *c)
{
    if (c->lev)
        event_free(c->lev);
    c->lev = NULL;
    if (c->lfd >= 0)
        close(c->lfd);
    c->lfd = -1;
    if (c->sock[0])
        unlink(c->sock);
    c->sock[0] = '\0';
}

static void conn_close(struct conn *c)
{
    conn_unlisten(c);
    if (c->cev)
        event_free(c->cev);
    c->cev = NULL;
    if (c->cfd >= 0)
        close(c->cfd);
    c->cfd = -1;
    if (c->fd_in >= 0)
        close(c->fd_in);
    c->fd_in = -1;
}

/* Listen at dir/name; on_read(fd, what, arg) then reads the connection. */
static int conn_listen(struct conn *c, struct event_base *base, const char *dir, const char *name,
                       event_callback_fn on_read, void *arg, char *err, size_t errlen)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };

    c->base = base;
    c->on_read = on_read;
    c->arg = arg;
    c->lfd = c->cfd = c->fd_in = -1;
    c->need = 4;
    if ((size_t)snprintf(c->sock, sizeof(c->sock), "%s/%s", dir, name) >= sizeof(c->sock)) {
        c->sock[0] = '\0';
        snprintf(err, errlen, "'%s' is too long a path for CRIU's streamer socket", dir);
        return -1;
    }
    memcpy(sa.sun_path, c->sock, sizeof(c->sock));
    unlink(c->sock);
    if ((c->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0 ||
        bind(c->lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(c->lfd, 1) < 0 ||
        !(c->lev = event_new(base, c->lfd, EV_READ | EV_PERSIST, on_conn_accept, c)) ||
        event_add(c->lev, NULL) < 0) {
        snprintf(err, errlen, "cannot listen at '%s': %s", c->sock, strerror(errno));
        conn_close(c);
        return -1;
    }
    return 0;
}

/* CRIU connects once. */
static void on_conn_accept(evutil_socket_t fd, short what, void *arg)
{
    struct conn *c = arg;
    int s = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

    (void)what;
    if (s < 0)
        return;
    conn_unlisten(c);
    c->cfd = s;
    if (!(c->cev = event_new(c->base, s, EV_READ | EV_PERSIST, c->on_read, c->arg)) ||
        event_add(c->cev, NULL) < 0) {
        /* CRIU reads the end, and fails. */
        log_msg(LOGL_ERROR, "out of memory: CRIU's image streamer connection is closed");
        conn_close(c);
    }
}

/* A plain file name, no path. */
static bool name_ok(const char *name, size_t len)
{
    if (len == 0 || len > NAME_MAX_LEN || name[0] == '.')
        return false;
    for (size_t i = 0; i < len; i++)
        if (name[i] == '/' || (unsigned char)name[i] < 0x21 || (unsigned char)name[i] > 0x7e)
            return false;
    return true;
}

/* Read what the connection has: CONN_MORE (wait for more), CONN_NAME (a
 * request, its image in c->name: a pipe comes next, or, after
 * conn_no_pipe(), the next request), CONN_PIPE (the pipe, *pipe, taken),
 * CONN_END (closed between requests); or -errno (-EPROTO) with why. */
static int conn_read(struct conn *c, int *pipe, char *why, size_t whylen)
{
    union { struct cmsghdr h; char buf[CMSG_SPACE(sizeof(int) * 4)]; } cm;
    uint8_t *into = c->piece == 0 ? c->len : c->piece == 1 ? c->rec : &c->byte;
    struct iovec iov = { into + c->got, c->need - c->got };
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf,
                         .msg_controllen = sizeof(cm.buf) };
    const uint8_t *p = c->rec;
    ssize_t n = recvmsg(c->cfd, &mh, MSG_CMSG_CLOEXEC);

    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return CONN_MORE;
    for (struct cmsghdr *h = CMSG_FIRSTHDR(&mh); n > 0 && h; h = CMSG_NXTHDR(&mh, h)) {
        if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS)
            continue;
        for (size_t i = 0; i < (h->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
            int got;

            memcpy(&got, CMSG_DATA(h) + i * sizeof(int), sizeof(int));
            if (c->fd_in < 0 && c->piece == 2)
                c->fd_in = got;
            else
                close(got);
        }
    }
    if (n == 0 && c->piece == 0 && c->got == 0)
        return CONN_END;
    if (n <= 0) {
        snprintf(why, whylen, "CRIU's image streamer connection ended inside a request%s%s",
                 n < 0 ? ": " : "", n < 0 ? strerror(errno) : "");
        return n < 0 ? -errno : -EPROTO;
    }
    if ((c->got += (uint32_t)n) < c->need)
        return CONN_MORE;
    c->got = 0;
    switch (c->piece) {
    case 0:
        memcpy(&c->rec_len, c->len, 4);
        if (c->rec_len < 2 || c->rec_len > sizeof(c->rec)) {
            snprintf(why, whylen, "CRIU's image streamer request of %u bytes", c->rec_len);
            return -EPROTO;
        }
        c->piece = 1;
        c->need = c->rec_len;
        return CONN_MORE;
    case 1:
        /* Field 1 (tag 0x0a), a length below 128, the name. */
        if (p[0] != 0x0a || p[1] >= 0x80 || 2u + p[1] != c->rec_len ||
            !name_ok((const char *)p + 2, p[1])) {
            snprintf(why, whylen, "CRIU's image streamer request is not one image name (%u "
                     "bytes)", c->rec_len);
            return -EPROTO;
        }
        memcpy(c->name, p + 2, p[1]);
        c->name[p[1]] = '\0';
        c->piece = 2;
        c->need = 1;
        return CONN_NAME;
    }
    c->piece = 0;
    c->need = 4;
    *pipe = c->fd_in;
    c->fd_in = -1;
    if (*pipe < 0) {
        snprintf(why, whylen, "CRIU's image streamer request came without a pipe");
        return -EPROTO;
    }
    return CONN_PIPE;
}

/* After CONN_NAME, for an image that is not there: no pipe comes. */
static void conn_no_pipe(struct conn *c)
{
    c->piece = 0;
    c->need = 4;
}

/* ---- capture: `criu dump --stream` ----------------------------------------- */

struct image {
    struct imgstream *st;
    char name[NAME_MAX_LEN + 1];
    int pipe;                      /* the read end; -1 once ended */
    struct event *ev;
    bool pages;                    /* chunked into the snap, else written to dir */
    int out;                       /* not pages: its file in dir, -1 once ended */
    uint8_t *buf;                  /* pages: the chunk being filled */
    uint32_t fill;
    struct mf_chunk *chunks;       /* pages: by index, as their puts report */
    size_t n_chunks, cap_chunks;
};

struct put {
    struct image *img;
    size_t idx;
};

struct imgstream {
    struct event_base *base;
    struct snap *snap;
    uint64_t gen;
    char *dir;
    struct conn conn;
    uint32_t chunk;
    struct image **images;
    size_t n_images;
    unsigned puts;
    bool paused, finishing, freed;
    int err;
    char msg[600];
    struct snap_counters counters;
    struct mf_file *files;
    size_t n_files;
    imgstream_fn done;
    void *done_arg;
    struct event *later;
};

static unsigned n_live;

static void on_conn(evutil_socket_t fd, short what, void *arg);
static void on_image(evutil_socket_t fd, short what, void *arg);
static void check_done(struct imgstream *st);

static void fail(struct imgstream *st, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fail(struct imgstream *st, int err, const char *fmt, ...)
{
    va_list ap;

    if (st->err)
        return;
    st->err = err;
    va_start(ap, fmt);
    vsnprintf(st->msg, sizeof(st->msg), fmt, ap);
    va_end(ap);
}

struct imgstream *imgstream_start(struct event_base *base, struct snap *snap, uint64_t gen,
                                  const char *dir, char *err, size_t errlen)
{
    struct imgstream *st = calloc(1, sizeof(*st));

    if (!st || !(st->dir = strdup(dir))) {
        free(st);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    st->base = base;
    st->snap = snap;
    st->gen = gen;
    st->chunk = snap_chunk_size(snap);
    if (conn_listen(&st->conn, base, dir, IMGSTREAM_SOCKET, on_conn, st, err, errlen) < 0) {
        free(st->dir);
        free(st);
        return NULL;
    }
    n_live++;
    return st;
}

/* "pages-<n>.img": the bytes of memory, chunked into the snap. */
static bool is_pages(const char *name)
{
    size_t n = strlen(name);

    return strncmp(name, "pages-", 6) == 0 && n > 10 && strcmp(name + n - 4, ".img") == 0;
}

static void open_image(struct imgstream *st, const char *name, int pipe)
{
    struct image *img = calloc(1, sizeof(*img)), **ni;
    char path[4400];

    for (size_t i = 0; i < st->n_images; i++)
        if (strcmp(st->images[i]->name, name) == 0) {
            fail(st, -EPROTO, "CRIU streamed the image '%s' twice", name);
            goto fail;
        }
    if (!img || st->n_images >= IMAGES_MAX ||
        !(ni = realloc(st->images, (st->n_images + 1) * sizeof(*ni)))) {
        fail(st, -ENOMEM, "out of memory, or more than %d images", IMAGES_MAX);
        goto fail;
    }
    st->images = ni;
    img->st = st;
    img->pipe = pipe;
    img->out = -1;
    img->pages = is_pages(name);
    snprintf(img->name, sizeof(img->name), "%s", name);
    if (!img->pages) {
        snprintf(path, sizeof(path), "%s/%s", st->dir, name);
        if ((img->out = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
                             0600)) < 0) {
            fail(st, -errno, "cannot create '%s': %s", path, strerror(errno));
            goto fail;
        }
    }
    if (fcntl(pipe, F_SETFL, O_NONBLOCK) < 0 ||
        !(img->ev = event_new(st->base, pipe, EV_READ | EV_PERSIST, on_image, img)) ||
        (!(st->paused && img->pages) && event_add(img->ev, NULL) < 0)) {
        fail(st, -ENOMEM, "out of memory");
        goto fail;
    }
    st->images[st->n_images++] = img;
    return;
fail:
    if (img) {
        if (img->out >= 0)
            close(img->out);
        free(img);
    }
    close(pipe);
}

/* The connection: each request names an image and passes its pipe. */
static void on_conn(evutil_socket_t fd, short what, void *arg)
{
    struct imgstream *st = arg;
    char why[300];
    int pipe, r = conn_read(&st->conn, &pipe, why, sizeof(why));

    (void)fd;
    (void)what;
    if (r == CONN_MORE || r == CONN_NAME)
        return;
    if (r == CONN_PIPE) {
        open_image(st, st->conn.name, pipe);
        return;
    }
    /* CRIU is done with the images it opened (or gone): they end on
     * their own pipes. */
    if (r < 0)
        fail(st, r, "%s", why);
    conn_close(&st->conn);
    check_done(st);
}

static void pause_pages(struct imgstream *st, bool on)
{
    if (st->paused == on)
        return;
    st->paused = on;
    for (size_t i = 0; i < st->n_images; i++) {
        struct image *img = st->images[i];

        if (img->pages && img->pipe >= 0) {
            if (on)
                event_del(img->ev);
            else
                event_add(img->ev, NULL);
        }
    }
}

static void end_image(struct image *img)
{
    if (img->ev)
        event_free(img->ev);
    img->ev = NULL;
    if (img->pipe >= 0)
        close(img->pipe);
    img->pipe = -1;
    if (img->out >= 0 && close(img->out) < 0)
        fail(img->st, -errno, "cannot write '%s/%s': %s", img->st->dir, img->name,
             strerror(errno));
    img->out = -1;
}

static void free_stream(struct imgstream *st)
{
    for (size_t i = 0; i < st->n_images; i++) {
        end_image(st->images[i]);
        snap_chunk_buf_put(st->snap, st->images[i]->buf);
        free(st->images[i]->chunks);
        free(st->images[i]);
    }
    for (size_t i = 0; i < st->n_files; i++)
        free(st->files[i].path);
    free(st->files);
    free(st->images);
    if (st->later)
        event_free(st->later);
    free(st->dir);
    free(st);
    n_live--;
}

static void on_put(void *arg, int err, const char *msg, const struct mf_chunk *c)
{
    struct put *p = arg;
    struct image *img = p->img;
    struct imgstream *st = img->st;

    st->puts--;
    if (err)
        fail(st, err, "cannot store a chunk of the streamed '%s': %s", img->name, msg);
    else
        img->chunks[p->idx] = *c;
    free(p);
    if (st->freed) {
        if (st->puts == 0)
            free_stream(st);
        return;
    }
    if (st->puts < IMGSTREAM_PUTS)
        pause_pages(st, false);
    check_done(st);
}

/* The chunk in img's buffer goes to the snap. */
static int put_chunk(struct image *img)
{
    struct imgstream *st = img->st;
    struct put *p = malloc(sizeof(*p));

    if (!p)
        return -ENOMEM;
    if (img->n_chunks == img->cap_chunks) {
        size_t cap = img->cap_chunks ? 2 * img->cap_chunks : 64;
        struct mf_chunk *nc = realloc(img->chunks, cap * sizeof(*nc));

        if (!nc) {
            free(p);
            return -ENOMEM;
        }
        img->chunks = nc;
        img->cap_chunks = cap;
    }
    *p = (struct put){ img, img->n_chunks++ };
    st->puts++;
    if (st->puts >= IMGSTREAM_PUTS)
        pause_pages(st, true);
    snap_put_chunk(st->snap, st->gen, img->name, img->buf, img->fill, &st->counters, on_put, p);
    img->buf = NULL;
    img->fill = 0;
    return 0;
}

static void on_image(evutil_socket_t fd, short what, void *arg)
{
    struct image *img = arg;
    struct imgstream *st = img->st;
    uint8_t small[65536];
    ssize_t n;

    (void)what;
    if (!img->pages) {
        while ((n = read(fd, small, sizeof(small))) > 0) {
            for (ssize_t off = 0, w; off < n; off += w)
                if ((w = write(img->out, small + off, (size_t)(n - off))) < 0) {
                    fail(st, -errno, "cannot write '%s/%s': %s", st->dir, img->name,
                         strerror(errno));
                    end_image(img);
                    check_done(st);
                    return;
                }
        }
    } else {
        for (;;) {
            if (!img->buf && !(img->buf = snap_chunk_buf(st->snap))) {
                fail(st, -ENOMEM, "out of memory");
                n = 0;
                break;
            }
            if ((n = read(fd, img->buf + img->fill, st->chunk - img->fill)) <= 0)
                break;
            /* After a failure the rest is drained, not stored: CRIU must
             * not wait on a pipe nobody reads. */
            if (st->err)
                continue;
            if ((img->fill += (uint32_t)n) == st->chunk) {
                if (put_chunk(img) < 0) {
                    fail(st, -ENOMEM, "out of memory");
                    n = 0;
                    break;
                }
                if (st->paused)
                    return;
            }
        }
        /* The short last chunk. */
        if (n == 0 && img->fill && !st->err && put_chunk(img) < 0)
            fail(st, -ENOMEM, "out of memory");
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n < 0)
        fail(st, -errno, "cannot read the streamed '%s': %s", img->name, strerror(errno));
    end_image(img);
    check_done(st);
}

static void on_later(evutil_socket_t fd, short what, void *arg)
{
    struct imgstream *st = arg;

    (void)fd;
    (void)what;
    st->finishing = false;
    st->done(st->done_arg, st->err, st->msg);
}

/* Every image ended and stored, after CRIU: the files, then done. */
static void check_done(struct imgstream *st)
{
    struct timespec now;

    if (!st->finishing || !st->done || st->puts > 0 || st->later)
        return;
    for (size_t i = 0; i < st->n_images; i++)
        if (st->images[i]->pipe >= 0)
            return;
    clock_gettime(CLOCK_REALTIME, &now);
    for (size_t i = 0; !st->err && i < st->n_images; i++) {
        struct image *img = st->images[i];
        struct mf_file *f, *nf;

        if (!img->pages)
            continue;
        if (!(nf = realloc(st->files, (st->n_files + 1) * sizeof(*nf)))) {
            fail(st, -ENOMEM, "out of memory");
            break;
        }
        st->files = nf;
        f = &st->files[st->n_files];
        *f = (struct mf_file){ .type = MF_FILE, .mode = 0600, .mtime_s = now.tv_sec,
                               .mtime_ns = (uint32_t)now.tv_nsec, .chunks = img->chunks,
                               .n_chunks = img->n_chunks, .streamed = true };
        if (!(f->path = strdup(img->name))) {
            fail(st, -ENOMEM, "out of memory");
            break;
        }
        for (size_t c = 0; c < img->n_chunks; c++)
            f->size += img->chunks[c].len;
        st->n_files++;
    }
    /* Never from inside imgstream_finish(). */
    if (!(st->later = event_new(st->base, -1, 0, on_later, st))) {
        st->finishing = false;
        st->done(st->done_arg, -ENOMEM, "out of memory");
        return;
    }
    event_active(st->later, 0, 0);
}

void imgstream_finish(struct imgstream *st, imgstream_fn done, void *arg)
{
    /* CRIU is gone: a connection it never made is not coming. */
    conn_unlisten(&st->conn);
    st->done = done;
    st->done_arg = arg;
    st->finishing = true;
    check_done(st);
}

const struct mf_file *imgstream_files(const struct imgstream *st, size_t *n,
                                      struct snap_counters *c)
{
    const struct snap_counters *s = &st->counters;

    c->bytes_hashed += s->bytes_hashed;
    c->bytes_compressed += s->bytes_compressed;
    c->bytes_sent += s->bytes_sent;
    c->chunks_sent += s->chunks_sent;
    c->cpu_hash_ns += s->cpu_hash_ns;
    c->cpu_encode_ns += s->cpu_encode_ns;
    *n = st->n_files;
    return st->files;
}

struct imgstream *imgstream_free(struct imgstream *st)
{
    if (!st)
        return NULL;
    conn_close(&st->conn);
    for (size_t i = 0; i < st->n_images; i++)
        end_image(st->images[i]);
    st->freed = true;
    if (st->puts == 0)
        free_stream(st);
    return NULL;
}

unsigned imgstream_live(void)
{
    return n_live + snap_streams_live();
}

/* ---- restore: spotd serves the images to `criu restore --stream` -------- */

struct served {
    struct imgserve *sv;
    char name[NAME_MAX_LEN + 1];
    int pipe;                      /* the write end; -1 once ended */
    struct event *ev;              /* the pipe has room */
    int in;                        /* a small image's file in dir, else -1 */
    struct snap_stream *ss;        /* a pages image, from the store */
    const uint8_t *data;           /* pages: the chunk being written */
    size_t len, off;
};

struct imgserve {
    struct event_base *base;
    struct snap *snap;
    uint64_t gen;
    uint32_t rank;
    char *dir;
    struct conn conn;
    bool asked;                    /* conn.name waits for its answer (the manifest) */
    bool loading, freed, logged;
    struct mf_file *pages;         /* the rank's pages images, from its manifest */
    size_t n_pages;
    struct served **imgs;
    size_t n_imgs;
    int err;
    char msg[600];
    struct snap_counters counters;
    int64_t t0;
    void (*failed)(void *arg);
    void *arg;
};

static void serve_fail(struct imgserve *sv, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void serve_fail(struct imgserve *sv, int err, const char *fmt, ...)
{
    va_list ap;

    if (sv->err)
        return;
    sv->err = err;
    va_start(ap, fmt);
    vsnprintf(sv->msg, sizeof(sv->msg), fmt, ap);
    va_end(ap);
    log_msg(LOGL_ERROR, "CRIU's restore cannot have its images: %s (generation %llu)", sv->msg,
            (unsigned long long)sv->gen);
    if (sv->failed && !sv->freed)
        sv->failed(sv->arg);
}

bool imgstream_serve_fits(const char *dir)
{
    return strlen(dir) + 1 + strlen(IMGSERVE_SOCKET) < sizeof(((struct sockaddr_un *)0)->sun_path);
}

static void on_serve_conn(evutil_socket_t fd, short what, void *arg);
static void on_served_room(evutil_socket_t fd, short what, void *arg);
static void on_manifests(void *arg, int err, const char *msg, const struct commit *c,
                         const struct manifest *mfs);
static void answer(struct imgserve *sv);
static void serve_check_done(struct imgserve *sv);
static void serve_destroy(struct imgserve *sv);

struct imgserve *imgstream_serve(struct event_base *base, struct snap *snap, uint64_t gen,
                                 uint32_t rank, const char *dir, void (*failed)(void *arg),
                                 void *arg, char *err, size_t errlen)
{
    struct imgserve *sv = calloc(1, sizeof(*sv));

    if (!sv || !(sv->dir = strdup(dir))) {
        free(sv);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    sv->base = base;
    sv->snap = snap;
    sv->gen = gen;
    sv->rank = rank;
    sv->failed = failed;
    sv->arg = arg;
    sv->t0 = notice_mono_ms();
    if (conn_listen(&sv->conn, base, dir, IMGSERVE_SOCKET, on_serve_conn, sv, err, errlen) < 0) {
        free(sv->dir);
        free(sv);
        return NULL;
    }
    /* Which pages the generation has, and their chunks: while CRIU starts. */
    sv->loading = true;
    n_live++;
    snap_manifests(snap, gen, on_manifests, sv);
    return sv;
}

static void on_manifests(void *arg, int err, const char *msg, const struct commit *c,
                         const struct manifest *mfs)
{
    struct imgserve *sv = arg;
    const struct manifest *m;

    sv->loading = false;
    if (sv->freed) {
        serve_destroy(sv);
        return;
    }
    if (err || sv->rank >= c->world_size) {
        serve_fail(sv, err ? err : -ENOENT, "%s", err ? msg : "no such rank");
        answer(sv);
        return;
    }
    m = &mfs[sv->rank];
    for (size_t i = 0; i < m->n_files && !sv->err; i++) {
        const struct mf_file *f = &m->files[i];
        struct mf_file *np, *p;

        if (f->type != MF_FILE || !is_pages(f->path))
            continue;
        if (!(np = realloc(sv->pages, (sv->n_pages + 1) * sizeof(*np)))) {
            serve_fail(sv, -ENOMEM, "out of memory");
            break;
        }
        sv->pages = np;
        p = &np[sv->n_pages];
        *p = *f;
        p->target = NULL;
        p->chunks = f->n_chunks ? malloc(f->n_chunks * sizeof(*f->chunks)) : NULL;
        if (!(p->path = strdup(f->path)) || (f->n_chunks && !p->chunks)) {
            free(p->path);
            free(p->chunks);
            serve_fail(sv, -ENOMEM, "out of memory");
            break;
        }
        if (f->n_chunks)
            memcpy(p->chunks, f->chunks, f->n_chunks * sizeof(*f->chunks));
        sv->n_pages++;
    }
    answer(sv);
}

static const struct mf_file *find_pages(const struct imgserve *sv, const char *name)
{
    for (size_t i = 0; i < sv->n_pages; i++)
        if (strcmp(sv->pages[i].path, name) == 0)
            return &sv->pages[i];
    return NULL;
}

/* Whether the image asked for is there: a pages image of the manifest,
 * or another image restored into dir (a regular file, not a link). */
static bool exists(const struct imgserve *sv, const char *name)
{
    char path[4400];
    struct stat st;

    if (find_pages(sv, name))
        return true;
    snprintf(path, sizeof(path), "%s/%s", sv->dir, name);
    return lstat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The reply to the request in sv->want, once the manifest is in; after a
 * failure the connection ends (CRIU's restore fails on it). */
static void answer(struct imgserve *sv)
{
    uint8_t reply[6] = { 2, 0, 0, 0, 0x08, 0 };
    uint32_t two = 2;

    if (!sv->asked || sv->loading || sv->conn.cfd < 0)
        return;
    sv->asked = false;
    if (sv->err) {
        conn_close(&sv->conn);
        serve_check_done(sv);
        return;
    }
    memcpy(reply, &two, 4);
    reply[5] = exists(sv, sv->conn.name);
    if (send(sv->conn.cfd, reply, sizeof(reply), MSG_NOSIGNAL) != (ssize_t)sizeof(reply)) {
        serve_fail(sv, -EPROTO, "cannot answer CRIU's request for '%s': %s", sv->conn.name,
                   strerror(errno));
        conn_close(&sv->conn);
        serve_check_done(sv);
        return;
    }
    /* A pipe follows for an image that is there; the next request for one
     * that is not. */
    if (!reply[5])
        conn_no_pipe(&sv->conn);
    if (event_add(sv->conn.cev, NULL) < 0) {
        serve_fail(sv, -ENOMEM, "out of memory");
        conn_close(&sv->conn);
        serve_check_done(sv);
    }
}

static void served_end(struct served *s)
{
    if (s->ev)
        event_free(s->ev);
    s->ev = NULL;
    if (s->pipe >= 0)
        close(s->pipe);
    s->pipe = -1;
    if (s->in >= 0)
        close(s->in);
    s->in = -1;
    snap_stream_free(s->ss);
    s->ss = NULL;
}

/* Write what there is to write into s's pipe, until it is full. */
static void served_pump(struct served *s)
{
    struct imgserve *sv = s->sv;
    ssize_t n;

    for (;;) {
        if (s->in >= 0)
            n = splice(s->in, NULL, s->pipe, NULL, 1 << 20, SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
        else if (s->data)
            n = write(s->pipe, s->data + s->off, s->len - s->off);
        else
            return;               /* the next chunk is on its way */
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN) {
            if (event_add(s->ev, NULL) < 0) {
                serve_fail(sv, -ENOMEM, "out of memory");
                break;
            }
            return;
        }
        if (n < 0) {
            serve_fail(sv, -errno, "cannot hand '%s' to CRIU: %s", s->name, strerror(errno));
            break;
        }
        if (s->in >= 0) {
            if (n == 0)
                break;            /* all of the file */
            continue;
        }
        if ((s->off += (size_t)n) == s->len) {
            s->data = NULL;
            snap_stream_next(s->ss);
            return;
        }
    }
    served_end(s);
    serve_check_done(sv);
}

static void on_served_room(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    served_pump(arg);
}

static void on_chunk(void *arg, int err, const char *msg, const uint8_t *data, size_t len)
{
    struct served *s = arg;

    if (err)
        serve_fail(s->sv, err, "%s", msg);
    if (err || !data) {
        served_end(s);
        serve_check_done(s->sv);
        return;
    }
    s->data = data;
    s->len = len;
    s->off = 0;
    served_pump(s);
}

static void serve_image(struct imgserve *sv, const char *name, int pipe)
{
    struct served *s = calloc(1, sizeof(*s)), **ni;
    const struct mf_file *f = find_pages(sv, name);
    char path[4400];

    if (!s || sv->n_imgs >= IMAGES_MAX ||
        !(ni = realloc(sv->imgs, (sv->n_imgs + 1) * sizeof(*ni)))) {
        serve_fail(sv, -ENOMEM, "out of memory, or more than %d images", IMAGES_MAX);
        free(s);
        close(pipe);
        return;
    }
    sv->imgs = ni;
    sv->imgs[sv->n_imgs++] = s;
    s->sv = sv;
    s->pipe = pipe;
    s->in = -1;
    snprintf(s->name, sizeof(s->name), "%s", name);
    if (fcntl(pipe, F_SETFL, O_NONBLOCK) < 0 ||
        !(s->ev = event_new(sv->base, pipe, EV_WRITE, on_served_room, s))) {
        serve_fail(sv, -ENOMEM, "out of memory");
    } else if (f) {
        if (!(s->ss = snap_stream_open(sv->snap, f, &sv->counters, on_chunk, s)))
            serve_fail(sv, -ENOMEM, "out of memory");
        else
            return;
    } else {
        snprintf(path, sizeof(path), "%s/%s", sv->dir, name);
        if ((s->in = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
            serve_fail(sv, -errno, "cannot open '%s': %s", path, strerror(errno));
        } else {
            served_pump(s);
            return;
        }
    }
    served_end(s);
}

/* The connection: each request names an image; the answer says whether
 * it is there, and if it is, its pipe comes. */
static void on_serve_conn(evutil_socket_t fd, short what, void *arg)
{
    struct imgserve *sv = arg;
    char why[300];
    int pipe, r = conn_read(&sv->conn, &pipe, why, sizeof(why));

    (void)fd;
    (void)what;
    if (r == CONN_MORE)
        return;
    if (r == CONN_NAME) {
        /* Nothing more comes before the answer. */
        event_del(sv->conn.cev);
        sv->asked = true;
        answer(sv);
        return;
    }
    if (r == CONN_PIPE) {
        serve_image(sv, sv->conn.name, pipe);
        return;
    }
    /* CRIU has all it asked for, or is gone. */
    if (r < 0)
        serve_fail(sv, r, "%s", why);
    conn_close(&sv->conn);
    serve_check_done(sv);
}

/* CRIU gone and every image ended: what the stream brought, once. */
static void serve_check_done(struct imgserve *sv)
{
    uint64_t bytes = sv->counters.bytes_hashed + sv->counters.bytes_zero;

    if (sv->logged || sv->conn.cfd >= 0 || sv->conn.lev)
        return;
    for (size_t i = 0; i < sv->n_imgs; i++)
        if (sv->imgs[i]->pipe >= 0)
            return;
    sv->logged = true;
    if (!sv->err)
        log_msg(LOGL_INFO, "CRIU's restore took its pages from the store: %llu MiB in %lld ms, "
                "each chunk checked, none written to disk", (unsigned long long)(bytes >> 20),
                (long long)(notice_mono_ms() - sv->t0));
}

struct imgserve *imgstream_serve_free(struct imgserve *sv)
{
    if (!sv)
        return NULL;
    conn_close(&sv->conn);
    sv->freed = true;
    if (!sv->loading)
        serve_destroy(sv);
    return NULL;
}

static void serve_destroy(struct imgserve *sv)
{
    for (size_t i = 0; i < sv->n_imgs; i++) {
        served_end(sv->imgs[i]);
        free(sv->imgs[i]);
    }
    for (size_t i = 0; i < sv->n_pages; i++) {
        free(sv->pages[i].path);
        free(sv->pages[i].chunks);
    }
    free(sv->pages);
    free(sv->imgs);
    free(sv->dir);
    free(sv);
    n_live--;
}
