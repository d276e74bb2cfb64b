/*
 * stk_tokmix.c: mixtures of token datasets (stk_tokens_mix; docs/tokens.md "Mixtures").
 *
 * Which part each position of an epoch reads is Megatron's blending rule (its
 * build_blending_indices): position p goes to the part d with the largest error
 * w_d * max(p, 1) - c_d(p), c_d(p) the positions given to d before p, ties to the lower d. Every
 * prefix therefore holds each part within about one sample of its share, and every window within
 * about two. The rule does not depend on the epoch or the seed: it is computed once at open into
 * src[] (one byte per position) with each part's count before every block of 256 positions, so a
 * position's part and its rank k among that part's positions are found in O(256) without state.
 *
 * Part d's k-th position of epoch e is entry s = e * m_d + k of the part's endless stream of
 * passes over its n_d rows (m_d its positions per epoch): pass s / n_d, row
 * stk_sampler_index(n_d, shuffle, seed_d, pass, s mod n_d), seed_d the loader's seed mixed with d.
 * A part with m_d > n_d repeats (each pass a new permutation); one with m_d < n_d is subsampled
 * and goes on where it stopped next epoch. Every position is a pure function of (seed, epoch,
 * position), so a loader's resume and rank split apply unchanged; the loader keeps the positions
 * in order (self_ordered) and hands its shuffle setting to the read.
 */
#include "source/tokens/stk_tokens.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

#define BLOCK 256
#define PART_SALT 0x2545f4914f6cdd1dULL

typedef struct tokmix {
    stk_dataset **parts;
    size_t n;
    double *w;           /* normalised weights */
    uint64_t N;          /* positions per epoch */
    uint8_t *src;        /* [N]: the part of each position */
    uint64_t *blk;       /* [(N / BLOCK + 1) * n]: each part's positions before each block */
    uint64_t *per_epoch; /* m_d */
    uint32_t source_field;
    int lens_field; /* packed rows: seq_lens, whose tail past a part's own length is zeroed */
} tokmix;

typedef struct mixcur {
    stk__cursor **cur; /* each part's */
} mixcur;

void stk__tokmix_blend(const double *w, size_t n_parts, uint64_t n, uint8_t *src, uint64_t *counts)
{
    memset(counts, 0, n_parts * sizeof(*counts));
    for (uint64_t p = 0; p < n; p++) {
        double x = p > 1 ? (double)p : 1.0;
        size_t best = 0;
        double best_err = w[0] * x - (double)counts[0];
        for (size_t d = 1; d < n_parts; d++) {
            double e = w[d] * x - (double)counts[d];
            if (e > best_err) {
                best_err = e;
                best = d;
            }
        }
        src[p] = (uint8_t)best;
        counts[best]++;
    }
}

/* Part d's positions in [0, p): its rank at position p. */
static uint64_t rank_of(const tokmix *m, uint64_t p, size_t d)
{
    uint64_t b = p / BLOCK, k = m->blk[b * m->n + d];
    for (uint64_t q = b * BLOCK; q < p; q++)
        k += m->src[q] == d;
    return k;
}

static void mix_close(stk_dataset *ds)
{
    tokmix *m = ds->impl;
    if (!m)
        return;
    for (size_t d = 0; m->parts && d < m->n; d++)
        stk_dataset_close(m->parts[d]);
    stk__free(m->parts);
    stk__free(m->w);
    stk__free(m->src);
    stk__free(m->blk);
    stk__free(m->per_epoch);
    stk__free(m);
    ds->impl = NULL;
}

static stk_status mix_cursor_open(const stk_dataset *ds, stk__cursor **out, char *err,
                                  size_t err_size)
{
    const tokmix *m = ds->impl;
    mixcur *mc = stk__calloc(1, sizeof(*mc));
    if (!mc || !(mc->cur = stk__calloc(m->n, sizeof(*mc->cur)))) {
        stk__free(mc);
        return stk__set_error(err, err_size, STK_ENOMEM, "out of memory for a mixture cursor");
    }
    for (size_t d = 0; d < m->n; d++) {
        stk_status rc = stk__dataset_cursor_open(m->parts[d], &mc->cur[d], err, err_size);
        if (rc < 0) {
            for (size_t k = 0; k < d; k++)
                stk__dataset_cursor_close(m->parts[k], mc->cur[k]);
            stk__free(mc->cur);
            stk__free(mc);
            return rc;
        }
    }
    *out = (stk__cursor *)mc;
    return STK_OK;
}

