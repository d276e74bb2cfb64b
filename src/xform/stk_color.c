/*
 * stk_color.c: ColorJitter with torchvision's semantics on uint8 images.
 *
 * torchvision 0.14's functional_tensor applies each adjustment to a uint8 tensor by promoting to
 * float32, computing, clamping to [0, 255] and casting back, which truncates. Python scalars
 * become float32 operands (ratio and 1.0 - ratio, the latter computed in double first). This file
 * repeats those float32 operations one by one, in torch's order, so the results match torch's
 * bit for bit on the same input:
 *   brightness  trunc(clamp(r*x))                                   (_blend with zeros)
 *   contrast    trunc(clamp(r*x + (1-r)*mean)), mean = float32 mean of the truncated grayscale
 *   saturation  trunc(clamp(r*x + (1-r)*gray)), gray = trunc(0.2989 R + 0.587 G + 0.114 B)
 *   hue         x/255 -> HSV (_rgb2hsv) -> h = (h + f) mod 1 -> RGB (_hsv2rgb) -> trunc(v * 255)
 * The contrast mean is computed from an exact integer sum (torch's float32 cascade sum equals it
 * while the sum stays below 2^24, i.e. for outputs up to 65793 pixels).
 */
#include "xform/stk_xform.h"

#include <math.h>

/* torch's float -> uint8 cast of a value already clamped to [0, 255]. */
static inline uint8_t trunc_u8(float v)
{
    return (uint8_t)(int)v;
}

static inline float clamp255(float v)
{
    return v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v;
}

/* rgb_to_grayscale on uint8: (0.2989 r + 0.587 g) + 0.114 b in float32, truncated. */
static inline uint8_t gray_u8(const uint8_t *p)
{
    float v = (0.2989f * (float)p[0] + 0.587f * (float)p[1]) + 0.114f * (float)p[2];
    return trunc_u8(v);
}

void stk__adjust_brightness(uint8_t *rgb, size_t npix, double factor)
{
    float r = (float)factor;
    for (size_t i = 0; i < npix * 3; i++)
        rgb[i] = trunc_u8(clamp255(r * (float)rgb[i]));
}

void stk__adjust_contrast(uint8_t *rgb, size_t npix, double factor)
{
    if (npix == 0)
        return;
    uint64_t sum = 0;
    for (size_t i = 0; i < npix; i++)
        sum += gray_u8(rgb + i * 3);
    float mean = (float)sum / (float)npix;
    float r = (float)factor, rest = (float)(1.0 - factor) * mean;
    for (size_t i = 0; i < npix * 3; i++)
        rgb[i] = trunc_u8(clamp255(r * (float)rgb[i] + rest));
}

void stk__adjust_saturation(uint8_t *rgb, size_t npix, double factor)
{
    float r = (float)factor, q = (float)(1.0 - factor);
    for (size_t i = 0; i < npix; i++) {
        uint8_t *p = rgb + i * 3;
        float g = q * (float)gray_u8(p);
        p[0] = trunc_u8(clamp255(r * (float)p[0] + g));
        p[1] = trunc_u8(clamp255(r * (float)p[1] + g));
        p[2] = trunc_u8(clamp255(r * (float)p[2] + g));
    }
}

static inline float clamp01(float v)
{
    return v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v;
}

/* torch.remainder(a, 1.0) for float: fmod, moved into [0, 1). */
static inline float rem1(float a)
{
    float m = fmodf(a, 1.0f);
    if (m != 0.0f && m < 0.0f)
        m += 1.0f;
    return m;
}

