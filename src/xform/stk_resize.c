/*
 * stk_resize.c: antialiased bilinear resampling from a decoded window straight to the output.
 *
 * The filter is PIL's (and torchvision's antialias=True): output pixel u of a resize of an
 * interval to `grid` pixels has its centre at c = (u + 0.5) * scale, scale = input pixels per
 * output pixel; the taps are the input pixels floor(c - s + 0.5) .. floor(c + s + 0.5) - 1 with
 * s = max(scale, 1) (clipped to the input image), weighted by the triangle 1 - |(t - c + 0.5) / s|
 * and normalised to sum 1. For upscaling that is the plain bilinear tent. The centres are
 * computed in the decoded buffer's coordinates by composing the axis geometry (stk_xform.h) with
 * the decoder's origin/scale map, so a DCT-scaled or cropped decode is sampled exactly where a
 * full decode would have been, and only the output pixels are ever computed.
 *
 * Evaluation: separable, vertical pass first. For each output row the vertical taps are combined
 * over the needed columns into one float row (contiguous, auto-vectorised: uint8 -> float, mul,
 * add), then each output pixel combines its horizontal taps with 4-wide vector loads of (R,G,B,x).
 * Arithmetic is float32 in a fixed order (no FMA contraction under -std=c11), so results do not
 * depend on the SIMD width. Unlike PIL there is no 8-bit intermediate between the passes and no
 * 22-bit fixed-point coefficients: results may differ from PIL's by one level on some pixels.
 *
 * Scratch (tap tables, one row) lives in the worker's stk__rscratch and only grows.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

#include "xform/stk_xform.h"

#include <math.h>
#include <string.h>

typedef float v4f __attribute__((vector_size(16)));

/* Make sure *p holds at least n elements of elem bytes. */
static bool grow(void **p, size_t *cap, size_t n, size_t elem)
{
    if (n <= *cap)
        return true;
    size_t want = n + n / 4 + 16, bytes;
    if (!stk__mul_ok(want, elem, &bytes))
        return false;
    void *q = stk__realloc(*p, bytes);
    if (!q)
        return false;
    *p = q;
    *cap = want;
    return true;
}

/* Free one tap table. */
static void taps_free(stk__taps *t)
{
    stk__free(t->tmin);
    stk__free(t->tn);
    stk__free(t->w);
}

void stk__rscratch_free(stk__rscratch *s)
{
    if (!s)
        return;
    taps_free(&s->x);
    taps_free(&s->y);
    stk__free(s->row);
    memset(s, 0, sizeof(*s));
}

/* Room for n output pixels of k weights each. */
static bool taps_reserve(stk__taps *t, size_t n, size_t k)
{
    size_t nw, cap_i = t->cap_i;
    if (!stk__mul_ok(n, k, &nw))
        return false;
    if (!grow((void **)&t->tmin, &cap_i, n, sizeof(int32_t)))
        return false;
    cap_i = t->cap_i;
    if (!grow((void **)&t->tn, &cap_i, n, sizeof(int32_t)))
        return false;
    t->cap_i = cap_i;
    return grow((void **)&t->w, &t->cap_w, nw, sizeof(float));
}

static double triangle(double x)
{
    x = fabs(x);
    return x < 1.0 ? 1.0 - x : 0.0;
}

/* Taps per output pixel needed for an axis (PIL's ksize = 2 * ceil(support) + 1). */
static int axis_ksize(const stk__xaxis *a, double bscale)
{
    double sb = (a->c1 - a->c0) / (double)a->grid / bscale;
    double support = sb > 1.0 ? sb : 1.0;
    double k = ceil(support) * 2.0 + 1.0;
    return k > 1.0e7 ? 10000001 : (int)k;
}

/* Fill the tap table of one axis for a buffer of bsize pixels, buffer pixel b covering full-res
 * [origin + b*bscale, origin + (b+1)*bscale), with k weights per output pixel. */
