/*
 * stk_autoaug.c: TrivialAugmentWide, RandAugment and AutoAugment(IMAGENET) (torchvision 0.14) on
 * the uint8 output-size image.
 *
 * The op list, magnitude bins and signs are torchvision's _augmentation_space (float32 linspace
 * values, as torch computes them); the draw is its forward: op = randint(14), bin =
 * randint(num_magnitude_bins) for ops with magnitudes, sign = randint(2) for signed ones, from
 * the sample's stream. The ops are torchvision's _apply_op:
 *   - ShearX/ShearY/TranslateX/TranslateY/Rotate: PIL's affine warps (stk_warp.c) with the op's
 *     interpolation (NEAREST or BILINEAR) and fill, i.e. what Compose gives on PIL images;
 *   - Brightness/Color/Contrast/Sharpness/Posterize/Solarize/AutoContrast/Equalize: the
 *     functional_tensor ops of stk_color.c and stk_pixops.c (bit-identical to torch on uint8).
 */
#include "xform/stk_xform.h"

#include <math.h>
#include <string.h>

static const char *const ta_names[STK__TA_N + 1] = {
    "Identity",  "ShearX",     "ShearY",       "TranslateX", "TranslateY",
    "Rotate",    "Brightness", "Color",        "Contrast",   "Sharpness",
    "Posterize", "Solarize",   "AutoContrast", "Equalize",   "Invert"};

/* (start, end) of each op's linspace, signed; Posterize has its own formula; none: no bins */
typedef struct ta_space {
    float start, end;
    bool bins, is_signed;
} ta_space;

static const ta_space ta_spaces[STK__TA_N + 1] = {
    {0, 0, false, false},      {0.0f, 0.99f, true, true}, {0.0f, 0.99f, true, true},
    {0.0f, 32.0f, true, true}, {0.0f, 32.0f, true, true}, {0.0f, 135.0f, true, true},
    {0.0f, 0.99f, true, true}, {0.0f, 0.99f, true, true}, {0.0f, 0.99f, true, true},
    {0.0f, 0.99f, true, true}, {0, 0, true, false},       {255.0f, 0.0f, true, false},
    {0, 0, false, false},      {0, 0, false, false},      {0, 0, false, false}};

const char *stk__ta_name(int op)
{
    return op >= 0 && op <= STK__TA_INVERT ? ta_names[op] : NULL;
}

bool stk__ta_has_bins(int op, bool *is_signed)
{
    *is_signed = ta_spaces[op].is_signed;
    return ta_spaces[op].bins;
}

/* torch.linspace(start, end, steps)[idx] as a float32 tensor, as torch 1.13's CPU kernel on
 * AVX2 computes it (so the table values are torchvision's to the bit; the test compares all of
 * them): step = (end - start) / (steps - 1) in float32; blocks of two 8-wide vectors while 16
 * values remain, each vector from base = start + step * i (or end - step * (steps - i - 1) past
 * the half), one fused multiply-add, then base + step * k (two roundings); the rest one by one
 * with fused multiply-adds. */
static float linspace_f32(float start, float end, int64_t steps, int64_t idx)
{
    if (steps == 1)
        return start;
    float step = (end - start) / (float)(steps - 1);
    int64_t halfway = steps / 2;
    int64_t vec_end = steps / 16 * 16;
    if (idx < vec_end) {
        int64_t i = idx / 8 * 8, k = idx - i;
        float base =
            i < halfway ? fmaf(step, (float)i, start) : fmaf(-step, (float)(steps - i - 1), end);
        float sk = step * (float)k;
        return base + sk;
    }
    return idx < halfway ? fmaf(step, (float)idx, start)
                         : fmaf(-step, (float)(steps - idx - 1), end);
}

