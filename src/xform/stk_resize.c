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
 * Evaluation: separable, vertical pass first, in integers. Weights are rounded to 14 fractional
 * bits (their rounding remainder goes to the largest, so they sum to exactly 1). For each output
 * row the vertical taps are combined over the needed columns into one int16 row with 7
 * fractional bits (PIL rounds to 8 bits here: 0 fractional bits), then each output pixel combines
 * its horizontal taps and is rounded half up and clipped to uint8. Tap counts are padded to one
 * even number per row so the loops have a single trip count. Integer sums are exact, so every
 * kernel below gives the same bytes (the tests and the fuzzer compare them with the portable
 * loops), and the results are within one level of a double-precision reference on at most
 * 0.2% of the values in the tests (the float32 kernels these replaced: 0.02%; PIL's 8-bit
 * intermediate: 7-18% of values one level off).
 *
 * AVX2 (checked at run time) works on blocks of 16 output rows. Vertical: rows q and q+1
 * interleaved and widened to int16 pairs, so one vpmaddwd applies two taps to 8 values. The
 * horizontal pass is where a per-pixel kernel spends its time gathering each pixel's taps and
 * reducing them; instead the block's 16 vertical rows are transposed (16x16 int16 tiles), so
 * that one tap of one output value is a contiguous load of its 16 rows and one vpmaddwd applies
 * a tap pair to 8 rows, and the 16x16 byte tiles of results are transposed back into the rows.
 * Measured per 224x224 RandomResizedCrop sample (gen_imgdump --bench, one thread, ~55 KB
 * JPEGs): float32 per-pixel kernels 113 us, the same in int16 113 us, the blocked transposed
 * form 75-80 us. Where the CPU has AVX512-VNNI (+VL) the same kernels are compiled a second time
 * with vpdpwssd, which does a vpmaddwd and its vpaddd in one instruction (the same sums).
 *
 * Scratch (tap tables, one row) lives in the worker's stk__rscratch and only grows.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

#include "xform/stk_xform.h"

#include <math.h>
#include <string.h>

/* Fixed point: weights carry W_BITS fractional bits (1.0 = 16384, the largest that fits int16),
 * the vertical pass's int16 row carries R_BITS (255 << 7 = 32640 fits int16, with room for the
 * weights' rounding), and the horizontal pass drops W_BITS + R_BITS with rounding. */
#define W_BITS 14
#define R_BITS 7
#define W_ONE (1 << W_BITS)
#define V_SHIFT (W_BITS - R_BITS) /* vertical: u8 * weight -> row */
#define H_SHIFT (W_BITS + R_BITS) /* horizontal: row * weight -> u8 */

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
    stk__free(s->blk);
    stk__free(s->obuf);
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
    return grow((void **)&t->w, &t->cap_w, nw, sizeof(int16_t));
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
        int16_t *w = t->w + i * k;
        t->tmin[i] = 0;
        t->tn[i] = 0;
        u = stk__axis_pad_map(a, u); /* padding_mode edge/reflect/symmetric: a content pixel */
        if (u < a->v0 || u >= a->v1)
            continue; /* padding */
        double c = rel ? (u + 0.5) * scale : base + (u + 0.5) * sb;
        int64_t t0 = (int64_t)floor(c - support + 0.5) + (int64_t)shift;
        int64_t t1 = (int64_t)floor(c + support + 0.5) + (int64_t)shift;
        t0 = STK_MAX(t0, lo);
        t1 = STK_MIN(t1, hi);
        t1 = STK_MIN(t1, t0 + k); /* cannot bind (k >= 2*support + 1); keeps memory safe */
        int n = (int)(t1 > t0 ? t1 - t0 : 0);
        double v[64], sum = 0.0; /* the weights themselves when n <= 64, the usual case */
        double x0 = ((double)t0 - shift - c + 0.5) * ss;
        for (int q = 0; q < n; q++) {
            double tv = triangle(x0 + q * ss);
            sum += tv;
            if (q < 64)
                v[q] = tv;
        }
        if (!(sum > 0.0))
            continue; /* no tap overlaps the filter: a zero pixel */
        /* Normalise in double, round to W_BITS, and give the rounding's remainder to the
         * largest weight so that they sum to exactly 1 (flat areas stay exact). */
        int total = 0, big = 0;
        double scale_w = W_ONE / sum;
        for (int q = 0; q < n; q++) {
            double tv = q < 64 ? v[q] : triangle(x0 + q * ss);
            w[q] = (int16_t)(tv * scale_w + 0.5); /* >= 0: truncation rounds half up */
            total += w[q];
            big = w[q] > w[big] ? q : big;
        }
        w[big] = (int16_t)(w[big] + (W_ONE - total));
        /* Drop zero-weight taps at both ends */
        int first = 0, last = n;
        while (first < last && w[first] == 0)
            first++;
        while (last > first && w[last - 1] == 0)
            last--;
        if (first > 0)
            memmove(w, w + first, (size_t)(last - first) * sizeof(int16_t));
        t->tmin[i] = (int32_t)(t0 + first);
        t->tn[i] = last - first;
    }
}

