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
 * add), then each output pixel combines its horizontal taps with 4-wide vector loads of
 * (R, G, B, next), as two chains (even and odd taps), and is rounded half up and clipped. Tap
 * counts are padded to one even number per row so the loops have a single trip count. On CPUs
 * with AVX2 (checked at run time) both passes use AVX2 kernels with exactly the same float32
 * operations in the same order (no FMA: -std=c11 disables contraction), so every machine gives
 * the same bytes; the tests and the fuzzer compare the two paths. Unlike PIL there is no 8-bit
 * intermediate between the passes and no 22-bit fixed-point coefficients: results may differ
 * from PIL's by one level on some pixels (never more, in the tests).
 *
 * Scratch (tap tables, one row) lives in the worker's stk__rscratch and only grows.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

#include "xform/stk_xform.h"

#include <math.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

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
    stk__free(s->w8);
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

/* row[i] = sum_q w[q] * src[q*stride + i] for i < len. The additions happen in tap order for
 * every i, whatever the vector width, so all variants give the same floats. */
#define VERTICAL_BODY                                                                              \
    do {                                                                                           \
        const uint8_t *restrict r0 = src;                                                          \
        float w0 = w[0];                                                                           \
        for (size_t i = 0; i < len; i++)                                                           \
            row[i] = w0 * (float)r0[i];                                                            \
        int q = 1;                                                                                 \
        for (; q + 1 < n; q += 2) { /* two taps per sweep: half the row traffic, same order */     \
            const uint8_t *restrict r1 = src + (size_t)q * stride;                                 \
            const uint8_t *restrict r2 = r1 + stride;                                              \
            float w1 = w[q], w2 = w[q + 1];                                                        \
            for (size_t i = 0; i < len; i++)                                                       \
                row[i] = (row[i] + w1 * (float)r1[i]) + w2 * (float)r2[i];                         \
        }                                                                                          \
        if (q < n) {                                                                               \
            const uint8_t *restrict r1 = src + (size_t)q * stride;                                 \
            float w1 = w[q];                                                                       \
            for (size_t i = 0; i < len; i++)                                                       \
                row[i] = row[i] + w1 * (float)r1[i];                                               \
        }                                                                                          \
    } while (0)

static void vertical_pass(float *restrict row, const uint8_t *restrict src, size_t stride,
                          const float *restrict w, int n, size_t len)
{
    VERTICAL_BODY;
}

#if defined(__x86_64__) && defined(__GNUC__)
/* The same loop compiled for AVX2 (8 floats, vpmovzxbd): no FMA, so identical results. */
__attribute__((target("avx2"))) static void
vertical_pass_avx2(float *restrict row, const uint8_t *restrict src, size_t stride,
                   const float *restrict w, int n, size_t len)
{
    VERTICAL_BODY;
}
#define HAVE_AVX2_VARIANT 1
#endif

typedef int32_t v4si __attribute__((vector_size(16)));

/* Tap q of a pixel: the 4 floats (R, G, B, next) at p + 3q times its weight. */
static inline v4f tap(const float *p, const float *w, int q)
{
    v4f v;
    memcpy(&v, p + q * 3, sizeof(v));
    return v * w[q];
}

/* One output row from the float row: every pixel combines k taps (k even: zero-padded weights,
 * so the trip count is the same for all pixels) with 4-wide loads, summed as two chains (even
 * taps, odd taps; a fixed order shared with the AVX2 kernel), then rounded half up and clipped
 * to uint8 as PIL does, in vector registers. The common small k are unrolled. */
