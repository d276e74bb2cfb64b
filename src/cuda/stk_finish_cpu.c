/*
 * stk_finish_cpu.c: finishing set up from the transform's stk__finish, and its CPU fallback, the
 * C twin of the kernel: each uint8 value's finished value per channel comes from tables built
 * with the kernel's own functions (stk_finish_body.h), so both give the same bits. The flip of a
 * sample is drawn here for both paths, from a random stream of its own.
 */
#include "cuda/stk_devcopy.h"

#include <inttypes.h>
#include <string.h>

/* Key of the finishing flip's random stream: a stream of its own beside the transform's. */
#define FLIP_KEY 0x5f1b9e37c4a2d861ULL

stk_status stk__finish_init(stk__devcopy *dc, const stk__finish *f, uint32_t h, uint32_t w,
                            uint32_t batch_size, char *err, size_t err_size)
{
    if ((uint64_t)h * w > UINT32_MAX / batch_size) /* the kernel indexes pixels with 32 bits */
        return stk__set_error(err, err_size, STK_ELIMIT,
                              "finishing: %u x %u x %u pixels per batch is over 2^32", batch_size,
                              h, w);
    dc->flip = f->flip;
    dc->fin_row = (size_t)h * w * 3 * stk_dtype_size(f->dtype);
    memset(&dc->fin, 0, sizeof(dc->fin));
    dc->fin.h = h;
    dc->fin.w = w;
    dc->fin.dtype = (uint32_t)f->dtype;
    dc->fin.nhwc = f->nhwc;
    for (int ch = 0; ch < 3; ch++) {
        dc->fin.mean[ch] = f->mean[ch];
        dc->fin.std[ch] = f->std[ch];
        for (uint32_t x = 0; x < 256; x++) { /* the kernel's values, for the CPU fallback */
            float v = stk__fin_value(x, f->mean[ch], f->std[ch]);
            dc->lut32[ch][x] = v;
            dc->lut16[ch][x] =
                (uint16_t)(f->dtype == STK_DTYPE_BFLOAT16 ? stk__fin_bf16(v) : stk__fin_f16(v));
        }
    }
    return STK_OK;
}

void stk__finish_shape(const stk__devcopy *dc, int64_t shape[3])
{
    int64_t h = dc->fin.h, w = dc->fin.w;
    int64_t chw[3] = {3, h, w}, hwc[3] = {h, w, 3};
    memcpy(shape, dc->fin.nhwc ? hwc : chw, sizeof(chw));
}

bool stk__finish_flip_draw(const stk__devcopy *dc, uint64_t seed, uint64_t epoch, uint64_t index)
{
    if (!(dc->flip > 0))
        return false;
    stk_rng rng;
    stk_rng_init(&rng, seed ^ FLIP_KEY, epoch, index);
    return stk_rng_uniform(&rng) < (double)dc->flip;
}

void stk__finish_cpu(const stk__devcopy *dc, const uint8_t *in, uint8_t *out, bool flip)
{
    size_t h = dc->fin.h, wd = dc->fin.w, hw = h * wd;
    bool f32 = dc->fin.dtype == STK_DTYPE_FLOAT32, nhwc = dc->fin.nhwc;
    for (size_t y = 0; y < h; y++)
        for (size_t x = 0; x < wd; x++) {
            const uint8_t *px = in + (y * wd + (flip ? wd - 1 - x : x)) * 3;
            size_t r = y * wd + x;
            for (size_t ch = 0; ch < 3; ch++) {
                size_t o = nhwc ? r * 3 + ch : ch * hw + r;
                if (f32)
                    ((float *)out)[o] = dc->lut32[ch][px[ch]];
                else
                    ((uint16_t *)out)[o] = dc->lut16[ch][px[ch]];
            }
        }
}
