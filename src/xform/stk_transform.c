/*
 * stk_transform.c: the public transform API (op lists, recipes) and the fused per-sample path.
 *
 * Per sample (stk__transform_apply, on a worker thread):
 *   probe the header -> plan (fold the ops into one resample per axis, draw the randomness) ->
 *   decode only the window the output needs, at the largest DCT scale 1/den with den <= the
 *   downscale factor (den = 1 when `exact`) -> resample straight to the output size, mirrored if
 *   flipped -> the pixel kernels (ColorJitter; uint8, in place) -> convert/normalise into dst.
 *   Not exact and a YCbCr JPEG: the window is decoded as Y, Cb, Cr planes, each resampled from
 *   its own resolution, and colour-converted at the output size (render_planes).
 * What each op does at each step is its row in the op table (stk_ops.c); this file only walks
 * the rows.
 * No per-sample allocation in steady state: the worker's scratch grows to the largest need and
 * stays.
 *
 * Randomness: a sample draws from its own stream (seed, epoch, index) in op order: each
 * RandomResizedCrop its box, each RandomHorizontalFlip or RandomVerticalFlip one uniform (flip
 * when u < p), each ColorJitter its permutation and factors. The draws depend only on the image
 * size and the op list, never on the thread, so outputs are identical for any thread count.
 *
 * Semantics are torchvision 0.14's on PIL images (what `ImageFolder` + transforms gives), with
 * these documented differences: consecutive resizing ops are fused into one resample (exact for
 * one resize followed by crops/flips, the torchvision recipes); ColorJitter is applied to the
 * output-size image wherever it sits in the list; resampling is float32 without PIL's 8-bit
 * intermediate (a level of difference on some pixels); with DCT scaling the decoder's 1/den
 * image stands in for the full one (set `exact` to decode at full scale).
 *
 * Threads: a stk_transform is immutable after create and shared; a stk__tworker belongs to one
 * thread.
 */
#include "xform/stk_xform.h"

#include <math.h>
#include <string.h>

#define DEFAULT_MAX_PIXELS (64ull << 20)

void stk_transform_opts_init(stk_transform_opts *opts)
{
    if (!opts)
        return;
    memset(opts, 0, sizeof(*opts));
    opts->struct_size = sizeof(*opts);
    opts->dtype = STK_DTYPE_FLOAT32;
    opts->max_pixels = DEFAULT_MAX_PIXELS;
}

/* The padding style of ops[i] (Pad/RandomCrop's fill and padding_mode, other than zeros): the
 * axes hold one padding_mode and the render one fill, so every padding op must agree; and a
 * resize after it would resample the padding as an edge extension (not torchvision's).
 * *pad_at: the first padding op with a style. @return STK_OK or STK_EINVAL. */
static stk_status check_pad_style(stk_transform *t, size_t i, size_t *pad_at)
{
    const stk_op *op = &t->ops[i];
    const stk__op_def *d = t->defs[i];
    if (*pad_at != SIZE_MAX && d->resamples)
        return stk__set_last_error(STK_EINVAL,
                                   "ops[%zu] (%s): cannot follow %s (ops[%zu]) with a fill or a "
                                   "padding_mode (stoker resamples padding as an edge "
                                   "extension); put the padding after the resize",
                                   i, d->name, t->defs[*pad_at]->name, *pad_at);
    if (op->kind != STK_OP_PAD && op->kind != STK_OP_RANDOM_CROP)
        return STK_OK;
    bool styled = op->padding_mode != 0 || op->fill[0] || op->fill[1] || op->fill[2];
    if (*pad_at == SIZE_MAX) {
        if (!styled)
            return STK_OK;
        for (size_t k = 0; k < i; k++)
            if (t->ops[k].kind == STK_OP_PAD || t->ops[k].kind == STK_OP_RANDOM_CROP)
                *pad_at = k; /* an earlier plain one: it must agree too */
        if (*pad_at == SIZE_MAX) {
            *pad_at = i;
            t->pad_fill = op->padding_mode == 0;
            stk__fill_u8(op->fill, t->pad_rgb);
            return STK_OK;
        }
    }
    const stk_op *first = &t->ops[*pad_at];
    if (first->padding_mode != op->padding_mode ||
        memcmp(first->fill, op->fill, sizeof(op->fill)) != 0)
        return stk__set_last_error(STK_EINVAL,
                                   "ops[%zu] (%s): its fill and padding_mode must equal those of "
                                   "%s (ops[%zu]) (one padding style per transform)",
                                   i, d->name, t->defs[*pad_at]->name, *pad_at);
    return STK_OK;
}

