/*
 * stk_normalize.c: the last stage of a sample: uint8 RGB -> output dtype and layout, written
 * straight into the sample's place in the batch.
 *
 * Values follow torchvision exactly: ToTensor is x / 255 in float32, Normalize is
 * (v - mean) / std in float32 (two IEEE divisions, no reciprocal, so results are bit-identical to
 * torch's on the same uint8 data); float16 and bfloat16 are that float32 rounded to nearest even,
 * as torch's .to(dtype).
 *
 * Since the input is uint8, each channel's output is one of 256 values: stk__store_init computes
 * them once per transform (with the exact formula above) and the store is a table lookup per
 * value, which also splits or keeps the interleaving for CHW / HWC. Measured on 224x224x3: the
 * lookup takes ~45 us; the same loop computing the two divisions with SSE2 (gcc-vectorised)
 * took ~180 us, division-bound. The conversions themselves are branch-free (the float16 one
 * uses the float-arithmetic rounding trick of the FP16 library rather than F16C).
 *
 * float32 on CPUs with AVX2 and FMA: the table lookups (three byte loads, three table loads and
 * three scattered stores per pixel) are replaced by arithmetic on 8 floats at a time: each
 * division a/b is a multiplication by the reciprocal r = 1/b corrected once with the exact
 * residual (q = a*r; e = fma(-q, b, a); q + e*r as one fma), which gives the correctly rounded
 * quotient for nearly every a and b. "Nearly" is made "exactly" by checking: stk__store_init
 * evaluates the same formula (with C's fmaf, the same IEEE operation) on all 256 inputs of
 * each channel and enables the arithmetic path only if every result equals the table's, bit
 * for bit; so both paths always give the same bytes. NCHW splits 16 pixels into three planes
 * with byte shuffles first. Measured on 224x224x3 float32 NCHW (gen_imgdump --bench):
 * table 47 us, arithmetic 27 us.
 *
 * From Y, Cb, Cr planes (stk__store_ycc) the colour conversion and the store are one pass; on
 * CPUs with AVX-512F it runs 16 pixels a step (the same operations on 16 lanes, so the same
 * bytes), and the levels are rounded and clamped in float (roundps, maxps, minps) instead of a
 * round trip through int32; the first pixels go through the tables up to where the vector
 * stores start on a whole vector (a store across two cache lines costs more). Measured with
 * gen_imgdump --bench (imagenet-train, 224x224, medians): store 40-44 -> 26-27 us with a hot
 * destination, 42-48 -> 29-39 us with a 64-byte-aligned one rotating through 64 rows.
 * Lookups of the 256 values per channel instead of the two divisions: AVX2 gathers from lut_f32
 * are 2x slower; the four bytes of each float from 128-byte vpermi2b tables (AVX-512 VBMI),
 * interleaved with unpacks, are 12% faster on a hot destination and no faster on a rotating
 * one, so not kept (commit cb8383d has that kernel; bench/RESULTS.md, "Store kernel").
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

#include "xform/stk_xform.h"

#include <math.h>
#include <string.h>

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static inline float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* float -> binary16, round to nearest even (Maratyszcza's FP16, fp16_ieee_from_fp32_value): the
 * scaled addition makes the FPU do the rounding, including subnormals; overflow gives inf. */
static inline uint16_t f16_from_f32(float f)
{
    const float to_inf = 0x1.0p+112f, to_zero = 0x1.0p-110f;
    float base = (__builtin_fabsf(f) * to_inf) * to_zero;
    uint32_t w = f32_bits(f);
    uint32_t shl1 = w + w;
    uint32_t sign = w & 0x80000000u;
    uint32_t bias = shl1 & 0xFF000000u;
    bias = bias > 0x71000000u ? bias : 0x71000000u;
    base = bits_f32((bias >> 1) + 0x07800000u) + base;
    uint32_t bits = f32_bits(base);
    uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
    uint32_t mant_bits = bits & 0x00000FFFu;
    uint32_t nonsign = exp_bits + mant_bits;
    uint32_t nan = 0u - (uint32_t)(shl1 > 0xFF000000u); /* all ones for NaN: masks, no branch */
    return (uint16_t)((sign >> 16) | (nan & 0x7E00u) | (~nan & nonsign));
}

