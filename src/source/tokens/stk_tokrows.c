/*
 * stk_tokrows.c: a token corpus as records (docs/tokens.md): the rows of seq_len tokens a loader
 * batches, or the documents themselves, and stk_tokens_info_get (stk_tokens_open is stk_tokopen.c).
 *
 * Records by mode (stk_tokens_mode):
 *   WINDOWS    row r = tokens [r*T, r*T + T + 1) of the stream; fields input_ids = the first T,
 *              labels = the last T. floor((tokens - 1) / T) rows.
 *   RANDOM     as many rows; row r of epoch e starts at (Philox(seed ^ salt, e, r) mod
 *              (tokens - T)): nanoGPT's get_batch as a pure function of (seed, epoch, row).
 *   PACKED     row r = the pieces stk_tokpack.c put there, then padding (pad_id, label -100);
 *              labels[j] is the next token of the same document, -100 after its last;
 *              position_ids count from 0 in each piece and in the padding; seq_lens (int32
 *              [most pieces of a row]): the pieces' lengths, padding one, then zeros.
 *              Pieces close together in the stream are read with one read.
 *   DOCUMENTS  record d = document d, field "tokens": its stored ids as bytes.
 * The loader's order (shuffle from (seed, epoch)), rank split and resume apply to rows as to any
 * record. Every row is a pure function of the corpus, the options and (RANDOM) (seed, epoch), so
 * a resumed or re-ranked run reads exactly the same rows.
 *
 * Ids are widened into the batch rows (int64 or int32; stk_tokwiden.c) straight from the mapped
 * file (STOKER_MMAP=1, stk_mapped.h: no system call, no copy), or, where there is no mapping (the
 * default), read raw into the
 * cursor's buffer first (one read for a window).
 */
#include "source/tokens/stk_tokens.h"

#include <inttypes.h>
#include <string.h>

#define RANDOM_SALT 0x9e6c63d0676a9a99ULL /* row offsets' streams apart from every other */
#define RUN_GAP 2048 /* tokens between two pieces of a packed row read together */

static const char *const mode_names[] = {"windows", "random", "packed", "documents"};

const stk__tokds *stk__tokds_of(const stk_dataset *ds)
{
    return ds && ds->m && (ds->m->tokens || ds->m == &stk__src_tokcol) ? ds->impl : NULL;
}

void stk__tokds_close(stk_dataset *ds)
{
    stk__tokds *t = ds->impl;
    if (!t)
        return;
    stk__tokcorpus_free(&t->c);
    stk__tokpack_free(&t->pack);
    stk__free(t);
    ds->impl = NULL;
}

/* Set a field of the schema. */
static void set_field(stk_dataset *ds, const char *name, stk_field_kind kind, stk_dtype dtype,
                      int64_t len)
{
    stk_field *f = &ds->fields[ds->n_fields];
    memset(f, 0, sizeof(*f));
    snprintf(f->name, sizeof(f->name), "%s", name);
    f->kind = kind;
    f->dtype = dtype;
    if (kind == STK_FIELD_ARRAY) {
        f->ndim = 1;
        f->shape[0] = len;
    }
    *f = stk__field_canonical(f);
    ds->field_max[ds->n_fields] =
        kind == STK_FIELD_BYTES ? (uint64_t)len : stk__field_fixed_size(f);
    ds->max_record += ds->field_max[ds->n_fields];
    ds->n_fields++;
}