static void horizontal_pass(uint8_t *restrict out, const float *restrict row, int64_t n_out,
                            const int32_t *restrict tmin, const float *restrict w, int stride_w,
                            int k, int32_t xlo)
{
    const v4f zero = {0.0f, 0.0f, 0.0f, 0.0f}, top = {255.0f, 255.0f, 255.0f, 255.0f};
    const v4f half = {0.5f, 0.5f, 0.5f, 0.5f};
    for (int64_t i = 0; i < n_out; i++) {
        const float *p = row + (size_t)(tmin[i] - xlo) * 3;
        const float *wi = w + i * stride_w;
        v4f a0, a1;
        switch (k) { /* k is even (padded with zero weights) */
        case 2:
            a0 = tap(p, wi, 0), a1 = tap(p, wi, 1);
            break;
        case 4:
            a0 = tap(p, wi, 0) + tap(p, wi, 2);
            a1 = tap(p, wi, 1) + tap(p, wi, 3);
            break;
        case 6:
            a0 = (tap(p, wi, 0) + tap(p, wi, 2)) + tap(p, wi, 4);
            a1 = (tap(p, wi, 1) + tap(p, wi, 3)) + tap(p, wi, 5);
            break;
        default:
            a0 = tap(p, wi, 0);
            a1 = tap(p, wi, 1);
            for (int q = 2; q < k; q += 2) {
                a0 += tap(p, wi, q);
                a1 += tap(p, wi, q + 1);
            }
            break;
        }
        v4f acc = a0 + a1;
        v4si lo = acc > zero, hi = acc > top; /* also maps NaN to 0 */
        acc = (v4f)(((v4si)acc & lo & ~hi) | ((v4si)top & hi));
        v4si iv = __builtin_convertvector(acc + half, v4si); /* truncation: half up */
#ifdef __SSE2__
        __m128i b16 = _mm_packs_epi32((__m128i)iv, (__m128i)iv);
        uint32_t px = (uint32_t)_mm_cvtsi128_si32(_mm_packus_epi16(b16, b16));
#else
        uint32_t px = (uint32_t)iv[0] | (uint32_t)iv[1] << 8 | (uint32_t)iv[2] << 16;
#endif
        if (i + 1 < n_out) /* 4 bytes: the 4th lands on the next pixel's R, written next */
            memcpy(out + i * 3, &px, 4);
        else
            memcpy(out + i * 3, &px, 3); /* little-endian: R, G, B */
    }
}

#ifdef HAVE_AVX2_VARIANT
#include <immintrin.h>

/* Weights for the AVX2 kernel: per pixel and tap pair (q, q+1), the 8 lanes
 * (wq, wq, wq, 0, wq+1, wq+1, wq+1, 0). */
static void expand_weights(float *restrict w8, const float *restrict w, int64_t n, int stride_w,
                           int k)
{
    for (int64_t i = 0; i < n; i++)
        for (int q = 0; q < k; q += 2) {
            float *o = w8 + (i * k + q) * 4;
            const float *wi = w + i * stride_w;
            o[0] = o[1] = o[2] = wi[q];
            o[4] = o[5] = o[6] = wi[q + 1];
            o[3] = o[7] = 0.0f;
        }
}

/* One output pixel of the AVX2 kernel as 4 int32 (R, G, B, junk), rounded and clipped. */
__attribute__((target("avx2"))) static inline __m128i
pixel_avx2(const float *restrict p, const float *restrict wi, int pairs)
{
    const __m256i perm = _mm256_setr_epi32(0, 1, 2, 3, 3, 4, 5, 6);
    __m256 acc =
        _mm256_mul_ps(_mm256_permutevar8x32_ps(_mm256_loadu_ps(p), perm), _mm256_loadu_ps(wi));
    for (int m = 1; m < pairs; m++) {
        __m256 v = _mm256_permutevar8x32_ps(_mm256_loadu_ps(p + m * 6), perm);
        acc = _mm256_add_ps(acc, _mm256_mul_ps(v, _mm256_loadu_ps(wi + m * 8)));
    }
    __m128 a = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    a = _mm_min_ps(_mm_max_ps(a, _mm_setzero_ps()), _mm_set1_ps(255.0f)); /* NaN -> 0 */
    return _mm_cvttps_epi32(_mm_add_ps(a, _mm_set1_ps(0.5f)));
}

/* horizontal_pass for AVX2: one 8-float load per tap pair, permuted to (tap q | tap q+1) in the
 * two 128-bit halves. The low half sums the even taps and the high half the odd ones, in the
 * same order as the two chains of horizontal_pass, so the results are identical. Four pixels
 * are packed and stored together (12 bytes of a 16-byte store; the rest is rewritten next). */