double stk__ta_magnitude(int policy, int op, int64_t bins, int64_t idx, int64_t h, int64_t w)
{
    /* AutoAugment's table is RandAugment's; AugMix's too but for Posterize and translations */
    bool rand = policy != STK__POLICY_TRIVIAL_WIDE, augmix = policy == STK__POLICY_AUGMIX;
    if (op == STK__TA_POSTERIZE) { /* B - (arange(bins) / ((bins - 1) / D)).round().int() */
        float q = (float)idx / (float)((double)(bins - 1) / (rand ? 4.0 : 6.0));
        return (augmix ? 4.0 : 8.0) - (double)nearbyintf(q);
    }
    const ta_space *s = &ta_spaces[op];
    if (!s->bins)
        return 0.0;
    float end = s->end;
    if (rand) { /* RandAugment's table */
        switch (op) {
        case STK__TA_SHEAR_X:
        case STK__TA_SHEAR_Y:
            end = 0.3f;
            break;
        case STK__TA_TRANSLATE_X:
            end = (float)(augmix ? (double)w / 3.0 : 150.0 / 331.0 * (double)w);
            break;
        case STK__TA_TRANSLATE_Y:
            end = (float)(augmix ? (double)h / 3.0 : 150.0 / 331.0 * (double)h);
            break;
        case STK__TA_ROTATE:
            end = 30.0f;
            break;
        case STK__TA_SOLARIZE:
            break;
        default: /* Brightness, Color, Contrast, Sharpness */
            end = 0.9f;
            break;
        }
    }
    return (double)linspace_f32(s->start, end, bins, idx);
}

/* One op: its magnitude (bin idx when it has bins), negated on randint(2) when signed. */
static void draw_one(stk_rng *rng, int policy, int op, int64_t bins, int64_t idx, int64_t h,
                     int64_t w, stk__ta *out)
{
    bool is_signed;
    double m = 0.0;
    if (stk__ta_has_bins(op, &is_signed))
        m = stk__ta_magnitude(policy, op, bins, idx, h, w);
    if (is_signed && stk__rng_below(rng, 2))
        m = -m;
    out->op[out->n] = op;
    out->magnitude[out->n] = m;
    out->n++;
}

void stk__ta_draw(stk_rng *rng, int64_t bins, stk__ta *out)
{
    out->policy = -1;
    out->n = 0;
    int op = (int)stk__rng_below(rng, STK__TA_N);
    bool is_signed;
    int64_t idx =
        stk__ta_has_bins(op, &is_signed) ? (int64_t)stk__rng_below(rng, (uint64_t)bins) : 0;
    draw_one(rng, STK__POLICY_TRIVIAL_WIDE, op, bins, idx, 0, 0, out);
}

void stk__ra_draw(stk_rng *rng, int64_t num_ops, int64_t magnitude, int64_t bins, int64_t h,
                  int64_t w, stk__ta *out)
{
    out->policy = -1;
    out->n = 0;
    for (int64_t k = 0; k < num_ops && k < STK__TA_MAX_OPS; k++)
        draw_one(rng, STK__POLICY_RAND, (int)stk__rng_below(rng, STK__TA_N), bins, magnitude, h, w,
                 out);
}

