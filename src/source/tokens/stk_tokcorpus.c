/*
 * stk_tokcorpus.c: a token corpus as one stream: reading any span of it (across files, or across
 * the records of a token column), and documents from eos/bos.
 *
 * With STOKER_MMAP=1, local files are mapped (stk_mapped.h) and read in place: a row's ids are
 * widened straight from the page cache, with no system call and no copy (bench/RESULTS.md,
 * issue 26); a file cut short or rewritten while open is a read error naming it, never SIGBUS.
 * What is not mapped (the default, remote files, a span across two files) is read through the byte
 * sources (pread locally, ranged GETs remotely). A column record is read whole on its first touch
 * (so the source's checksum policy applies), after which spans of it are read in place when the
 * source gives the field's byte range.
 */
#include "source/tokens/stk_tokens.h"

#include <inttypes.h>
#include <string.h>

#define SCAN_CHUNK (4u << 20) /* bytes per read while scanning for eos/bos */

stk_status stk__tokcorpus_add(stk__tokcorpus *c, stk__file *f, uint64_t data_offset, uint64_t count,
                              char *err, size_t err_size)
{
    stk__tokpart *p = stk__realloc(c->parts, (c->n_parts + 1) * sizeof(*p));
    if (!p) {
        stk_status rc = stk__set_error(err, err_size, STK_ENOMEM, "%s: out of memory", f->path);
        stk__vfs_close(f);
        return rc;
    }
    c->parts = p;
    p[c->n_parts++] = (stk__tokpart){f, data_offset, c->n_tokens, count, NULL};
    c->n_tokens += count;
    return STK_OK;
}

void stk__tokcorpus_free(stk__tokcorpus *c)
{
    for (size_t i = 0; i < c->n_parts; i++) {
        stk__mapped_close(c->parts[i].map);
        stk__vfs_close(c->parts[i].f);
    }
    stk__free(c->parts);
    stk__free(c->doc);
    stk_dataset_close(c->col);
    stk__free((void *)c->col_checked);
    memset(c, 0, sizeof(*c));
}

/* The part holding token t (t < n_tokens). */
static size_t part_of(const stk__tokcorpus *c, uint64_t t)
{
    size_t lo = 0, hi = c->n_parts;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (c->parts[mid].first <= t)
            lo = mid;
        else
            hi = mid;
    }
    while (t - c->parts[lo].first >= c->parts[lo].count)
        lo++; /* empty parts start where the next one does */
    return lo;
}

/* The document holding token t (t < n_tokens). */
static uint64_t doc_of(const stk__tokcorpus *c, uint64_t t)
{
    uint64_t lo = 0, hi = c->n_docs;
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (c->doc[mid] <= t)
            lo = mid;
        else
            hi = mid;
    }
    while (t >= c->doc[lo + 1])
        lo++; /* empty documents */
    return lo;
}

void stk__tokcorpus_where(const stk__tokcorpus *c, uint64_t t, char *buf, size_t size)
{
    if (c->col) {
        uint64_t d = t < c->n_tokens ? doc_of(c, t) : c->n_docs;
        char rec[STK_ERRMSG_SIZE] = "";
        if (d < c->n_docs)
            stk_dataset_describe(c->col, d, rec, sizeof(rec));
        snprintf(buf, size, "%s, token %" PRIu64, rec, d < c->n_docs ? t - c->doc[d] : t);
        return;
    }
    if (t >= c->n_tokens || c->n_parts == 0) {
        snprintf(buf, size, "token %" PRIu64, t);
        return;
    }
    const stk__tokpart *p = &c->parts[part_of(c, t)];
    uint64_t local = t - p->first;
    snprintf(buf, size, "%s token %" PRIu64 " (byte %" PRIu64 ")", p->f->path, local,
             p->data_offset + local * c->width);
}

