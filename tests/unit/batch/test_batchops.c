/*
 * test_batchops.c: batch transforms (MixUp, CutMix) and the per-sample callback through the
 * public C API: the Beta draw's moments; labels one-hot and mixed (rows sum to 1); MixUp images
 * a lambda-mix of a row and the row before it; CutMix's box area matching lambda; identical
 * batches for 1 and 3 threads; the sample_fn writing the slot, its errors naming the record and
 * being skipped and counted under SKIP_CORRUPT; bad options.
 */
#include "batch/stk_batchops.h"
#include "stk_internal.h"
#include "t.h"
#include "data/fixtures.h"

#include <math.h>
#include <stdatomic.h>

#define N 40
#define K 5
#define CH 2
#define HH 6
#define WW 8
#define PIX (CH * HH * WW)

static char path[256];

static float pixel(uint64_t rec, int k)
{
    return (float)(1000.0 * (double)rec + k);
}

static int64_t class_of(uint64_t rec)
{
    return (int64_t)(rec % K);
}

static int setup(void)
{
    const char *dir = fx_tmpdir("batchops");
    T_CHECK(dir != NULL);
    snprintf(path, sizeof(path), "%s/s.stk", dir);
    stk_field fields[2] = {
        {.struct_size = sizeof(stk_field),
         .name = "image",
         .kind = STK_FIELD_ARRAY,
         .dtype = STK_DTYPE_FLOAT32,
         .ndim = 3,
         .shape = {CH, HH, WW}},
        {.struct_size = sizeof(stk_field), .name = "label", .kind = STK_FIELD_INT64}};
    stk_writer_opts wo;
    stk_writer_opts_init(&wo);
    wo.fields = fields;
    wo.n_fields = 2;
    stk_writer *w;
    T_OK(stk_writer_open(path, &wo, &w));
    for (uint64_t i = 0; i < N; i++) {
        float img[PIX];
        for (int k = 0; k < PIX; k++)
            img[k] = pixel(i, k);
        stk_value v[2] = {{.struct_size = sizeof(stk_value), .data = img, .size = sizeof(img)},
                          {.struct_size = sizeof(stk_value), .i64 = class_of(i)}};
        T_OK(stk_writer_add(w, v));
    }
    T_OK(stk_writer_close(w));
    return 0;
}

static int test_beta_moments(void)
{
    const double alphas[] = {0.2, 1.0, 3.0};
    for (size_t a = 0; a < 3; a++) {
        stk_rng rng;
        stk_rng_init(&rng, 7, 0, a);
        double sum = 0, sq = 0;
        const int n = 40000;
        for (int i = 0; i < n; i++) {
            double x = stk__beta_draw(&rng, alphas[a]);
            T_CHECK(x >= 0.0 && x <= 1.0);
            sum += x;
            sq += x * x;
        }
        double mean = sum / n, var = sq / n - mean * mean;
        double want = 1.0 / (4.0 * (2.0 * alphas[a] + 1.0)); /* Beta(a, a) */
        T_CHECKF(fabs(mean - 0.5) < 0.01, "alpha %g: mean %g", alphas[a], mean);
        T_CHECKF(fabs(var - want) < 0.05 * want, "alpha %g: var %g, want %g", alphas[a], var, want);
    }
    return 0;
}

/* Every batch of one epoch under `ops`, appended to out (N samples' image + label + index). */
static int run_epoch(const stk_batch_op *ops, uint32_t n_ops, bool choice, int threads, float *img,
                     float *lab, int64_t *idx)
{
    const char *paths[] = {path};
    stk_loader_opts o = fx_opts(paths, 8, threads);
    o.flags = STK_LOADER_SHUFFLE;
    o.seed = 5;
    o.batch_ops = ops;
    o.n_batch_ops = n_ops;
    o.batch_ops_choice = choice;
    o.num_classes = K;
    stk_loader *L;
    T_OK(stk_loader_create(&o, &L));
    size_t at = 0;
    stk_batch *b;
    stk_status rc;
    while ((rc = stk_loader_next(L, &b)) == STK_OK) {
        stk_tensor ti, tl, tx;
        stk_tensor_init(&ti);
        stk_tensor_init(&tl);
        stk_tensor_init(&tx);
        T_OK(stk_batch_tensor(b, 0, &ti));
        T_OK(stk_batch_tensor(b, 1, &tl));
        T_OK(stk_batch_tensor(b, 2, &tx));
        T_EQ(tl.dtype, STK_DTYPE_FLOAT32);
        T_EQ(tl.ndim, 2);
        T_EQ(tl.shape[1], K);
        uint32_t n = stk_batch_n_samples(b);
        memcpy(img + at * PIX, ti.data, (size_t)n * PIX * sizeof(float));
        memcpy(lab + at * K, tl.data, (size_t)n * K * sizeof(float));
        memcpy(idx + at, tx.data, (size_t)n * sizeof(int64_t));
        at += n;
        stk_batch_release(b);
    }
    T_EQ(rc, STK_END);
    T_EQ(at, N);
    stk_loader_destroy(L);
    return 0;
}