static void mix_cursor_close(const stk_dataset *ds, stk__cursor *cur)
{
    const tokmix *m = ds->impl;
    mixcur *mc = (mixcur *)cur;
    if (!mc)
        return;
    for (size_t d = 0; d < m->n; d++)
        stk__dataset_cursor_close(m->parts[d], mc->cur[d]);
    stk__free(mc->cur);
    stk__free(mc);
}

/* Where position p of epoch `key` reads: part *d, its row, and the part's key. */
static uint64_t locate(const tokmix *m, const stk__readkey *key, uint64_t p, size_t *d,
                       stk__readkey *pkey)
{
    *d = m->src[p];
    uint64_t n_d = stk_dataset_n_records(m->parts[*d]);
    uint64_t s = key->epoch * m->per_epoch[*d] + rank_of(m, p, *d);
    *pkey = (stk__readkey){key->seed ^ stk__mix64(PART_SALT + *d), s / n_d, key->shuffle};
    return stk_sampler_index(n_d, key->shuffle, pkey->seed, pkey->epoch, s % n_d);
}

static stk_status mix_read_keyed(const stk_dataset *ds, stk__cursor *cur, const stk__readkey *key,
                                 uint64_t i, void *const dst[], const size_t cap[], unsigned flags,
                                 stk__recinfo *info, char *err, size_t err_size)
{
    const tokmix *m = ds->impl;
    static const stk__readkey zero = {0, 0, false};
    if (i >= m->N)
        return stk__set_error(err, err_size, STK_EINVAL,
                              "record %" PRIu64 " out of range (dataset has %" PRIu64 " records)",
                              i, m->N);
    size_t d;
    stk__readkey pkey;
    uint64_t row = locate(m, key ? key : &zero, i, &d, &pkey);
    stk_status rc = stk__dataset_read_keyed(m->parts[d], ((mixcur *)cur)->cur[d], &pkey, row, dst,
                                            cap, flags, info, err, err_size);
    if (rc < 0)
        return rc;            /* the part's message names its file and row */
    if (m->lens_field >= 0) { /* a part whose rows have fewer pieces: zeros after its own */
        uint64_t have = m->parts[d]->field_max[m->lens_field];
        memset((uint8_t *)dst[m->lens_field] + have, 0,
               (size_t)(ds->field_max[m->lens_field] - have));
        info->field_size[m->lens_field] = ds->field_max[m->lens_field];
    }
    int64_t src = (int64_t)d;
    memcpy(dst[m->source_field], &src, sizeof(src));
    info->field_size[m->source_field] = sizeof(src);
    info->size += sizeof(src);
    info->local = i;
    return STK_OK;
}

static stk_status mix_read(const stk_dataset *ds, stk__cursor *cur, uint64_t i, void *const dst[],
                           const size_t cap[], unsigned flags, stk__recinfo *info, char *err,
                           size_t err_size)
{
    return mix_read_keyed(ds, cur, NULL, i, dst, cap, flags, info, err, err_size);
}

static void mix_describe(const stk_dataset *ds, uint64_t i, char *buf, size_t size)
{
    const tokmix *m = ds->impl;
    if (i >= m->N) {
        snprintf(buf, size, "mixture position %" PRIu64 " (of %" PRIu64 ")", i, m->N);
        return;
    }
    static const stk__readkey zero = {0, 0, false};
    size_t d;
    stk__readkey pkey;
    uint64_t row = locate(m, &zero, i, &d, &pkey);
    char part[STK_ERRMSG_SIZE];
    stk_dataset_describe(m->parts[d], row, part, sizeof(part));
    snprintf(buf, size, "mixture position %" PRIu64 " (part %zu in epoch 0: %s)", i, d, part);
}

const stk__source_methods stk__src_tokmix = {
    .name = "mix",
    .summary = "a blend of token datasets by weight (stk_tokens_mix)",
    .close = mix_close,
    .cursor_open = mix_cursor_open,
    .cursor_close = mix_cursor_close,
    .read = mix_read,
    .read_keyed = mix_read_keyed,
    .describe = mix_describe,
};

/* Whether parts a and b have the same fields; packed rows' seq_lens may differ in length (each
 * corpus has its own most pieces per row: the mixture takes the longest). */