stk_status stk__tokcur_open(const stk__tokcorpus *c, size_t buf_size, stk__tokcur **out, char *err,
                            size_t err_size)
{
    stk__tokcur *cur = stk__calloc(1, sizeof(*cur));
    if (!cur || !(cur->buf = stk__malloc(buf_size ? buf_size : 1))) {
        stk__free(cur);
        return stk__set_error(err, err_size, STK_ENOMEM, "out of memory for a token cursor");
    }
    cur->buf_size = buf_size;
    cur->rec_doc = UINT64_MAX;
    if (c->col) {
        stk_status rc = stk__dataset_cursor_open(c->col, &cur->col_cur, err, err_size);
        if (rc < 0) {
            stk__free(cur->buf);
            stk__free(cur);
            return rc;
        }
    }
    *out = cur;
    return STK_OK;
}

void stk__tokcur_close(const stk__tokcorpus *c, stk__tokcur *cur)
{
    if (!cur)
        return;
    if (c->col)
        stk__dataset_cursor_close(c->col, cur->col_cur);
    stk__tokcur_ahead_free(cur);
    stk__free(cur->buf);
    stk__free(cur->rec);
    stk__free(cur);
}

/* Read record d of a column whole (checking it as the source does) into cur->rec. */
static stk_status column_record(const stk__tokcorpus *c, stk__tokcur *cur, uint64_t d,
                                unsigned flags, char *err, size_t err_size)
{
    if (cur->rec_doc == d)
        return STK_OK;
    const stk_dataset *ds = c->col;
    void *dst[STK_MAX_FIELDS];
    size_t cap[STK_MAX_FIELDS];
    uint64_t need = stk_dataset_max_record_size(ds);
    if (need > cur->rec_size) {
        uint8_t *b = stk__realloc(cur->rec, (size_t)need);
        if (!b)
            return stk__set_error(err, err_size, STK_ENOMEM,
                                  "out of memory for a %" PRIu64 "-byte record", need);
        cur->rec = b;
        cur->rec_size = (size_t)need;
    }
    size_t at = 0;
    for (uint32_t f = 0; f < ds->n_fields; f++) {
        dst[f] = cur->rec + at;
        cap[f] = (size_t)ds->field_max[f];
        at += cap[f];
    }
    stk__recinfo info;
    cur->rec_doc = UINT64_MAX;
    stk_status rc = stk__dataset_read(ds, cur->col_cur, d, dst, cap, flags, &info, err, err_size);
    if (rc < 0)
        return rc;
    /* The field's bytes first in rec (the fields are laid out at their maxima). */
    size_t off = 0;
    for (uint32_t f = 0; f < c->col_field; f++)
        off += cap[f];
    if (info.field_size[c->col_field] != (c->doc[d + 1] - c->doc[d]) * c->width) {
        char where[STK_ERRMSG_SIZE];
        stk_dataset_describe(ds, d, where, sizeof(where));
        return stk__set_error(err, err_size, STK_EFORMAT,
                              "%s: field '%s' holds %" PRIu64 " bytes, %" PRIu64
                              " when the dataset was opened (changed while open)",
                              where, ds->fields[c->col_field].name, info.field_size[c->col_field],
                              (c->doc[d + 1] - c->doc[d]) * c->width);
    }
    memmove(cur->rec, cur->rec + off, (size_t)info.field_size[c->col_field]);
    cur->rec_doc = d;
    if (c->col_checked)
        atomic_fetch_or_explicit(&c->col_checked[d / 64], 1ULL << (d % 64), memory_order_relaxed);
    return STK_OK;
}

/* Tokens [first, first + n) of a column corpus (all inside document d) into dst. */
static stk_status column_read(const stk__tokcorpus *c, stk__tokcur *cur, uint64_t d, uint64_t first,
                              uint64_t n, uint8_t *dst, unsigned flags, char *err, size_t err_size)
{
    uint64_t skip = (first - c->doc[d]) * c->width;
    bool checked =
        !c->col_checked ||
        (atomic_load_explicit(&c->col_checked[d / 64], memory_order_relaxed) & (1ULL << (d % 64)));
    if (c->col_extent && checked && cur->rec_doc != d && !(flags & STK__READ_VERIFY_ALL)) {
        stk__file *f;
        stk__brange r;
        if (c->col->m->field_extent(c->col, d, c->col_field, &f, &r) &&
            r.len == (c->doc[d + 1] - c->doc[d]) * c->width) {
            const stk__vfs_opts *prev = stk__vfs_opts_use(&c->col->vfs);
            stk_status rc =
                stk__vfs_read(f, r.off + skip, dst, (size_t)(n * c->width), err, err_size);
            stk__vfs_opts_use(prev);
            if (rc < 0) {
                char where[STK_ERRMSG_SIZE];
                stk_dataset_describe(c->col, d, where, sizeof(where));
                return stk__source_read_error(rc, where, f->path, err, err_size);
            }
            return STK_OK;
        }
    }
    stk_status rc = column_record(c, cur, d, flags, err, err_size);
    if (rc < 0)
        return rc;
    memcpy(dst, cur->rec + skip, (size_t)(n * c->width));
    return STK_OK;
}

