/*
 * stk_batchops.c: MixUp and CutMix over a complete batch (stk_batchops.h), as
 * torchvision.transforms.v2 defines them: one lambda ~ Beta(alpha, alpha) per batch, the batch
 * mixed with itself rolled by one along the batch dimension, labels one-hot then mixed alike.
 * The random numbers come from the batch's own counter stream (seed, epoch, key), so a batch is
 * the same for any thread count, rank layout or resume point.
 */
#include "batch/stk_batchops.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

#define BATCH_KEY 0x6d69787570637574ULL /* "mixupcut": keeps the batch streams apart */

double stk__beta_draw(stk_rng *rng, double alpha)
{
    double x = stk__rng_gamma(rng, alpha), y = stk__rng_gamma(rng, alpha);
    return x + y > 0.0 ? x / (x + y) : 0.5;
}

stk_status stk__batchops_opts(stk__batchops *b, const stk_loader_opts *o, char *err,
                              size_t err_size)
{
    memset(b, 0, sizeof(*b));
    b->img_t = b->lab_t = -1;
    if (o->n_batch_ops == 0)
        return STK_OK;
    if (!o->batch_ops || o->n_batch_ops > STK_MAX_BATCH_OPS)
        return stk__set_error(err, err_size, STK_EINVAL,
                              "batch transforms: %u ops given (at most %d)",
                              (unsigned)o->n_batch_ops, STK_MAX_BATCH_OPS);
    if (o->num_classes < 2 || o->num_classes > (1 << 24))
        return stk__set_error(err, err_size, STK_EINVAL,
                              "batch transforms: num_classes=%" PRId64
                              " is invalid (MixUp/CutMix need 2..16777216 classes)",
                              o->num_classes);
    for (uint32_t i = 0; i < o->n_batch_ops; i++) {
        stk_batch_op *op = &b->op[i];
        stk_batch_op_init(op, 0);
        if (!stk__elem_load(op, sizeof(*op), o->batch_ops, i)) /* strided by [0].struct_size */
            return stk__set_error(err, err_size, STK_EINVAL,
                                  "batch transform %u: not initialised with stk_batch_op_init "
                                  "(struct_size unset or unlike batch_ops[0]'s)",
                                  i);
        if (op->kind != STK_BATCH_MIXUP && op->kind != STK_BATCH_CUTMIX)
            return stk__set_error(err, err_size, STK_EINVAL,
                                  "batch transform %u: unknown kind %d (STK_BATCH_MIXUP or "
                                  "STK_BATCH_CUTMIX)",
                                  i, (int)op->kind);
        if (!(op->alpha > 0.0) || !isfinite(op->alpha))
            return stk__set_error(err, err_size, STK_EINVAL,
                                  "batch transform %u (%s): alpha=%g is invalid (must be > 0)", i,
                                  op->kind == STK_BATCH_MIXUP ? "MixUp" : "CutMix", op->alpha);
    }
    b->n = o->n_batch_ops;
    b->choice = o->batch_ops_choice;
    b->num_classes = o->num_classes;
    return STK_OK;
}

void stk__batchops_label_field(const stk__batchops *b, stk_field *f)
{
    f->kind = STK_FIELD_ARRAY;
    f->dtype = STK_DTYPE_FLOAT32;
    f->ndim = 1;
    f->shape[0] = b->num_classes;
}

static int find_tensor(const stk__layout *v, const char *name)
{
    for (size_t i = 0; i + 1 < v->n_tensors; i++)
        if (strcmp(v->t[i].name, name) == 0)
            return (int)i;
    return -1;
}

stk_status stk__batchops_init(stk__batchops *b, const stk__layout *view, const char *image,
                              const char *label, bool hwc, char *err, size_t err_size)
{
    if (!b->n)
        return STK_OK;
    b->img_t = find_tensor(view, image);
    b->lab_t = find_tensor(view, label);
    if (b->lab_t < 0)
        return stk__set_error(err, err_size, STK_EINVAL,
                              "batch transforms: the label field '%s' is not in the batch", label);
    if (b->img_t < 0)
        return stk__set_error(err, err_size, STK_EINVAL,
                              "batch transforms: the image field '%s' is not in the batch", image);
    const stk__tlayout *t = &view->t[b->img_t];
    if (t->bytes || t->ndim < 2 || (hwc && t->ndim != 3))
        return stk__set_error(err, err_size, STK_EINVAL,
                              "batch transforms: the image field '%s' is not an image tensor "
                              "([C, H, W] or [H, W, C]; decode it with a transform)",
                              image);
    for (uint32_t i = 0; i < b->n; i++)
        if (b->op[i].kind == STK_BATCH_MIXUP && t->dtype != STK_DTYPE_FLOAT32)
            return stk__set_error(err, err_size, STK_EINVAL,
                                  "MixUp needs float32 images, but '%s' is %s (end the "
                                  "transforms with ToTensor/Normalize, or use CutMix)",
                                  image, stk_dtype_name(t->dtype));
    b->hwc = hwc;
    b->scratch_size = (size_t)STK_ALIGN_UP(t->row_size, 64) + view->t[b->lab_t].row_size;
    return STK_OK;
}

