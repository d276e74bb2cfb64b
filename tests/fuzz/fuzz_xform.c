/*
 * fuzz_xform.c: libFuzzer target for the image ops (src/xform), without the decoder.
 *
 * The input describes an op list (kinds and parameters, possibly invalid), the output dtype and
 * layout, an image size and a sample seed; the rest of the bytes are pixels. A valid transform is
 * planned on that image size, and a synthetic decoded buffer is built the way the decoder
 * would return it (the planned window at the planned DCT scale, with an origin/scale map and
 * a row stride wider than the window), filled with the pixel bytes, and rendered into an
 * exactly-sized output buffer, so that ASan sees any read or write out of bounds. It must never
 * crash, whatever the bytes; invalid op lists must be refused by stk_transform_create.
 *
 * Layout: [n_ops] then 14 bytes per op, then flags, width (2), height (2), seed (4), pixels.
 * Corpus: tests/fuzz/corpus/xform, hand-made seeds (one per op-list shape: the ImageNet
 * recipes scaled down, padding, jitter, DCT-scaled windows, an invalid list).
 */
#include "xform/stk_xform.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define OP_BYTES 14

/* A little reader over the input that yields zeros when it runs out. */
typedef struct rd {
    const uint8_t *p;
    size_t n;
} rd;

static uint32_t take(rd *r, int bytes)
{
    uint32_t v = 0;
    for (int i = 0; i < bytes; i++) {
        v = (v << 8) | (r->n ? *r->p : 0);
        if (r->n) {
            r->p++;
            r->n--;
        }
    }
    return v;
}

/* A parameter in [lo, hi] from one byte, with a few out-of-range values to hit validation. */
static double param(uint8_t b, double lo, double hi)
{
    if (b == 255)
        return -1.0;
    if (b == 254)
        return hi * 4 + 1;
    return lo + (hi - lo) * (double)b / 253.0;
}

