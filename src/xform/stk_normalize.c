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

void stk__store_init(stk_transform *t)
{
    for (int c = 0; c < 3; c++)
        for (int x = 0; x < 256; x++) {
            /* torchvision: ToTensor is x / 255 in float32; Normalize (v - mean) / std */
            float v = (float)x / 255.0f;
            if (t->normalize)
                v = (v - t->mean[c]) / t->std[c];
            t->lut_f32[c][x] = v;
            t->lut_u16[c][x] = t->dtype == STK_DTYPE_BFLOAT16 ? bf16_from_f32(v) : f16_from_f32(v);
        }
}

/* CHW planes from interleaved RGB through per-channel tables (T = float or uint16_t). */
#define STORE_PLANES(T, lut)                                                                       \
    do {                                                                                           \
        T *restrict o0 = (T *)dst, *restrict o1 = o0 + npix, *restrict o2 = o1 + npix;             \
        const T *l0 = lut[0], *l1 = lut[1], *l2 = lut[2];                                          \
        for (size_t i = 0; i < npix; i++) {                                                        \
            o0[i] = l0[rgb[i * 3]];                                                                \
            o1[i] = l1[rgb[i * 3 + 1]];                                                            \
            o2[i] = l2[rgb[i * 3 + 2]];                                                            \
        }                                                                                          \
    } while (0)

/* HWC through the tables. */
#define STORE_INTERLEAVED(T, lut)                                                                  \
    do {                                                                                           \
        T *restrict o = (T *)dst;                                                                  \
        const T *l0 = lut[0], *l1 = lut[1], *l2 = lut[2];                                          \
        for (size_t i = 0; i < npix; i++) {                                                        \
            o[i * 3] = l0[rgb[i * 3]];                                                             \
            o[i * 3 + 1] = l1[rgb[i * 3 + 1]];                                                     \
            o[i * 3 + 2] = l2[rgb[i * 3 + 2]];                                                     \
        }                                                                                          \
    } while (0)

void stk__store(const stk_transform *t, const uint8_t *restrict rgb, uint32_t w, uint32_t h,
                void *restrict dst)
{
    size_t npix = (size_t)w * h;
    switch (t->dtype) {
    case STK_DTYPE_FLOAT32:
        if (t->nhwc)
            STORE_INTERLEAVED(float, t->lut_f32);
        else
            STORE_PLANES(float, t->lut_f32);
        break;
    case STK_DTYPE_FLOAT16:
    case STK_DTYPE_BFLOAT16:
        if (t->nhwc)
            STORE_INTERLEAVED(uint16_t, t->lut_u16);
        else
            STORE_PLANES(uint16_t, t->lut_u16);
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