/* x[i] = lam * x[i] + (1 - lam) * x[i - 1] over n rows of m floats (x[-1] = the last row). */
static void mix_rows(float *x, size_t m, uint32_t n, double lam, float *save)
{
    float a = (float)lam, c = (float)(1.0 - lam);
    memcpy(save, x + (size_t)(n - 1) * m, m * sizeof(float));
    for (uint32_t i = n; i-- > 0;) {
        const float *r = i ? x + (size_t)(i - 1) * m : save;
        float *d = x + (size_t)i * m;
        for (size_t j = 0; j < m; j++) {
            float rolled = r[j] * c, mine = d[j] * a;
            d[j] = rolled + mine;
        }
    }
}

/* Paste the box [x1, x2) x [y1, y2) of row i - 1 into row i (row n - 1 into row 0). */
static void paste_box(const stk__batchops *b, const stk__tlayout *t, uint8_t *img, uint32_t n,
                      int64_t x1, int64_t y1, int64_t x2, int64_t y2, uint8_t *save)
{
    size_t es = stk_dtype_size(t->dtype), lead = 1, H, W, px;
    if (b->hwc) {
        H = (size_t)t->shape[0];
        W = (size_t)t->shape[1];
        px = (size_t)t->shape[2] * es;
    } else {
        for (uint32_t d = 0; d + 2 < t->ndim; d++)
            lead *= (size_t)t->shape[d];
        H = (size_t)t->shape[t->ndim - 2];
        W = (size_t)t->shape[t->ndim - 1];
        px = es;
    }
    memcpy(save, img + (size_t)(n - 1) * t->row_size, t->row_size);
    size_t span = (size_t)(x2 - x1) * px;
    for (uint32_t i = n; i-- > 0;) {
        const uint8_t *r = i ? img + (size_t)(i - 1) * t->row_size : save;
        uint8_t *d = img + (size_t)i * t->row_size;
        for (size_t p = 0; p < lead; p++)
            for (int64_t y = y1; y < y2; y++) {
                size_t at = ((p * H + (size_t)y) * W + (size_t)x1) * px;
                memcpy(d + at, r + at, span);
            }
    }
}

stk_status stk__batchops_apply(const stk__batchops *b, const stk__layout *view, uint8_t *slot,
                               uint32_t n, uint64_t seed, uint64_t epoch, uint64_t key,
                               uint8_t *scratch, int64_t *bad, char *err, size_t err_size)
{
    if (!b->n || n == 0)
        return STK_OK;
    const stk__tlayout *lt = &view->t[b->lab_t], *it = &view->t[b->img_t];
    const int64_t *index = (const int64_t *)(slot + view->t[view->n_tensors - 1].offset);
    size_t K = (size_t)b->num_classes;
    float *lab = (float *)(slot + lt->offset);
    for (uint32_t t = 0; t < n; t++) { /* the worker left the int64 label at the row's start */
        float *row = lab + (size_t)t * K;
        int64_t v;
        memcpy(&v, row, sizeof(v));
        if (v < 0 || v >= b->num_classes) {
            *bad = index[t];
            return stk__set_error(err, err_size, STK_EFORMAT,
                                  "label %" PRId64 " is outside [0, %" PRId64
                                  ") (num_classes of MixUp/CutMix)",
                                  v, b->num_classes);
        }
        memset(row, 0, K * sizeof(float));
        row[v] = 1.0f;
    }
    stk_rng rng;
    stk_rng_init(&rng, stk__mix64(seed ^ BATCH_KEY), epoch, key);
    uint32_t first = 0, end = b->n;
    if (b->choice) {
        first = STK_MIN((uint32_t)(stk_rng_uniform(&rng) * b->n), b->n - 1);
        end = first + 1;
    }
    for (uint32_t k = first; k < end; k++) {
        double lam = stk__beta_draw(&rng, b->op[k].alpha);
        if (b->op[k].kind == STK_BATCH_MIXUP) {
            mix_rows((float *)(slot + it->offset), it->row_size / sizeof(float), n, lam,
                     (float *)scratch);
        } else {
            int64_t H = b->hwc ? it->shape[0] : it->shape[it->ndim - 2];
            int64_t W = b->hwc ? it->shape[1] : it->shape[it->ndim - 1];
            int64_t rx = STK_MIN((int64_t)(stk_rng_uniform(&rng) * (double)W), W - 1);
            int64_t ry = STK_MIN((int64_t)(stk_rng_uniform(&rng) * (double)H), H - 1);
            double r = 0.5 * sqrt(1.0 - lam);
            int64_t rw = (int64_t)(r * (double)W), rh = (int64_t)(r * (double)H);
            int64_t x1 = STK_MAX(rx - rw, 0), y1 = STK_MAX(ry - rh, 0);
            int64_t x2 = STK_MIN(rx + rw, W), y2 = STK_MIN(ry + rh, H);
            if (x2 > x1 && y2 > y1)
                paste_box(b, it, slot + it->offset, n, x1, y1, x2, y2, scratch);
            lam = 1.0 - (double)((x2 - x1) * (y2 - y1)) / (double)(W * H);
        }
        mix_rows(lab, K, n, lam, (float *)(scratch + STK_ALIGN_UP(it->row_size, 64)));
    }
    return STK_OK;
}