/* True when every non-padding output pixel of the axis is one buffer pixel with weight 1. */
static bool axis_is_copy(const int32_t *tn, const int16_t *w, int k, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (tn[i] > 1 || (tn[i] == 1 && w[i * k] != W_ONE))
            return false;
    return true;
}

/* Round and shift one fixed-point sum (never negative: the weights are not). */
static inline int32_t descale(int32_t acc, int shift)
{
    return (acc + (1 << (shift - 1))) >> shift;
}

/* row[i] = round(sum_q w[q] * src[q*stride + i] >> V_SHIFT) for i < len: the vertical pass. */
static void vertical_pass(int16_t *restrict row, const uint8_t *restrict src, size_t stride,
                          const int16_t *restrict w, int n, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        int32_t acc = 0;
        for (int q = 0; q < n; q++)
            acc += (int32_t)w[q] * src[(size_t)q * stride + i];
        row[i] = (int16_t)descale(acc, V_SHIFT);
    }
}

/* One output row from the int16 row of nc channels: pixel i combines kk taps (kk even,
 * zero-padded weights) from buffer pixel tmin[i] on, then rounds and clips to uint8. */
static void horizontal_pass(uint8_t *restrict out, const int16_t *restrict row, int64_t n_out,
                            const int32_t *restrict tmin, const int16_t *restrict w, int stride_w,
                            int kk, int32_t xlo, int nc)
{
    for (int64_t i = 0; i < n_out; i++) {
        const int16_t *p = row + (size_t)(tmin[i] - xlo) * (size_t)nc;
        const int16_t *wi = w + i * stride_w;
        for (int c = 0; c < nc; c++) {
            int32_t acc = 0;
            for (int q = 0; q < kk; q++)
                acc += (int32_t)wi[q] * p[q * nc + c];
            int32_t v = descale(acc, H_SHIFT);
            out[i * nc + c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_AVX2_VARIANT 1
#define BLK 16 /* output rows per block of the AVX2 path */

/* acc + the int16 pair products of a and b summed per int32 (vpmaddwd + vpaddd) in one
 * instruction, vpdpwssd (AVX512-VNNI, no saturation: the same sums). Called only where `vnni` is
 * true below, that is from resample_blocks_vnni, whose target includes this one's: it is inlined
 * there (it cannot be always_inline: the AVX2 instantiation holds a call to it too, dead). */
__attribute__((target("avx2,avx512vnni,avx512vl"))) static inline __m256i
dot_vnni(__m256i acc, __m256i a, __m256i b)
{
    return _mm256_dpwssd_epi32(acc, a, b);
}

/* The accumulate step of every kernel below, for the instantiation `vnni` (a constant). */
__attribute__((target("avx2"), always_inline)) static inline __m256i
madd_acc(__m256i acc, __m256i a, __m256i b, bool vnni)
{
    return vnni ? dot_vnni(acc, a, b) : _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
}

/* The steps of vertical_pass_avx2 over a row, with the tap pairs' rows ra[m], rb[m] and weights
 * wv[m]: 32 values a step, rows q and q+1 interleaved byte by byte, then widened to int16 pairs
 * (both per 128-bit lane, so the sums come out as values 0-3 | 16-19, 4-7 | 20-23, ...); the last
 * values 16 a step, the last step overlapping the one before (the same values again). */
__attribute__((target("avx2"), always_inline)) static inline void
vertical_steps(int16_t *restrict row, const uint8_t *const *ra, const uint8_t *const *rb,
               const __m256i *wv, int pairs, size_t len, bool vnni)
{
    const __m256i round = _mm256_set1_epi32(1 << (V_SHIFT - 1)), zero = _mm256_setzero_si256();
    size_t i0 = 0;
    for (; i0 + 32 <= len; i0 += 32) {
        __m256i s0 = round, s1 = round, s2 = round, s3 = round;
        for (int m = 0; m < pairs; m++) {
            __m256i a = _mm256_loadu_si256((const __m256i *)(ra[m] + i0));
            __m256i b = _mm256_loadu_si256((const __m256i *)(rb[m] + i0));
            __m256i x0 = _mm256_unpacklo_epi8(a, b), x1 = _mm256_unpackhi_epi8(a, b);
            s0 = madd_acc(s0, _mm256_unpacklo_epi8(x0, zero), wv[m], vnni);
            s1 = madd_acc(s1, _mm256_unpackhi_epi8(x0, zero), wv[m], vnni);
            s2 = madd_acc(s2, _mm256_unpacklo_epi8(x1, zero), wv[m], vnni);
            s3 = madd_acc(s3, _mm256_unpackhi_epi8(x1, zero), wv[m], vnni);
        }
        /* [0-7 | 16-23] and [8-15 | 24-31] */
        __m256i p01 =
            _mm256_packs_epi32(_mm256_srai_epi32(s0, V_SHIFT), _mm256_srai_epi32(s1, V_SHIFT));
        __m256i p23 =
            _mm256_packs_epi32(_mm256_srai_epi32(s2, V_SHIFT), _mm256_srai_epi32(s3, V_SHIFT));
        _mm256_storeu_si256((__m256i *)(row + i0), _mm256_permute2x128_si256(p01, p23, 0x20));
        _mm256_storeu_si256((__m256i *)(row + i0 + 16), _mm256_permute2x128_si256(p01, p23, 0x31));
    }
    for (; i0 < len; i0 += 16) {
        size_t i = i0 + 16 <= len ? i0 : len - 16;
        __m256i lo = round, hi = round;
        for (int m = 0; m < pairs; m++) {
            __m128i a = _mm_loadu_si128((const __m128i *)(ra[m] + i));
            __m128i b = _mm_loadu_si128((const __m128i *)(rb[m] + i));
            lo = madd_acc(lo, _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(a, b)), wv[m], vnni);
            hi = madd_acc(hi, _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(a, b)), wv[m], vnni);
        }
        lo = _mm256_srai_epi32(lo, V_SHIFT);
        hi = _mm256_srai_epi32(hi, V_SHIFT);
        /* packs works per 128-bit lane: [lo0-3 hi0-3 | lo4-7 hi4-7] -> reorder the quarters */
        __m256i v = _mm256_permute4x64_epi64(_mm256_packs_epi32(lo, hi), 0xD8);
        _mm256_storeu_si256((__m256i *)(row + i), v);
    }
}

/* vertical_pass with AVX2: rows q and q+1 interleaved byte by byte and widened to int16 pairs,
 * so that one vpmaddwd applies both taps to 8 values; the same integer sums, so the same row.
 * An odd last tap is paired with itself at weight 0. The usual pair counts (a resize by up to
 * 3x after DCT scaling) get their own copy of the steps, the pair loop unrolled. */
__attribute__((target("avx2"), always_inline)) static inline void
vertical_pass_avx2(int16_t *restrict row, const uint8_t *restrict src, size_t stride,
                   const int16_t *restrict w, int n, size_t len, bool vnni)
{
    enum { MAX_PAIRS = 32 };
    int pairs = (n + 1) / 2;
    if (pairs > MAX_PAIRS || len < 16) { /* a downscale by more than 32 after DCT scaling */
        vertical_pass(row, src, stride, w, n, len);
        return;
    }
    __m256i wv[MAX_PAIRS];
    const uint8_t *ra[MAX_PAIRS], *rb[MAX_PAIRS];
    for (int m = 0; m < pairs; m++) {
        int q = 2 * m;
        uint16_t w1 = q + 1 < n ? (uint16_t)w[q + 1] : 0;
        wv[m] = _mm256_set1_epi32((int32_t)((uint32_t)w1 << 16 | (uint16_t)w[q]));
        ra[m] = src + (size_t)q * stride;
        rb[m] = q + 1 < n ? ra[m] + stride : ra[m];
    }
    switch (pairs) {
    case 1:
        vertical_steps(row, ra, rb, wv, 1, len, vnni);
        break;
    case 2:
        vertical_steps(row, ra, rb, wv, 2, len, vnni);
        break;
    case 3:
        vertical_steps(row, ra, rb, wv, 3, len, vnni);
        break;
    default:
        vertical_steps(row, ra, rb, wv, pairs, len, vnni);
    }
}

/* Transpose 16 rows of 16 int16 (r[k] = row k) so that r[k] becomes column k: unpacks of 16,
 * 32, 64 bits within each 128-bit lane, then a lane exchange. */
__attribute__((target("avx2"))) static inline void transpose16_i16(__m256i r[16])
{
    __m256i x[16], y[16];
    for (int i = 0; i < 8; i++) { /* x[q*8 + i]: row pair i, column quad q */
        x[i] = _mm256_unpacklo_epi16(r[2 * i], r[2 * i + 1]);
        x[8 + i] = _mm256_unpackhi_epi16(r[2 * i], r[2 * i + 1]);
    }
    for (int q = 0; q < 2; q++)
        for (int i = 0; i < 4; i++) { /* y[q*8 + p*4 + i]: rows 4i.., columns 4q + 2p + (0, 1) */
            y[q * 8 + i] = _mm256_unpacklo_epi32(x[q * 8 + 2 * i], x[q * 8 + 2 * i + 1]);
            y[q * 8 + 4 + i] = _mm256_unpackhi_epi32(x[q * 8 + 2 * i], x[q * 8 + 2 * i + 1]);
        }
    for (int qp = 0; qp < 4; qp++) /* column 2*qp (+8 in the high lane), rows 0-7 and 8-15 */
        for (int h = 0; h < 2; h++) {
            const __m256i *g = y + qp * 4;
            __m256i lo = h ? _mm256_unpackhi_epi64(g[0], g[1]) : _mm256_unpacklo_epi64(g[0], g[1]);
            __m256i hi = h ? _mm256_unpackhi_epi64(g[2], g[3]) : _mm256_unpacklo_epi64(g[2], g[3]);
            x[2 * qp + h] = _mm256_permute2x128_si256(lo, hi, 0x20);
            x[8 + 2 * qp + h] = _mm256_permute2x128_si256(lo, hi, 0x31);
        }
    for (int k = 0; k < 16; k++)
        r[k] = x[k];
}

/* Transpose 16 rows of 16 bytes (r[k] = row k) so that r[k] becomes column k. */
__attribute__((target("avx2"))) static inline void transpose16_u8(__m128i r[16])
{
    __m128i t[16];
    for (int i = 0; i < 8; i++) { /* t[h*8 + i]: rows 2i, 2i+1, columns 8h .. 8h+7 */
        t[i] = _mm_unpacklo_epi8(r[2 * i], r[2 * i + 1]);
        t[8 + i] = _mm_unpackhi_epi8(r[2 * i], r[2 * i + 1]);
    }
    for (int h = 0; h < 2; h++)
        for (int i = 0; i < 4; i++) { /* r[g*4 + i]: rows 4i .. 4i+3, columns 4g .. 4g+3 */
            r[h * 8 + i] = _mm_unpacklo_epi16(t[h * 8 + 2 * i], t[h * 8 + 2 * i + 1]);
            r[h * 8 + 4 + i] = _mm_unpackhi_epi16(t[h * 8 + 2 * i], t[h * 8 + 2 * i + 1]);
        }
    for (int g = 0; g < 4; g++)
        for (int i = 0; i < 2; i++) { /* t[g*4 + p*2 + i]: rows 8i.., columns 4g + 2p + (0, 1) */
            t[g * 4 + i] = _mm_unpacklo_epi32(r[g * 4 + 2 * i], r[g * 4 + 2 * i + 1]);
            t[g * 4 + 2 + i] = _mm_unpackhi_epi32(r[g * 4 + 2 * i], r[g * 4 + 2 * i + 1]);
        }
    for (int g = 0; g < 4; g++)
        for (int p = 0; p < 2; p++) {
            r[4 * g + 2 * p] = _mm_unpacklo_epi64(t[g * 4 + p * 2], t[g * 4 + p * 2 + 1]);
            r[4 * g + 2 * p + 1] = _mm_unpackhi_epi64(t[g * 4 + p * 2], t[g * 4 + p * 2 + 1]);
        }
}

/* Output value t = i*nc + c (pixel i, channel c of nc) of BLK rows at once, from the transposed
 * block vt (value v of the block's vertical rows at vt + v*BLK, the BLK rows side by side): every
 * tap is one contiguous load of BLK values, and one vpmaddwd applies a tap pair to 8 rows. Returns
 * the 16 rows as int16, in order. The sums are those of horizontal_pass. */
__attribute__((target("avx2"), always_inline)) static inline __m256i
value_rows_avx2(const int16_t *restrict vt, int64_t t, const int32_t *restrict tmin,
                const int16_t *restrict w, int stride_w, int kk, int32_t xlo, int nc, bool vnni)
{
    int64_t i = t / nc;
    const int16_t *wi = w + i * stride_w;
    const int16_t *p = vt + ((size_t)(tmin[i] - xlo) * (size_t)nc + (size_t)(t - i * nc)) * BLK;
    __m256i lo = _mm256_set1_epi32(1 << (H_SHIFT - 1)), hi = lo;
    for (int q = 0; q < kk; q += 2, p += 2 * nc * BLK) {
        __m256i a = _mm256_loadu_si256((const __m256i *)p);
        __m256i b = _mm256_loadu_si256((const __m256i *)(p + nc * BLK));
        int32_t pair;
        memcpy(&pair, wi + q, sizeof(pair)); /* (w[q], w[q+1]) as an int16 pair */
        __m256i wv = _mm256_set1_epi32(pair);
        /* rows 0-3 | 8-11 and 4-7 | 12-15, each with taps q and q+1 side by side */
        lo = madd_acc(lo, _mm256_unpacklo_epi16(a, b), wv, vnni);
        hi = madd_acc(hi, _mm256_unpackhi_epi16(a, b), wv, vnni);
    }
    return _mm256_packs_epi32(_mm256_srai_epi32(lo, H_SHIFT), _mm256_srai_epi32(hi, H_SHIFT));
}

/* The horizontal pass of a block: every output value of BLK rows, written transposed,
 * obuf[t * BLK + row], two values (32 bytes) a step. */
__attribute__((target("avx2"), always_inline)) static inline void
horizontal_block_nc(uint8_t *restrict obuf, const int16_t *restrict vt, int64_t n_out,
                    const int32_t *restrict tmin, const int16_t *restrict w, int stride_w, int kk,
                    int32_t xlo, int nc, bool vnni)
{
    int64_t n_val = n_out * nc, t = 0;
    for (; t + 2 <= n_val; t += 2) {
        __m256i a = value_rows_avx2(vt, t, tmin, w, stride_w, kk, xlo, nc, vnni);
        __m256i b = value_rows_avx2(vt, t + 1, tmin, w, stride_w, kk, xlo, nc, vnni);
        /* [a 0-7, b 0-7 | a 8-15, b 8-15] -> [a 0-15 | b 0-15] */
        __m256i v = _mm256_permute4x64_epi64(_mm256_packus_epi16(a, b), 0xD8);
        _mm256_storeu_si256((__m256i *)(obuf + (size_t)t * BLK), v);
    }
    if (t < n_val) {
        __m256i a = value_rows_avx2(vt, t, tmin, w, stride_w, kk, xlo, nc, vnni);
        __m256i v = _mm256_permute4x64_epi64(_mm256_packus_epi16(a, a), 0xD8);
        _mm_storeu_si128((__m128i *)(obuf + (size_t)t * BLK), _mm256_castsi256_si128(v));
    }
}

/* horizontal_block_nc with its own copy for the usual tap counts (a resize by up to 2.5x after
 * DCT scaling), the tap loop unrolled. */
__attribute__((target("avx2"), always_inline)) static inline void
horizontal_block_kk(uint8_t *restrict obuf, const int16_t *restrict vt, int64_t n_out,
                    const int32_t *restrict tmin, const int16_t *restrict w, int stride_w, int kk,
                    int32_t xlo, int nc, bool vnni)
{
    switch (kk) {
    case 2:
        horizontal_block_nc(obuf, vt, n_out, tmin, w, stride_w, 2, xlo, nc, vnni);
        break;
    case 4:
        horizontal_block_nc(obuf, vt, n_out, tmin, w, stride_w, 4, xlo, nc, vnni);
        break;
    case 6:
        horizontal_block_nc(obuf, vt, n_out, tmin, w, stride_w, 6, xlo, nc, vnni);
        break;
    default:
        horizontal_block_nc(obuf, vt, n_out, tmin, w, stride_w, kk, xlo, nc, vnni);
    }
}

/* horizontal_block_kk compiled for RGB (nc = 3) and for one plane (nc = 1). */
__attribute__((target("avx2"), always_inline)) static inline void
horizontal_block_avx2(uint8_t *restrict obuf, const int16_t *restrict vt, int64_t n_out,
                      const int32_t *restrict tmin, const int16_t *restrict w, int stride_w, int kk,
                      int32_t xlo, int nc, bool vnni)
{
    if (nc == 3)
        horizontal_block_kk(obuf, vt, n_out, tmin, w, stride_w, kk, xlo, 3, vnni);
    else
        horizontal_block_kk(obuf, vt, n_out, tmin, w, stride_w, kk, xlo, 1, vnni);
}

/* Resample with the AVX2 kernels, BLK output rows at a time: the vertical pass of each row
 * into a BLK x ld block, one transpose to vt, horizontal_block_avx2, and a transpose of the
 * bytes back into the output rows. */
__attribute__((target("avx2"), always_inline)) static inline void
resample_blocks(const stk__rscratch *s, const stk__decoded *src, int nc, int64_t ow, int64_t oh,
                int kx, int ky, int kk, int32_t xlo, size_t len, size_t ld, uint8_t *dst,
                size_t dst_stride, bool vnni)
{
    int16_t *vb = s->blk, *vt = s->blk + ld * BLK;
    uint8_t *obuf = s->obuf;
    const int32_t *ymin = s->y.tmin, *yn = s->y.tn;
    size_t n_val = (size_t)ow * (size_t)nc;
    for (int64_t j0 = 0; j0 < oh; j0 += BLK) {
        int rows = (int)STK_MIN((int64_t)BLK, oh - j0);
        for (int r = 0; r < BLK; r++) {
            int64_t j = j0 + r;
            int16_t *row = vb + (size_t)r * ld;
            if (r < rows && yn[j] > 0)
                vertical_pass_avx2(
                    row, src->rgb + (size_t)ymin[j] * src->stride + (size_t)xlo * (size_t)nc,
                    src->stride, s->y.w + j * ky, yn[j], len, vnni);
            else
                memset(row, 0, len * sizeof(int16_t));
        }
        for (size_t v0 = 0; v0 < ld; v0 += BLK) {
            __m256i r[BLK];
            for (int k = 0; k < BLK; k++)
                r[k] = _mm256_loadu_si256((const __m256i *)(vb + (size_t)k * ld + v0));
            transpose16_i16(r);
            for (int k = 0; k < BLK; k++)
                _mm256_storeu_si256((__m256i *)(vt + (v0 + (size_t)k) * BLK), r[k]);
        }
        horizontal_block_avx2(obuf, vt, ow, s->x.tmin, s->x.w, kx, kk, xlo, nc, vnni);
        size_t t0 = 0;
        for (; t0 + BLK <= n_val; t0 += BLK) {
            __m128i r[BLK];
            for (int k = 0; k < BLK; k++)
                r[k] = _mm_loadu_si128((const __m128i *)(obuf + (t0 + (size_t)k) * BLK));
            transpose16_u8(r);
            for (int k = 0; k < rows; k++)
                _mm_storeu_si128((__m128i *)(dst + (size_t)(j0 + k) * dst_stride + t0), r[k]);
        }
        for (; t0 < n_val; t0++) /* the last values (output widths not a multiple of 16/3) */
            for (int k = 0; k < rows; k++)
                dst[(size_t)(j0 + k) * dst_stride + t0] = obuf[t0 * BLK + (size_t)k];
    }
}

/* resample_blocks compiled twice: with vpmaddwd + vpaddd (AVX2), and with vpdpwssd (where the
 * CPU has AVX512-VNNI and AVX512VL: Ice Lake and later, Zen 4). */
#define RESAMPLE_BLOCKS_ARGS                                                                       \
    const stk__rscratch *s, const stk__decoded *src, int nc, int64_t ow, int64_t oh, int kx,       \
        int ky, int kk, int32_t xlo, size_t len, size_t ld, uint8_t *dst, size_t dst_stride
__attribute__((target("avx2"))) static void resample_blocks_avx2(RESAMPLE_BLOCKS_ARGS)
{
    resample_blocks(s, src, nc, ow, oh, kx, ky, kk, xlo, len, ld, dst, dst_stride, false);
}

__attribute__((target("avx2,avx512vnni,avx512vl"))) static void
resample_blocks_vnni(RESAMPLE_BLOCKS_ARGS)
{
    resample_blocks(s, src, nc, ow, oh, kx, ky, kk, xlo, len, ld, dst, dst_stride, true);
}
#endif

/* Pad every output pixel of a tap table to exactly kk taps (zero weights past its own; padding
 * pixels read tap `at` with weight 0), so the inner loops have one trip count. */
static void uniform_taps(stk__taps *t, int64_t n, int k, int kk, int32_t at)
{
    for (int64_t i = 0; i < n; i++) {
        int16_t *w = t->w + i * k;
        if (t->tn[i] == 0)
            t->tmin[i] = at;
        for (int q = t->tn[i]; q < kk; q++)
            w[q] = 0;
    }
}

/* stk__resample and stk__resample_plane: src holds nc interleaved channels. */
static stk_status resample(stk__rscratch *s, const stk__decoded *src, int nc, const stk__xaxis *x,
                           const stk__xaxis *y, uint8_t *dst, size_t dst_stride, char *err,
                           size_t err_size)
{
    size_t px = (size_t)nc; /* bytes per pixel */
    int64_t ow = x->n, oh = y->n;
    /* One spare x weight: tap counts are padded to even (pairs for the AVX2 kernel). */
    int kx = axis_ksize(x, src->scale_x) + 1, ky = axis_ksize(y, src->scale_y);
    if (!taps_reserve(&s->x, (size_t)ow, (size_t)kx) ||
        !taps_reserve(&s->y, (size_t)oh, (size_t)ky))
        return stk__set_error(err, err_size, STK_ENOMEM, "out of memory for resize tables");
    /* The tables of the previous call when the geometry is the same (the planes path's Cb and
     * Cr, which share their map): they depend only on the axes and the buffer's map and size. */
    stk__tapkey key;
    memset(&key, 0, sizeof(key)); /* padding bytes too: the key is compared with memcmp */
    memcpy(&key.x, x, sizeof(*x));
    memcpy(&key.y, y, sizeof(*y));
    key.origin[0] = src->origin_x;
    key.origin[1] = src->origin_y;
    key.scale[0] = src->scale_x;
    key.scale[1] = src->scale_y;
    key.size[0] = src->width;
    key.size[1] = src->height;
    if (!s->key_valid || memcmp(&key, &s->key, sizeof(key)) != 0) {
        s->key_valid = false; /* until both tables are filled */
        axis_taps(x, src->origin_x, src->scale_x, src->width, &s->x, kx);
        axis_taps(y, src->origin_y, src->scale_y, src->height, &s->y, ky);
        memcpy(&s->key, &key, sizeof(key));
        s->key_valid = true;
    }
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
            memset(dst + (size_t)j * dst_stride, 0, (size_t)ow * px);
        return STK_OK;
    }

    if (axis_is_copy(xn, s->x.w, kx, ow) && axis_is_copy(yn, s->y.w, ky, oh)) {
        /* A pure crop (and flip) of the decoded pixels: copy them. */
        bool run = x->dir > 0 && xn[0] == 1 && xn[ow - 1] == 1 && xmin[ow - 1] - xmin[0] == ow - 1;
        for (int64_t j = 0; j < oh; j++) {
            uint8_t *o = dst + (size_t)j * dst_stride;
            const uint8_t *r = src->rgb + (size_t)ymin[j] * src->stride;
            if (yn[j] == 0) {
                memset(o, 0, (size_t)ow * px);
            } else if (run) {
                memcpy(o, r + (size_t)xmin[0] * px, (size_t)ow * px);
            } else {
                for (int64_t i = 0; i < ow; i++) {
                    const uint8_t *p = r + (size_t)xmin[i] * px;
                    bool pad = xn[i] == 0;
                    for (size_t c = 0; c < px; c++)
                        o[(size_t)i * px + c] = pad ? 0 : p[c];
                }
            }
        }
        return STK_OK;
    }

    /* Uniform, even tap counts; the rows get zeroed slack for the padded taps' reads. */
    int kk = 2;
    for (int64_t i = 0; i < ow; i++)
        kk = STK_MAX(kk, xn[i]);
    kk = (kk + 1) & ~1;
    uniform_taps(&s->x, ow, kx, kk, xlo);
    size_t len = (size_t)(xhi - xlo) * px, slack = (size_t)kk * px + 16;
#ifdef HAVE_AVX2_VARIANT
    if (!s->portable && __builtin_cpu_supports("avx2")) {
        /* Block rows of ld values (a multiple of BLK), zero past len; the transpose and the
         * output bytes of one block. */
        size_t ld = (len + slack + BLK - 1) / BLK * BLK, nb, nv;
        if (!stk__mul_ok(ld, 2 * BLK, &nb) || !stk__mul_ok((size_t)ow, px * BLK, &nv) ||
            !grow((void **)&s->blk, &s->cap_blk, nb, sizeof(int16_t)) ||
            !grow((void **)&s->obuf, &s->cap_obuf, nv, 1))
            return stk__set_error(err, err_size, STK_ENOMEM, "out of memory for the resize rows");
        for (int r = 0; r < BLK; r++)
            memset(s->blk + (size_t)r * ld + len, 0, (ld - len) * sizeof(int16_t));
        if (!s->no_vnni && __builtin_cpu_supports("avx512vnni") &&
            __builtin_cpu_supports("avx512vl"))
            resample_blocks_vnni(s, src, nc, ow, oh, kx, ky, kk, xlo, len, ld, dst, dst_stride);
        else
            resample_blocks_avx2(s, src, nc, ow, oh, kx, ky, kk, xlo, len, ld, dst, dst_stride);
        return STK_OK;
    }
#endif
    if (!grow((void **)&s->row, &s->cap_row, len + slack, sizeof(int16_t)))
        return stk__set_error(err, err_size, STK_ENOMEM, "out of memory for the resize row");
    memset(s->row + len, 0, slack * sizeof(int16_t));
    for (int64_t j = 0; j < oh; j++) {
        uint8_t *o = dst + (size_t)j * dst_stride;
        if (yn[j] == 0) {
            memset(o, 0, (size_t)ow * px);
            continue;
        }
        const uint8_t *r = src->rgb + (size_t)ymin[j] * src->stride + (size_t)xlo * px;
        vertical_pass(s->row, r, src->stride, s->y.w + j * ky, yn[j], len);
        horizontal_pass(o, s->row, ow, xmin, s->x.w, kx, kk, xlo, nc);
    }
    return STK_OK;
}

stk_status stk__resample(stk__rscratch *s, const stk__decoded *src, const stk__xaxis *x,
                         const stk__xaxis *y, uint8_t *dst, size_t dst_stride, char *err,
                         size_t err_size)
{
    return resample(s, src, 3, x, y, dst, dst_stride, err, err_size);
}

stk_status stk__resample_plane(stk__rscratch *s, const stk__decoded *src, const stk__xaxis *x,
                               const stk__xaxis *y, uint8_t *dst, size_t dst_stride, char *err,
                               size_t err_size)
{
    return resample(s, src, 1, x, y, dst, dst_stride, err, err_size);
}