/* One pixel through _rgb2hsv, the hue shift and _hsv2rgb, in torch's float32 operations. */
static void hue_pixel(uint8_t *p, float shift)
{
    float r = (float)p[0] / 255.0f, g = (float)p[1] / 255.0f, b = (float)p[2] / 255.0f;
    float maxc = fmaxf(fmaxf(r, g), b), minc = fminf(fminf(r, g), b);
    bool eqc = maxc == minc;
    float cr = maxc - minc;
    float s = cr / (eqc ? 1.0f : maxc);
    float crd = eqc ? 1.0f : cr;
    float rc = (maxc - r) / crd, gc = (maxc - g) / crd, bc = (maxc - b) / crd;
    float hr = maxc == r ? bc - gc : 0.0f;
    float hg = (maxc == g && maxc != r) ? (2.0f + rc) - bc : 0.0f;
    float hb = (maxc != g && maxc != r) ? (4.0f + gc) - rc : 0.0f;
    float h = (hr + hg) + hb;
    h = fmodf(h / 6.0f + 1.0f, 1.0f);
    h = rem1(h + shift);
    float v = maxc;

    float h6 = h * 6.0f;
    float fi = floorf(h6);
    float f = h6 - fi;
    int i = ((int)fi % 6 + 6) % 6;
    float pp = clamp01(v * (1.0f - s));
    float qq = clamp01(v * (1.0f - s * f));
    float tt = clamp01(v * (1.0f - s * (1.0f - f)));
    /* _hsv2rgb's selection by sector i: (R, G, B) among (v, q, p, t). */
    static const uint8_t pick[6][3] = {{0, 3, 2}, {1, 0, 2}, {2, 0, 3},
                                       {2, 1, 0}, {3, 2, 0}, {0, 2, 1}};
    const float vals[4] = {v, qq, pp, tt};
    float o[3] = {vals[pick[i][0]], vals[pick[i][1]], vals[pick[i][2]]};
    /* (img * 255.0).to(uint8): no clamp in torchvision; the values are within [0, 255]. */
    p[0] = trunc_u8(o[0] * 255.0f);
    p[1] = trunc_u8(o[1] * 255.0f);
    p[2] = trunc_u8(o[2] * 255.0f);
}

void stk__adjust_hue(uint8_t *rgb, size_t npix, double factor)
{
    float shift = (float)factor;
    for (size_t i = 0; i < npix; i++)
        hue_pixel(rgb + i * 3, shift);
}

void stk__jitter_draw(stk_rng *rng, const stk_op *op, stk__jitter *out)
{
    /* torch.randperm(4): Fisher-Yates over our stream. */
    uint8_t perm[4] = {0, 1, 2, 3};
    for (int i = 3; i > 0; i--) {
        int j = (int)stk__rng_below(rng, (uint64_t)i + 1);
        uint8_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (int i = 0; i < 4; i++)
        out->order[i] = perm[i];
    const double v[3] = {op->brightness, op->contrast, op->saturation};
    for (int k = 0; k < 3; k++) {
        /* [max(0, 1 - v), 1 + v]; v == 0 means off ([1, 1]) */
        out->on[k] = v[k] != 0.0;
        out->factor[k] =
            out->on[k] ? stk__rng_range(rng, STK_MAX(0.0, 1.0 - v[k]), 1.0 + v[k]) : 1.0;
    }
    out->on[STK__JIT_HUE] = op->hue != 0.0;
    out->factor[STK__JIT_HUE] =
        out->on[STK__JIT_HUE] ? stk__rng_range(rng, -op->hue, op->hue) : 0.0;
}

void stk__jitter_apply(uint8_t *rgb, size_t npix, const stk__jitter *j)
{
    for (int k = 0; k < 4; k++) {
        int what = j->order[k];
        if (!j->on[what])
            continue;
        double f = j->factor[what];
        switch (what) {
        case STK__JIT_BRIGHTNESS:
            stk__adjust_brightness(rgb, npix, f);
            break;
        case STK__JIT_CONTRAST:
            stk__adjust_contrast(rgb, npix, f);
            break;
        case STK__JIT_SATURATION:
            stk__adjust_saturation(rgb, npix, f);
            break;
        default:
            stk__adjust_hue(rgb, npix, f);
            break;
        }
    }
}