/* float -> bfloat16, round to nearest even; NaN stays a (quiet) NaN. */
static inline uint16_t bf16_from_f32(float f)
{
    uint32_t u = f32_bits(f);
    uint32_t r = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    uint32_t nan = 0u - (uint32_t)((u & 0x7FFFFFFFu) > 0x7F800000u);
    return (uint16_t)((nan & ((u >> 16) | 0x40u)) | (~nan & r));
}

uint16_t stk__f32_to_f16(float f)
{
    return f16_from_f32(f);
}

uint16_t stk__f32_to_bf16(float f)
{
    return bf16_from_f32(f);
}

float stk__f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
    if (exp == 0x1F)
        return bits_f32(sign | 0x7F800000u | (mant << 13));
    if (exp == 0) /* zero or subnormal: mant * 2^-24 */
        return bits_f32(sign) + (sign ? -1.0f : 1.0f) * (float)mant * 0x1.0p-24f;
    return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

/* a / b as the arithmetic store computes it, r = 1/b: one residual correction (header). */
static float div_fma(float a, float b, float r)
{
    float q = a * r;
    return fmaf(fmaf(-q, b, a), r, q);
}

void stk__store_init(stk_transform *t)
{
    bool arith = true;
    for (int c = 0; c < 3; c++) {
        t->st_mean[c] = t->normalize ? t->mean[c] : 0.0f;
        t->st_std[c] = t->normalize ? t->std[c] : 1.0f;
        t->st_rstd[c] = 1.0f / t->st_std[c];
        for (int x = 0; x < 256; x++) {
            /* torchvision: ToTensor is x / 255 in float32; Normalize (v - mean) / std */
            float v = (float)x / 255.0f;
            if (t->normalize)
                v = (v - t->mean[c]) / t->std[c];
            t->lut_f32[c][x] = v;
            t->lut_u16[c][x] = t->dtype == STK_DTYPE_BFLOAT16 ? bf16_from_f32(v) : f16_from_f32(v);
            /* The arithmetic path's value, to the bit (NaN never arises: std is finite, != 0) */
            float a = div_fma((float)x, 255.0f, 1.0f / 255.0f);
            a = div_fma(a - t->st_mean[c], t->st_std[c], t->st_rstd[c]);
            arith = arith && f32_bits(a) == f32_bits(v);
        }
    }
    t->store_arith = arith;
}

/* CHW planes from interleaved RGB through per-channel tables (T = float or uint16_t), from pixel
 * `from` on. */
#define STORE_PLANES(T, lut, from)                                                                 \
    do {                                                                                           \
        T *restrict o0 = (T *)dst, *restrict o1 = o0 + npix, *restrict o2 = o1 + npix;             \
        const T *l0 = lut[0], *l1 = lut[1], *l2 = lut[2];                                          \
        for (size_t i = (from); i < npix; i++) {                                                   \
            o0[i] = l0[rgb[i * 3]];                                                                \
            o1[i] = l1[rgb[i * 3 + 1]];                                                            \
            o2[i] = l2[rgb[i * 3 + 2]];                                                            \
        }                                                                                          \
    } while (0)

/* HWC through the tables, from pixel `from` on. */
#define STORE_INTERLEAVED(T, lut, from)                                                            \
    do {                                                                                           \
        T *restrict o = (T *)dst;                                                                  \
        const T *l0 = lut[0], *l1 = lut[1], *l2 = lut[2];                                          \
        for (size_t i = (from); i < npix; i++) {                                                   \
            o[i * 3] = l0[rgb[i * 3]];                                                             \
            o[i * 3 + 1] = l1[rgb[i * 3 + 1]];                                                     \
            o[i * 3 + 2] = l2[rgb[i * 3 + 2]];                                                     \
        }                                                                                          \
    } while (0)

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_ARITH_STORE 1

/* div_fma on 8 lanes. */
__attribute__((target("avx2,fma"))) static inline __m256 div8(__m256 a, __m256 b, __m256 r)
{
    __m256 q = _mm256_mul_ps(a, r);
    return _mm256_fmadd_ps(_mm256_fnmadd_ps(q, b, a), r, q);
}

/* ((x / 255) - mean) / std for 8 uint8 values (the low 8 bytes of v) of one channel setting. */
__attribute__((target("avx2,fma"))) static inline __m256 value8(__m128i v, __m256 mean, __m256 sd,
                                                                __m256 rsd)
{
    __m256 x = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
    __m256 q = div8(x, _mm256_set1_ps(255.0f), _mm256_set1_ps(1.0f / 255.0f));
    return div8(_mm256_sub_ps(q, mean), sd, rsd);
}