/* Decode one op from 14 bytes. */
static void read_op(rd *r, stk_op *op)
{
    uint8_t b[OP_BYTES];
    for (int i = 0; i < OP_BYTES; i++)
        b[i] = (uint8_t)take(r, 1);
    /* every kind of the op table, plus one invalid kind */
    stk_op_init(op, (stk_op_kind)(b[0] % (stk_op_n_kinds() + 1)));
    /* sizes 0..95 (small outputs keep the fuzzer fast), sometimes 0 = shorthand / invalid */
    op->size[0] = b[1] % 96;
    op->size[1] = b[2] % 96;
    op->scale[0] = param(b[3], 0.0, 1.0);
    op->scale[1] = param(b[4], 0.0, 2.0);
    op->ratio[0] = param(b[5], 0.05, 3.0);
    op->ratio[1] = param(b[6], 0.05, 6.0);
    op->p = param(b[7], 0.0, 1.0);
    op->brightness = param(b[8], 0.0, 2.0);
    op->contrast = param(b[9], 0.0, 2.0);
    op->saturation = param(b[10], 0.0, 2.0);
    op->hue = param(b[11], 0.0, 0.5);
    for (int c = 0; c < 3; c++) {
        op->mean[c] = (float)param(b[12], -1.0, 1.0);
        uint8_t sb = (uint8_t)(b[13] + c);
        op->std[c] = sb == 0 ? 0.0f : (float)param(sb, -2.0, 2.0); /* 0: refused */
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rd r = {data, size};
    stk_op ops[STK__XF_MAX_OPS + 2];
    size_t n_ops = take(&r, 1) % (STK__XF_MAX_OPS + 2);
    for (size_t i = 0; i < n_ops; i++)
        read_op(&r, &ops[i]);
    uint8_t flags = (uint8_t)take(&r, 1);
    static const stk_dtype dts[4] = {STK_DTYPE_UINT8, STK_DTYPE_FLOAT32, STK_DTYPE_FLOAT16,
                                     STK_DTYPE_BFLOAT16};
    uint32_t width = take(&r, 2) % 700 + 1, height = take(&r, 2) % 700 + 1;
    uint32_t seed = take(&r, 4);

    stk_transform_opts o;
    stk_transform_opts_init(&o);
    o.ops = ops;
    o.n_ops = n_ops;
    o.dtype = dts[flags & 3];
    o.nhwc = flags & 4;
    o.exact = flags & 8;
    stk_transform *t = NULL;
    if (stk_transform_create(&o, &t) < 0)
        return 0;
    if (t->media !=
        STK_MEDIA_IMAGE) { /* an audio op first makes an audio transform: fuzz_audio's */
        stk_transform_destroy(t);
        return 0;
    }

    stk_rng rng;
    stk_rng_init(&rng, seed, flags, size);
    stk__xplan plan;
    stk__xform_plan(t, width, height, &rng, &plan);
    if ((uint64_t)plan.x.n != t->out_w || (uint64_t)plan.y.n != t->out_h)
        abort(); /* the plan must produce the size the transform promised */

    /* The decoder's answer: the window at 1/den, snapped to den-pixel cells, plus slack. */
    stk__decoded dec;
    memset(&dec, 0, sizeof(dec));
    uint8_t *buf = NULL;
    if (plan.decode) {
        uint32_t den = plan.den;
        if (plan.win_x + plan.win_w > width || plan.win_y + plan.win_h > height || den == 0)
            abort();
        uint32_t xs = plan.win_x / den, ys = plan.win_y / den;
        uint32_t xe = (plan.win_x + plan.win_w + den - 1) / den;
        uint32_t ye = (plan.win_y + plan.win_h + den - 1) / den;
        uint32_t bw = xe - xs, bh = ye - ys, pad = flags >> 4;
        size_t stride = (size_t)(bw + pad) * 3, n = stride * bh;
        buf = malloc(n ? n : 1);
        for (size_t i = 0; i < n; i++)
            buf[i] = r.n ? r.p[i % r.n] : (uint8_t)(i * 7);
        dec.rgb = buf;
        dec.width = bw;
        dec.height = bh;
        dec.stride = stride;
        dec.origin_x = (double)xs * den;
        dec.origin_y = (double)ys * den;
        dec.scale_x = dec.scale_y = den;
    } else {
        dec.scale_x = dec.scale_y = 1.0;
    }

    stk__tworker w;
    memset(&w, 0, sizeof(w));
    stk_dtype dt;
    uint32_t nd;
    int64_t shape[STK_MAX_DIMS];
    stk_transform_output(t, &dt, &nd, shape);
    size_t out_size = stk_dtype_size(dt) * (size_t)(shape[0] * shape[1] * shape[2]);
    void *out = malloc(out_size);
    char err[256];
    if (stk__xform_render(t, &w, &plan, &dec, out, err, sizeof(err)) < 0)
        abort(); /* only ENOMEM can fail, and the sizes here are small */
    /* The SIMD kernels (VNNI or AVX2 where the CPU has them) and the baseline ones agree bit for
     * bit: outputs must not depend on the machine. */
    size_t n8 = (size_t)t->out_w * t->out_h * 3;
    uint8_t *a = malloc(n8), *b = malloc(n8);
    if (stk__resample(&w.rs, &dec, &plan.x, &plan.y, a, (size_t)t->out_w * 3, err, sizeof(err)) < 0)
        abort();
    for (int k = 0; k < 2; k++) { /* AVX2 without VNNI (where the CPU has VNNI), then portable */
        w.rs.no_vnni = k == 0;
        w.rs.portable = k == 1;
        if (stk__resample(&w.rs, &dec, &plan.x, &plan.y, b, (size_t)t->out_w * 3, err,
                          sizeof(err)) < 0 ||
            memcmp(a, b, n8) != 0)
            abort();
    }
    free(a);
    free(b);
    free(out);
    free(buf);
    stk__rscratch_free(&w.rs);
    stk__free(w.img);
    stk_transform_destroy(t);
    return 0;
}
