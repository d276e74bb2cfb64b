/*
 * stk_normalize.c: the last stage of a sample: uint8 RGB -> output dtype and layout, written
 * straight into the sample's place in the batch.
 *
 * Values follow torchvision exactly: ToTensor is x / 255 in float32, Normalize is
 * (v - mean) / std in float32 (two IEEE divisions, no reciprocal, so results are bit-identical to
 * torch's on the same uint8 data); float16 and bfloat16 are that float32 rounded to nearest even,
 * as torch's .to(dtype). All loops are branch-free per element so gcc vectorises them (the
 * float16 conversion uses the float-arithmetic rounding trick of the FP16 library rather than
 * F16C, so it is portable and still vectorises).
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

#include "xform/stk_xform.h"

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

/* Output element kinds: the store loops are instantiated once per kind (constant-folded). */
enum { OUT_F32, OUT_F16, OUT_BF16 };

/* ToTensor (x / 255), then Normalize when asked, then the output rounding, for one element. */
static inline void put(void *restrict out, size_t i, int kind, bool norm, uint8_t x, float mean,
                       float std)
{
    float v = (float)x / 255.0f;
    if (norm)
        v = (v - mean) / std;
    if (kind == OUT_F32)
        ((float *)out)[i] = v;
    else if (kind == OUT_F16)
        ((uint16_t *)out)[i] = f16_from_f32(v);
    else
        ((uint16_t *)out)[i] = bf16_from_f32(v);
}

/* One CHW plane: out[i] = f(rgb[3 i]), with the stride-3 read vectorised by gcc. */
static inline void plane(void *restrict out, const uint8_t *restrict rgb, size_t npix, int kind,
                         bool norm, float mean, float std)
{
    for (size_t i = 0; i < npix; i++)
        put(out, i, kind, norm, rgb[i * 3], mean, std);
}

/* HWC: three interleaved outputs per pixel (an SLP group of 3 for gcc). */
static inline void interleaved(void *restrict out, const uint8_t *restrict rgb, size_t npix,
                               int kind, bool norm, const float mean[3], const float std[3])
{
    float m0 = mean[0], m1 = mean[1], m2 = mean[2], s0 = std[0], s1 = std[1], s2 = std[2];
    for (size_t i = 0; i < npix; i++) {
        put(out, i * 3, kind, norm, rgb[i * 3], m0, s0);
        put(out, i * 3 + 1, kind, norm, rgb[i * 3 + 1], m1, s1);
        put(out, i * 3 + 2, kind, norm, rgb[i * 3 + 2], m2, s2);
    }
}

/* Instantiate the loops for one element kind and normalisation flag. */
static void store_kind(const stk_transform *t, const uint8_t *restrict rgb, size_t npix,
                       void *restrict out, int kind, bool norm)
{
    size_t es = kind == OUT_F32 ? 4 : 2;
    if (t->nhwc) {
        interleaved(out, rgb, npix, kind, norm, t->mean, t->std);
        return;
    }
    for (int c = 0; c < 3; c++)
        plane((char *)out + (size_t)c * npix * es, rgb + c, npix, kind, norm, t->mean[c],
              t->std[c]);
}

/* Dispatch to constant-argument instances (each one its own vectorised loops). */
#define STORE_CASE(kind)                                                                           \
    do {                                                                                           \
        if (t->normalize)                                                                          \
            store_kind(t, rgb, npix, dst, kind, true);                                             \
        else                                                                                       \
            store_kind(t, rgb, npix, dst, kind, false);                                            \
    } while (0)

void stk__store(const stk_transform *t, const uint8_t *rgb, uint32_t w, uint32_t h, void *dst)
{
    size_t npix = (size_t)w * h;
    switch (t->dtype) {
    case STK_DTYPE_FLOAT32: STORE_CASE(OUT_F32); break;
    case STK_DTYPE_FLOAT16: STORE_CASE(OUT_F16); break;
    case STK_DTYPE_BFLOAT16: STORE_CASE(OUT_BF16); break;
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