static void axis_taps(const stk__xaxis *a, double origin, double bscale, int64_t bsize,
                      stk__taps *t, int k)
{
    double scale = (a->c1 - a->c0) / (double)a->grid;
    double sb = scale / bscale;           /* buffer pixels per output pixel */
    double support = sb > 1.0 ? sb : 1.0; /* bilinear support 1, scaled when shrinking */
    double ss = 1.0 / support;
    double base = (a->c0 - origin) / bscale; /* buffer coordinate of the grid's start */
    /* The usual case (full-scale decode, integer window) is computed exactly as PIL does, in
     * coordinates relative to the resized image, then shifted by an integer. */
    bool rel = bscale == 1.0 && base == floor(base);
    double shift = rel ? base : 0.0;
    int64_t lo = (int64_t)floor((a->lim0 - origin) / bscale + 0.5);
    int64_t hi = (int64_t)floor((a->lim1 - origin) / bscale + 0.5);
    lo = STK_MIN(STK_MAX(lo, 0), bsize);
    hi = STK_MIN(STK_MAX(hi, lo), bsize);
    for (int64_t i = 0; i < a->n; i++) {
        int64_t u = a->off + a->dir * i;
        float *w = t->w + i * k;
        t->tmin[i] = 0;
        t->tn[i] = 0;
        if (u < 0 || u >= a->grid)
            continue; /* padding */
        double c = rel ? (u + 0.5) * scale : base + (u + 0.5) * sb;
        int64_t t0 = (int64_t)floor(c - support + 0.5) + (int64_t)shift;
        int64_t t1 = (int64_t)floor(c + support + 0.5) + (int64_t)shift;
        t0 = STK_MAX(t0, lo);
        t1 = STK_MIN(t1, hi);
        t1 = STK_MIN(t1, t0 + k); /* cannot bind (k >= 2*support + 1); keeps memory safe */
        int n = (int)(t1 > t0 ? t1 - t0 : 0);
        double sum = 0.0;
        for (int q = 0; q < n; q++)
            sum += triangle(((double)(t0 + q) - shift - c + 0.5) * ss);
        /* Normalise in double (as PIL), then drop zero-weight taps at both ends. */
        int first = 0, last = n;
        for (int q = 0; q < n; q++) {
            double v = triangle(((double)(t0 + q) - shift - c + 0.5) * ss);
            w[q] = (float)(sum != 0.0 ? v / sum : v);
        }
        while (first < last && w[first] == 0.0f)
            first++;
        while (last > first && w[last - 1] == 0.0f)
            last--;
        if (first > 0)
            memmove(w, w + first, (size_t)(last - first) * sizeof(float));
        t->tmin[i] = (int32_t)(t0 + first);
        t->tn[i] = last - first;
    }
}

/* True when every non-padding output pixel of the axis is one buffer pixel with weight 1. */
static bool axis_is_copy(const int32_t *tn, const float *w, int k, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (tn[i] > 1 || (tn[i] == 1 && w[i * k] != 1.0f))
            return false;
    return true;
}

/* row[i] = sum_k w[k] * src[k*stride + i], for i < len (len a multiple of 1; vectorised). The
 * additions happen in tap order for every i, whatever the vector width. */
static void vertical_pass(float *restrict row, const uint8_t *restrict src, size_t stride,
                          const float *restrict w, int n, size_t len)
{
    const uint8_t *restrict r0 = src;
    float w0 = w[0];
    for (size_t i = 0; i < len; i++)
        row[i] = w0 * (float)r0[i];
    int q = 1;
    for (; q + 1 < n; q += 2) { /* two taps per sweep: half the row traffic, same order */
        const uint8_t *restrict r1 = src + (size_t)q * stride;
        const uint8_t *restrict r2 = r1 + stride;
        float w1 = w[q], w2 = w[q + 1];
        for (size_t i = 0; i < len; i++)
            row[i] = (row[i] + w1 * (float)r1[i]) + w2 * (float)r2[i];
    }
    if (q < n) {
        const uint8_t *restrict r1 = src + (size_t)q * stride;
        float w1 = w[q];
        for (size_t i = 0; i < len; i++)
            row[i] = row[i] + w1 * (float)r1[i];
    }
}

/* Round a filtered value to uint8 as PIL does (half up, clipped). */
static inline uint8_t to_u8(float v)
{
    v = v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v;
    return (uint8_t)(int)(v + 0.5f);
}