/* The files as dataset files (tokens counted as records) and the fingerprint. */
static stk_status describe_files(stk_dataset *ds, stk__tokds *t, char *err, size_t err_size)
{
    const stk__tokcorpus *c = &t->c;
    stk__fphash fp, *h = &fp;
    stk__fp_begin(h);
    stk__fp_add(h, c->format, strlen(c->format));
    stk__fp_add_u64(h, c->width);
    stk__fp_add_u64(h, c->n_tokens);
    stk__fp_add(h, c->doc, (size_t)(c->n_docs + 1) * sizeof(uint64_t));
    stk__fp_add_u64(h, t->o.mode);
    stk__fp_add_u64(h, t->T);
    stk__fp_add_u64(h, t->o.mode == STK_TOKENS_PACKED ? t->o.packing : 0);
    stk__fp_add_u64(h, (uint64_t)t->o.ids_dtype);
    stk__fp_add_u64(h, (uint64_t)t->o.pad_id);
    if (c->col) {
        stk__fp_add_u64(h, stk_dataset_fingerprint(c->col));
        ds->fingerprint = stk__fp_end(h);
        return STK_OK; /* the column's files are the dataset's own */
    }
    stk_status rc = stk__dataset_files_alloc(ds, c->n_parts, err, err_size);
    for (size_t i = 0; rc == STK_OK && i < c->n_parts; i++) {
        const stk__tokpart *p = &c->parts[i];
        stk__srcfile *sf = &ds->files[i];
        char meta[160];
        snprintf(meta, sizeof(meta),
                 "{\"format\": \"%s\", \"token_bytes\": %u, \"tokens\": %" PRIu64
                 ", \"first_token\": %" PRIu64 "}",
                 c->format, c->width, p->count, p->first);
        sf->path = stk__strdup(p->f->path);
        sf->metadata = stk__strdup(meta);
        sf->first = p->first;
        sf->count = p->count;
        sf->size = p->f->size;
        sf->data_size = p->count * c->width;
        if (!sf->path || !sf->metadata)
            rc = stk__set_error(err, err_size, STK_ENOMEM, "out of memory");
        stk__fp_add_u64(h, p->f->size);
        stk__fp_add_u64(h, p->data_offset);
    }
    ds->fingerprint = stk__fp_end(h);
    return rc;
}

/* Rows (or documents) from the corpus per t->o; fills the dataset's common part. */
static stk_status rows_setup(stk_dataset *ds, stk__tokds *t, char *err, size_t err_size)
{
    stk__tokcorpus *c = &t->c;
    const char *what = c->col ? c->col->files[0].path : c->n_parts ? c->parts[0].f->path : "";
    stk_dtype ids = t->o.ids_dtype;
    t->T = t->o.mode == STK_TOKENS_DOCUMENTS ? 0 : t->o.seq_len;
    for (uint64_t d = 0; d < c->n_docs; d++)
        t->max_doc = STK_MAX(t->max_doc, c->doc[d + 1] - c->doc[d]);
    ds->n_fields = 0;
    ds->max_record = 0;
    switch (t->o.mode) {
    case STK_TOKENS_DOCUMENTS:
        t->n_rows = c->n_docs;
        set_field(ds, "tokens", STK_FIELD_BYTES, STK_DTYPE_UINT8, (int64_t)(t->max_doc * c->width));
        break;
    case STK_TOKENS_PACKED:
        if (!c->bounded)
            return stk__set_error(err, err_size, STK_EINVAL,
                                  "%s: packing needs document boundaries, and this %s corpus has "
                                  "none: give eos= (the id ending each document) or bos=",
                                  what, c->format);
        STK_TRY_RET(
            stk__tokpack_build(c->doc, c->n_docs, t->T, t->o.packing, &t->pack, err, err_size));
        t->n_rows = t->pack.n_rows;
        for (uint64_t r = 0; r < t->n_rows; r++) {
            uint64_t n = t->pack.row[r + 1] - t->pack.row[r], fill = 0;
            for (uint64_t k = t->pack.row[r]; k < t->pack.row[r + 1]; k++)
                fill += t->pack.seg[k].len;
            t->max_pieces = (uint32_t)STK_MAX(t->max_pieces, n + (fill < t->T));
        }
        if (t->n_rows == 0)
            return stk__set_error(err, err_size, STK_EINVAL,
                                  "%s: no tokens to pack (%" PRIu64 " documents, all empty)", what,
                                  c->n_docs);
        break;
    default:
        if (c->n_tokens < (uint64_t)t->T + 1)
            return stk__set_error(err, err_size, STK_EINVAL,
                                  "%s: %" PRIu64 " tokens make no row of seq_len %u (a row reads "
                                  "seq_len + 1 tokens)",
                                  what, c->n_tokens, t->T);
        t->n_rows = (c->n_tokens - 1) / t->T;
    }
    if (t->o.mode != STK_TOKENS_DOCUMENTS) {
        set_field(ds, "input_ids", STK_FIELD_ARRAY, ids, t->T);
        set_field(ds, "labels", STK_FIELD_ARRAY, ids, t->T);
        if (t->o.mode == STK_TOKENS_PACKED) {
            set_field(ds, "position_ids", STK_FIELD_ARRAY, ids, t->T);
            set_field(ds, "seq_lens", STK_FIELD_ARRAY, STK_DTYPE_INT32, t->max_pieces);
        }
    }
    ds->count = t->n_rows;
    /* Rows at random offsets: no read-around on a miss (the kernel's, for a mapping) */
    STK_TRY_RET(stk__tokcorpus_map(
        c, t->o.mode == STK_TOKENS_RANDOM ? STK__MAP_RANDOM : STK__MAP_NORMAL, err, err_size));
    return describe_files(ds, t, err, err_size);
}