stk_status stk_transform_create(const stk_transform_opts *opts, stk_transform **out)
{
    stk_status rc = STK_OK;
    stk_transform *t = NULL;
    if (out)
        *out = NULL;
    if (!opts || !out)
        return stk__set_last_error(STK_EINVAL, "stk_transform_create: NULL %s",
                                   !opts ? "opts" : "out");
    stk_transform_opts full;
    stk_transform_opts_init(&full);
    if (!stk__opts_load(&full, sizeof(full), opts))
        return stk__set_last_error(STK_EINVAL, "stk_transform_create: opts not initialised with "
                                               "stk_transform_opts_init");
    opts = &full;
    if (opts->n_ops == 0 || !opts->ops)
        return stk__set_last_error(STK_EINVAL, "stk_transform_create: no ops");
    if (opts->n_ops > STK__XF_MAX_OPS)
        return stk__set_last_error(STK_EINVAL,
                                   "stk_transform_create: too many ops (%zu, at most %d)",
                                   opts->n_ops, STK__XF_MAX_OPS);
    if (opts->dtype != STK_DTYPE_UINT8 && opts->dtype != STK_DTYPE_FLOAT32 &&
        opts->dtype != STK_DTYPE_FLOAT16 && opts->dtype != STK_DTYPE_BFLOAT16)
        return stk__set_last_error(STK_EINVAL,
                                   "stk_transform_create: output dtype %s not supported (uint8, "
                                   "float32, float16 or bfloat16)",
                                   stk_dtype_name(opts->dtype));

    t = stk__calloc(1, sizeof(*t));
    if (!t)
        return stk__set_last_error(STK_ENOMEM, "stk_transform_create: out of memory");
    t->n_ops = opts->n_ops;
    memcpy(t->ops, opts->ops, opts->n_ops * sizeof(stk_op));
    t->dtype = opts->dtype;
    t->nhwc = opts->nhwc;
    t->exact = opts->exact;
    t->max_pixels = opts->max_pixels ? opts->max_pixels : DEFAULT_MAX_PIXELS;
    t->lenient = opts->lenient;
    for (int c = 0; c < 3; c++)
        t->std[c] = 1.0f;

    /* Validate each op and follow the output size through the list (the op table's rows). */
    int64_t oh = 0, ow = 0;                                   /* 0: depends on the image */
    int64_t size_h[STK__XF_MAX_OPS], size_w[STK__XF_MAX_OPS]; /* before each op */
    size_t norm_at = SIZE_MAX;                                /* the STORE op (Normalize) */
    size_t tensor_at = SIZE_MAX; /* the first TENSOR op (RandomErasing) */
    size_t warp_at = SIZE_MAX;   /* the first warp (RandomRotation, RandomAffine) */
    size_t pad_at = SIZE_MAX;    /* the first Pad/RandomCrop with a fill or padding_mode */
    for (size_t i = 0; i < t->n_ops; i++) {
        stk_op *op = &t->ops[i];
        size_h[i] = oh;
        size_w[i] = ow;
        const stk__op_def *d = stk__op_def_get(op->kind);
        if (!d) {
            rc = stk__set_last_error(STK_EINVAL, "ops[%zu]: unknown op kind %d", i, (int)op->kind);
            goto fail;
        }
        t->defs[i] = d;
        if (d->check)
            STK_TRY(d->check(i, op));
        if (norm_at != SIZE_MAX && !d->after_store) {
            char after[256];
            stk__op_list_names(true, after, sizeof(after));
            rc = stk__set_last_error(STK_EINVAL,
                                     "ops[%zu] (%s): %s (ops[%zu]) must come last (only %s may "
                                     "follow it)",
                                     i, d->name, t->defs[norm_at]->name, norm_at, after);
            goto fail;
        }
        if (tensor_at != SIZE_MAX && d->stage != STK__OP_TENSOR) {
            rc = stk__set_last_error(STK_EINVAL,
                                     "ops[%zu] (%s): %s (ops[%zu]) works on the output tensor; "
                                     "only such ops may follow it",
                                     i, d->name, t->defs[tensor_at]->name, tensor_at);
            goto fail;
        }
        if (warp_at != SIZE_MAX && d->stage == STK__OP_GEOMETRY && !d->container) {
            rc = stk__set_last_error(STK_EINVAL,
                                     "ops[%zu] (%s): a geometric op cannot follow %s (ops[%zu]), "
                                     "which warps the output-size image; put %s after the "
                                     "crops, resizes and flips",
                                     i, d->name, t->defs[warp_at]->name, warp_at,
                                     t->defs[warp_at]->name);
            goto fail;
        }
        if (d->warp && warp_at == SIZE_MAX)
            warp_at = i;
        STK_TRY(check_pad_style(t, i, &pad_at));
        if (d->stage == STK__OP_TENSOR && tensor_at == SIZE_MAX)
            tensor_at = i;
        if (d->size)
            d->size(op, &oh, &ow);
        if (d->compile)
            d->compile(op, t);
        if (d->stage == STK__OP_STORE)
            norm_at = i;
    }
    /* RandomApply/RandomChoice/RandomOrder: their `transforms` ops follow them and may not
     * change the size (the output size would depend on the draw) nor be the store or a tensor
     * op; RandomOrder's are single ops, and not both warps and geometric ops (the geometry is
     * folded into the resample before every kernel, so it cannot come after a warp). */
    for (size_t i = 0; i < t->n_ops; i++) {
        if (!t->defs[i]->container)
            continue;
        int64_t n = t->ops[i].n_transforms;
        bool order = t->defs[i]->kind == STK_OP_RANDOM_ORDER;
        bool has_warp = false, has_geometry = false;
        if ((size_t)n > t->n_ops - 1 - i) {
            rc = stk__set_last_error(STK_EINVAL,
                                     "ops[%zu] (%s): its %lld transforms must follow it (only "
                                     "%zu ops do)",
                                     i, t->defs[i]->name, (long long)n, t->n_ops - 1 - i);
            goto fail;
        }
        for (size_t k = i + 1; k <= i + (size_t)n; k++) {
            const stk__op_def *c = t->defs[k];
            bool nested = c->container && t->defs[i]->kind != STK_OP_RANDOM_APPLY;
            int64_t h = size_h[k], w = size_w[k];
            if (c->size)
                c->size(&t->ops[k], &h, &w);
            bool resizes = c->size && (c->stage != STK__OP_PIXEL || h == 0 || w == 0 ||
                                       h != size_h[k] || w != size_w[k]);
            has_warp |= c->warp;
            has_geometry |= c->stage == STK__OP_GEOMETRY;
            if (order && has_warp && has_geometry) {
                rc = stk__set_last_error(STK_EINVAL,
                                         "ops[%zu] (%s): its transforms cannot mix warps "
                                         "(RandomRotation, RandomAffine) with geometric ops "
                                         "(a geometric op cannot run after a warp)",
                                         i, t->defs[i]->name);
                goto fail;
            }
            if (resizes || c->stage == STK__OP_STORE || c->stage == STK__OP_TENSOR || nested) {
                rc = stk__set_last_error(STK_EINVAL,
                                         "ops[%zu] (%s): ops[%zu] (%s) cannot be one of its "
                                         "transforms (only ops that keep the size: flips, "
                                         "pixel ops, warps%s)",
                                         i, t->defs[i]->name, k, c->name,
                                         t->defs[i]->kind == STK_OP_RANDOM_APPLY ? ", RandomApply"
                                                                                 : "");
                goto fail;
            }
        }
    }
    if (oh == 0 || ow == 0) {
        rc = stk__set_last_error(STK_EINVAL,
                                 "the output size is not fixed: end the geometric ops with "
                                 "RandomResizedCrop, CenterCrop or Resize((h, w))");
        goto fail;
    }
    if (t->normalize && t->dtype == STK_DTYPE_UINT8) {
        rc = stk__set_last_error(STK_EINVAL,
                                 "ops[%zu] (Normalize): needs a float output dtype, "
                                 "not uint8",
                                 norm_at);
        goto fail;
    }
    t->out_h = (uint32_t)oh;
    t->out_w = (uint32_t)ow;
    if (opts->finish_on_device)
        STK_TRY(stk__finish_compile(t, opts));
    stk__store_init(t);
    t->planar = !t->exact;
    *out = t;
    return STK_OK;
fail:
    stk__free(t);
    return rc;
}

