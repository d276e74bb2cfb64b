/*
 * test_order.c: the epoch orders of stk_loader_opts.order (src/loader/stk_order.c): the weighted
 * draws' distributions with and without replacement against their weights, an index list read
 * exactly once per epoch (shuffled: a permutation of the list) across ranks, resume in the
 * middle of an epoch for every order, stk_loader_set_indices, and the settings refused.
 */
#include "loader/stk_order.h"
#include "stk_internal.h"
#include "t.h"
#include "data/fixtures.h"

#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>

#define N 100

static char dir[128], shard[192];

static int setup(void)
{
    const char *d = fx_tmpdir("order");
    T_CHECK(d != NULL);
    snprintf(dir, sizeof(dir), "%s", d);
    snprintf(shard, sizeof(shard), "%s/d.stk", dir);
    stk_writer *w;
    T_OK(fx_shard_open(shard, &w));
    for (uint64_t i = 0; i < N; i++) {
        uint8_t buf[512];
        stk_value v[2] = {
            {.struct_size = sizeof(stk_value), .data = buf, .size = fx_payload(i, buf)},
            {.struct_size = sizeof(stk_value), .i64 = (int64_t)i}};
        T_OK(stk_writer_add(w, v));
    }
    T_OK(stk_writer_close(w));
    return 0;
}

static int teardown(void)
{
    fx_rmtree(dir);
    return 0;
}

/* With replacement: each record's frequency over 200,000 positions is within 5 standard
 * deviations of weight/sum; a zero weight is never drawn. */
static int test_draw_frequencies(void)
{
    static const double w[8] = {1, 0, 2, 4, 0.5, 8, 0, 0.25};
    double cdf[8], sum = 15.75;
    uint64_t pos, count[8] = {0};
    char err[256];
    T_OK(stk__order_cdf(w, 8, cdf, &pos, err, sizeof(err)));
    T_EQ(pos, 6);
    const uint64_t draws = 200000;
    for (uint64_t p = 0; p < draws; p++)
        count[stk__order_draw(cdf, 8, 42, 3, p)]++;
    for (int i = 0; i < 8; i++) {
        double q = w[i] / sum, mean = draws * q, sd = sqrt(draws * q * (1 - q));
        T_CHECKF(fabs((double)count[i] - mean) <= 5 * sd + (q == 0 ? 0 : 1),
                 "record %d: %llu draws, expected %.0f +- %.0f", i, (unsigned long long)count[i],
                 mean, sd);
    }
    /* the stream depends on (seed, epoch, position) only */
    T_EQ(stk__order_draw(cdf, 8, 42, 3, 17), stk__order_draw(cdf, 8, 42, 3, 17));
    int differ = 0;
    for (uint64_t p = 0; p < 64; p++)
        differ += stk__order_draw(cdf, 8, 42, 3, p) != stk__order_draw(cdf, 8, 42, 4, p);
    T_CHECK(differ > 10);
    /* bad weights */
    static const double neg[2] = {1, -1}, zero[2] = {0, 0}, nan_[2] = {1, NAN};
    T_EQ(stk__order_cdf(neg, 2, cdf, &pos, err, sizeof(err)), STK_EINVAL);
    T_CHECKF(strstr(err, "weight 1 is -1"), "%s", err);
    T_EQ(stk__order_cdf(zero, 2, cdf, &pos, err, sizeof(err)), STK_EINVAL);
    T_EQ(stk__order_cdf(nan_, 2, cdf, &pos, err, sizeof(err)), STK_EINVAL);
    return 0;
}

/* Without replacement: m distinct records of positive weight, a pure function of (seed, epoch);
 * over many epochs the first draw follows weight/sum, and a record's inclusion in a draw of 2
 * of 4 follows the sequential-draw probability. */