static bool same_fields(const stk_dataset *a, const stk_dataset *b)
{
    if (a->n_fields != b->n_fields)
        return false;
    for (uint32_t f = 0; f < a->n_fields; f++) {
        stk_field x = a->fields[f], y = b->fields[f];
        if (strcmp(x.name, "seq_lens") == 0 && strcmp(y.name, "seq_lens") == 0)
            x.shape[0] = y.shape[0] = 0;
        if (!stk__field_equal(&x, &y))
            return false;
    }
    return true;
}

/* The parts' files, listed as the mixture's (stoker inspect, messages). */
static stk_status mix_files(stk_dataset *ds, stk_dataset *const *parts, size_t n_parts, char *err,
                            size_t err_size)
{
    size_t n = 0;
    for (size_t d = 0; d < n_parts; d++)
        n += parts[d]->n_files;
    STK_TRY_RET(stk__dataset_files_alloc(ds, n, err, err_size));
    n = 0;
    for (size_t d = 0; d < n_parts; d++)
        for (size_t i = 0; i < parts[d]->n_files; i++, n++) {
            const stk__srcfile *sf = &parts[d]->files[i];
            ds->files[n] = *sf;
            ds->files[n].path = stk__strdup(sf->path);
            ds->files[n].metadata = stk__strdup(sf->metadata ? sf->metadata : "{}");
            if (!ds->files[n].path || !ds->files[n].metadata)
                return stk__set_error(err, err_size, STK_ENOMEM, "out of memory");
        }
    return STK_OK;
}

stk_status stk_tokens_mix(stk_dataset *const *parts, const double *weights, size_t n,
                          uint64_t samples, stk_dataset **out)
{
    stk_status rc = STK_OK;
    char err[STK_ERRMSG_SIZE];
    stk_dataset *ds;
    tokmix *m;
    if (out)
        *out = NULL;
    if (!out || !parts || !weights || n == 0 || n > 255)
        return stk__set_last_error(STK_EINVAL, "stk_tokens_mix: %zu parts (1 to 255, with weights)",
                                   n);
    double sum = 0;
    uint64_t rows = 0;
    for (size_t d = 0; d < n; d++) {
        const stk__tokds *t = stk__tokds_of(parts[d]);
        if (!t || t->o.mode == STK_TOKENS_DOCUMENTS)
            return stk__set_last_error(STK_EINVAL,
                                       "stk_tokens_mix: part %zu is not a token dataset of rows "
                                       "(stk_tokens_open with a seq_len)",
                                       d);
        if (!same_fields(parts[0], parts[d]))
            return stk__set_last_error(STK_EINVAL,
                                       "stk_tokens_mix: part %zu (%s) has other rows than part 0 "
                                       "(%s): the parts of a mixture share seq_len, mode and "
                                       "ids_dtype",
                                       d, parts[d]->files[0].path, parts[0]->files[0].path);
        if (!(weights[d] >= 0) || !isfinite(weights[d]))
            return stk__set_last_error(STK_EINVAL,
                                       "stk_tokens_mix: weight %zu is %g (weights are finite and "
                                       ">= 0)",
                                       d, weights[d]);
        sum += weights[d];
        rows += stk_dataset_n_records(parts[d]);
    }
    if (!(sum > 0) || !isfinite(sum))
        return stk__set_last_error(STK_EINVAL, "stk_tokens_mix: every weight is 0");
    if (!(ds = stk__calloc(1, sizeof(*ds))) || !(m = stk__calloc(1, sizeof(*m)))) {
        stk__free(ds);
        return stk__set_last_error(STK_ENOMEM, "out of memory");
    }
    ds->m = &stk__src_tokmix; /* from here on closing ds frees m (the parts only once given) */
    ds->impl = m;
    m->n = n;
    m->N = samples ? samples : rows;
    if (!(m->parts = stk__calloc(n, sizeof(*m->parts))) ||
        !(m->w = stk__calloc(n, sizeof(double))) ||
        !(m->per_epoch = stk__calloc(n, sizeof(uint64_t))) ||
        !(m->src = stk__malloc((size_t)m->N)) ||
        !(m->blk = stk__calloc((size_t)(m->N / BLOCK + 1) * n, sizeof(uint64_t))))
        STK_FAIL(err, STK_ENOMEM, "out of memory for a mixture of %" PRIu64 " positions", m->N);
    for (size_t d = 0; d < n; d++)
        m->w[d] = weights[d] / sum;
    stk__tokmix_blend(m->w, n, m->N, m->src, m->per_epoch);
    for (uint64_t b = 1; b <= m->N / BLOCK; b++) { /* blk[b][d]: d's positions before block b */
        uint64_t *cur = m->blk + b * n;
        memcpy(cur, cur - n, n * sizeof(uint64_t));
        for (uint64_t q = (b - 1) * BLOCK; q < b * BLOCK; q++)
            cur[m->src[q]]++;
    }
    ds->self_ordered = true;
    ds->count = m->N;
    const stk_dataset *p0 = parts[0];
    ds->n_fields = p0->n_fields + 1;
    ds->max_record = p0->max_record + sizeof(int64_t);
    m->lens_field = -1;
    for (uint32_t f = 0; f < p0->n_fields; f++) {
        ds->fields[f] = p0->fields[f];
        ds->field_max[f] = p0->field_max[f];
        if (strcmp(p0->fields[f].name, "seq_lens") == 0) {
            m->lens_field = (int)f;
            for (size_t d = 1; d < n; d++)
                if (parts[d]->fields[f].shape[0] > ds->fields[f].shape[0]) {
                    ds->max_record += parts[d]->field_max[f] - ds->field_max[f];
                    ds->fields[f].shape[0] = parts[d]->fields[f].shape[0];
                    ds->field_max[f] = parts[d]->field_max[f];
                }
        }
    }
    m->source_field = p0->n_fields;
    stk_field *sf = &ds->fields[m->source_field];
    memset(sf, 0, sizeof(*sf));
    snprintf(sf->name, sizeof(sf->name), "source");
    sf->kind = STK_FIELD_INT64;
    *sf = stk__field_canonical(sf);
    ds->field_max[m->source_field] = sizeof(int64_t);
    stk__fphash fp;
    stk__fp_begin(&fp);
    stk__fp_add(&fp, "mix", 3);
    stk__fp_add_u64(&fp, m->N);
    for (size_t d = 0; d < n; d++) {
        stk__fp_add_u64(&fp, stk_dataset_fingerprint(parts[d]));
        stk__fp_add(&fp, &m->w[d], sizeof(double));
    }
    ds->fingerprint = stk__fp_end(&fp);
    STK_TRY(mix_files(ds, parts, n, err, sizeof(err)));
    for (size_t d = 0; d < n; d++) /* the mixture owns them now */
        m->parts[d] = parts[d];
    *out = ds;
    return STK_OK;
fail:
    stk_dataset_close(ds);
    return stk__last_error_copy(rc, err);
}