/* The options as kept (strings and paths dropped). */
static void keep_opts(stk__tokds *t, const stk_tokens_opts *o)
{
    if (o) {
        t->o = *o;
    } else { /* stk_dataset_open: the documents */
        stk_tokens_opts_init(&t->o);
        t->o.mode = STK_TOKENS_DOCUMENTS;
    }
    t->o.paths = NULL;
    t->o.n_paths = 0;
    t->o.format = t->o.token_field = t->o.cache_dir = t->o.cache_limit = NULL;
}

stk_status stk__tokds_open(stk_dataset *ds, const char *const *paths, size_t n_paths,
                           const char *const *suffixes, const char *what, const char *format,
                           stk__tokparse_fn parse, char *err, size_t err_size)
{
    stk__strlist files = {0};
    stk__tokds *t = stk__calloc(1, sizeof(*t));
    if (!t)
        return stk__set_error(err, err_size, STK_ENOMEM, "out of memory");
    ds->impl = t;
    keep_opts(t, ds->open_tokens);
    t->c.format = format;
    stk_status rc = stk__paths_files(paths, n_paths, suffixes, what, &files, err, err_size);
    if (rc == STK_OK)
        rc = parse(&t->c, (const char *const *)files.v, files.n, t->o.token_bytes, err, err_size);
    stk__strlist_free(&files);
    if (rc == STK_OK && !t->c.bounded && (t->o.eos >= 0 || t->o.bos >= 0))
        rc = stk__tokcorpus_split(&t->c, t->o.eos, t->o.bos, err, err_size);
    else if (rc == STK_OK && !t->c.bounded)
        rc = stk__tokcorpus_doc_per_part(&t->c, err, err_size);
    return rc < 0 ? rc : rows_setup(ds, t, err, err_size);
}

/* Build the dataset part of a column wrapper (stk_tokcolumn.c fills the corpus). */
stk_status stk__tokds_setup(stk_dataset *ds, stk__tokds *t, const stk_tokens_opts *o, char *err,
                            size_t err_size)
{
    keep_opts(t, o);
    return rows_setup(ds, t, err, err_size);
}

stk_status stk__tokds_cursor_open(const stk_dataset *ds, stk__cursor **out, char *err,
                                  size_t err_size)
{
    const stk__tokds *t = ds->impl;
    stk__tokcur *cur;
    STK_TRY_RET(stk__tokcur_open(&t->c, ((size_t)t->T + 1) * 8, &cur, err, err_size));
    *out = (stk__cursor *)cur;
    return STK_OK;
}

void stk__tokds_cursor_close(const stk_dataset *ds, stk__cursor *cur)
{
    const stk__tokds *t = ds->impl;
    stk__tokcur_close(&t->c, (stk__tokcur *)cur);
}

uint64_t stk__tokds_row_start(const stk__tokds *t, const stk__readkey *key, uint64_t r)
{
    if (t->o.mode == STK_TOKENS_WINDOWS)
        return r * t->T;
    stk_rng rng;
    stk_rng_init(&rng, key->seed ^ RANDOM_SALT, key->epoch, r);
    uint64_t span = t->c.n_tokens - t->T; /* starts 0..span-1: the last reads token span + T - 1 */
    return stk_rng_u64(&rng) % span;
}

void stk__tokds_describe(const stk_dataset *ds, uint64_t i, char *buf, size_t size)
{
    const stk__tokds *t = ds->impl;
    const stk__tokcorpus *c = &t->c;
    const char *file = c->col ? c->col->files[0].path : c->parts[0].f->path;
    const char *more = (c->col ? c->col->n_files : c->n_parts) > 1 ? " (and others)" : "";
    if (i >= t->n_rows) {
        snprintf(buf, size, "%s%s row %" PRIu64 " (of %" PRIu64 ")", file, more, i, t->n_rows);
        return;
    }
    switch (t->o.mode) {
    case STK_TOKENS_DOCUMENTS:
        snprintf(buf, size, "%s%s document %" PRIu64 " (tokens %" PRIu64 "..%" PRIu64 ")", file,
                 more, i, c->doc[i], c->doc[i + 1]);
        break;
    case STK_TOKENS_WINDOWS:
        snprintf(buf, size, "%s%s row %" PRIu64 " (tokens %" PRIu64 "..%" PRIu64 ")", file, more, i,
                 i * t->T, i * t->T + t->T + 1);
        break;
    case STK_TOKENS_RANDOM:
        snprintf(buf, size, "%s%s row %" PRIu64 " (at a random offset per epoch)", file, more, i);
        break;
    default: {
        const stk__tokseg *s = &t->pack.seg[t->pack.row[i]];
        snprintf(buf, size,
                 "%s%s packed row %" PRIu64 " (%" PRIu64 " pieces from token %" PRIu64 ")", file,
                 more, i, t->pack.row[i + 1] - t->pack.row[i], s->start);
    }
    }
}

