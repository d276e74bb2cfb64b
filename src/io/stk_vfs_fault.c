/*
 * stk_vfs_fault.c: a byte source that misbehaves on a schedule, for tests and fuzz targets:
 * `stk-fault:PLAN:PATH` serves PATH (any other byte source: a local file, s3://, http://) through
 * faults listed in PLAN, so a format's handling of a failing, short or lying transport can be
 * tried on any file without a network or a broken disk.
 *
 * PLAN is a comma-separated list of faults, each `KIND@A`, `KIND@A-B` (bytes A..B inclusive of
 * the file) or `KIND#N` (the Nth read call on the open file, counting from 1):
 *   eio    the read fails with STK_EIO "injected I/O error"
 *   short  the transport delivers only the bytes before A (for #N: none): STK_EIO "short read"
 *   flip   the bytes read at A..B (for #N: the first byte of that read) come back with bit 5
 *          flipped; the read succeeds (damage in transit or on disk, which only a checksum sees)
 * and `size=S` makes the file claim S bytes at open (a lying length: reads past the real end
 * fail as the inner byte source says). An empty PLAN passes everything through.
 *
 * Faults at byte ranges are pure functions of the read's range, so they hold for any number of
 * threads and any read order; only #N counts (an atomic counter per open file). stat, list and
 * glob are the inner path's (glob's matches get the prefix back). Always compiled (no build
 * flag): a path nobody writes by accident, documented in docs/reliability.md.
 */
#include "io/stk_vfs.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define PREFIX "stk-fault:"
#define PREFIX_LEN (sizeof(PREFIX) - 1)
#define MAX_FAULTS 16

enum { F_EIO, F_SHORT, F_FLIP };

typedef struct fault {
    int kind;
    bool by_count;    /* #N: n is the read number; else bytes [a, b] */
    uint64_t a, b, n; /* inclusive byte range, or the read number */
} fault;

typedef struct ffile {
    stk__file base;
    stk__file *inner;
    fault f[MAX_FAULTS];
    int n_faults;
    _Atomic uint64_t reads;
} ffile;

static bool fault_claims(const char *path)
{
    return strncmp(path, PREFIX, PREFIX_LEN) == 0;
}

/* Split `stk-fault:PLAN:PATH`: *plan and *plan_len, *inner (PATH). false when malformed. */
static bool split(const char *path, const char **plan, size_t *plan_len, const char **inner)
{
    const char *p = path + PREFIX_LEN, *colon = strchr(p, ':');
    if (!colon || !colon[1])
        return false;
    *plan = p;
    *plan_len = (size_t)(colon - p);
    *inner = colon + 1;
    return true;
}

/* A decimal number at *s (advanced past it). */
static bool number(const char **s, const char *end, uint64_t *out)
{
    const char *p = *s;
    uint64_t v = 0;
    if (p >= end || *p < '0' || *p > '9')
        return false;
    while (p < end && *p >= '0' && *p <= '9') {
        if (v > (UINT64_MAX - 9) / 10)
            return false;
        v = v * 10 + (uint64_t)(*p++ - '0');
    }
    *s = p;
    *out = v;
    return true;
}

/* Parse PLAN into f (and *size_override, UINT64_MAX when absent). */
static stk_status parse_plan(const char *plan, size_t len, ffile *f, uint64_t *size_override,
                             const char *path, char *err, size_t err_size)
{
    const char *p = plan, *end = plan + len;
    *size_override = UINT64_MAX;
    while (p < end) {
        const char *item = p, *comma = memchr(p, ',', (size_t)(end - p));
        const char *stop = comma ? comma : end;
        static const struct {
            const char *name;
            int kind;
        } kinds[] = {{"eio", F_EIO}, {"short", F_SHORT}, {"flip", F_FLIP}};
        bool ok = false;
        if (stop - p > 5 && strncmp(p, "size=", 5) == 0) {
            p += 5;
            ok = number(&p, stop, size_override) && p == stop;
        } else {
            for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]) && !ok; k++) {
                size_t kl = strlen(kinds[k].name);
                if ((size_t)(stop - p) <= kl || strncmp(p, kinds[k].name, kl) != 0)
                    continue;
                if (f->n_faults == MAX_FAULTS)
                    break;
                fault *x = &f->f[f->n_faults];
                const char *q = p + kl + 1;
                x->kind = kinds[k].kind;
                if (p[kl] == '#') {
                    x->by_count = true;
                    ok = number(&q, stop, &x->n) && x->n > 0 && q == stop;
                } else if (p[kl] == '@') {
                    ok = number(&q, stop, &x->a);
                    x->b = x->a;
                    if (ok && q < stop && *q == '-') {
                        q++;
                        ok = number(&q, stop, &x->b) && x->b >= x->a;
                    }
                    ok = ok && q == stop;
                }
                if (ok)
                    f->n_faults++;
            }
        }
        if (!ok)
            return stk__set_error(err, err_size, STK_EINVAL,
                                  "%s: bad fault '%.*s' (eio|short|flip followed by @A, @A-B or "
                                  "#N; or size=S)",
                                  path, (int)(stop - item), item);
        p = comma ? comma + 1 : end;
    }
    return STK_OK;
}

