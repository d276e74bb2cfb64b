/*
 * stk_pixops.c: the pixel ops of torchvision's augmentation set (Grayscale, RandomInvert,
 * RandomPosterize, RandomSolarize, RandomAutocontrast, RandomEqualize, RandomAdjustSharpness,
 * GaussianBlur) on the uint8 output-size image, with torchvision 0.14's functional_tensor
 * semantics on uint8 tensors:
 *   - integer ops (invert, posterize, solarize, equalize) are exact;
 *   - float32 ops (grayscale, autocontrast, the sharpness blend) repeat torch's float32
 *     operations one by one (uint8 * python float -> float32, clamp, truncating cast), so they
 *     are bit-identical too;
 *   - the sharpness smoothing is (sum of 8 neighbours + 5 x centre) / 13 rounded: exact in
 *     integers, since k / 13 is never within float error of a half;
 *   - GaussianBlur convolves in float32 (separably; torch's conv2d sums the 2-D kernel in its own
 *     order) and rounds, so a value can differ by one level where the sum lands on a half.
 * Each kernel runs once per sample over all pixels (no per-pixel indirect calls).
 */
#include "xform/stk_xform.h"

#include <math.h>
#include <string.h>

static inline uint8_t trunc_u8(float v)
{
    return (uint8_t)(int)v;
}

static inline float clamp255(float v)
{
    return v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v;
}

void stk__px_grayscale(uint8_t *rgb, size_t npix)
{
    for (size_t i = 0; i < npix; i++, rgb += 3) {
        float v = (0.2989f * (float)rgb[0] + 0.587f * (float)rgb[1]) + 0.114f * (float)rgb[2];
        rgb[0] = rgb[1] = rgb[2] = trunc_u8(v);
    }
}

void stk__px_invert(uint8_t *rgb, size_t npix)
{
    for (size_t i = 0; i < npix * 3; i++)
        rgb[i] = (uint8_t)(255 - rgb[i]);
}

void stk__px_posterize(uint8_t *rgb, size_t npix, int bits)
{
    uint8_t mask = bits <= 0 ? 0 : (uint8_t)(0xffu << (8 - (bits > 8 ? 8 : bits)));
    for (size_t i = 0; i < npix * 3; i++)
        rgb[i] &= mask;
}

void stk__px_solarize(uint8_t *rgb, size_t npix, double threshold)
{
    uint8_t lut[256];
    for (int v = 0; v < 256; v++)
        lut[v] = (double)v >= threshold ? (uint8_t)(255 - v) : (uint8_t)v;
    for (size_t i = 0; i < npix * 3; i++)
        rgb[i] = lut[rgb[i]];
}

/* Apply one lookup table per channel. */
static void apply_luts(uint8_t *rgb, size_t npix, const uint8_t lut[3][256])
{
    for (size_t i = 0; i < npix; i++, rgb += 3) {
        rgb[0] = lut[0][rgb[0]];
        rgb[1] = lut[1][rgb[1]];
        rgb[2] = lut[2][rgb[2]];
    }
}

static void histograms(const uint8_t *rgb, size_t npix, uint64_t hist[3][256])
{
    memset(hist, 0, sizeof(uint64_t) * 3 * 256);
    for (size_t i = 0; i < npix; i++, rgb += 3) {
        hist[0][rgb[0]]++;
        hist[1][rgb[1]]++;
        hist[2][rgb[2]]++;
    }
}

void stk__px_autocontrast(uint8_t *rgb, size_t npix)
{
    if (npix == 0)
        return;
    uint64_t hist[3][256];
    uint8_t lut[3][256];
    histograms(rgb, npix, hist);
    for (int c = 0; c < 3; c++) {
        int lo = 0, hi = 255;
        while (!hist[c][lo])
            lo++;
        while (!hist[c][hi])
            hi--;
        /* scale = 255.0 / (max - min): torch's __rtruediv__ is reciprocal(t) * 255.0, two float32
         * roundings; a flat channel keeps min 0 and scale 1 */
        float mn = (float)lo, scale = 1.0f;
        if (hi > lo) {
            float rec = 1.0f / (float)(hi - lo);
            scale = rec * 255.0f;
        } else
            mn = 0.0f;
        for (int v = 0; v < 256; v++)
            lut[c][v] = trunc_u8(clamp255(((float)v - mn) * scale));
    }
    apply_luts(rgb, npix, lut);
}

