/*
 * chunking: how many bytes of NEW would be uploaded again when NEW is
 * chunked and deduplicated (by SHA-256) against OLD, and how fast the chunk
 * boundaries are found.
 *
 *   cc -O2 -o build/chunking tests/bench/chunking.c \
 *       $(pkg-config --cflags --libs libcrypto)
 *   chunking [--fixed SIZE | --cdc AVG | --zip SIZE [--zip-min BYTES]] OLD NEW
 *
 * SIZE and AVG take a K, M or G suffix (powers of 1024). --cdc AVG needs a
 * power of two.
 *
 *   --fixed SIZE  chunks at offsets 0, SIZE, 2*SIZE, ...
 *   --cdc AVG     FastCDC (Xia et al., 2016/2020): gear hash, normalized
 *                 chunking (level 2: a mask of log2(AVG)+2 bits before AVG
 *                 bytes, log2(AVG)-2 bits after), min AVG/4, max AVG*4,
 *                 the first min bytes of each chunk skipped.
 *   --zip SIZE    a hybrid: the file is read as a zip archive (what
 *                 torch.save writes) and the fixed grid restarts at the
 *                 start of the data of every member of at least SIZE/4
 *                 bytes (--zip-min BYTES changes that); the headers and
 *                 small members between two such members are cut on a
 *                 grid of their own that starts where the previous large
 *                 member ends. A file that is not a zip is one region, so
 *                 this equals --fixed.
 *
 * Each file is chunked on its own. Prints key=value lines:
 *   new_bytes      size of NEW
 *   chunks         chunks of NEW (old_chunks: of OLD)
 *   upload_bytes   bytes of NEW's chunks whose SHA-256 is not among OLD's
 *                  chunks; a chunk that occurs twice in NEW counts twice
 *   upload_pct     upload_bytes / new_bytes
 *   upload_unique_bytes  the same, each new digest counted once
 *   boundary_mbps  boundary finding on NEW, one thread, without SHA-256,
 *                  bytes per second of thread CPU time (10^6 B/s);
 *                  boundary_wall_mbps: per second of wall time
 *   sha256_mbps    SHA-256 of NEW's chunks, thread CPU time, for scale
 * Both files are mmap'ed with MAP_POPULATE (or read into memory), so the
 * timed passes do not fault pages in.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

enum mode { MODE_FIXED, MODE_CDC, MODE_ZIP };

struct params {
    enum mode mode;
    uint64_t size;   /* fixed size, or CDC average */
    uint64_t min, max;
    uint64_t mask_s, mask_l;
    uint64_t zip_min; /* --zip: members smaller than this stay in the gaps;
                         0: SIZE/4 */
};

struct buf {
    const uint8_t *p;
    size_t n;
    int mapped;
};

/* Chunk ends (exclusive offsets), ascending; the last is the file size. */
struct cuts {
    uint64_t *v;
    size_t n, cap;
};

static uint64_t gear[256];

static void die(const char *what)
{
    fprintf(stderr, "chunking: %s: %s\n", what, strerror(errno));
    exit(2);
}

static void usage(void)
{
    fprintf(stderr,
            "usage: chunking [--fixed SIZE | --cdc AVG | --zip SIZE [--zip-min BYTES]]"
            " OLD NEW\n");
    exit(2);
}

static uint64_t parse_size(const char *s)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s)
        usage();
    switch (*end) {
    case 'k': case 'K': v <<= 10; end++; break;
    case 'm': case 'M': v <<= 20; end++; break;
    case 'g': case 'G': v <<= 30; end++; break;
    }
    if (*end == 'i' && end[1] == 'B')
        end += 2;
    else if (*end == 'B')
        end++;
    if (*end || v == 0)
        usage();
    return v;
}

static double now(clockid_t clk)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static struct buf load(const char *path)
{
    struct buf b = {0};
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        die(path);
    struct stat st;
    if (fstat(fd, &st) < 0)
        die(path);
    b.n = st.st_size;
    if (b.n == 0) {
        b.p = (const uint8_t *)"";
        close(fd);
        return b;
    }
    void *m = mmap(NULL, b.n, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    if (m != MAP_FAILED) {
        b.p = m;
        b.mapped = 1;
    } else {
        uint8_t *p = malloc(b.n);
        if (!p)
            die("malloc");
        size_t got = 0;
        while (got < b.n) {
            ssize_t r = read(fd, p + got, b.n - got);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                die(path);
            got += r;
        }
        b.p = p;
    }
    close(fd);
    return b;
}

static void push(struct cuts *c, uint64_t end)
{
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 1024;
        c->v = realloc(c->v, c->cap * sizeof *c->v);
        if (!c->v)
            die("realloc");
    }
    c->v[c->n++] = end;
}

