/*
 * stk_apply.c: an image transform applied to one sample: the fused per-sample path, and the
 * per-thread worker state it runs in (the image kind's rows of stk__media_image; the transform
 * object itself is stk_transform.c).
 *
 * Per sample (stk__image_apply, through stk__transform_apply, on a worker thread):
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

stk_status stk__image_worker_create(const stk_transform *t, stk__tworker **out)
{
    stk_status rc = STK_OK;
    *out = NULL;
    stk__tworker *w = stk__calloc(1, sizeof(*w));
    if (!w)
        return stk__set_last_error(STK_ENOMEM, "out of memory for a transform worker");
    stk__clear_last_error();
    w->media = STK_MEDIA_IMAGE;
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
    stk__image_worker_destroy(w);
    return rc;
}

void stk__image_worker_destroy(stk__tworker *w)
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

void stk__image_trust(stk__tworker *w, bool trusted)
{
    stk__decoder_set_trusted(w->dec, trusted);
}

bool stk__image_checked(const stk__tworker *w)
{
    return stk__decoder_checked(w->dec);
}

void stk__image_stage_ns(const stk__tworker *w, uint64_t *decode_ns, uint64_t *augment_ns)
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

stk_status stk__image_apply(const stk_transform *t, stk__tworker *w, const void *src, size_t size,
                            stk_rng *rng, void *dst, char *err, size_t err_size)
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