stk_status stk__tokmix_info(const stk_dataset *ds, stk_tokens_info *in)
{
    const tokmix *m = ds->impl;
    for (size_t d = 0; d < m->n; d++) {
        stk_tokens_info p;
        memset(&p, 0, sizeof(p));
        stk__tokds_info(stk__tokds_of(m->parts[d]), &p);
        if (d == 0) {
            *in = p;
        } else {
            in->n_tokens += p.n_tokens;
            in->n_documents += p.n_documents;
            in->boundaries = in->boundaries && p.boundaries;
            in->max_document = STK_MAX(in->max_document, p.max_document);
            in->n_row_tokens += p.n_row_tokens;
            in->n_padding += p.n_padding;
            in->n_unused += p.n_unused;
            in->token_bytes = STK_MAX(in->token_bytes, p.token_bytes);
            for (int k = 0; k < 48; k++)
                in->doc_hist[k] += p.doc_hist[k];
        }
    }
    in->struct_size = sizeof(*in);
    in->format = "mix";
    in->n_rows = m->N;
    in->n_parts = (uint32_t)m->n;
    return STK_OK;
}

stk_status stk_tokens_mix_part(const stk_dataset *mixture, size_t i, const stk_dataset **part,
                               double *weight, uint64_t *per_epoch)
{
    if (!mixture || mixture->m != &stk__src_tokmix)
        return stk__set_last_error(STK_EINVAL, "stk_tokens_mix_part: not a mixture");
    const tokmix *m = mixture->impl;
    if (i >= m->n)
        return stk__set_last_error(STK_EINVAL, "stk_tokens_mix_part: part %zu of %zu", i, m->n);
    if (part)
        *part = m->parts[i];
    if (weight)
        *weight = m->w[i];
    if (per_epoch)
        *per_epoch = m->per_epoch[i];
    return STK_OK;
}