/* splitmix64 from a fixed seed, so the gear table (and so every boundary)
 * is the same in every run and on every machine. */
static void gear_init(void)
{
    uint64_t x = 0x5370744443444331ULL; /* "SptDCDC1" */
    for (int i = 0; i < 256; i++) {
        uint64_t z = (x += 0x9E3779B97F4A7C15ULL);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        gear[i] = z ^ (z >> 31);
    }
}

/* A mask of the top `bits` bits of the hash: with hash = (hash << 1) +
 * gear[b], bit 63-k depends on the last 64-k bytes, so the top bits see the
 * widest window (the low bits would see only the last few bytes). */
static uint64_t top_mask(int bits)
{
    return bits <= 0 ? 0 : ~0ULL << (64 - bits);
}

/* Length of the FastCDC chunk at the start of src[0..n). */
static inline uint64_t fastcdc_cut(const struct params *pr, const uint8_t *src,
                                   uint64_t n)
{
    uint64_t min = pr->min, max = pr->max, normal = pr->size;
    if (n <= min)
        return n;
    if (n > max)
        n = max;
    if (n < normal)
        normal = n;
    uint64_t h = 0, i = min;
    const uint64_t ms = pr->mask_s, ml = pr->mask_l;
    for (; i < normal; i++) {
        h = (h << 1) + gear[src[i]];
        if (!(h & ms))
            return i + 1;
    }
    for (; i < n; i++) {
        h = (h << 1) + gear[src[i]];
        if (!(h & ml))
            return i + 1;
    }
    return n;
}

/* Fixed grid over [start, end), starting at start. */
static void fixed_region(struct cuts *c, uint64_t start, uint64_t end,
                         uint64_t size)
{
    for (uint64_t o = start; o < end;) {
        uint64_t e = end - o > size ? o + size : end;
        push(c, e);
        o = e;
    }
}

static uint16_t rd16(const uint8_t *p) { return p[0] | p[1] << 8; }
static uint32_t rd32(const uint8_t *p) { return rd16(p) | (uint32_t)rd16(p + 2) << 16; }
static uint64_t rd64(const uint8_t *p) { return rd32(p) | (uint64_t)rd32(p + 4) << 32; }

struct region {
    uint64_t start, end;
};