bool stk__tokcorpus_locate(const stk__tokcorpus *c, uint64_t first, uint64_t n,
                           const stk__tokpart **part, uint64_t *offset)
{
    if (c->col || n == 0 || first >= c->n_tokens || n > c->n_tokens - first)
        return false;
    const stk__tokpart *p = &c->parts[part_of(c, first)];
    uint64_t local = first - p->first;
    if (n > p->count - local)
        return false;
    *part = p;
    *offset = p->data_offset + local * c->width;
    return true;
}

stk_status stk__tokcorpus_map(stk__tokcorpus *c, stk__map_advice advice, char *err, size_t err_size)
{
    for (size_t i = 0; i < c->n_parts; i++)
        if (c->parts[i].count && !c->parts[i].map)
            STK_TRY_RET(stk__mapped_open(c->parts[i].f, advice, &c->parts[i].map, err, err_size));
    return STK_OK;
}

/* A read error of part p at token `first`: "FILE token T (byte B): REASON". */
static stk_status part_error(const stk__tokcorpus *c, const stk__tokpart *p, uint64_t first,
                             stk_status rc, char *err, size_t err_size)
{
    char where[STK_ERRMSG_SIZE];
    stk__tokcorpus_where(c, first, where, sizeof(where));
    return stk__source_read_error(rc, where, p->f->path, err, err_size);
}

/* A guarded use's copy out of the mapping (stk__tokcorpus_read). */
static void copy_out(void *dst, const uint8_t *bytes, size_t n)
{
    memcpy(dst, bytes, n);
}

stk_status stk__tokcorpus_use(const stk__tokcorpus *c, stk__tokcur *cur, uint64_t first, uint64_t n,
                              stk__mapped_fn *fn, void *arg, unsigned flags, char *err,
                              size_t err_size)
{
    size_t size = (size_t)(n * c->width);
    const uint8_t *ahead = stk__tokcur_ahead(cur, first, n);
    if (ahead) {
        fn(arg, ahead, size);
        return STK_OK;
    }
    if (!c->col && first < c->n_tokens && n <= c->n_tokens - first) {
        const stk__tokpart *p = &c->parts[part_of(c, first)];
        uint64_t local = first - p->first;
        if (p->map && n <= p->count - local) { /* in place, no copy */
            stk_status rc = stk__mapped_use(p->map, p->data_offset + local * c->width, size, fn,
                                            arg, err, err_size);
            return rc < 0 ? part_error(c, p, first, rc, err, err_size) : STK_OK;
        }
    }
    if (size > cur->buf_size)
        return stk__set_error(err, err_size, STK_ELIMIT,
                              "%" PRIu64 " tokens over the %zu-byte buffer of a token cursor", n,
                              cur->buf_size);
    STK_TRY_RET(stk__tokcorpus_read(c, cur, first, n, cur->buf, flags, err, err_size));
    fn(arg, cur->buf, size);
    return STK_OK;
}