stk_status stk_transform_recipe(const char *name, bool exact, stk_transform **out)
{
    stk_op ops[3];
    stk_transform_opts o;
    stk_transform_opts_init(&o);
    o.exact = exact;
    o.ops = ops;
    o.n_ops = 3;
    if (out)
        *out = NULL;
    if (name && strcmp(name, "imagenet-train") == 0) {
        stk_op_init(&ops[0], STK_OP_RANDOM_RESIZED_CROP);
        stk_op_init(&ops[1], STK_OP_RANDOM_HORIZONTAL_FLIP);
    } else if (name && strcmp(name, "imagenet-val") == 0) {
        stk_op_init(&ops[0], STK_OP_RESIZE);
        stk_op_init(&ops[1], STK_OP_CENTER_CROP);
    } else {
        return stk__set_last_error(STK_EINVAL,
                                   "unknown transform recipe '%s' (known: imagenet-train, "
                                   "imagenet-val)",
                                   name ? name : "(null)");
    }
    stk_op_init(&ops[2], STK_OP_NORMALIZE);
    static const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    memcpy(ops[2].mean, mean, sizeof(mean));
    memcpy(ops[2].std, std, sizeof(std));
    return stk_transform_create(&o, out);
}

void stk__transform_spec(const stk_transform *t, stk__tspec *out)
{
    memset(out, 0, sizeof(*out));
    out->dtype = t->dtype;
    out->ndim = 3;
    if (t->nhwc) {
        out->shape[0] = t->out_h;
        out->shape[1] = t->out_w;
        out->shape[2] = 3;
    } else {
        out->shape[0] = 3;
        out->shape[1] = t->out_h;
        out->shape[2] = t->out_w;
    }
}