static int region_cmp(const void *a, const void *b)
{
    const struct region *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

/* The data regions of a zip's members, from the central directory (zip64
 * aware). Returns the count, 0 when the file is not a zip we understand. */
static size_t zip_regions(const struct buf *b, struct region **out)
{
    const uint8_t *p = b->p;
    size_t n = b->n;
    if (n < 22)
        return 0;
    size_t lo = n > 22 + 65535 ? n - 22 - 65535 : 0, eocd = SIZE_MAX;
    for (size_t i = n - 22 + 1; i-- > lo;)
        if (rd32(p + i) == 0x06054b50) {
            eocd = i;
            break;
        }
    if (eocd == SIZE_MAX)
        return 0;
    uint64_t entries = rd16(p + eocd + 10), cd = rd32(p + eocd + 16);
    if (eocd >= 20 && rd32(p + eocd - 20) == 0x07064b50) {
        uint64_t z = rd64(p + eocd - 20 + 8);
        if (z + 56 <= n && rd32(p + z) == 0x06064b50) {
            entries = rd64(p + z + 32);
            cd = rd64(p + z + 48);
        }
    }
    struct region *r = calloc(entries ? entries : 1, sizeof *r);
    if (!r)
        die("calloc");
    size_t k = 0;
    uint64_t o = cd;
    for (uint64_t e = 0; e < entries; e++) {
        if (o + 46 > n || rd32(p + o) != 0x02014b50)
            goto bad;
        uint64_t csize = rd32(p + o + 20), usize = rd32(p + o + 24);
        uint64_t lho = rd32(p + o + 42);
        unsigned nlen = rd16(p + o + 28), xlen = rd16(p + o + 30),
                 clen = rd16(p + o + 32);
        const uint8_t *x = p + o + 46 + nlen, *xe = x + xlen;
        if (o + 46 + nlen + xlen > n)
            goto bad;
        while (x + 4 <= xe) {
            unsigned id = rd16(x), len = rd16(x + 2);
            if (id == 1) { /* zip64: the fields that are 0xffffffff, in order */
                const uint8_t *f = x + 4;
                if (usize == 0xffffffff && f + 8 <= x + 4 + len) { usize = rd64(f); f += 8; }
                if (csize == 0xffffffff && f + 8 <= x + 4 + len) { csize = rd64(f); f += 8; }
                if (lho == 0xffffffff && f + 8 <= x + 4 + len) { lho = rd64(f); f += 8; }
            }
            x += 4 + len;
        }
        if (lho + 30 > n || rd32(p + lho) != 0x04034b50)
            goto bad;
        uint64_t data = lho + 30 + rd16(p + lho + 26) + rd16(p + lho + 28);
        if (data + csize > n)
            goto bad;
        r[k].start = data;
        r[k].end = data + csize;
        k++;
        o += 46 + nlen + xlen + clen;
    }
    qsort(r, k, sizeof *r, region_cmp);
    *out = r;
    return k;
bad:
    free(r);
    return 0;
}

static void chunk(const struct params *pr, const struct buf *b, struct cuts *c)
{
    c->n = 0;
    if (pr->mode == MODE_FIXED) {
        fixed_region(c, 0, b->n, pr->size);
    } else if (pr->mode == MODE_CDC) {
        uint64_t o = 0;
        while (o < b->n) {
            o += fastcdc_cut(pr, b->p + o, b->n - o);
            push(c, o);
        }
    } else {
        struct region *r = NULL;
        size_t k = zip_regions(b, &r);
        uint64_t o = 0;
        for (size_t i = 0; i < k; i++) {
            if (r[i].start < o || r[i].end - r[i].start < pr->zip_min ||
                r[i].start == r[i].end)
                continue;
            /* the headers and small members since the last large one */
            fixed_region(c, o, r[i].start, pr->size);
            fixed_region(c, r[i].start, r[i].end, pr->size);
            o = r[i].end;
        }
        if (o < b->n)
            fixed_region(c, o, b->n, pr->size);
        free(r);
    }
}

typedef uint8_t digest[32];

static int dcmp(const void *a, const void *b)
{
    return memcmp(a, b, sizeof(digest));
}

struct upl {
    digest d;
    uint64_t len;
};

static void sha(EVP_MD_CTX *ctx, const uint8_t *p, size_t n, uint8_t *out)
{
    if (!EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) ||
        !EVP_DigestUpdate(ctx, p, n) || !EVP_DigestFinal_ex(ctx, out, NULL)) {
        fprintf(stderr, "chunking: SHA-256 failed\n");
        exit(2);
    }
}

static digest *hash_chunks(EVP_MD_CTX *ctx, const struct buf *b,
                           const struct cuts *c)
{
    digest *d = malloc((c->n ? c->n : 1) * sizeof *d);
    if (!d)
        die("malloc");
    uint64_t s = 0;
    for (size_t i = 0; i < c->n; i++) {
        sha(ctx, b->p + s, c->v[i] - s, d[i]);
        s = c->v[i];
    }
    return d;
}