static stk_status fault_open(const char *path, stk__file **out, char *err, size_t err_size)
{
    *out = NULL;
    const char *plan, *inner;
    size_t plan_len;
    if (!split(path, &plan, &plan_len, &inner))
        return stk__set_error(err, err_size, STK_EINVAL, "%s: a fault path is " PREFIX "PLAN:PATH",
                              path);
    ffile *f = stk__calloc(1, sizeof(*f));
    char *p = stk__strdup(path);
    if (!f || !p) {
        stk__free(f);
        stk__free(p);
        return stk__set_error(err, err_size, STK_ENOMEM, "%s: out of memory", path);
    }
    uint64_t size_override;
    stk_status rc = parse_plan(plan, plan_len, f, &size_override, path, err, err_size);
    if (rc == STK_OK)
        rc = stk__vfs_open(inner, &f->inner, err, err_size);
    if (rc < 0) {
        stk__free(f);
        stk__free(p);
        return rc;
    }
    f->base.vfs = &stk__vfs_fault;
    f->base.path = p;
    f->base.size = size_override != UINT64_MAX ? size_override : f->inner->size;
    *out = &f->base;
    return STK_OK;
}

/* Flip bit 5 of the request's bytes whose file offsets lie in [a, b]. */
static void flip_range(const stk__iov *iov, int n_iov, uint64_t offset, uint64_t a, uint64_t b)
{
    uint64_t pos = offset;
    for (int i = 0; i < n_iov; i++) {
        uint64_t lo = STK_MAX(pos, a), hi = STK_MIN(pos + iov[i].len, b + 1);
        for (uint64_t x = lo; x < hi; x++)
            ((uint8_t *)iov[i].base)[x - pos] ^= 0x20;
        pos += iov[i].len;
    }
}

static stk_status fault_read(stk__file *file, uint64_t offset, const stk__iov *iov, int n_iov,
                             char *err, size_t err_size)
{
    ffile *f = (ffile *)file;
    uint64_t want = 0;
    for (int i = 0; i < n_iov; i++)
        want += iov[i].len;
    uint64_t nr = atomic_fetch_add(&f->reads, 1) + 1, last = offset + want - 1;
    for (int i = 0; i < f->n_faults; i++) {
        const fault *x = &f->f[i];
        bool hit = x->by_count ? x->n == nr : want > 0 && x->a <= last && x->b >= offset;
        if (!hit || x->kind == F_FLIP)
            continue;
        uint64_t at = x->by_count ? offset : STK_MAX(offset, x->a);
        if (x->kind == F_EIO)
            return stk__set_error(err, err_size, STK_EIO,
                                  "%s: read of %" PRIu64 " bytes at %" PRIu64
                                  " failed: injected I/O error at byte %" PRIu64,
                                  file->path, want, offset, at);
        return stk__set_error(err, err_size, STK_EIO,
                              "%s: read of %" PRIu64 " bytes at %" PRIu64
                              " failed: short read (%" PRIu64 " of %" PRIu64 " bytes, injected)",
                              file->path, want, offset, at - offset, want);
    }
    stk_status rc = f->inner->vfs->read(f->inner, offset, iov, n_iov, err, err_size);
    if (rc < 0)
        return rc;
    for (int i = 0; i < f->n_faults; i++) {
        const fault *x = &f->f[i];
        if (x->kind != F_FLIP || want == 0)
            continue;
        if (x->by_count && x->n == nr)
            flip_range(iov, n_iov, offset, offset, offset);
        else if (!x->by_count && x->a <= last && x->b >= offset)
            flip_range(iov, n_iov, offset, x->a, x->b);
    }
    return STK_OK;
}

static void fault_close(stk__file *file)
{
    ffile *f = (ffile *)file;
    stk__vfs_close(f->inner);
    stk__free(file->path);
    stk__free(f);
}

/* The inner path of a fault path (malformed: the path itself, which then fails there). */
static const char *inner_of(const char *path)
{
    const char *plan, *inner;
    size_t plan_len;
    return split(path, &plan, &plan_len, &inner) ? inner : path + PREFIX_LEN;
}

static stk_status fault_stat(const char *path, stk__stat *st, char *err, size_t err_size)
{
    return stk__vfs_stat(inner_of(path), st, err, err_size);
}

static stk_status fault_list(const char *dir, stk__strlist *out, char *err, size_t err_size)
{
    const char *inner = inner_of(dir);
    return stk__vfs_for(inner)->list(inner, out, err, err_size);
}

static stk_status fault_glob(const char *pattern, stk__strlist *out, char *err, size_t err_size)
{
    const char *inner = inner_of(pattern);
    size_t first = out->n, head = (size_t)(inner - pattern);
    stk_status rc = stk__vfs_for(inner)->glob(inner, out, err, err_size);
    for (size_t i = first; rc == STK_OK && i < out->n; i++) { /* the prefix back on each match */
        size_t n = strlen(out->v[i]);
        char *s = stk__malloc(head + n + 1);
        if (!s)
            return stk__set_error(err, err_size, STK_ENOMEM, "%s: out of memory", pattern);
        memcpy(s, pattern, head);
        memcpy(s + head, out->v[i], n + 1);
        stk__free(out->v[i]);
        out->v[i] = s;
    }
    return rc;
}

const stk__vfs stk__vfs_fault = {
    .name = "fault",
    .claims = fault_claims,
    .open = fault_open,
    .read = fault_read,
    .close = fault_close,
    .stat = fault_stat,
    .list = fault_list,
    .glob = fault_glob,
};