bool stk_transform_draws(const stk_transform *t)
{
    for (size_t i = 0; t && i < t->n_ops; i++)
        if (t->defs[i]->draws)
            return true;
    return false;
}

void stk_transform_output(const stk_transform *t, stk_dtype *dtype, uint32_t *ndim,
                          int64_t shape[STK_MAX_DIMS])
{
    stk__tspec s;
    stk__transform_spec(t, &s);
    stk__finish_output(t, &s); /* the finished output when the loader finishes */
    if (dtype)
        *dtype = s.dtype;
    if (ndim)
        *ndim = s.ndim;
    if (shape)
        memcpy(shape, s.shape, sizeof(s.shape));
}

void stk_transform_destroy(stk_transform *t)
{
    stk__free(t);
}

/* ---- per-sample plan ---- */

/* Full-resolution window [*w0, *w1) an axis reads, for DCT denominator den; false when every
 * output pixel is padding. */
static bool axis_window(const stk__xaxis *a, int64_t full, uint32_t den, int64_t *w0, int64_t *w1)
{
    int64_t ulo = a->dir > 0 ? a->off : a->off - (a->n - 1), uhi = ulo + a->n - 1;
    bool copies = false; /* edge/reflect/symmetric padding: the content it copies */
    for (int s = 0; s < a->n_pads; s++)
        copies |= a->pads[s].mode != STK__PAD_CONSTANT;
    if (copies && a->v1 > a->v0) {
        int64_t lo = INT64_MAX, hi = INT64_MIN;
        for (int64_t u = ulo; u <= uhi; u++) {
            int64_t m = stk__axis_pad_map(a, u);
            lo = STK_MIN(lo, m);
            hi = STK_MAX(hi, m);
        }
        ulo = lo;
        uhi = hi;
    }
    ulo = STK_MAX(ulo, a->v0);
    uhi = STK_MIN(uhi, a->v1 - 1);
    if (ulo > uhi)
        return false;
    double scale = (a->c1 - a->c0) / (double)a->grid;
    double clo = a->c0 + ((double)ulo + 0.5) * scale, chi = a->c0 + ((double)uhi + 0.5) * scale;
    /* Filter support (in full-res pixels at this scale) plus a buffer pixel of slack. */
    double sup = STK_MAX(scale, (double)den) + den + 1.0;
    double lo = STK_MAX(STK_MAX(clo - sup, a->lim0), 0.0);
    double hi = STK_MIN(STK_MIN(chi + sup, a->lim1), (double)full);
    int64_t l = (int64_t)floor(lo), h = (int64_t)ceil(hi);
    l = STK_MIN(STK_MAX(l, 0), full - 1);
    h = STK_MIN(STK_MAX(h, l + 1), full);
    *w0 = l;
    *w1 = h;
    return true;
}