static int test_list_without_replacement(void)
{
    static const double w[5] = {1, 2, 0, 3, 4};
    stk__okey keys[5];
    uint64_t a[4], b[4], first[5] = {0}, incl[5] = {0};
    stk__order_list(w, 5, 4, 9, 0, keys, a);
    stk__order_list(w, 5, 4, 9, 0, keys, b);
    T_CHECK(memcmp(a, b, sizeof(a)) == 0);
    bool seen[5] = {false};
    for (int j = 0; j < 4; j++) {
        T_CHECK(a[j] < 5 && a[j] != 2 && !seen[a[j]]);
        seen[a[j]] = true;
    }
    const uint64_t epochs = 40000;
    for (uint64_t e = 0; e < epochs; e++) {
        stk__order_list(w, 5, 2, 9, e, keys, a);
        first[a[0]]++;
        incl[a[0]]++;
        incl[a[1]]++;
    }
    for (int i = 0; i < 5; i++) {
        double q = w[i] / 10, mean = epochs * q, sd = sqrt(epochs * q * (1 - q));
        T_CHECKF(fabs((double)first[i] - mean) <= 5 * sd + (q == 0 ? 0 : 1),
                 "first draw %d: %llu, expected %.0f", i, (unsigned long long)first[i], mean);
        /* P(i in 2 draws) = q_i + sum_{j != i} q_j * w_i / (10 - w_j) */
        double p = q;
        for (int j = 0; j < 5; j++)
            if (j != i && w[j] > 0)
                p += w[j] / 10 * w[i] / (10 - w[j]);
        double m2 = epochs * p, sd2 = sqrt(epochs * p * (1 - p));
        T_CHECKF(fabs((double)incl[i] - m2) <= 5 * sd2 + (p == 0 ? 0 : 1),
                 "inclusion %d: %llu, expected %.0f", i, (unsigned long long)incl[i], m2);
    }
    return 0;
}

/* Indices of every batch of the next epoch (count in *n); -1 on error. */
static int epoch_indices(stk_loader *L, int64_t *out, size_t *n, size_t max_batches)
{
    stk_batch *b;
    stk_status rc;
    size_t batches = 0;
    *n = 0;
    while (batches < max_batches && (rc = stk_loader_next(L, &b)) == STK_OK) {
        const int64_t *idx = stk_batch_indices(b);
        for (uint32_t j = 0; j < stk_batch_n_samples(b); j++)
            out[(*n)++] = idx[j];
        stk_batch_release(b);
        batches++;
    }
    if (batches == max_batches)
        return 0;
    if (rc != STK_END) {
        fprintf(stderr, "  next: %d %s\n", rc, stk_loader_errmsg(L));
        return -1;
    }
    return 0;
}

static stk_loader_opts opts(uint32_t rank, uint32_t world, int threads)
{
    static const char *p[1];
    p[0] = shard;
    stk_loader_opts o = fx_opts(p, 4, threads);
    o.rank = (int32_t)rank;
    o.world = (int32_t)world;
    o.seed = 1234;
    return o;
}

static const uint64_t subset[] = {3, 97, 50, 51, 8, 8, 20, 64, 77, 10, 11, 12, 13, 99, 0};
#define NSUB (sizeof(subset) / sizeof(subset[0]))

/* An index list in order; shuffled, each epoch a different permutation of it; split among 1
 * and 3 ranks x 1 and 3 threads the ranks' union is the list (plus the wrap padding). */