void stk__px_equalize(uint8_t *rgb, size_t npix)
{
    uint64_t hist[3][256];
    uint8_t lut[3][256];
    histograms(rgb, npix, hist);
    for (int c = 0; c < 3; c++) {
        /* step = (sum of the non-zero bins but the last one) // 255 */
        int last = 255;
        while (last > 0 && !hist[c][last])
            last--;
        uint64_t sum = 0;
        for (int v = 0; v < last; v++)
            sum += hist[c][v];
        uint64_t step = sum / 255;
        if (step == 0) {
            for (int v = 0; v < 256; v++)
                lut[c][v] = (uint8_t)v;
            continue;
        }
        /* lut[v] = (cumsum[v - 1] + step // 2) // step, clamped to 255; lut[0] = 0 */
        uint64_t cum = 0;
        for (int v = 0; v < 256; v++) {
            uint64_t q = (cum + step / 2) / step;
            lut[c][v] = (uint8_t)(q > 255 ? 255 : q);
            cum += hist[c][v];
        }
    }
    apply_luts(rgb, npix, lut);
}

/* The blend of _blend(img1, img2, ratio): trunc(clamp(r * a + (1 - r) * b)) in float32. */
static inline uint8_t blend(float r, float q, uint8_t a, uint8_t b)
{
    float x = r * (float)a;
    float y = q * (float)b;
    return trunc_u8(clamp255(x + y));
}

bool stk__px_sharpness(uint8_t *rgb, uint32_t w, uint32_t h, double factor)
{
    if (w <= 2 || h <= 2)
        return true;
    float r = (float)factor, q = (float)(1.0 - factor);
    size_t stride = (size_t)w * 3;
    /* In place: keep the original of the previous row and of the current row. */
    uint8_t prev_row_buf[3 * 1024], cur_row_buf[3 * 1024];
    uint8_t *prev = NULL, *cur = NULL;
    uint8_t *heap = NULL;
    if (stride <= sizeof(prev_row_buf)) {
        prev = prev_row_buf;
        cur = cur_row_buf;
    } else {
        heap = stk__malloc(stride * 2);
        if (!heap)
            return false;
        prev = heap;
        cur = heap + stride;
    }
    /* The border keeps its values as the smoothing, but is blended too: r * x + (1 - r) * x
     * need not give x back in float32. */
    uint8_t self[256];
    for (int v = 0; v < 256; v++)
        self[v] = blend(r, q, (uint8_t)v, (uint8_t)v);
    memcpy(prev, rgb, stride);
    for (size_t k = 0; k < stride; k++)
        rgb[k] = self[rgb[k]];
    for (uint32_t y = 1; y + 1 < h; y++) {
        uint8_t *row = rgb + y * stride;
        const uint8_t *next = row + stride; /* not yet modified */
        memcpy(cur, row, stride);
        for (int c = 0; c < 3; c++) {
            row[c] = self[row[c]];
            row[stride - 3 + c] = self[row[stride - 3 + c]];
        }
        for (uint32_t x = 1; x + 1 < w; x++) {
            for (int c = 0; c < 3; c++) {
                size_t k = (size_t)x * 3 + c;
                unsigned s = prev[k - 3] + prev[k] + prev[k + 3] + cur[k - 3] + 5u * cur[k] +
                             cur[k + 3] + next[k - 3] + next[k] + next[k + 3];
                uint8_t smooth = (uint8_t)((2 * s + 13) / 26); /* round(s / 13) */
                row[k] = blend(r, q, cur[k], smooth);
            }
        }
        uint8_t *tmp = prev;
        prev = cur;
        cur = tmp;
    }
    uint8_t *last = rgb + (size_t)(h - 1) * stride;
    for (size_t k = 0; k < stride; k++)
        last[k] = self[last[k]];
    stk__free(heap);
    return true;
}

/* torchvision's _get_gaussian_kernel1d: linspace(-(k-1)/2, (k-1)/2, k), exp(-0.5 (x/s)^2),
 * normalised by its float32 sum. */
static void gauss1d(int k, double sigma, float *out)
{
    float half = (float)(k - 1) * 0.5f, s = (float)sigma, sum = 0.0f;
    for (int i = 0; i < k; i++) {
        float x = -half + (float)i; /* torch.linspace: step 1, exact */
        float t = x / s;
        out[i] = expf(-0.5f * (t * t));
        sum += out[i];
    }
    for (int i = 0; i < k; i++)
        out[i] /= sum;
}

