/*
 * stk_order.c: the epoch's order of a loader (stk_order_kind in include/stoker.h): position ->
 * record for STK_ORDER_INDICES (a list, optionally permuted per epoch by stk_sampler_index) and
 * STK_ORDER_WEIGHTED (draws with replacement, O(log n) per position from the prefix sums; without
 * replacement a list per epoch), and the checked copy of a new index list that
 * stk_loader_set_indices (stk_loader.c) swaps in. STK_ORDER_ALL is stk_sampler_index itself
 * (stk_sampler.c).
 *
 * Lists without replacement: the dispatcher (open_batch, under mu) makes epoch e's list when it
 * opens e's first batch, into a free entry of a pool of n_slots + 1 lists allocated at create;
 * each slot keeps a reference to the list of the batch it holds (workers read it without mu:
 * the entry cannot be reused while referenced). At most n_slots slots and the dispatcher hold
 * references, so an entry is always free. Resume needs nothing stored: every list is a pure
 * function of (weights, seed, epoch).
 */
#include "loader/stk_loader_int.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* The order's streams are kept apart from the augmentation streams of (seed, epoch, record). */
#define ORDER_SALT 0x5851f42d4c957f2dULL

stk_status stk__order_cdf(const double *weights, uint64_t n, double *cdf, uint64_t *positive,
                          char *err, size_t err_size)
{
    double sum = 0;
    uint64_t pos = 0;
    for (uint64_t i = 0; i < n; i++) {
        double w = weights[i];
        if (!(w >= 0) || !isfinite(w))
            return stk__set_error(err, err_size, STK_EINVAL,
                                  "weight %" PRIu64 " is %g (weights must be finite and >= 0)", i,
                                  w);
        pos += w > 0;
        sum += w;
        cdf[i] = sum;
    }
    if (pos == 0 || !isfinite(sum))
        return stk__set_error(err, err_size, STK_EINVAL,
                              pos ? "the weights' sum overflows" : "every weight is 0");
    *positive = pos;
    return STK_OK;
}

uint64_t stk__order_draw(const double *cdf, uint64_t n, uint64_t seed, uint64_t epoch, uint64_t pos)
{
    stk_rng rng;
    stk_rng_init(&rng, seed ^ ORDER_SALT, epoch, pos);
    double u = stk_rng_uniform(&rng) * cdf[n - 1];
    uint64_t lo = 0, hi = n - 1; /* the first i with cdf[i] > u (cdf[n-1] > u always) */
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (cdf[mid] > u)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

static int key_cmp(const void *a, const void *b)
{
    const stk__okey *x = a, *y = b;
    if (x->key != y->key)
        return x->key > y->key ? -1 : 1; /* largest first */
    return x->index < y->index ? -1 : x->index > y->index;
}

void stk__order_list(const double *weights, uint64_t n, uint64_t m, uint64_t seed, uint64_t epoch,
                     stk__okey *keys, uint64_t *out)
{
    uint64_t k = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (!(weights[i] > 0))
            continue;
        stk_rng rng;
        stk_rng_init(&rng, seed ^ ORDER_SALT, epoch, i);
        /* 1 - u is in (0, 1]: log is finite, <= 0; a heavier record's key is nearer 0 */
        keys[k].key = log(1.0 - stk_rng_uniform(&rng)) / weights[i];
        keys[k].index = i;
        k++;
    }
    qsort(keys, (size_t)k, sizeof(*keys), key_cmp);
    for (uint64_t j = 0; j < m && j < k; j++)
        out[j] = keys[j].index;
}

/* ---- the loader's order ---- */

/* Rows a slot needs for an epoch of m positions: min(batch_size, positions per rank). */
static uint64_t rows_for(const core *c, uint64_t m)
{
    uint64_t per_rank = m / c->world + (m % c->world != 0);
    return STK_MIN((uint64_t)c->batch_size, STK_MAX(per_rank, (uint64_t)1));
}

/* The checksum of the order's settings (0 for STK_ORDER_ALL), for the resume state. */
static uint64_t order_hash(const core *c)
{
    if (c->order == STK_ORDER_ALL)
        return 0;
    uint64_t head[4] = {c->order, c->replacement, c->m, c->n};
    uint64_t h = XXH3_64bits(head, sizeof(head));
    if (c->order == STK_ORDER_INDICES)
        h = XXH3_64bits_withSeed(c->ilist, c->m * sizeof(uint64_t), h);
    else
        h = XXH3_64bits_withSeed(c->cdf, c->n * sizeof(double), h);
    return h ? h : 1;
}

/* Copy and check an index list (each < n); *out NULL on error. */
static stk_status copy_indices(const core *c, const uint64_t *idx, uint64_t m, uint64_t **out,
                               char *err, size_t err_size)
{
    *out = NULL;
    if (!idx || m == 0)
        return stk__set_error(err, err_size, STK_EINVAL, "the index list is empty");
    for (uint64_t i = 0; i < m; i++)
        if (idx[i] >= c->n)
            return stk__set_error(err, err_size, STK_EINVAL,
                                  "index %" PRIu64 " (position %" PRIu64
                                  " of the list) is out of range: the dataset has %" PRIu64
                                  " records",
                                  idx[i], i, c->n);
    if (m > SIZE_MAX / sizeof(uint64_t) || !(*out = stk__malloc((size_t)m * sizeof(uint64_t))))
        return stk__set_error(err, err_size, STK_ENOMEM,
                              "out of memory for a list of %" PRIu64 " indices", m);
    memcpy(*out, idx, (size_t)m * sizeof(uint64_t));
    return STK_OK;
}