/* One output row from the float row: 4-wide (R,G,B,next) loads per tap. */
static void horizontal_pass(uint8_t *restrict out, const float *restrict row, int64_t n_out,
                            const int32_t *tmin, const int32_t *tn, const float *w, int k,
                            int32_t xlo)
{
    for (int64_t i = 0; i < n_out; i++) {
        uint8_t *o = out + i * 3;
        int n = tn[i];
        if (n == 0) {
            o[0] = o[1] = o[2] = 0;
            continue;
        }
        const float *p = row + (size_t)(tmin[i] - xlo) * 3;
        const float *wi = w + i * k;
        v4f acc = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int q = 0; q < n; q++) {
            v4f v;
            memcpy(&v, p + q * 3, sizeof(v));
            acc += v * wi[q];
        }
        o[0] = to_u8(acc[0]);
        o[1] = to_u8(acc[1]);
        o[2] = to_u8(acc[2]);
    }
}

stk_status stk__resample(stk__rscratch *s, const stk__decoded *src, const stk__xaxis *x,
                         const stk__xaxis *y, uint8_t *dst, size_t dst_stride, char *err,
                         size_t err_size)
{
    int64_t ow = x->n, oh = y->n;
    int kx = axis_ksize(x, src->scale_x), ky = axis_ksize(y, src->scale_y);
    if (!taps_reserve(&s->x, (size_t)ow, (size_t)kx) || !taps_reserve(&s->y, (size_t)oh, (size_t)ky))
        return stk__set_error(err, err_size, STK_ENOMEM, "out of memory for resize tables");
    axis_taps(x, src->origin_x, src->scale_x, src->width, &s->x, kx);
    axis_taps(y, src->origin_y, src->scale_y, src->height, &s->y, ky);
    const int32_t *xmin = s->x.tmin, *xn = s->x.tn, *ymin = s->y.tmin, *yn = s->y.tn;

    int32_t xlo = INT32_MAX, xhi = 0;
    for (int64_t i = 0; i < ow; i++) {
        if (xn[i] == 0)
            continue;
        xlo = STK_MIN(xlo, xmin[i]);
        xhi = STK_MAX(xhi, xmin[i] + xn[i]);
    }
    if (xlo >= xhi) { /* every column is padding */
        for (int64_t j = 0; j < oh; j++)
            memset(dst + (size_t)j * dst_stride, 0, (size_t)ow * 3);
        return STK_OK;
    }

    if (axis_is_copy(xn, s->x.w, kx, ow) && axis_is_copy(yn, s->y.w, ky, oh)) {
        /* A pure crop (and flip) of the decoded pixels: copy them. */
        bool run = x->dir > 0 && xn[0] == 1 && xn[ow - 1] == 1 && xmin[ow - 1] - xmin[0] == ow - 1;
        for (int64_t j = 0; j < oh; j++) {
            uint8_t *o = dst + (size_t)j * dst_stride;
            const uint8_t *r = src->rgb + (size_t)ymin[j] * src->stride;
            if (yn[j] == 0) {
                memset(o, 0, (size_t)ow * 3);
            } else if (run) {
                memcpy(o, r + (size_t)xmin[0] * 3, (size_t)ow * 3);
            } else {
                for (int64_t i = 0; i < ow; i++) {
                    const uint8_t *p = r + (size_t)xmin[i] * 3;
                    bool pad = xn[i] == 0;
                    o[i * 3] = pad ? 0 : p[0];
                    o[i * 3 + 1] = pad ? 0 : p[1];
                    o[i * 3 + 2] = pad ? 0 : p[2];
                }
            }
        }
        return STK_OK;
    }

    size_t len = (size_t)(xhi - xlo) * 3;
    if (!grow((void **)&s->row, &s->cap_row, len + 4, sizeof(float)))
        return stk__set_error(err, err_size, STK_ENOMEM, "out of memory for the resize row");
    s->row[len] = 0.0f; /* the 4th lane of the last pixel's load */
    for (int64_t j = 0; j < oh; j++) {
        uint8_t *o = dst + (size_t)j * dst_stride;
        if (yn[j] == 0) {
            memset(o, 0, (size_t)ow * 3);
            continue;
        }
        const uint8_t *r = src->rgb + (size_t)ymin[j] * src->stride + (size_t)xlo * 3;
        vertical_pass(s->row, r, src->stride, s->y.w + j * ky, yn[j], len);
        horizontal_pass(o, s->row, ow, xmin, xn, s->x.w, kx, xlo);
    }
    return STK_OK;
}