static int test_mixup_and_cutmix(void)
{
    static float img[N * PIX], lab[N * K], img3[N * PIX], lab3[N * K];
    static int64_t idx[N], idx3[N];
    for (int kind = STK_BATCH_MIXUP; kind <= STK_BATCH_CUTMIX; kind++) {
        stk_batch_op op;
        stk_batch_op_init(&op, (stk_batch_op_kind)kind);
        T_CHECK(run_epoch(&op, 1, false, 1, img, lab, idx) == 0);
        T_CHECK(run_epoch(&op, 1, false, 3, img3, lab3, idx3) == 0);
        T_CHECK(memcmp(img, img3, sizeof(img)) == 0 && memcmp(lab, lab3, sizeof(lab)) == 0 &&
                memcmp(idx, idx3, sizeof(idx)) == 0);
        for (int i = 0; i < N; i++) {
            int first = i / 8 * 8, n = STK_MIN(8, N - first);
            int prev = i == first ? first + n - 1 : i - 1; /* rolled by one within the batch */
            uint64_t me = (uint64_t)idx[i], other = (uint64_t)idx[prev];
            double lam;
            const float *x = img + (size_t)i * PIX;
            if (kind == STK_BATCH_MIXUP) {
                lam = (x[0] - pixel(other, 0)) / (pixel(me, 0) - pixel(other, 0));
                for (int k = 0; k < PIX; k++) {
                    double want = lam * pixel(me, k) + (1 - lam) * pixel(other, k);
                    T_CHECKF(fabs(x[k] - want) <= 1e-4 * fabs(want) + 1e-3, "%g vs %g", x[k], want);
                }
            } else {
                int area = 0;
                for (int k = 0; k < PIX; k++) {
                    T_CHECK(x[k] == pixel(me, k) || x[k] == pixel(other, k));
                    area += k < HH * WW && x[k] == pixel(other, k);
                }
                lam = 1.0 - (double)area / (HH * WW);
            }
            float want[K] = {0};
            want[class_of(me)] += (float)lam;
            want[class_of(other)] += (float)(1 - lam);
            float sum = 0;
            for (int c = 0; c < K; c++) {
                T_CHECKF(fabsf(lab[i * K + c] - want[c]) < 1e-4, "class %d: %g vs %g", c,
                         lab[i * K + c], want[c]);
                sum += lab[i * K + c];
            }
            T_CHECK(fabsf(sum - 1.0f) < 1e-5);
        }
    }
    return 0;
}

static atomic_int calls;

/* out: "sum" float32 [HH, WW] (the channels' sum), "y" int64 = label + 100; fails on class 3. */
static stk_status sample_fn(void *ctx, uint64_t index, const stk_tensor *in, size_t n_in,
                            stk_tensor *out, size_t n_out, char *err, size_t err_size)
{
    (void)ctx;
    atomic_fetch_add(&calls, 1);
    if (n_in != 2 || n_out != 2 || out[0].size != HH * WW * sizeof(float) ||
        out[1].size != sizeof(int64_t))
        return stk__set_error(err, err_size, STK_EINVAL, "unexpected tensors");
    const float *x = in[0].data;
    float *s = out[0].data;
    for (int k = 0; k < HH * WW; k++)
        s[k] = x[k] + x[HH * WW + k];
    int64_t y = *(const int64_t *)in[1].data;
    if (y == 3)
        return stk__set_error(err, err_size, STK_EFORMAT, "class 3 refused (record %llu)",
                              (unsigned long long)index);
    *(int64_t *)out[1].data = y + 100;
    return STK_OK;
}