void stk__plan_size(const stk__xplan *p, int64_t *h, int64_t *w)
{
    *h = p->pix_h ? p->pix_h : p->y.n;
    *w = p->pix_w ? p->pix_w : p->x.n;
}

/* Plan op i: fold it into the geometry, draw its randomness, queue its kernel. */
static void plan_op(const stk_transform *t, size_t i, stk_rng *rng, stk__xplan *out)
{
    const stk__op_def *d = t->defs[i];
    stk__opdraw *draw = NULL;
    if (d->kernel || d->post) {
        stk__xpix *px = &out->pix[out->n_pix++];
        px->def = d;
        px->op = &t->ops[i];
        draw = &px->draw;
    }
    if (d->plan)
        d->plan(&t->ops[i], rng, out, draw);
}

void stk__xform_plan(const stk_transform *t, uint32_t width, uint32_t height, stk_rng *rng,
                     stk__xplan *out)
{
    memset(out, 0, sizeof(*out));
    stk__axis_init(&out->x, width);
    stk__axis_init(&out->y, height);
    uint32_t skip = 0; /* bit 0: skip this op (a RandomApply/RandomChoice left it out) */
    for (size_t i = 0; i < t->n_ops; i++) {
        bool skipped = skip & 1;
        skip >>= 1;
        if (skipped)
            continue;
        plan_op(t, i, rng, out);
        skip |= out->skip; /* a container's choice over the ops after it */
        out->skip = 0;
        if (out->order.n) { /* RandomOrder: its (single, non-container) ops in its order */
            int n = out->order.n;
            out->order.n = 0;
            for (int k = 0; k < n; k++)
                if (!(skip >> out->order.perm[k] & 1))
                    plan_op(t, i + 1 + out->order.perm[k], rng, out);
            skip >>= n;
            i += (size_t)n;
        }
    }
    out->flip = out->x.dir < 0;
    out->vflip = out->y.dir < 0;

    /* DCT scale: the largest 1/den with den <= the downscale factor on both axes, so the decoded
     * window keeps at least one pixel per output pixel. Scales other than 1/2, 1/4, 1/8 would
     * decode fewer pixels but have no SIMD IDCT in libjpeg-turbo 2.1: RandomResizedCrop windows
     * at the smallest M/8 decode at 1,600 img/s against 2,050 at these (bench/decode_speed.c).
     * The fast decode (IFAST, plain chroma upsampling) only where the output is resampled: a pure
     * crop stays a bit-exact copy of PIL's decode. */
    uint32_t den = 1;
    double sx = (out->x.c1 - out->x.c0) / (double)out->x.grid;
    double sy = (out->y.c1 - out->y.c0) / (double)out->y.grid;
    if (!t->exact) {
        double s = STK_MIN(sx, sy);
        den = s >= 8.0 ? 8 : s >= 4.0 ? 4 : s >= 2.0 ? 2 : 1;
        out->fast = sx != 1.0 || sy != 1.0;
    }
    int64_t x0, x1, y0, y1;
    out->decode =
        axis_window(&out->x, width, den, &x0, &x1) && axis_window(&out->y, height, den, &y0, &y1);
    if (!out->decode)
        return;
    out->den = den;
    out->win_x = (uint32_t)x0;
    out->win_y = (uint32_t)y0;
    out->win_w = (uint32_t)(x1 - x0);
    out->win_h = (uint32_t)(y1 - y0);
    out->min_w = (out->win_w + den - 1) / den;
    out->min_h = (out->win_h + den - 1) / den;
}