static int test_indices_exactly_once(void)
{
    int64_t got[64];
    size_t n;
    stk_loader *L;
    stk_loader_opts o = opts(0, 1, 2);
    o.order = STK_ORDER_INDICES;
    o.indices = subset;
    o.n_indices = NSUB;
    T_OK(stk_loader_create(&o, &L));
    T_EQ(stk_loader_n_batches(L), 4);
    T_CHECK(epoch_indices(L, got, &n, 100) == 0);
    T_EQ(n, NSUB);
    for (size_t i = 0; i < NSUB; i++)
        T_EQ(got[i], subset[i]);
    stk_loader_destroy(L);

    o.flags = STK_LOADER_SHUFFLE;
    int64_t prev[64] = {0};
    for (int world = 1; world <= 3; world += 2)
        for (int threads = 1; threads <= 3; threads += 2)
            for (uint64_t e = 0; e < 2; e++) {
                uint32_t count[N] = {0};
                size_t total = 0;
                int64_t all[64];
                for (int r = 0; r < world; r++) {
                    stk_loader_opts q = opts((uint32_t)r, (uint32_t)world, threads);
                    q.order = STK_ORDER_INDICES;
                    q.indices = subset;
                    q.n_indices = NSUB;
                    q.flags = STK_LOADER_SHUFFLE;
                    T_OK(stk_loader_create(&q, &L));
                    T_OK(stk_loader_set_epoch(L, e));
                    T_CHECK(epoch_indices(L, got, &n, 100) == 0);
                    stk_loader_destroy(L);
                    T_EQ(n, (NSUB + world - 1) / world);
                    for (size_t i = 0; i < n; i++) {
                        count[got[i]]++;
                        all[total++] = got[i];
                    }
                }
                uint32_t want[N] = {0};
                for (size_t i = 0; i < NSUB; i++)
                    want[subset[i]]++;
                size_t pad = total - NSUB, extra = 0;
                for (int i = 0; i < N; i++) {
                    T_CHECKF(count[i] >= want[i], "record %d read %u times, listed %u", i, count[i],
                             want[i]);
                    extra += count[i] - want[i];
                }
                T_EQ(extra, pad); /* only the padding repeats */
                if (world == 1 && threads == 1) {
                    if (e == 1)
                        T_CHECK(memcmp(prev, all, NSUB * 8) != 0); /* epochs differ */
                    memcpy(prev, all, NSUB * 8);
                }
            }
    return 0;
}

/* The order, the first k batches, the state, then a new loader restored from it: the rest
 * equals the uninterrupted run's, for each order kind. */
static int resume_case(const stk_loader_opts *base)
{
    int64_t full[256], head[256], tail[256];
    size_t nf, nh, nt;
    stk_loader *L;
    T_OK(stk_loader_create(base, &L));
    T_OK(stk_loader_set_epoch(L, 2));
    T_CHECK(epoch_indices(L, full, &nf, 1000) == 0);
    stk_loader_destroy(L);
    for (size_t k = 0; k <= 3; k++) {
        T_OK(stk_loader_create(base, &L));
        T_OK(stk_loader_set_epoch(L, 2));
        T_CHECK(epoch_indices(L, head, &nh, k) == 0);
        char state[320];
        T_OK(stk_loader_save_state(L, state, sizeof(state)));
        stk_loader_destroy(L);
        T_CHECK(base->order == STK_ORDER_ALL || strstr(state, "\"order\": \""));
        T_OK(stk_loader_create(base, &L));
        T_OK(stk_loader_load_state(L, state));
        T_CHECK(epoch_indices(L, tail, &nt, 1000) == 0);
        stk_loader_destroy(L);
        T_EQ(nh + nt, nf);
        T_CHECK(memcmp(head, full, nh * 8) == 0);
        T_CHECKF(memcmp(tail, full + nh, nt * 8) == 0, "order %u: resume after %zu batches",
                 base->order, k);
    }
    return 0;
}