__attribute__((target("avx2"))) static void
horizontal_pass_avx2(uint8_t *restrict out, const float *restrict row, int64_t n_out,
                     const int32_t *restrict tmin, const float *restrict w8, int pairs, int32_t xlo)
{
    const __m128i compact = _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
    const float *base = row - (size_t)xlo * 3;
    int64_t i = 0;
    for (; i + 6 <= n_out; i += 4) { /* pixel i+5 exists: the 4 spare bytes stay in the row */
        const float *w = w8 + i * pairs * 8;
        __m128i a = pixel_avx2(base + (size_t)tmin[i] * 3, w, pairs);
        __m128i b = pixel_avx2(base + (size_t)tmin[i + 1] * 3, w + pairs * 8, pairs);
        __m128i c = pixel_avx2(base + (size_t)tmin[i + 2] * 3, w + pairs * 16, pairs);
        __m128i d = pixel_avx2(base + (size_t)tmin[i + 3] * 3, w + pairs * 24, pairs);
        __m128i bytes = _mm_packus_epi16(_mm_packs_epi32(a, b), _mm_packs_epi32(c, d));
        _mm_storeu_si128((__m128i *)(out + i * 3), _mm_shuffle_epi8(bytes, compact));
    }
    for (; i < n_out; i++) {
        __m128i v = pixel_avx2(base + (size_t)tmin[i] * 3, w8 + i * pairs * 8, pairs);
        __m128i b16 = _mm_packs_epi32(v, v);
        uint32_t px = (uint32_t)_mm_cvtsi128_si32(_mm_packus_epi16(b16, b16));
        memcpy(out + i * 3, &px, 3);
    }
}
#endif

/* Pad every output pixel of a tap table to exactly kk taps (zero weights past its own; padding
 * pixels read tap `at` with weight 0), so the inner loops have one trip count. */
static void uniform_taps(stk__taps *t, int64_t n, int k, int kk, int32_t at)
{
    for (int64_t i = 0; i < n; i++) {
        float *w = t->w + i * k;
        if (t->tn[i] == 0)
            t->tmin[i] = at;
        for (int q = t->tn[i]; q < kk; q++)
            w[q] = 0.0f;
    }
}

stk_status stk__resample(stk__rscratch *s, const stk__decoded *src, const stk__xaxis *x,
                         const stk__xaxis *y, uint8_t *dst, size_t dst_stride, char *err,
                         size_t err_size)
{
    int64_t ow = x->n, oh = y->n;
    /* One spare x weight: tap counts are padded to even (pairs for the AVX2 kernel). */
    int kx = axis_ksize(x, src->scale_x) + 1, ky = axis_ksize(y, src->scale_y);
    if (!taps_reserve(&s->x, (size_t)ow, (size_t)kx) ||
        !taps_reserve(&s->y, (size_t)oh, (size_t)ky))
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

    /* Uniform, even tap counts; the row gets zeroed slack for the padded taps' reads. */
    int kk = 2;
    for (int64_t i = 0; i < ow; i++)
        kk = STK_MAX(kk, xn[i]);
    kk = (kk + 1) & ~1;
    uniform_taps(&s->x, ow, kx, kk, xlo);
    size_t len = (size_t)(xhi - xlo) * 3, slack = (size_t)kk * 3 + 12;
    if (!grow((void **)&s->row, &s->cap_row, len + slack, sizeof(float)))
        return stk__set_error(err, err_size, STK_ENOMEM, "out of memory for the resize row");
    memset(s->row + len, 0, slack * sizeof(float));
#ifdef HAVE_AVX2_VARIANT
    bool avx2 = !s->portable && __builtin_cpu_supports("avx2");
    if (avx2) {
        size_t n8;
        if (!stk__mul_ok((size_t)ow, (size_t)kk * 4, &n8) ||
            !grow((void **)&s->w8, &s->cap_w8, n8, sizeof(float)))
            return stk__set_error(err, err_size, STK_ENOMEM, "out of memory for resize tables");
        expand_weights(s->w8, s->x.w, ow, kx, kk);
    }
#endif
    for (int64_t j = 0; j < oh; j++) {
        uint8_t *o = dst + (size_t)j * dst_stride;
        if (yn[j] == 0) {
            memset(o, 0, (size_t)ow * 3);
            continue;
        }
        const uint8_t *r = src->rgb + (size_t)ymin[j] * src->stride + (size_t)xlo * 3;
#ifdef HAVE_AVX2_VARIANT
        if (avx2) {
            vertical_pass_avx2(s->row, r, src->stride, s->y.w + j * ky, yn[j], len);
            horizontal_pass_avx2(o, s->row, ow, xmin, s->w8, kk / 2, xlo);
            continue;
        }
#endif
        vertical_pass(s->row, r, src->stride, s->y.w + j * ky, yn[j], len);
        horizontal_pass(o, s->row, ow, xmin, s->x.w, kx, kk, xlo);
    }
    return STK_OK;
}