/* ---- workers ---- */

/* Make the worker's uint8 image hold n bytes. */
static bool img_reserve(stk__tworker *w, size_t n)
{
    if (n <= w->img_cap)
        return true;
    uint8_t *p = stk__realloc(w->img, n);
    if (!p)
        return false;
    w->img = p;
    w->img_cap = n;
    return true;
}

stk_status stk__transform_worker_create(const stk_transform *t, stk__tworker **out)
{
    stk_status rc = STK_OK;
    *out = NULL;
    stk__tworker *w = stk__calloc(1, sizeof(*w));
    if (!w)
        return stk__set_last_error(STK_ENOMEM, "out of memory for a transform worker");
    stk__clear_last_error();
    rc = stk__decoder_create(t->max_pixels, &w->dec);
    if (rc < 0) {
        if (!stk_last_errmsg()[0])
            stk__set_last_error(rc, "cannot create an image decoder: %s", stk_strerror(rc));
        goto fail;
    }
    stk__decoder_set_lenient(w->dec, t->lenient);
    /* Size the output image now so that the first sample does not allocate it. */
    if (!img_reserve(w, (size_t)t->out_w * t->out_h * 3)) {
        rc = stk__set_last_error(STK_ENOMEM, "out of memory for a transform worker image");
        goto fail;
    }
    *out = w;
    return STK_OK;
fail:
    stk__transform_worker_destroy(w);
    return rc;
}

void stk__transform_worker_destroy(stk__tworker *w)
{
    if (!w)
        return;
    stk__decoder_destroy(w->dec);
    stk__rscratch_free(&w->rs);
    stk__free(w->img);
    stk__free(w);
}

const stk__xtimes *stk__transform_worker_times(const stk__tworker *w)
{
    return &w->times;
}

void stk__transform_worker_trust(stk__tworker *w, bool trusted)
{
    stk__decoder_set_trusted(w->dec, trusted);
}

bool stk__transform_worker_checked(const stk__tworker *w)
{
    return stk__decoder_checked(w->dec);
}

void stk__transform_worker_stage_ns(const stk__tworker *w, uint64_t *decode_ns,
                                    uint64_t *augment_ns)
{
    const stk__xtimes *x = &w->times;
    *decode_ns = atomic_load_explicit(&x->probe_ns, memory_order_relaxed) +
                 atomic_load_explicit(&x->decode_ns, memory_order_relaxed);
    *augment_ns = atomic_load_explicit(&x->resize_ns, memory_order_relaxed) +
                  atomic_load_explicit(&x->jitter_ns, memory_order_relaxed) +
                  atomic_load_explicit(&x->store_ns, memory_order_relaxed);
}

static inline bool is_padding(const stk__xaxis *a, int64_t i)
{
    int64_t u = a->off + a->dir * i;
    return u < a->v0 || u >= a->v1;
}

/* Pad/RandomCrop's constant fill: the padding pixels (zero from the resample) get the colour. */
static void fill_padding(uint8_t *img, const stk__xaxis *x, const stk__xaxis *y,
                         const uint8_t rgb[3])
{
    for (int64_t j = 0; j < y->n; j++) {
        uint8_t *row = img + (size_t)j * x->n * 3;
        bool all = is_padding(y, j);
        for (int64_t i = 0; i < x->n; i++)
            if (all || is_padding(x, i))
                memcpy(row + i * 3, rgb, 3);
    }
}

/* The end of both render paths: the tensor passes on the stored output (RandomErasing: counted
 * as store time), then the stage times (resample from t0, pixel kernels from t1, store from t2). */
static void finish_render(const stk_transform *t, stk__tworker *w, const stk__xplan *plan,
                          void *dst, uint64_t t0, uint64_t t1, uint64_t t2)
{
    for (uint32_t i = 0; i < plan->n_pix; i++)
        if (plan->pix[i].def->post)
            plan->pix[i].def->post(t, dst, &plan->pix[i].draw);
    uint64_t t3 = stk__now_ns();
    atomic_fetch_add_explicit(&w->times.resize_ns, t1 - t0, memory_order_relaxed);
    atomic_fetch_add_explicit(&w->times.jitter_ns, t2 - t1, memory_order_relaxed);
    atomic_fetch_add_explicit(&w->times.store_ns, t3 - t2, memory_order_relaxed);
}