/* float32 NCHW from npix interleaved pixels; returns the pixels done (a multiple of 16). */
__attribute__((target("avx2,fma"))) static size_t store_planes_arith(const stk_transform *t,
                                                                     const uint8_t *restrict rgb,
                                                                     size_t npix,
                                                                     float *restrict dst)
{
    /* pshufb masks gathering R, G, B of 16 pixels from the three 16-byte loads a, b, c */
    const __m128i ra = _mm_setr_epi8(0, 3, 6, 9, 12, 15, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m128i rb = _mm_setr_epi8(-1, -1, -1, -1, -1, -1, 2, 5, 8, 11, 14, -1, -1, -1, -1, -1);
    const __m128i rc = _mm_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 1, 4, 7, 10, 13);
    const __m128i ga = _mm_setr_epi8(1, 4, 7, 10, 13, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m128i gb = _mm_setr_epi8(-1, -1, -1, -1, -1, 0, 3, 6, 9, 12, 15, -1, -1, -1, -1, -1);
    const __m128i gc = _mm_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 2, 5, 8, 11, 14);
    const __m128i ba = _mm_setr_epi8(2, 5, 8, 11, 14, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m128i bb = _mm_setr_epi8(-1, -1, -1, -1, -1, 1, 4, 7, 10, 13, -1, -1, -1, -1, -1, -1);
    const __m128i bc = _mm_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 3, 6, 9, 12, 15);
    __m256 mean[3], sd[3], rsd[3];
    for (int c = 0; c < 3; c++) {
        mean[c] = _mm256_set1_ps(t->st_mean[c]);
        sd[c] = _mm256_set1_ps(t->st_std[c]);
        rsd[c] = _mm256_set1_ps(t->st_rstd[c]);
    }
    float *o[3] = {dst, dst + npix, dst + 2 * npix};
    size_t i = 0;
    for (; i + 16 <= npix; i += 16) {
        const uint8_t *p = rgb + i * 3;
        __m128i a = _mm_loadu_si128((const __m128i *)p);
        __m128i b = _mm_loadu_si128((const __m128i *)(p + 16));
        __m128i cc = _mm_loadu_si128((const __m128i *)(p + 32));
        __m128i ch[3];
        ch[0] = _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(a, ra), _mm_shuffle_epi8(b, rb)),
                             _mm_shuffle_epi8(cc, rc));
        ch[1] = _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(a, ga), _mm_shuffle_epi8(b, gb)),
                             _mm_shuffle_epi8(cc, gc));
        ch[2] = _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(a, ba), _mm_shuffle_epi8(b, bb)),
                             _mm_shuffle_epi8(cc, bc));
        for (int c = 0; c < 3; c++) {
            _mm256_storeu_ps(o[c] + i, value8(ch[c], mean[c], sd[c], rsd[c]));
            _mm256_storeu_ps(o[c] + i + 8,
                             value8(_mm_srli_si128(ch[c], 8), mean[c], sd[c], rsd[c]));
        }
    }
    return i;
}

/* float32 NHWC: the output keeps the input's order, so 24 values (8 pixels) at a time with the
 * channel constants in their repeating R, G, B pattern. Returns the pixels done. */
__attribute__((target("avx2,fma"))) static size_t
store_interleaved_arith(const stk_transform *t, const uint8_t *restrict rgb, size_t npix,
                        float *restrict dst)
{
    __m256 mean[3], sd[3], rsd[3];
    for (int k = 0; k < 3; k++) { /* vector k holds values 8k .. 8k+7: channel (8k + l) % 3 */
        float m[8], s[8], r[8];
        for (int l = 0; l < 8; l++) {
            int c = (8 * k + l) % 3;
            m[l] = t->st_mean[c];
            s[l] = t->st_std[c];
            r[l] = t->st_rstd[c];
        }
        mean[k] = _mm256_loadu_ps(m);
        sd[k] = _mm256_loadu_ps(s);
        rsd[k] = _mm256_loadu_ps(r);
    }
    size_t i = 0;
    for (; i + 8 <= npix; i += 8) {
        const uint8_t *p = rgb + i * 3;
        float *o = dst + i * 3;
        for (int k = 0; k < 3; k++)
            _mm256_storeu_ps(o + 8 * k, value8(_mm_loadl_epi64((const __m128i *)(p + 8 * k)),
                                               mean[k], sd[k], rsd[k]));
    }
    return i;
}