/* A read error of row i: "DESCRIBE: REASON" (REASON names the file and token). */
static stk_status row_error(const stk_dataset *ds, uint64_t i, stk_status rc, char *err,
                            size_t err_size)
{
    if (!err || !err_size)
        return rc;
    char where[STK_ERRMSG_SIZE], why[STK_ERRMSG_SIZE];
    stk__tokds_describe(ds, i, where, sizeof(where));
    snprintf(why, sizeof(why), "%s", err);
    return stk__set_error(err, err_size, rc, "%s: %s", where, why);
}

uint64_t stk__tokds_packed_run(const stk__tokds *t, uint64_t cap, uint64_t k, uint64_t end,
                               uint64_t *first, uint64_t *n)
{
    const stk__tokseg *seg = t->pack.seg;
    uint64_t at = seg[k].start, m = k + 1;
    while (m < end && seg[m].start - (seg[m - 1].start + seg[m - 1].len) <= RUN_GAP &&
           seg[m].start + seg[m].len + seg[m].more - at <= cap)
        m++;
    const stk__tokseg *last = &seg[m - 1];
    *first = at;
    *n = last->start + last->len + last->more - at;
    return m;
}

/* A packed row being written: where its next piece goes. */
typedef struct packed_row {
    const stk__tokds *t;
    bool i32;
    size_t es; /* bytes per id */
    uint8_t *in, *lab, *pos;
    int32_t *lens;
    uint32_t n_lens;
    size_t at;          /* positions written */
    uint64_t k, m;      /* the run's pieces k..m-1 */
    uint64_t run_first; /* the run's first token */
} packed_row;

/* The pieces of one run from its raw tokens (a guarded use: reads of buf, stores to the row). */
static void packed_run(void *arg, const uint8_t *buf, size_t size)
{
    (void)size;
    packed_row *a = arg;
    uint32_t w = a->t->c.width;
    bool i32 = a->i32;
    size_t es = a->es;
    for (; a->k < a->m; a->k++) {
        const stk__tokseg *s = &a->t->pack.seg[a->k];
        const uint8_t *src = buf + (s->start - a->run_first) * w;
        size_t at = a->at, n_in = s->len, last = at + n_in - 1; /* a piece has a token or more */
        /* input_ids and labels of all but the last token in one pass, as a window's */
        stk__tok_window(src, w, n_in - 1, a->in + at * es, a->lab + at * es, i32);
        stk__tok_widen(src + (n_in - 1) * w, w, 1, a->in + last * es, i32);
        if (s->more) /* the document goes on in another row: its next token */
            stk__tok_widen(src + n_in * w, w, 1, a->lab + last * es, i32);
        else /* the document's last token predicts nothing */
            stk__tok_fill(a->lab, i32, last, 1, -100, 0);
        stk__tok_fill(a->pos, i32, at, n_in, 0, 1);
        a->lens[a->n_lens++] = (int32_t)s->len;
        a->at += s->len;
    }
}