stk_status stk__xform_render(const stk_transform *t, stk__tworker *w, const stk__xplan *plan,
                             const stk__decoded *src, void *dst, char *err, size_t err_size)
{
    stk_status rc = STK_OK;
    size_t npix = (size_t)t->out_w * t->out_h;
    uint64_t t0 = stk__now_ns();
    /* uint8 HWC output is the resampled image itself: resample (and jitter) in place. */
    uint8_t *img = t->dtype == STK_DTYPE_UINT8 && t->nhwc ? dst : NULL;
    if (!img) {
        if (!img_reserve(w, npix * 3)) {
            rc = stk__set_error(err, err_size, STK_ENOMEM, "out of memory for the output image");
            goto fail;
        }
        img = w->img;
    }
    /* The geometry's size; a RandomRotation(expand=True) grows it (to at most the output's). */
    stk__pixctx px = {img, (uint32_t)plan->x.n, (uint32_t)plan->y.n, err, err_size};
    STK_TRY(stk__resample(&w->rs, src, &plan->x, &plan->y, img, (size_t)px.w * 3, err, err_size));
    if (t->pad_fill)
        fill_padding(img, &plan->x, &plan->y, t->pad_rgb);
    uint64_t t1 = stk__now_ns();
    for (uint32_t i = 0; i < plan->n_pix; i++) { /* one call per kernel per sample */
        const stk__xpix *k = &plan->pix[i];
        if (!k->def->kernel)
            continue;
        STK_TRY(k->def->kernel(&px, &k->draw));
        if (k->def->size) {
            int64_t h = px.h, wd = px.w;
            k->def->size(k->op, &h, &wd);
            px.h = (uint32_t)h;
            px.w = (uint32_t)wd;
        }
    }
    uint64_t t2 = stk__now_ns();
    stk__store(t, img, t->out_w, t->out_h, dst);
    finish_render(t, w, plan, dst, t0, t1, t2);
    return STK_OK;
fail:
    return rc;
}

/* Whether every output pixel of an axis is content (no padding). */
static bool axis_all_content(const stk__xaxis *a)
{
    int64_t lo = a->dir > 0 ? a->off : a->off - (a->n - 1);
    return lo >= a->v0 && lo + a->n <= a->v1;
}

/* The planes path: resample the Y, Cb and Cr planes, each at its own resolution, to the output
 * size (luma 1 plane at full resolution and 4:2:0 chroma 2 quarter planes: half the vertical
 * work of resampling RGB and two thirds of the horizontal), then colour-convert the output-size
 * planes, inside the float32 store where it has a kernel for that and no pixel kernel runs. */
static stk_status render_planes(const stk_transform *t, stk__tworker *w, const stk__xplan *plan,
                                const stk__decoded planes[3], void *dst, char *err, size_t err_size)
{
    stk_status rc = STK_OK;
    size_t npix = (size_t)t->out_w * t->out_h;
    uint64_t t0 = stk__now_ns();
    if (!img_reserve(w, npix * 6)) { /* the planes, then the RGB image made of them */
        rc = stk__set_error(err, err_size, STK_ENOMEM, "out of memory for the output image");
        goto fail;
    }
    uint8_t *py = w->img, *pu = py + npix, *pv = pu + npix;
    for (int c = 0; c < 3; c++)
        STK_TRY(stk__resample_plane(&w->rs, &planes[c], &plan->x, &plan->y, w->img + c * npix,
                                    t->out_w, err, err_size));
    bool kernels = false;
    for (uint32_t i = 0; i < plan->n_pix; i++)
        kernels = kernels || plan->pix[i].def->kernel;
    uint64_t t1 = stk__now_ns(), t2 = t1;
    if (kernels || !stk__store_ycc(t, py, pu, pv, t->out_w, t->out_h, dst)) {
        /* the RGB image, the pixel kernels on it (ColorJitter...), the store */
        uint8_t *rgb = t->dtype == STK_DTYPE_UINT8 && t->nhwc ? dst : w->img + npix * 3;
        stk__ycc_to_rgb(py, pu, pv, npix, rgb);
        const stk__pixctx px = {rgb, t->out_w, t->out_h, err, err_size};
        for (uint32_t i = 0; i < plan->n_pix; i++)
            if (plan->pix[i].def->kernel)
                STK_TRY(plan->pix[i].def->kernel(&px, &plan->pix[i].draw));
        t2 = stk__now_ns();
        stk__store(t, rgb, t->out_w, t->out_h, dst);
    }
    finish_render(t, w, plan, dst, t0, t1, t2);
    return STK_OK;
fail:
    return rc;
}