int main(int argc, char **argv)
{
    struct params pr = {.mode = MODE_FIXED, .size = 4 << 20};
    int i = 1;
    for (; i < argc && argv[i][0] == '-' && argv[i][1] == '-'; i++) {
        if (!strcmp(argv[i], "--fixed") && i + 1 < argc) {
            pr.mode = MODE_FIXED;
            pr.size = parse_size(argv[++i]);
        } else if (!strcmp(argv[i], "--cdc") && i + 1 < argc) {
            pr.mode = MODE_CDC;
            pr.size = parse_size(argv[++i]);
        } else if (!strcmp(argv[i], "--zip-min") && i + 1 < argc) {
            pr.zip_min = parse_size(argv[++i]);
        } else if (!strcmp(argv[i], "--zip") && i + 1 < argc) {
            pr.mode = MODE_ZIP;
            pr.size = parse_size(argv[++i]);
        } else {
            usage();
        }
    }
    if (argc - i != 2)
        usage();
    if (pr.mode == MODE_ZIP && !pr.zip_min)
        pr.zip_min = pr.size / 4;
    if (pr.mode == MODE_CDC) {
        if (pr.size & (pr.size - 1) || pr.size < 64) {
            fprintf(stderr, "chunking: --cdc AVG must be a power of two >= 64\n");
            return 2;
        }
        int bits = __builtin_ctzll(pr.size);
        pr.min = pr.size / 4;
        pr.max = pr.size * 4;
        pr.mask_s = top_mask(bits + 2);
        pr.mask_l = top_mask(bits - 2);
        gear_init();
    }

    struct buf old = load(argv[i]), new = load(argv[i + 1]);
    struct cuts oc = {0}, nc = {0};

    chunk(&pr, &old, &oc);

    /* Timed: boundaries of NEW, repeated until at least 0.3 s of CPU. */
    double cpu = 0, wall = 0;
    uint64_t scanned = 0;
    int reps = 0;
    do {
        double c0 = now(CLOCK_THREAD_CPUTIME_ID), w0 = now(CLOCK_MONOTONIC);
        chunk(&pr, &new, &nc);
        __asm__ volatile("" ::"r"(nc.v) : "memory");
        cpu += now(CLOCK_THREAD_CPUTIME_ID) - c0;
        wall += now(CLOCK_MONOTONIC) - w0;
        scanned += new.n;
        reps++;
    } while (cpu < 0.3 && reps < 1000000 && new.n);

    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx)
        die("EVP_MD_CTX_new");
    digest *od = hash_chunks(ctx, &old, &oc);
    double s0 = now(CLOCK_THREAD_CPUTIME_ID);
    digest *nd = hash_chunks(ctx, &new, &nc);
    double shacpu = now(CLOCK_THREAD_CPUTIME_ID) - s0;
    qsort(od, oc.n, sizeof *od, dcmp);

    uint64_t up = 0, upu = 0, s = 0, minc = UINT64_MAX, maxc = 0;
    size_t newchunks = 0;
    struct upl *u = malloc((nc.n ? nc.n : 1) * sizeof *u);
    if (!u)
        die("malloc");
    for (size_t k = 0; k < nc.n; k++) {
        uint64_t len = nc.v[k] - s;
        s = nc.v[k];
        if (k + 1 < nc.n || nc.n == 1) { /* the last chunk is a remainder */
            if (len < minc) minc = len;
            if (len > maxc) maxc = len;
        }
        if (bsearch(nd[k], od, oc.n, sizeof *od, dcmp))
            continue;
        up += len;
        memcpy(u[newchunks].d, nd[k], sizeof(digest));
        u[newchunks++].len = len;
    }
    qsort(u, newchunks, sizeof *u, dcmp); /* d is the first member */
    for (size_t k = 0; k < newchunks; k++)
        if (k == 0 || memcmp(u[k].d, u[k - 1].d, sizeof(digest)))
            upu += u[k].len;
    if (minc == UINT64_MAX)
        minc = 0;

    const char *mname = pr.mode == MODE_FIXED ? "fixed"
                        : pr.mode == MODE_CDC ? "cdc" : "zip";
    printf("mode=%s\n", mname);
    printf("size=%" PRIu64 "\n", pr.size);
    if (pr.mode == MODE_ZIP)
        printf("zip_min=%" PRIu64 "\n", pr.zip_min);
    printf("old_bytes=%zu\n", old.n);
    printf("old_chunks=%zu\n", oc.n);
    printf("new_bytes=%zu\n", new.n);
    printf("chunks=%zu\n", nc.n);
    printf("chunk_avg=%.0f\n", nc.n ? (double)new.n / nc.n : 0.0);
    printf("chunk_min=%" PRIu64 "\n", minc);
    printf("chunk_max=%" PRIu64 "\n", maxc);
    printf("upload_chunks=%zu\n", newchunks);
    printf("upload_bytes=%" PRIu64 "\n", up);
    printf("upload_pct=%.2f\n", new.n ? 100.0 * up / new.n : 0.0);
    printf("upload_unique_bytes=%" PRIu64 "\n", upu);
    printf("boundary_mbps=%.0f\n", cpu > 0 ? scanned / cpu / 1e6 : 0.0);
    printf("boundary_wall_mbps=%.0f\n", wall > 0 ? scanned / wall / 1e6 : 0.0);
    printf("boundary_reps=%d\n", reps);
    printf("sha256_mbps=%.0f\n", shacpu > 0 ? new.n / shacpu / 1e6 : 0.0);

    EVP_MD_CTX_free(ctx);
    return 0;
}