static int test_resume_every_order(void)
{
    static double w[N];
    for (int i = 0; i < N; i++)
        w[i] = (i % 5) * 0.5;
    stk_loader_opts o = opts(0, 1, 3);
    o.order = STK_ORDER_INDICES;
    o.indices = subset;
    o.n_indices = NSUB;
    o.flags = STK_LOADER_SHUFFLE;
    T_CHECK(resume_case(&o) == 0);
    o.order = STK_ORDER_WEIGHTED;
    o.flags = 0;
    o.weights = w;
    o.n_weights = N;
    o.num_samples = 30;
    o.replacement = true;
    T_CHECK(resume_case(&o) == 0);
    o.replacement = false;
    o.num_samples = 50;
    T_CHECK(resume_case(&o) == 0);
    /* without replacement: distinct records, none of weight 0, different per epoch */
    stk_loader *L;
    o.n_slots = 2; /* epochs of 13 batches through a pool of 3 lists */
    T_OK(stk_loader_create(&o, &L));
    int64_t e0[64], e1[64];
    size_t n0, n1;
    T_CHECK(epoch_indices(L, e0, &n0, 1000) == 0);
    T_CHECK(epoch_indices(L, e1, &n1, 1000) == 0);
    T_CHECK(n0 == 50 && n1 == 50 && memcmp(e0, e1, sizeof(e0[0]) * 50) != 0);
    bool seen[N] = {false};
    for (size_t i = 0; i < n0; i++) {
        T_CHECK(e0[i] % 5 != 0 && !seen[e0[i]]);
        seen[e0[i]] = true;
    }
    /* a state of another order is refused */
    char state[320];
    T_OK(stk_loader_save_state(L, state, sizeof(state)));
    stk_loader_destroy(L);
    o.replacement = true;
    T_OK(stk_loader_create(&o, &L));
    T_EQ(stk_loader_load_state(L, state), STK_EINVAL);
    T_CHECKF(strstr(stk_loader_errmsg(L), "another epoch order"), "%s", stk_loader_errmsg(L));
    stk_loader_destroy(L);
    return 0;
}

/* stk_loader_set_indices: the next epoch reads the new list; the same list keeps the position
 * and what is prepared; bad lists and loaders are refused. */
static int test_set_indices(void)
{
    stk_loader *L;
    stk_loader_opts o = opts(0, 1, 2);
    o.order = STK_ORDER_INDICES;
    o.indices = subset;
    o.n_indices = NSUB;
    T_OK(stk_loader_create(&o, &L));
    int64_t got[64];
    size_t n;
    T_CHECK(epoch_indices(L, got, &n, 2) == 0);    /* 2 batches into epoch 0 */
    T_OK(stk_loader_set_indices(L, subset, NSUB)); /* same list: the epoch goes on */
    T_CHECK(epoch_indices(L, got, &n, 100) == 0);
    T_EQ(n, NSUB - 8);
    T_EQ(got[0], subset[8]);
    static const uint64_t other[] = {5, 4, 3, 2, 1, 0, 99};
    T_OK(stk_loader_set_indices(L, other, 7));
    T_EQ(stk_loader_n_batches(L), 2);
    T_CHECK(epoch_indices(L, got, &n, 100) == 0);
    T_EQ(stk_loader_epoch(L), 2);
    T_EQ(n, 7);
    for (size_t i = 0; i < 7; i++)
        T_EQ(got[i], other[i]);
    static const uint64_t bad[] = {1, 100};
    T_EQ(stk_loader_set_indices(L, bad, 2), STK_EINVAL);
    T_CHECKF(strstr(stk_loader_errmsg(L), "index 100 (position 1 of the list) is out of range"),
             "%s", stk_loader_errmsg(L));
    T_EQ(stk_loader_set_indices(L, bad, 0), STK_EINVAL);
    stk_loader_destroy(L);
    /* a loader of another order */
    o = opts(0, 1, 1);
    T_OK(stk_loader_create(&o, &L));
    T_EQ(stk_loader_set_indices(L, subset, NSUB), STK_EINVAL);
    stk_loader_destroy(L);
    /* settings refused at create */
    o.order = STK_ORDER_WEIGHTED;
    double w[N] = {0};
    w[3] = 1;
    o.weights = w;
    o.n_weights = N;
    o.num_samples = 2;
    T_EQ(stk_loader_create(&o, &L), STK_EINVAL); /* 2 without replacement, 1 positive */
    T_CHECKF(strstr(stk_last_errmsg(), "more than the 1 records of positive weight"), "%s",
             stk_last_errmsg());
    o.n_weights = 5;
    T_EQ(stk_loader_create(&o, &L), STK_EINVAL);
    o.order = 9;
    T_EQ(stk_loader_create(&o, &L), STK_EINVAL);
    return 0;
}

T_MAIN(T_CASE(setup), T_CASE(test_draw_frequencies), T_CASE(test_list_without_replacement),
       T_CASE(test_indices_exactly_once), T_CASE(test_resume_every_order), T_CASE(test_set_indices),
       T_CASE(teardown))