/* Reflect index i into [0, n) ("reflect" padding: the edge pixel is not repeated). */
static inline int64_t reflect(int64_t i, int64_t n)
{
    if (n == 1)
        return 0;
    int64_t period = 2 * (n - 1);
    i %= period;
    if (i < 0)
        i += period;
    return i < n ? i : period - i;
}

bool stk__px_gaussian_blur(uint8_t *rgb, uint32_t w, uint32_t h, int kx, int ky, double sigma)
{
    if (w == 0 || h == 0)
        return true;
    float wx[STK__XF_MAX_KERNEL], wy[STK__XF_MAX_KERNEL];
    gauss1d(kx, sigma, wx);
    gauss1d(ky, sigma, wy);
    int rx = kx / 2, ry = ky / 2;
    size_t stride = (size_t)w * 3, npix = (size_t)w * h;
    size_t prow = ((size_t)w + 2 * (size_t)rx) * 3; /* a reflect-padded row */
    /* the horizontal pass (npix * 3), a padded row and an accumulator row */
    float *tmp = stk__malloc((npix * 3 + prow + stride) * sizeof(float));
    if (!tmp)
        return false;
    float *pad = tmp + npix * 3, *acc = pad + prow;
    /* Each output value sums its taps in kernel order (k outer, values inner: vectorisable). */
    for (uint32_t y = 0; y < h; y++) {
        const uint8_t *row = rgb + y * stride;
        for (int64_t x = -rx; x < (int64_t)w + rx; x++)
            for (int c = 0; c < 3; c++)
                pad[(size_t)(x + rx) * 3 + c] = (float)row[reflect(x, w) * 3 + c];
        float *out = tmp + y * stride;
        for (size_t i = 0; i < stride; i++)
            out[i] = 0.0f;
        for (int k = 0; k < kx; k++) {
            const float *src = pad + (size_t)k * 3;
            float wk = wx[k];
            for (size_t i = 0; i < stride; i++)
                out[i] += wk * src[i];
        }
    }
    for (int64_t y = 0; y < (int64_t)h; y++) {
        for (size_t i = 0; i < stride; i++)
            acc[i] = 0.0f;
        for (int k = 0; k < ky; k++) {
            const float *src = tmp + (size_t)reflect(y + k - ry, h) * stride;
            float wk = wy[k];
            for (size_t i = 0; i < stride; i++)
                acc[i] += wk * src[i];
        }
        uint8_t *out = rgb + (size_t)y * stride;
        for (size_t i = 0; i < stride; i++)
            out[i] = trunc_u8(clamp255(nearbyintf(acc[i])));
    }
    stk__free(tmp);
    return true;
}

/* ---- RandomErasing: a box of the stored tensor set to `value` (torch's copy into the dtype) ----
 */

void stk__erase_apply(const stk_transform *t, void *dst, const stk__erase *e)
{
    if (!e->on || e->h <= 0 || e->w <= 0)
        return;
    size_t W = t->out_w, H = t->out_h, es = stk_dtype_size(t->dtype);
    uint8_t val[3][4]; /* each channel's value in the output dtype */
    for (int c = 0; c < 3; c++) {
        float f = (float)e->op->value[c]; /* torch.tensor(value): float32 */
        if (t->dtype == STK_DTYPE_UINT8) {
            float v = f < 0.0f ? 0.0f : f > 255.0f ? 255.0f : f;
            val[c][0] = (uint8_t)(int)v;
        } else if (t->dtype == STK_DTYPE_FLOAT32) {
            memcpy(val[c], &f, 4);
        } else {
            uint16_t b = t->dtype == STK_DTYPE_FLOAT16 ? stk__f32_to_f16(f) : stk__f32_to_bf16(f);
            memcpy(val[c], &b, 2);
        }
    }
    uint8_t *out = dst;
    for (int64_t y = e->i; y < e->i + e->h; y++)
        for (int64_t x = e->j; x < e->j + e->w; x++)
            for (size_t c = 0; c < 3; c++) {
                size_t at = t->nhwc ? ((size_t)y * W + (size_t)x) * 3 + c
                                    : (c * H + (size_t)y) * W + (size_t)x;
                memcpy(out + at * es, val[c], es);
            }
}
