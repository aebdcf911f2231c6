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
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "spot/log.h"

#define NAME_MAX_LEN 128
#define IMAGES_MAX 4096

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
    char sock[sizeof(((struct sockaddr_un *)0)->sun_path)];
    uint32_t chunk;
    int lfd, cfd;
    struct event *lev, *cev;
    /* the connection: what is being read (0 the length, 1 the record, 2
     * the byte with the descriptor), and of it how much */
    int piece;
    uint8_t len[4], rec[256], byte;
    uint32_t rec_len, need, got;
    int fd_in;                     /* a descriptor received, not yet given to an image */
    struct image **images;
    size_t n_images;
    unsigned puts;
    bool paused, conn_ended, finishing, freed;
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

static void on_accept(evutil_socket_t fd, short what, void *arg);
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
    struct sockaddr_un sa = { .sun_family = AF_UNIX };

    if (!st || !(st->dir = strdup(dir))) {
        free(st);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    st->base = base;
    st->snap = snap;
    st->gen = gen;
    st->chunk = snap_chunk_size(snap);
    st->lfd = st->cfd = st->fd_in = -1;
    if ((size_t)snprintf(st->sock, sizeof(st->sock), "%s/%s", dir, IMGSTREAM_SOCKET) >=
        sizeof(st->sock)) {
        snprintf(err, errlen, "'%s' is too long a path for CRIU's streamer socket", dir);
        goto fail;
    }
    memcpy(sa.sun_path, st->sock, sizeof(st->sock));
    unlink(st->sock);
    if ((st->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0 ||
        bind(st->lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(st->lfd, 1) < 0 ||
        !(st->lev = event_new(base, st->lfd, EV_READ | EV_PERSIST, on_accept, st)) ||
        event_add(st->lev, NULL) < 0) {
        snprintf(err, errlen, "cannot listen at '%s': %s", st->sock, strerror(errno));
        goto fail;
    }
    n_live++;
    return st;
fail:
    if (st->lev)
        event_free(st->lev);
    if (st->lfd >= 0)
        close(st->lfd);
    unlink(st->sock);
    free(st->dir);
    free(st);
    return NULL;
}

/* CRIU connects once; the socket goes at once, so that the save does not
 * find it in dir. */
static void on_accept(evutil_socket_t fd, short what, void *arg)
{
    struct imgstream *st = arg;
    int c = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

    (void)what;
    if (c < 0)
        return;
    event_free(st->lev);
    st->lev = NULL;
    close(st->lfd);
    st->lfd = -1;
    unlink(st->sock);
    st->cfd = c;
    st->need = 4;
    if (!(st->cev = event_new(st->base, c, EV_READ | EV_PERSIST, on_conn, st)) ||
        event_add(st->cev, NULL) < 0) {
        fail(st, -ENOMEM, "out of memory");
        st->conn_ended = true;
    }
}

static void end_conn(struct imgstream *st)
{
    if (st->cev)
        event_free(st->cev);
    st->cev = NULL;
    if (st->cfd >= 0)
        close(st->cfd);
    st->cfd = -1;
    if (st->fd_in >= 0)
        close(st->fd_in);
    st->fd_in = -1;
    st->conn_ended = true;
}

/* "pages-<n>.img": the bytes of memory, chunked into the snap. */
static bool is_pages(const char *name)
{
    size_t n = strlen(name);

    return strncmp(name, "pages-", 6) == 0 && n > 10 && strcmp(name + n - 4, ".img") == 0;
}

/* A name CRIU may give: one plain file name, no path. */
static bool name_ok(const char *name, size_t len)
{
    if (len == 0 || len > NAME_MAX_LEN || name[0] == '.')
        return false;
    for (size_t i = 0; i < len; i++)
        if (name[i] == '/' || (unsigned char)name[i] < 0x21 || (unsigned char)name[i] > 0x7e)
            return false;
    return true;
}

/* The record: field 1 (tag 0x0a), a length below 128, the name. */
static int parse_request(struct imgstream *st, char *name)
{
    const uint8_t *p = st->rec;
    uint32_t len = st->rec_len;

    if (len < 2 || p[0] != 0x0a || p[1] >= 0x80 || 2u + p[1] != len ||
        !name_ok((const char *)p + 2, p[1])) {
        fail(st, -EPROTO, "CRIU's image streamer request is not one image name (%u bytes)",
             len);
        return -EPROTO;
    }
    memcpy(name, p + 2, p[1]);
    name[p[1]] = '\0';
    return 0;
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

/* Read the connection a piece at a time: never past the byte a
 * descriptor comes with. */
static void on_conn(evutil_socket_t fd, short what, void *arg)
{
    struct imgstream *st = arg;
    union { struct cmsghdr h; char buf[CMSG_SPACE(sizeof(int) * 4)]; } cm;
    uint8_t *into = st->piece == 0 ? st->len : st->piece == 1 ? st->rec : &st->byte;
    struct iovec iov = { into + st->got, st->need - st->got };
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf,
                         .msg_controllen = sizeof(cm.buf) };
    char name[NAME_MAX_LEN + 1];
    ssize_t n;
    int pipe;

    (void)what;
    n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    for (struct cmsghdr *h = CMSG_FIRSTHDR(&mh); n > 0 && h; h = CMSG_NXTHDR(&mh, h)) {
        if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS)
            continue;
        for (size_t i = 0; i < (h->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
            int got;

            memcpy(&got, CMSG_DATA(h) + i * sizeof(int), sizeof(int));
            if (st->fd_in < 0 && st->piece == 2)
                st->fd_in = got;
            else
                close(got);
        }
    }
    if (n <= 0) {
        /* CRIU is done with the images it opened (or gone): they end on
         * their own pipes. */
        if (n < 0 || st->piece != 0 || st->got != 0)
            fail(st, n < 0 ? -errno : -EPROTO, "CRIU's image streamer connection ended "
                 "inside a request");
        end_conn(st);
        check_done(st);
        return;
    }
    if ((st->got += (uint32_t)n) < st->need)
        return;
    st->got = 0;
    switch (st->piece) {
    case 0:
        memcpy(&st->rec_len, st->len, 4);
        if (st->rec_len < 2 || st->rec_len > sizeof(st->rec)) {
            fail(st, -EPROTO, "CRIU's image streamer request of %u bytes", st->rec_len);
            end_conn(st);
            check_done(st);
            return;
        }
        st->piece = 1;
        st->need = st->rec_len;
        return;
    case 1:
        st->piece = 2;
        st->need = 1;
        return;
    }
    /* The byte came: with the pipe, or the request is broken. */
    st->piece = 0;
    st->need = 4;
    pipe = st->fd_in;
    st->fd_in = -1;
    if (pipe < 0)
        fail(st, -EPROTO, "CRIU's image streamer request came without a pipe");
    else if (parse_request(st, name) == 0)
        open_image(st, name, pipe);
    else
        close(pipe);
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
    if (st->lev) {
        event_free(st->lev);
        st->lev = NULL;
        close(st->lfd);
        st->lfd = -1;
        unlink(st->sock);
    }
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
    if (st->lev)
        event_free(st->lev);
    if (st->lfd >= 0)
        close(st->lfd);
    unlink(st->sock);
    end_conn(st);
    for (size_t i = 0; i < st->n_images; i++)
        end_image(st->images[i]);
    st->freed = true;
    if (st->puts == 0)
        free_stream(st);
    return NULL;
}

unsigned imgstream_live(void)
{
    return n_live;
}