static int test_sample_fn(void)
{
    const char *paths[] = {path};
    stk_field outs[2] = {{.struct_size = sizeof(stk_field),
                          .name = "sum",
                          .kind = STK_FIELD_ARRAY,
                          .dtype = STK_DTYPE_FLOAT32,
                          .ndim = 2,
                          .shape = {HH, WW}},
                         {.struct_size = sizeof(stk_field), .name = "y", .kind = STK_FIELD_INT64}};
    for (int skip = 0; skip <= 1; skip++) {
        stk_loader_opts o = fx_opts(paths, 8, 2);
        o.sample_fn = sample_fn;
        o.sample_fields = outs;
        o.n_sample_fields = 2;
        o.flags = skip ? STK_LOADER_SKIP_CORRUPT : 0;
        stk_loader *L;
        T_OK(stk_loader_create(&o, &L));
        stk_batch *b;
        stk_status rc;
        int delivered = 0, failed = 0;
        while ((rc = stk_loader_next(L, &b)) != STK_END) {
            if (rc < 0) {
                T_CHECK(!skip);
                char where[256]; /* the batch's first class-3 record (not shuffled) */
                uint64_t r = (uint64_t)failed * 8;
                while (class_of(r) != 3)
                    r++;
                T_OK(stk_dataset_describe(stk_loader_dataset(L), r, where, sizeof(where)));
                T_CHECKF(strncmp(stk_loader_errmsg(L), where, strlen(where)) == 0 &&
                             strstr(stk_loader_errmsg(L), "class 3 refused") != NULL,
                         "%s", stk_loader_errmsg(L));
                failed++;
                continue;
            }
            T_EQ(stk_batch_n_tensors(b), 3);
            stk_tensor ts, ty, tx;
            stk_tensor_init(&ts);
            stk_tensor_init(&ty);
            stk_tensor_init(&tx);
            T_OK(stk_batch_tensor(b, 0, &ts));
            T_OK(stk_batch_tensor(b, 1, &ty));
            T_OK(stk_batch_tensor(b, 2, &tx));
            T_CHECK(strcmp(ts.name, "sum") == 0 && strcmp(ty.name, "y") == 0);
            for (uint32_t i = 0; i < stk_batch_n_samples(b); i++) {
                uint64_t r = (uint64_t)((const int64_t *)tx.data)[i];
                T_EQ(((const int64_t *)ty.data)[i], class_of(r) + 100);
                T_CHECK(((const float *)ts.data)[i * HH * WW + 1] ==
                        pixel(r, 1) + pixel(r, HH * WW + 1));
                delivered++;
            }
            stk_batch_release(b);
        }
        stk_loader_stats st = {.struct_size = sizeof(st)};
        stk_loader_stats_get(L, &st);
        if (skip) {
            T_EQ(delivered, N);
            T_EQ(st.skipped, N / K);
        } else {
            T_EQ(failed, 5); /* one class-3 record in each batch of 8 */
        }
        T_CHECK(atomic_load(&calls) >= N);
        stk_loader_destroy(L);
    }
    return 0;
}

static int test_bad_options(void)
{
    const char *paths[] = {path};
    stk_loader *L;
    stk_batch_op op;
    stk_batch_op_init(&op, STK_BATCH_MIXUP);
    stk_loader_opts o = fx_opts(paths, 8, 1);
    o.batch_ops = &op;
    o.n_batch_ops = 1;
    o.num_classes = 1;
    T_EQ(stk_loader_create(&o, &L), STK_EINVAL);
    T_CHECK(strstr(stk_last_errmsg(), "num_classes") != NULL);
    o.num_classes = K;
    op.alpha = -1;
    T_EQ(stk_loader_create(&o, &L), STK_EINVAL);
    op.alpha = 1;
    o.label_field = "image";
    T_EQ(stk_loader_create(&o, &L), STK_EINVAL);
    T_CHECK(strstr(stk_last_errmsg(), "not an int64 field") != NULL);
    o = fx_opts(paths, 8, 1);
    stk_field bytes = {.struct_size = sizeof(stk_field), .name = "b", .kind = STK_FIELD_BYTES};
    o.sample_fn = sample_fn;
    o.sample_fields = &bytes;
    o.n_sample_fields = 1;
    T_EQ(stk_loader_create(&o, &L), STK_EINVAL);
    T_CHECK(strstr(stk_last_errmsg(), "cannot be batched") != NULL);
    o.n_sample_fields = 0;
    T_EQ(stk_loader_create(&o, &L), STK_EINVAL);
    return 0;
}

static int teardown(void)
{
    char dir[256];
    snprintf(dir, sizeof(dir), "%s", path);
    *strrchr(dir, '/') = '\0';
    fx_rmtree(dir);
    return 0;
}

T_MAIN(T_CASE(setup), T_CASE(test_beta_moments), T_CASE(test_mixup_and_cutmix),
       T_CASE(test_sample_fn), T_CASE(test_bad_options), T_CASE(teardown))