/* AutoAugmentPolicy.IMAGENET (torchvision 0.14's _get_policies; the test compares). */
static const stk__aa_step aa_imagenet[STK__AA_N_POLICIES][2] = {
    {{STK__TA_POSTERIZE, 0.4, 8}, {STK__TA_ROTATE, 0.6, 9}},
    {{STK__TA_SOLARIZE, 0.6, 5}, {STK__TA_AUTOCONTRAST, 0.6, -1}},
    {{STK__TA_EQUALIZE, 0.8, -1}, {STK__TA_EQUALIZE, 0.6, -1}},
    {{STK__TA_POSTERIZE, 0.6, 7}, {STK__TA_POSTERIZE, 0.6, 6}},
    {{STK__TA_EQUALIZE, 0.4, -1}, {STK__TA_SOLARIZE, 0.2, 4}},
    {{STK__TA_EQUALIZE, 0.4, -1}, {STK__TA_ROTATE, 0.8, 8}},
    {{STK__TA_SOLARIZE, 0.6, 3}, {STK__TA_EQUALIZE, 0.6, -1}},
    {{STK__TA_POSTERIZE, 0.8, 5}, {STK__TA_EQUALIZE, 1.0, -1}},
    {{STK__TA_ROTATE, 0.2, 3}, {STK__TA_SOLARIZE, 0.6, 8}},
    {{STK__TA_EQUALIZE, 0.6, -1}, {STK__TA_POSTERIZE, 0.4, 6}},
    {{STK__TA_ROTATE, 0.8, 8}, {STK__TA_COLOR, 0.4, 0}},
    {{STK__TA_ROTATE, 0.4, 9}, {STK__TA_EQUALIZE, 0.6, -1}},
    {{STK__TA_EQUALIZE, 0.0, -1}, {STK__TA_EQUALIZE, 0.8, -1}},
    {{STK__TA_INVERT, 0.6, -1}, {STK__TA_EQUALIZE, 1.0, -1}},
    {{STK__TA_COLOR, 0.6, 4}, {STK__TA_CONTRAST, 1.0, 8}},
    {{STK__TA_ROTATE, 0.8, 8}, {STK__TA_COLOR, 1.0, 2}},
    {{STK__TA_COLOR, 0.8, 8}, {STK__TA_SOLARIZE, 0.8, 7}},
    {{STK__TA_SHARPNESS, 0.4, 7}, {STK__TA_INVERT, 0.6, -1}},
    {{STK__TA_SHEAR_X, 0.6, 5}, {STK__TA_EQUALIZE, 1.0, -1}},
    {{STK__TA_COLOR, 0.4, 0}, {STK__TA_EQUALIZE, 0.6, -1}},
    {{STK__TA_EQUALIZE, 0.4, -1}, {STK__TA_SOLARIZE, 0.2, 4}},
    {{STK__TA_SOLARIZE, 0.6, 5}, {STK__TA_AUTOCONTRAST, 0.6, -1}},
    {{STK__TA_INVERT, 0.6, -1}, {STK__TA_EQUALIZE, 1.0, -1}},
    {{STK__TA_COLOR, 0.6, 4}, {STK__TA_CONTRAST, 1.0, 8}},
    {{STK__TA_EQUALIZE, 0.8, -1}, {STK__TA_EQUALIZE, 0.6, -1}},
};

const stk__aa_step *stk__aa_policy(int k, int i)
{
    return k >= 0 && k < STK__AA_N_POLICIES && (i == 0 || i == 1) ? &aa_imagenet[k][i] : NULL;
}

void stk__aa_draw(stk_rng *rng, int64_t h, int64_t w, stk__ta *out)
{
    int k = (int)stk__rng_below(rng, STK__AA_N_POLICIES);
    double u[2];
    int sign[2];
    for (int i = 0; i < 2; i++)
        u[i] = stk_rng_uniform(rng);
    for (int i = 0; i < 2; i++)
        sign[i] = (int)stk__rng_below(rng, 2);
    out->policy = k;
    out->n = 0;
    for (int i = 0; i < 2; i++) {
        const stk__aa_step *st = &aa_imagenet[k][i];
        if (!(u[i] <= st->p))
            continue;
        bool is_signed;
        double m = 0.0;
        if (st->bin >= 0 && stk__ta_has_bins(st->op, &is_signed))
            m = stk__ta_magnitude(STK__POLICY_AUTO, st->op, 10, st->bin, h, w);
        stk__ta_has_bins(st->op, &is_signed);
        if (is_signed && sign[i] == 0)
            m = -m;
        out->op[out->n] = st->op;
        out->magnitude[out->n] = m;
        out->n++;
    }
}