/* A packed row: its pieces, then padding. */
static stk_status read_packed(const stk__tokds *t, stk__tokcur *cur, uint64_t r, void *const dst[],
                              unsigned flags, char *err, size_t err_size)
{
    bool i32 = t->o.ids_dtype == STK_DTYPE_INT32;
    packed_row a = {.t = t,
                    .i32 = i32,
                    .es = i32 ? 4 : 8,
                    .in = dst[0],
                    .lab = dst[1],
                    .pos = dst[2],
                    .lens = dst[3]};
    uint64_t cap = cur->buf_size / t->c.width; /* tokens the buffer holds: at least T + 1 */
    for (uint64_t k = t->pack.row[r], end = t->pack.row[r + 1]; k < end; k = a.m) {
        /* A row's pieces come in stream order. One read takes a run of them whose gaps are
         * small and whose span fits the buffer: reading a few KB between two pieces costs less
         * than another read (a row of best-fit pieces on log-normal documents: 3.1 reads
         * without, about 1.3 with). Mapped, the run is widened in place. */
        uint64_t n;
        a.k = k;
        a.m = stk__tokds_packed_run(t, cap, k, end, &a.run_first, &n);
        STK_TRY_RET(
            stk__tokcorpus_use(&t->c, cur, a.run_first, n, packed_run, &a, flags, err, err_size));
    }
    uint8_t *in = a.in, *lab = a.lab, *pos = a.pos;
    int32_t *lens = a.lens;
    uint32_t n_lens = a.n_lens;
    size_t at = a.at;
    if (at < t->T)
        lens[n_lens++] = (int32_t)(t->T - at);
    memset(lens + n_lens, 0, (t->max_pieces - n_lens) * sizeof(int32_t));
    /* padding: a piece of its own, never a target */
    stk__tok_fill(in, i32, at, t->T - at, t->o.pad_id, 0);
    stk__tok_fill(lab, i32, at, t->T - at, -100, 0);
    stk__tok_fill(pos, i32, at, t->T - at, 0, 1);
    return STK_OK;
}

/* A window being written: input_ids and labels of T ids. */
typedef struct window_row {
    uint32_t width, T;
    void *input_ids, *labels;
    bool i32;
} window_row;

/* A window from its T + 1 raw ids (a guarded use). */
static void window(void *arg, const uint8_t *src, size_t size)
{
    (void)size;
    const window_row *a = arg;
    stk__tok_window(src, a->width, a->T, a->input_ids, a->labels, a->i32);
}

stk_status stk__tokds_read_keyed(const stk_dataset *ds, stk__cursor *cursor,
                                 const stk__readkey *key, uint64_t i, void *const dst[],
                                 const size_t cap[], unsigned flags, stk__recinfo *info, char *err,
                                 size_t err_size)
{
    const stk__tokds *t = ds->impl;
    const stk__tokcorpus *c = &t->c;
    stk__tokcur *cur = (stk__tokcur *)cursor;
    stk_status rc = STK_OK;
    if (i >= t->n_rows)
        return stk__set_error(err, err_size, STK_EINVAL,
                              "record %" PRIu64 " out of range (dataset has %" PRIu64 " records)",
                              i, t->n_rows);
    memset(info, 0, sizeof(*info));
    info->local = i;
    info->offset = UINT64_MAX;
    for (uint32_t f = 0; f < ds->n_fields; f++) {
        info->field_size[f] = ds->field_max[f];
        info->size += ds->field_max[f];
        if (t->o.mode != STK_TOKENS_DOCUMENTS && cap[f] < ds->field_max[f])
            return stk__set_error(err, err_size, STK_ELIMIT,
                                  "field '%s': a %zu-byte buffer for %" PRIu64 " bytes",
                                  ds->fields[f].name, cap[f], ds->field_max[f]);
    }
    bool i32 = t->o.ids_dtype == STK_DTYPE_INT32;
    switch (t->o.mode) {
    case STK_TOKENS_DOCUMENTS: {
        uint64_t n = c->doc[i + 1] - c->doc[i];
        if (n * c->width > cap[0])
            return stk__set_error(err, err_size, STK_ELIMIT,
                                  "document %" PRIu64 ": %" PRIu64 " bytes, over the %zu-byte "
                                  "buffer",
                                  i, n * c->width, cap[0]);
        info->field_size[0] = info->size = n * c->width;
        rc = stk__tokcorpus_read(c, cur, c->doc[i], n, dst[0], flags, err, err_size);
        break;
    }
    case STK_TOKENS_PACKED:
        rc = read_packed(t, cur, i, dst, flags, err, err_size);
        break;
    default: {
        static const stk__readkey zero = {0, 0, false};
        uint64_t first = stk__tokds_row_start(t, key ? key : &zero, i);
        window_row a = {c->width, t->T, dst[0], dst[1], i32};
        /* input_ids and labels from the same T + 1 ids, in one pass (from the mapping: no copy) */
        rc =
            stk__tokcorpus_use(c, cur, first, (uint64_t)t->T + 1, window, &a, flags, err, err_size);
        if (!c->col && c->n_parts == 1)
            info->offset = c->parts[0].data_offset + first * c->width; /* one file: exact */
    }
    }
    return rc < 0 ? row_error(ds, i, rc, err, err_size) : STK_OK;
}