stk_status stk__tokcorpus_read(const stk__tokcorpus *c, stk__tokcur *cur, uint64_t first,
                               uint64_t n, uint8_t *dst, unsigned flags, char *err, size_t err_size)
{
    if (first > c->n_tokens || n > c->n_tokens - first)
        return stk__set_error(err, err_size, STK_EINVAL,
                              "tokens %" PRIu64 "..%" PRIu64 " are past the corpus' %" PRIu64,
                              first, first + n, c->n_tokens);
    while (n > 0) {
        uint64_t k;
        stk_status rc;
        if (c->col) {
            uint64_t d = doc_of(c, first);
            k = STK_MIN(n, c->doc[d + 1] - first);
            rc = column_read(c, cur, d, first, k, dst, flags, err, err_size);
        } else {
            const stk__tokpart *p = &c->parts[part_of(c, first)];
            uint64_t local = first - p->first;
            k = STK_MIN(n, p->count - local);
            uint64_t off = p->data_offset + local * c->width;
            rc = p->map ? stk__mapped_use(p->map, off, (size_t)(k * c->width), copy_out, dst, err,
                                          err_size)
                        : stk__vfs_read(p->f, off, dst, (size_t)(k * c->width), err, err_size);
            if (rc < 0)
                return part_error(c, p, first, rc, err, err_size);
        }
        if (rc < 0)
            return rc;
        first += k;
        n -= k;
        dst += k * c->width;
    }
    return STK_OK;
}

/* The stored token at p (width bytes). */
static inline uint64_t token_at(const uint8_t *p, uint32_t width)
{
    switch (width) {
    case 1:
        return *p;
    case 2: {
        uint16_t v;
        memcpy(&v, p, 2);
        return v;
    }
    case 4: {
        uint32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    default: {
        uint64_t v;
        memcpy(&v, p, 8);
        return v;
    }
    }
}

/* A growable list of document starts. */
typedef struct starts {
    uint64_t *v;
    uint64_t n, cap;
} starts;

static bool starts_add(starts *s, uint64_t t)
{
    if (s->n && s->v[s->n - 1] == t)
        return true; /* eos then bos: one boundary */
    if (s->n == s->cap) {
        uint64_t cap = s->cap ? s->cap * 2 : 4096;
        uint64_t *v = stk__realloc(s->v, (size_t)cap * sizeof(*v));
        if (!v)
            return false;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = t;
    return true;
}

stk_status stk__tokcorpus_split(stk__tokcorpus *c, int64_t eos, int64_t bos, char *err,
                                size_t err_size)
{
    stk_status rc = STK_OK;
    starts s = {0};
    uint8_t *buf = NULL;
    stk__tokcur *cur = NULL;
    uint64_t chunk = SCAN_CHUNK / c->width;
    STK_TRY(stk__tokcur_open(c, 0, &cur, err, err_size));
    if (!(buf = stk__malloc(SCAN_CHUNK)) || !starts_add(&s, 0))
        goto oom;
    for (uint64_t at = 0; at < c->n_tokens; at += chunk) {
        uint64_t k = STK_MIN(chunk, c->n_tokens - at);
        STK_TRY(stk__tokcorpus_read(c, cur, at, k, buf, 0, err, err_size));
        for (uint64_t j = 0; j < k; j++) {
            uint64_t v = token_at(buf + j * c->width, c->width);
            uint64_t t = at + j;
            if (bos >= 0 && v == (uint64_t)bos && t > 0 && !starts_add(&s, t))
                goto oom;
            if (eos >= 0 && v == (uint64_t)eos && t + 1 < c->n_tokens && !starts_add(&s, t + 1))
                goto oom;
        }
    }
    if (c->n_tokens > 0 && !starts_add(&s, c->n_tokens))
        goto oom;
    stk__free(c->doc);
    c->doc = s.v;
    c->n_docs = s.n - 1; /* an empty stream: doc = {0}, no document */
    c->bounded = true;
    s.v = NULL;
    goto done;
oom:
    rc = stk__set_error(err, err_size, STK_ENOMEM, "out of memory for the document boundaries");
fail:
done:
    stk__free(s.v);
    stk__free(buf);
    stk__tokcur_close(c, cur);
    return rc;
}

stk_status stk__tokcorpus_doc_per_part(stk__tokcorpus *c, char *err, size_t err_size)
{
    uint64_t *d = stk__calloc(c->n_parts + 1, sizeof(*d));
    if (!d)
        return stk__set_error(err, err_size, STK_ENOMEM, "out of memory");
    uint64_t n = 0;
    for (size_t i = 0; i < c->n_parts; i++)
        if (c->parts[i].count) /* an empty file is no document */
            d[n++] = c->parts[i].first;
    d[n] = c->n_tokens;
    stk__free(c->doc);
    c->doc = d;
    c->n_docs = n;
    c->bounded = false;
    return STK_OK;
}