/* One of the ops (torchvision's _apply_op). */
static stk_status apply_one(const stk__pixctx *c, const stk__ta *d, int op, double mag)
{
    size_t npix = (size_t)c->w * c->h;
    int w = (int)c->w, h = (int)c->h;
    if (op >= STK__TA_SHEAR_X && op <= STK__TA_ROTATE) {
        uint8_t *src = stk__malloc(npix * 3);
        if (!src)
            return stk__set_error(c->err, c->err_size, STK_ENOMEM,
                                  "out of memory for TrivialAugmentWide's scratch");
        memcpy(src, c->rgb, npix * 3);
        double m[6];
        double deg = atan(mag) * 180.0 / M_PI; /* math.degrees(math.atan(magnitude)) */
        const double none[2] = {0.0, 0.0}, mid[2] = {w * 0.5, h * 0.5};
        switch (op) {
        case STK__TA_SHEAR_X:
        case STK__TA_SHEAR_Y: { /* F.affine(angle 0, center (0, 0), shear) */
            const double sh[2] = {op == STK__TA_SHEAR_X ? deg : 0.0,
                                  op == STK__TA_SHEAR_Y ? deg : 0.0};
            stk__warp_inverse_matrix(none, 0.0, none, 1.0, sh, m);
            stk__warp_affine(c->rgb, w, h, src, w, h, m, d->interp, d->fill);
            break;
        }
        case STK__TA_TRANSLATE_X:
        case STK__TA_TRANSLATE_Y: {
            double t = (double)(int64_t)mag; /* int(magnitude) */
            bool xdir = op == STK__TA_TRANSLATE_X;
            const double tr[2] = {xdir ? t : 0, xdir ? 0 : t};
            stk__warp_inverse_matrix(mid, 0.0, tr, 1.0, none, m);
            stk__warp_affine(c->rgb, w, h, src, w, h, m, d->interp, d->fill);
            break;
        }
        default:
            stk__warp_rotate(c->rgb, src, w, h, mag, NULL, false, d->interp, d->fill);
            break;
        }
        stk__free(src);
        return STK_OK;
    }
    switch (op) {
    case STK__TA_BRIGHTNESS:
        stk__adjust_brightness(c->rgb, npix, 1.0 + mag);
        break;
    case STK__TA_COLOR:
        stk__adjust_saturation(c->rgb, npix, 1.0 + mag);
        break;
    case STK__TA_CONTRAST:
        stk__adjust_contrast(c->rgb, npix, 1.0 + mag);
        break;
    case STK__TA_SHARPNESS:
        if (!stk__px_sharpness(c->rgb, c->w, c->h, 1.0 + mag))
            return stk__set_error(c->err, c->err_size, STK_ENOMEM,
                                  "out of memory for TrivialAugmentWide's scratch");
        break;
    case STK__TA_POSTERIZE:
        stk__px_posterize(c->rgb, npix, (int)mag);
        break;
    case STK__TA_SOLARIZE:
        stk__px_solarize(c->rgb, npix, mag);
        break;
    case STK__TA_AUTOCONTRAST:
        stk__px_autocontrast(c->rgb, npix);
        break;
    case STK__TA_EQUALIZE:
        stk__px_equalize(c->rgb, npix);
        break;
    case STK__TA_INVERT:
        stk__px_invert(c->rgb, npix);
        break;
    default: /* Identity */
        break;
    }
    return STK_OK;
}

stk_status stk__ta_apply(const stk__pixctx *c, const stk__ta *d)
{
    for (int k = 0; k < d->n; k++) {
        stk_status rc = apply_one(c, d, d->op[k], d->magnitude[k]);
        if (rc < 0)
            return rc;
    }
    return STK_OK;
}

/* ---- AugMix ---- */

/* Its _augmentation_space order: 9 ops, then 4 more with all_ops. */
static const int8_t am_ops[13] = {STK__TA_SHEAR_X,     STK__TA_SHEAR_Y,      STK__TA_TRANSLATE_X,
                                  STK__TA_TRANSLATE_Y, STK__TA_ROTATE,       STK__TA_POSTERIZE,
                                  STK__TA_SOLARIZE,    STK__TA_AUTOCONTRAST, STK__TA_EQUALIZE,
                                  STK__TA_BRIGHTNESS,  STK__TA_COLOR,        STK__TA_CONTRAST,
                                  STK__TA_SHARPNESS};