stk_status stk__transform_apply(const stk_transform *t, stk__tworker *w, const void *src,
                                size_t size, stk_rng *rng, void *dst, char *err, size_t err_size)
{
    stk_status rc = STK_OK;
    stk__imginfo info;
    stk__xplan plan;
    stk__decoded dec;
    uint64_t t0 = stk__now_ns();
    STK_TRY(stk__image_probe(w->dec, src, size, &info, err, err_size));
    stk__xform_plan(t, info.width, info.height, rng, &plan);
    uint64_t t1 = stk__now_ns();
    if (plan.decode && plan.fast && t->planar && axis_all_content(&plan.x) &&
        axis_all_content(&plan.y)) {
        stk__decoded planes[3];
        STK_TRY(stk__image_decode_planes(w->dec, src, size, &info, plan.win_x, plan.win_y,
                                         plan.win_w, plan.win_h, plan.min_w, plan.min_h, planes,
                                         err, err_size));
        if (rc == STK_OK) {
            uint64_t t2 = stk__now_ns();
            atomic_fetch_add_explicit(&w->times.probe_ns, t1 - t0, memory_order_relaxed);
            atomic_fetch_add_explicit(&w->times.decode_ns, t2 - t1, memory_order_relaxed);
            STK_TRY(render_planes(t, w, &plan, planes, dst, err, err_size));
            atomic_fetch_add_explicit(&w->times.samples, 1, memory_order_relaxed);
            return STK_OK;
        } /* STK__NOT_PLANAR (not a YCbCr JPEG of a usual sampling): the RGB path */
    }
    if (plan.decode) {
        STK_TRY((plan.fast ? stk__image_decode_fast : stk__image_decode)(
            w->dec, src, size, &info, plan.win_x, plan.win_y, plan.win_w, plan.win_h, plan.min_w,
            plan.min_h, &dec, err, err_size));
    } else { /* all padding: nothing to decode, every pixel comes out 0 */
        memset(&dec, 0, sizeof(dec));
        dec.scale_x = dec.scale_y = 1.0;
    }
    uint64_t t2 = stk__now_ns();
    atomic_fetch_add_explicit(&w->times.probe_ns, t1 - t0, memory_order_relaxed);
    atomic_fetch_add_explicit(&w->times.decode_ns, t2 - t1, memory_order_relaxed);
    STK_TRY(stk__xform_render(t, w, &plan, &dec, dst, err, err_size));
    atomic_fetch_add_explicit(&w->times.samples, 1, memory_order_relaxed);
    return STK_OK;
fail:
    return rc;
}

stk_status stk__transform_apply_rgb(const stk_transform *t, stk__tworker *w, const uint8_t *rgb,
                                    uint32_t width, uint32_t height, size_t stride, stk_rng *rng,
                                    void *dst, char *err, size_t err_size)
{
    stk__xplan plan;
    stk__xform_plan(t, width, height, rng, &plan);
    /* The pixels are the full-scale image a decode would have given (origin 0, scale 1). */
    stk__decoded dec = {.scale_x = 1.0, .scale_y = 1.0};
    if (plan.decode) { /* else all padding: every pixel comes out 0, as in stk__transform_apply */
        dec.rgb = rgb;
        dec.width = width;
        dec.height = height;
        dec.stride = stride;
    }
    stk_status rc = stk__xform_render(t, w, &plan, &dec, dst, err, err_size);
    if (rc >= 0)
        atomic_fetch_add_explicit(&w->times.samples, 1, memory_order_relaxed);
    return rc;
}