/* Whether the arithmetic float32 store may run here. */
static bool arith_ok(const stk_transform *t)
{
    return t->store_arith && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#endif

/* The store: the arithmetic kernels over the bulk when allowed, the tables for the rest. */
static void store(const stk_transform *t, const uint8_t *restrict rgb, uint32_t w, uint32_t h,
                  void *restrict dst, bool tables_only)
{
    size_t npix = (size_t)w * h;
    switch (t->dtype) {
    case STK_DTYPE_FLOAT32: {
        size_t done = 0;
#ifdef HAVE_ARITH_STORE
        if (!tables_only && arith_ok(t))
            done = t->nhwc ? store_interleaved_arith(t, rgb, npix, dst)
                           : store_planes_arith(t, rgb, npix, dst);
#else
        (void)tables_only;
#endif
        if (t->nhwc)
            STORE_INTERLEAVED(float, t->lut_f32, done);
        else
            STORE_PLANES(float, t->lut_f32, done);
        break;
    }
    case STK_DTYPE_FLOAT16:
    case STK_DTYPE_BFLOAT16:
        if (t->nhwc)
            STORE_INTERLEAVED(uint16_t, t->lut_u16, 0);
        else
            STORE_PLANES(uint16_t, t->lut_u16, 0);
        break;
    default: { /* uint8 */
        uint8_t *o = dst;
        if (t->nhwc) {
            if (o != rgb)
                memcpy(o, rgb, npix * 3);
            break;
        }
        for (int c = 0; c < 3; c++) {
            uint8_t *restrict oc = o + (size_t)c * npix;
            const uint8_t *restrict ic = rgb + c;
            for (size_t i = 0; i < npix; i++)
                oc[i] = ic[i * 3];
        }
        break;
    }
    }
}

/* ---- from Y, Cb, Cr planes (the planes path of stk_transform.c) ---- */

/* JFIF's YCbCr -> RGB, in float32 with fused multiply-adds, rounded to the nearest integer (ties
 * to even) and clamped to 0..255: the same operations in the scalar and AVX2 code, so the same
 * bytes. (libjpeg's own integer tables round slightly differently: at most one level.) */
#define YCC_RV 1.402f
#define YCC_GU (-0.344136286f)
#define YCC_GV (-0.714136286f)
#define YCC_BU 1.772f

static inline uint8_t ycc_level(float v)
{
    v = nearbyintf(v);
    return (uint8_t)(v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v);
}

/* Pixel i of the planes as R, G, B. */
static inline void ycc_pixel(const uint8_t *py, const uint8_t *pu, const uint8_t *pv, size_t i,
                             uint8_t out[3])
{
    float y = py[i], u = (float)pu[i] - 128.0f, v = (float)pv[i] - 128.0f;
    out[0] = ycc_level(fmaf(v, YCC_RV, y));
    out[1] = ycc_level(fmaf(u, YCC_GU, fmaf(v, YCC_GV, y)));
    out[2] = ycc_level(fmaf(u, YCC_BU, y));
}

#ifdef HAVE_ARITH_STORE
/* R, G, B of 8 pixels as levels in float (ycc_pixel's operations on 8 lanes): rounded as
 * nearbyintf (the current rounding direction, no inexact flag) and clamped in float. */
__attribute__((target("avx2,fma"))) static inline void ycc8(const uint8_t *py, const uint8_t *pu,
                                                            const uint8_t *pv, __m256 rgb[3])
{
    const __m256 c128 = _mm256_set1_ps(128.0f);
    __m256 y = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const void *)py)));
    __m256 u = _mm256_sub_ps(
        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const void *)pu))), c128);
    __m256 v = _mm256_sub_ps(
        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const void *)pv))), c128);
    __m256 f[3] = {
        _mm256_fmadd_ps(v, _mm256_set1_ps(YCC_RV), y),
        _mm256_fmadd_ps(u, _mm256_set1_ps(YCC_GU), _mm256_fmadd_ps(v, _mm256_set1_ps(YCC_GV), y)),
        _mm256_fmadd_ps(u, _mm256_set1_ps(YCC_BU), y)};
    for (int c = 0; c < 3; c++)
        rgb[c] = _mm256_min_ps(
            _mm256_max_ps(_mm256_round_ps(f[c], _MM_FROUND_CUR_DIRECTION | _MM_FROUND_NO_EXC),
                          _mm256_setzero_ps()),
            _mm256_set1_ps(255.0f));
}