const char *stk__am_op_name(int k)
{
    return k >= 0 && k < 13 ? ta_names[am_ops[k]] : NULL;
}

/* torch._sample_dirichlet of n equal alphas, as float32 weights. */
static void dirichlet(stk_rng *rng, double alpha, int n, float *out)
{
    double g[STK__AM_MAX_WIDTH], sum = 0.0;
    for (int k = 0; k < n; k++)
        sum += g[k] = stk__rng_gamma(rng, alpha);
    for (int k = 0; k < n; k++)
        out[k] = sum > 0.0 ? (float)(g[k] / sum) : (k == 0 ? 1.0f : 0.0f);
}

void stk__am_draw(stk_rng *rng, const stk_op *op, int64_t h, int64_t w, stk__augmix *out)
{
    float m[2];
    dirichlet(rng, op->alpha, 2, m);
    out->m0 = m[0];
    out->width = (int)op->mixture_width;
    dirichlet(rng, op->alpha, out->width, out->w);
    for (int i = 0; i < out->width; i++)
        out->w[i] *= m[1]; /* float32 product, as torch's */
    int n_ops = op->all_ops ? 13 : 9;
    for (int i = 0; i < out->width; i++) {
        int depth = op->chain_depth > 0 ? (int)op->chain_depth : 1 + (int)stk__rng_below(rng, 3);
        out->chain[i].n = depth;
        for (int k = 0; k < depth; k++) {
            int o = am_ops[stk__rng_below(rng, (uint64_t)n_ops)];
            bool is_signed;
            double mag = 0.0;
            if (stk__ta_has_bins(o, &is_signed)) {
                int64_t idx = (int64_t)stk__rng_below(rng, (uint64_t)op->severity);
                mag = stk__ta_magnitude(STK__POLICY_AUGMIX, o, 10, idx, h, w);
            }
            if (is_signed && stk__rng_below(rng, 2))
                mag = -mag;
            out->chain[i].op[k] = (int8_t)o;
            out->chain[i].magnitude[k] = mag;
        }
    }
}

stk_status stk__am_apply(const stk__pixctx *c, const stk__augmix *d)
{
    size_t n = (size_t)c->w * c->h * 3;
    float *mix = stk__malloc(n * sizeof(float));
    uint8_t *aug = stk__malloc(n);
    stk_status rc = STK_OK;
    if (!mix || !aug) {
        rc = stk__set_error(c->err, c->err_size, STK_ENOMEM, "out of memory for AugMix's scratch");
        goto done;
    }
    for (size_t k = 0; k < n; k++)
        mix[k] = d->m0 * (float)c->rgb[k];
    stk__ta chain;
    chain.policy = -1;
    chain.interp = d->interp;
    memcpy(chain.fill, d->fill, 3);
    const stk__pixctx ac = {aug, c->w, c->h, c->err, c->err_size};
    for (int i = 0; i < d->width; i++) {
        memcpy(aug, c->rgb, n);
        chain.n = d->chain[i].n;
        for (int k = 0; k < chain.n; k++) {
            chain.op[k] = d->chain[i].op[k];
            chain.magnitude[k] = d->chain[i].magnitude[k];
        }
        rc = stk__ta_apply(&ac, &chain);
        if (rc < 0)
            goto done;
        for (size_t k = 0; k < n; k++) {
            float t = d->w[i] * (float)aug[k]; /* mix.add_(w * aug): two float32 roundings */
            mix[k] += t;
        }
    }
    for (size_t k = 0; k < n; k++) /* .to(uint8): truncation (the sum stays within 0..255) */
        c->rgb[k] = (uint8_t)(mix[k] >= 255.0f ? 255 : mix[k] <= 0.0f ? 0 : (int)mix[k]);
done:
    stk__free(mix);
    stk__free(aug);
    return rc;
}