stk_status stk__order_setup(core *c, const stk_loader_opts *o, char *err, size_t err_size)
{
    stk_status rc;
    c->order = o->order;
    c->m = c->n;
    switch (o->order) {
    case STK_ORDER_ALL:
        return STK_OK;
    case STK_ORDER_INDICES:
        rc = copy_indices(c, o->indices, o->n_indices, &c->ilist, err, err_size);
        if (rc < 0)
            return rc;
        c->m = o->n_indices;
        break;
    case STK_ORDER_WEIGHTED: {
        if (!o->weights || o->n_weights != c->n)
            return stk__set_error(err, err_size, STK_EINVAL,
                                  "%" PRIu64 " weights for %" PRIu64 " records (one per record)",
                                  o->weights ? o->n_weights : 0, c->n);
        if (o->num_samples < 1)
            return stk__set_error(err, err_size, STK_EINVAL, "num_samples must be >= 1");
        if (c->n > SIZE_MAX / sizeof(stk__okey) || !(c->cdf = stk__malloc(c->n * sizeof(double))))
            return stk__set_error(err, err_size, STK_ENOMEM, "out of memory for the weights");
        uint64_t positive;
        if ((rc = stk__order_cdf(o->weights, c->n, c->cdf, &positive, err, err_size)) < 0)
            return rc;
        c->replacement = o->replacement;
        c->m = o->num_samples;
        if (c->replacement)
            break;
        if (c->m > positive)
            return stk__set_error(err, err_size, STK_EINVAL,
                                  "num_samples %" PRIu64 " without replacement is more than the "
                                  "%" PRIu64 " records of positive weight",
                                  c->m, positive);
        c->weights = stk__malloc(c->n * sizeof(double));
        c->okeys = stk__malloc(c->n * sizeof(stk__okey));
        c->n_pool = c->n_slots + 1;
        c->pool = stk__calloc(c->n_pool, sizeof(*c->pool));
        c->slot_list = stk__calloc(c->n_slots, sizeof(*c->slot_list));
        bool ok = c->weights && c->okeys && c->pool && c->slot_list;
        for (uint32_t i = 0; ok && i < c->n_pool; i++)
            ok = (c->pool[i].idx = stk__malloc(c->m * sizeof(uint64_t))) != NULL;
        if (!ok)
            return stk__set_error(err, err_size, STK_ENOMEM,
                                  "out of memory for %u lists of %" PRIu64 " draws", c->n_pool,
                                  c->m);
        memcpy(c->weights, o->weights, c->n * sizeof(double));
        break;
    }
    default:
        return stk__set_error(err, err_size, STK_EINVAL, "unknown order %u", o->order);
    }
    c->order_hash = order_hash(c);
    return STK_OK;
}

void stk__order_free(core *c)
{
    stk__free(c->ilist);
    stk__free(c->cdf);
    stk__free(c->weights);
    stk__free(c->okeys);
    for (uint32_t i = 0; c->pool && i < c->n_pool; i++)
        stk__free(c->pool[i].idx);
    stk__free(c->pool);
    stk__free(c->slot_list);
}

void stk__order_open_locked(core *c, const stk__slot *s)
{
    if (!c->pool)
        return;
    size_t k = (size_t)(s - c->r.slots);
    if (c->slot_list[k])
        c->slot_list[k]->refs--;
    c->slot_list[k] = NULL;
    if (!c->d_list || c->d_list->epoch != s->epoch) {
        if (c->d_list)
            c->d_list->refs--;
        stk__olist *l = c->pool;
        while (l->refs) /* one is free: see the top of the file */
            l++;
        stk__order_list(c->weights, c->n, c->m, c->seed, s->epoch, c->okeys, l->idx);
        l->epoch = s->epoch;
        l->refs = 1;
        c->d_list = l;
    }
    c->slot_list[k] = c->d_list;
    c->d_list->refs++;
}

uint64_t stk__order_at(const core *c, const stk__slot *s, uint64_t pos)
{
    switch (c->order) {
    case STK_ORDER_INDICES:
        return c->ilist[c->shuffle ? stk_sampler_index(c->m, true, c->seed, s->epoch, pos) : pos];
    case STK_ORDER_WEIGHTED:
        if (c->replacement)
            return stk__order_draw(c->cdf, c->n, c->seed, s->epoch, pos);
        return c->slot_list[s - c->r.slots]->idx[pos];
    default: /* a self-ordered dataset (a mixture) shuffles its parts itself */
        return stk_sampler_index(c->n, c->shuffle && !c->ds->self_ordered, c->seed, s->epoch, pos);
    }
}

stk_status stk__order_list_new(const core *c, const uint64_t *indices, uint64_t n, uint64_t **out,
                               char *err, size_t err_size)
{
    uint64_t *list;
    stk_status rc = copy_indices(c, indices, n, &list, err, err_size);
    if (rc < 0)
        return rc;
    if (rows_for(c, n) > c->r.lay.batch_size) {
        stk__free(list);
        return stk__set_error(err, err_size, STK_ELIMIT,
                              "a list of %" PRIu64 " indices gives rank %u batches of %" PRIu64
                              " records, but the ring's slots hold %u (sized at create to the "
                              "first list); create the loader with the longest list",
                              n, c->rank, rows_for(c, n), c->r.lay.batch_size);
    }
    *out = list;
    return STK_OK;
}

void stk__order_rehash(core *c)
{
    c->order_hash = order_hash(c);
}