/* float32 NCHW straight from the planes, 8 pixels a step: the levels of ycc8, then exactly the
 * arithmetic store's operations (value8), so the values equal stk__store of the RGB image
 * stk__ycc_to_rgb makes. Plane c of the output starts at dst + c * stride. Returns the pixels
 * done. */
__attribute__((target("avx2,fma"))) static size_t
store_ycc_avx2(const stk_transform *t, const uint8_t *restrict py, const uint8_t *restrict pu,
               const uint8_t *restrict pv, size_t npix, size_t stride, float *restrict dst)
{
    __m256 mean[3], sd[3], rsd[3];
    for (int c = 0; c < 3; c++) {
        mean[c] = _mm256_set1_ps(t->st_mean[c]);
        sd[c] = _mm256_set1_ps(t->st_std[c]);
        rsd[c] = _mm256_set1_ps(t->st_rstd[c]);
    }
    const __m256 k255 = _mm256_set1_ps(255.0f), r255 = _mm256_set1_ps(1.0f / 255.0f);
    size_t i = 0;
    for (; i + 8 <= npix; i += 8) {
        __m256 rgb[3];
        ycc8(py + i, pu + i, pv + i, rgb);
        for (int c = 0; c < 3; c++) {
            __m256 q = div8(rgb[c], k255, r255);
            _mm256_storeu_ps(dst + (size_t)c * stride + i,
                             div8(_mm256_sub_ps(q, mean[c]), sd[c], rsd[c]));
        }
    }
    return i;
}

/* store_ycc_avx2 on 16 lanes (AVX-512F): the same operations, so the same bytes; fewer
 * instructions per pixel even where the CPU splits them in two halves (Zen 4). */
__attribute__((target("avx512f"))) static inline __m512 div16(__m512 a, __m512 b, __m512 r)
{
    __m512 q = _mm512_mul_ps(a, r);
    return _mm512_fmadd_ps(_mm512_fnmadd_ps(q, b, a), r, q);
}

__attribute__((target("avx512f"))) static inline __m512 load16(const uint8_t *p)
{
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const void *)p)));
}

__attribute__((target("avx512f"))) static size_t
store_ycc_avx512(const stk_transform *t, const uint8_t *restrict py, const uint8_t *restrict pu,
                 const uint8_t *restrict pv, size_t npix, size_t stride, float *restrict dst)
{
    __m512 mean[3], sd[3], rsd[3];
    for (int c = 0; c < 3; c++) {
        mean[c] = _mm512_set1_ps(t->st_mean[c]);
        sd[c] = _mm512_set1_ps(t->st_std[c]);
        rsd[c] = _mm512_set1_ps(t->st_rstd[c]);
    }
    const __m512 k255 = _mm512_set1_ps(255.0f), r255 = _mm512_set1_ps(1.0f / 255.0f);
    const __m512 c128 = _mm512_set1_ps(128.0f), zero = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 16 <= npix; i += 16) {
        __m512 y = load16(py + i), u = _mm512_sub_ps(load16(pu + i), c128);
        __m512 v = _mm512_sub_ps(load16(pv + i), c128);
        __m512 f[3] = {_mm512_fmadd_ps(v, _mm512_set1_ps(YCC_RV), y),
                       _mm512_fmadd_ps(u, _mm512_set1_ps(YCC_GU),
                                       _mm512_fmadd_ps(v, _mm512_set1_ps(YCC_GV), y)),
                       _mm512_fmadd_ps(u, _mm512_set1_ps(YCC_BU), y)};
        for (int c = 0; c < 3; c++) {
            __m512 l = _mm512_roundscale_ps(f[c], _MM_FROUND_CUR_DIRECTION | _MM_FROUND_NO_EXC);
            l = _mm512_min_ps(_mm512_max_ps(l, zero), k255);
            __m512 q = div16(l, k255, r255);
            _mm512_storeu_ps(dst + (size_t)c * stride + i,
                             div16(_mm512_sub_ps(q, mean[c]), sd[c], rsd[c]));
        }
    }
    return i;
}