stk_status stk__tokds_read(const stk_dataset *ds, stk__cursor *cur, uint64_t i, void *const dst[],
                           const size_t cap[], unsigned flags, stk__recinfo *info, char *err,
                           size_t err_size)
{
    return stk__tokds_read_keyed(ds, cur, NULL, i, dst, cap, flags, info, err, err_size);
}

bool stk__tokds_extent(const stk_dataset *ds, uint64_t i, stk__file **f, stk__brange *r)
{
    const stk__tokds *t = ds->impl;
    const stk__tokcorpus *c = &t->c;
    uint64_t first, n;
    if (c->col || i >= t->n_rows || t->o.mode == STK_TOKENS_RANDOM)
        return false; /* a column's records are its own; random rows move every epoch */
    if (t->o.mode == STK_TOKENS_DOCUMENTS) {
        first = c->doc[i];
        n = c->doc[i + 1] - first;
    } else if (t->o.mode == STK_TOKENS_PACKED) {
        const stk__tokseg *s = &t->pack.seg[t->pack.row[i]];
        first = s->start;
        n = s->len + s->more;
    } else {
        first = i * t->T;
        n = t->T + 1;
    }
    if (n == 0)
        return false;
    /* the part of the first token (a span over two files hints the first file's share) */
    size_t lo = 0, hi = c->n_parts;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (c->parts[mid].first <= first)
            lo = mid;
        else
            hi = mid;
    }
    while (lo + 1 < c->n_parts && first - c->parts[lo].first >= c->parts[lo].count)
        lo++;
    const stk__tokpart *p = &c->parts[lo];
    uint64_t local = first - p->first;
    *f = p->f;
    *r = (stk__brange){p->data_offset + local * c->width, STK_MIN(n, p->count - local) * c->width};
    return true;
}

/* ---- options and the facts of a token dataset ---- */

void stk_tokens_opts_init_sized(stk_tokens_opts *opts, size_t struct_size)
{
    stk_tokens_opts full = {.struct_size = sizeof(full),
                            .mode = STK_TOKENS_WINDOWS,
                            .packing = STK_PACKING_BEST_FIT,
                            .eos = -1,
                            .bos = -1,
                            .ids_dtype = STK_DTYPE_INT64};
    stk__init_store(opts, struct_size, &full, sizeof(full));
}

stk_status stk_tokens_info_get(const stk_dataset *ds, stk_tokens_info *out)
{
    stk_tokens_info in;
    memset(&in, 0, sizeof(in));
    in.struct_size = sizeof(in);
    if (!ds || !out || out->struct_size < STK__STRUCT_MIN)
        return stk__set_last_error(STK_EINVAL, "stk_tokens_info_get: NULL argument or "
                                               "struct_size not set");
    if (ds->m == &stk__src_tokmix) {
        STK_TRY_RET(stk__tokmix_info(ds, &in));
    } else {
        const stk__tokds *t = stk__tokds_of(ds);
        if (!t)
            return stk__set_last_error(STK_EINVAL, "not a token dataset (format %s)", ds->m->name);
        stk__tokds_info(t, &in);
    }
    stk__out_store(out, &in, sizeof(in));
    return STK_OK;
}

void stk__tokds_info(const stk__tokds *t, stk_tokens_info *in)
{
    const stk__tokcorpus *c = &t->c;
    in->format = c->col ? stk_dataset_format(c->col) : c->format;
    in->token_bytes = c->width;
    in->seq_len = t->T;
    in->mode = t->o.mode;
    in->packing = t->o.packing;
    in->n_tokens = c->n_tokens;
    in->n_documents = c->n_docs;
    in->boundaries = c->bounded;
    in->max_document = t->max_doc;
    in->n_rows = t->n_rows;
    for (uint64_t d = 0; d < c->n_docs; d++) {
        uint64_t L = c->doc[d + 1] - c->doc[d];
        int k = L > 1 ? 63 - __builtin_clzll(L) : 0;
        in->doc_hist[STK_MIN(k, 47)]++;
    }
    switch (t->o.mode) {
    case STK_TOKENS_PACKED:
        in->n_padding = t->pack.padding;
        in->n_row_tokens = c->n_tokens;
        break;
    case STK_TOKENS_DOCUMENTS:
        in->n_row_tokens = c->n_tokens;
        break;
    default:
        in->n_row_tokens = t->n_rows * t->T;
        in->n_unused = t->o.mode == STK_TOKENS_WINDOWS ? c->n_tokens - in->n_row_tokens : 0;
    }
}

const char *stk__tokens_mode_name(uint32_t mode)
{
    return mode < 4 ? mode_names[mode] : "?";
}