/* Interleaved RGB from the planes, 8 pixels a step; returns the pixels done. */
__attribute__((target("avx2,fma"))) static size_t
ycc_to_rgb_avx2(const uint8_t *restrict py, const uint8_t *restrict pu, const uint8_t *restrict pv,
                size_t npix, uint8_t *restrict rgb)
{
    size_t i = 0;
    for (; i + 8 <= npix; i += 8) {
        __m256 c[3];
        ycc8(py + i, pu + i, pv + i, c);
        int32_t v[3][8];
        for (int k = 0; k < 3; k++) /* integral values in 0..255: the conversion is exact */
            _mm256_storeu_si256((__m256i *)v[k], _mm256_cvtps_epi32(c[k]));
        uint8_t *o = rgb + i * 3;
        for (int p = 0; p < 8; p++) {
            o[p * 3] = (uint8_t)v[0][p];
            o[p * 3 + 1] = (uint8_t)v[1][p];
            o[p * 3 + 2] = (uint8_t)v[2][p];
        }
    }
    return i;
}
#endif

void stk__ycc_to_rgb(const uint8_t *restrict py, const uint8_t *restrict pu,
                     const uint8_t *restrict pv, size_t npix, uint8_t *restrict rgb)
{
    size_t i = 0;
#ifdef HAVE_ARITH_STORE
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        i = ycc_to_rgb_avx2(py, pu, pv, npix, rgb);
#endif
    for (; i < npix; i++)
        ycc_pixel(py, pu, pv, i, rgb + i * 3);
}

/* Pixels from .. to - 1 of the planes through ycc_pixel and the tables. */
static void store_ycc_tables(const stk_transform *t, const uint8_t *restrict py,
                             const uint8_t *restrict pu, const uint8_t *restrict pv, size_t from,
                             size_t to, size_t npix, float *restrict o)
{
    for (size_t i = from; i < to; i++) {
        uint8_t rgb[3];
        ycc_pixel(py, pu, pv, i, rgb);
        for (int c = 0; c < 3; c++)
            o[(size_t)c * npix + i] = t->lut_f32[c][rgb[c]];
    }
}

bool stk__store_ycc_kernel(const stk_transform *t, stk__ycc_kernel k, const uint8_t *restrict py,
                           const uint8_t *restrict pu, const uint8_t *restrict pv, uint32_t w,
                           uint32_t h, void *restrict dst)
{
#ifdef HAVE_ARITH_STORE
    if (t->dtype != STK_DTYPE_FLOAT32 || t->nhwc || !arith_ok(t))
        return false;
    if (k == STK__YCC_AVX512 && !__builtin_cpu_supports("avx512f"))
        return false;
    size_t npix = (size_t)w * h;
    float *o = dst;
    /* The first pixels through the tables up to where the vector stores start on a whole vector
     * (64 or 32 bytes): on Zen 4 a store across two cache lines costs about twice. Planes 1 and
     * 2 are aligned as well where npix is a multiple of 16 (224 x 224). */
    size_t vec = k == STK__YCC_AVX512 ? 64 : 32, mis = (uintptr_t)o % vec;
    size_t i = mis % sizeof(float) ? 0 : (vec - mis) % vec / sizeof(float);
    i = i < npix ? i : npix;
    store_ycc_tables(t, py, pu, pv, 0, i, npix, o);
    if (k == STK__YCC_AVX512) /* the bulk 16 pixels a step, then at most one step of 8 */
        i += store_ycc_avx512(t, py + i, pu + i, pv + i, npix - i, npix, o + i);
    i += store_ycc_avx2(t, py + i, pu + i, pv + i, npix - i, npix, o + i);
    store_ycc_tables(t, py, pu, pv, i, npix, npix, o);
    return true;
#else
    (void)t, (void)k, (void)py, (void)pu, (void)pv, (void)w, (void)h, (void)dst;
    return false;
#endif
}

bool stk__store_ycc(const stk_transform *t, const uint8_t *restrict py, const uint8_t *restrict pu,
                    const uint8_t *restrict pv, uint32_t w, uint32_t h, void *restrict dst)
{
    return stk__store_ycc_kernel(t, STK__YCC_AVX512, py, pu, pv, w, h, dst) ||
           stk__store_ycc_kernel(t, STK__YCC_AVX2, py, pu, pv, w, h, dst);
}

void stk__store(const stk_transform *t, const uint8_t *restrict rgb, uint32_t w, uint32_t h,
                void *restrict dst)
{
    store(t, rgb, w, h, dst, false);
}

void stk__store_table(const stk_transform *t, const uint8_t *restrict rgb, uint32_t w, uint32_t h,
                      void *restrict dst)
{
    store(t, rgb, w, h, dst, true);
}
