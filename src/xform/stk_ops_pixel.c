/*
 * stk_ops_pixel.c: the op-table rows of the pixel ops, the kernels that run on the output-size
 * uint8 image after the resample: ColorJitter (stk_color.c), the ops of stk_pixops.c
 * (Grayscale ... GaussianBlur) and the augmentation policies (TrivialAugmentWide, RandAugment,
 * AutoAugment: stk_autoaug.c). Their parameters, checks, per-sample draws and kernels; stk_ops.c
 * holds the geometric, store, tensor and container rows and joins these to its table.
 *
 * Threads: the rows are static and read-only.
 */
#include "xform/stk_xform.h"

#include <math.h>
#include <stddef.h>

#define PARAM STK__PARAM
#define N(a) (sizeof(a) / sizeof((a)[0]))
#define PARAMS(a) a, N(a)

/* ---- parameter lists ---- */

static const stk_op_param p_jitter[] = {
    PARAM("brightness", DOUBLE, 1, brightness), PARAM("contrast", DOUBLE, 1, contrast),
    PARAM("saturation", DOUBLE, 1, saturation), PARAM("hue", DOUBLE, 1, hue)};
static const stk_op_param p_gray[] = {PARAM("num_output_channels", INT64, 1, num_output_channels)};
static const stk_op_param p_posterize[] = {PARAM("bits", INT64, 1, bits), PARAM("p", DOUBLE, 1, p)};
static const stk_op_param p_solarize[] = {PARAM("threshold", DOUBLE, 1, threshold),
                                          PARAM("p", DOUBLE, 1, p)};
static const stk_op_param p_sharpness[] = {PARAM("sharpness_factor", DOUBLE, 1, sharpness_factor),
                                           PARAM("p", DOUBLE, 1, p)};
static const stk_op_param p_ta[] = {PARAM("num_magnitude_bins", INT64, 1, num_magnitude_bins),
                                    PARAM("interpolation", INT64, 1, interpolation),
                                    PARAM("fill", DOUBLE, 3, fill)};
static const stk_op_param p_ra[] = {
    PARAM("num_ops", INT64, 1, num_ops), PARAM("magnitude", INT64, 1, magnitude),
    PARAM("num_magnitude_bins", INT64, 1, num_magnitude_bins),
    PARAM("interpolation", INT64, 1, interpolation), PARAM("fill", DOUBLE, 3, fill)};
static const stk_op_param p_aa[] = {PARAM("policy", INT64, 1, policy),
                                    PARAM("interpolation", INT64, 1, interpolation),
                                    PARAM("fill", DOUBLE, 3, fill)};
static const stk_op_param p_blur[] = {PARAM("kernel_size", INT64, 2, kernel_size),
                                      PARAM("sigma", DOUBLE, 2, sigma)};

static const stk_op_param p_augmix[] = {PARAM("severity", INT64, 1, severity),
                                        PARAM("mixture_width", INT64, 1, mixture_width),
                                        PARAM("chain_depth", INT64, 1, chain_depth),
                                        PARAM("alpha", DOUBLE, 1, alpha),
                                        PARAM("all_ops", INT64, 1, all_ops),
                                        PARAM("interpolation", INT64, 1, interpolation),
                                        PARAM("fill", DOUBLE, 3, fill)};

/* ---- checks, defaults, draws, kernels ---- */

static stk_status check_jitter(size_t i, stk_op *op)
{
    const double v[3] = {op->brightness, op->contrast, op->saturation};
    static const char *const what[3] = {"brightness", "contrast", "saturation"};
    const char *name = stk_op_name(op->kind);
    for (int k = 0; k < 3; k++)
        if (!(v[k] >= 0.0 && isfinite(v[k])))
            return stk__set_last_error(STK_EINVAL,
                                       "ops[%zu] (%s): %s must be a finite number >= 0, got %g", i,
                                       name, what[k], v[k]);
    if (!(op->hue >= 0.0 && op->hue <= 0.5))
        return stk__set_last_error(STK_EINVAL, "ops[%zu] (%s): hue must be in [0, 0.5], got %g", i,
                                   name, op->hue);
    return STK_OK;
}

static stk_status check_gray(size_t i, stk_op *op)
{
    if (op->num_output_channels != 3)
        return stk__set_last_error(STK_EINVAL,
                                   "ops[%zu] (%s): num_output_channels must be 3 (stoker's images "
                                   "have three channels; the gray value goes into each), got %lld",
                                   i, stk_op_name(op->kind), (long long)op->num_output_channels);
    return STK_OK;
}

/* An op with one number in [lo, hi] besides p (RandomPosterize, RandomSolarize,
 * RandomAdjustSharpness). */
static stk_status check_value_p(size_t i, stk_op *op, const char *what, double v, double lo,
                                double hi)
{
    if (!(v >= lo && v <= hi))
        return stk__set_last_error(STK_EINVAL, "ops[%zu] (%s): %s must be in [%g, %g], got %g", i,
                                   stk_op_name(op->kind), what, lo, hi, v);
    return stk__check_p(i, op);
}

static stk_status check_posterize(size_t i, stk_op *op)
{
    return check_value_p(i, op, "bits", (double)op->bits, 0, 8);
}

/* torchvision: "Threshold should be less than bound of img." (uint8: 255) */
static stk_status check_solarize(size_t i, stk_op *op)
{
    return check_value_p(i, op, "threshold (uint8 scale)", op->threshold, -HUGE_VAL, 255);
}

static stk_status check_sharpness(size_t i, stk_op *op)
{
    return check_value_p(i, op, "sharpness_factor", op->sharpness_factor, 0, HUGE_VAL);
}

static stk_status check_blur(size_t i, stk_op *op)
{
    const char *name = stk_op_name(op->kind);
    for (int k = 0; k < 2; k++)
        if (op->kernel_size[k] < 1 || op->kernel_size[k] > STK__XF_MAX_KERNEL ||
            op->kernel_size[k] % 2 == 0)
            return stk__set_last_error(STK_EINVAL,
                                       "ops[%zu] (%s): kernel_size must be odd and in 1..%d "
                                       "(x, y), got (%lld, %lld)",
                                       i, name, STK__XF_MAX_KERNEL, (long long)op->kernel_size[0],
                                       (long long)op->kernel_size[1]);
    if (!stk__finite2(op->sigma) || op->sigma[0] <= 0 || op->sigma[0] > op->sigma[1])
        return stk__set_last_error(STK_EINVAL,
                                   "ops[%zu] (%s): sigma must satisfy 0 < sigma[0] <= sigma[1], "
                                   "got (%g, %g)",
                                   i, name, op->sigma[0], op->sigma[1]);
    return STK_OK;
}

static stk_status check_ta(size_t i, stk_op *op)
{
    if (op->num_magnitude_bins < 2 || op->num_magnitude_bins > 1024)
        return stk__set_last_error(STK_EINVAL,
                                   "ops[%zu] (%s): num_magnitude_bins must be in 2..1024, got %lld",
                                   i, stk_op_name(op->kind), (long long)op->num_magnitude_bins);
    return stk__check_interp_fill(i, op);
}

static stk_status check_ra(size_t i, stk_op *op)
{
    stk_status rc = check_ta(i, op);
    if (rc < 0)
        return rc;
    if (op->num_ops < 0 || op->num_ops > STK__TA_MAX_OPS)
        return stk__set_last_error(STK_EINVAL, "ops[%zu] (%s): num_ops must be in 0..%d, got %lld",
                                   i, stk_op_name(op->kind), STK__TA_MAX_OPS,
                                   (long long)op->num_ops);
    if (op->magnitude < 0 || op->magnitude >= op->num_magnitude_bins)
        return stk__set_last_error(STK_EINVAL,
                                   "ops[%zu] (%s): magnitude must be in 0..num_magnitude_bins - 1 "
                                   "(%lld), got %lld",
                                   i, stk_op_name(op->kind), (long long)op->num_magnitude_bins - 1,
                                   (long long)op->magnitude);
    return STK_OK;
}

static stk_status check_aa(size_t i, stk_op *op)
{
    if (op->policy != 0)
        return stk__set_last_error(STK_EINVAL,
                                   "ops[%zu] (%s): policy must be 0 (AutoAugmentPolicy.IMAGENET; "
                                   "CIFAR10 and SVHN are not supported), got %lld",
                                   i, stk_op_name(op->kind), (long long)op->policy);
    return stk__check_interp_fill(i, op);
}

static void init_ta(stk_op *op)
{
    op->num_magnitude_bins = 31;
    op->num_ops = 2; /* RandAugment's defaults */
    op->magnitude = 9;
}

/* The pixel ops' parameters beyond p: identities where torchvision has no default (posterize 8
 * bits, sharpness 1), its defaults otherwise. */
static void init_pixel(stk_op *op)
{
    op->num_output_channels = 3;
    op->bits = 8;
    op->threshold = 128.0;
    op->sharpness_factor = 1.0;
    op->kernel_size[0] = op->kernel_size[1] = 3;
    op->sigma[0] = 0.1;
    op->sigma[1] = 2.0;
}

static void plan_jitter(const stk_op *op, stk_rng *rng, stk__xplan *p, stk__opdraw *draw)
{
    (void)p;
    stk__jitter_draw(rng, op, &draw->jitter);
}

/* The pixel ops of stk_pixops.c: Random* ops draw torch.rand(1) < p (one uniform); the
 * deterministic ones (Grayscale, GaussianBlur) always apply; GaussianBlur draws its sigma
 * (torch.empty(1).uniform_(sigma[0], sigma[1]): one uniform). */
static void plan_pixel_p(const stk_op *op, stk_rng *rng, stk__xplan *p, stk__opdraw *draw)
{
    (void)p;
    draw->pix.op = op;
    draw->pix.on = stk_rng_uniform(rng) < op->p;
}

static void plan_pixel(const stk_op *op, stk_rng *rng, stk__xplan *p, stk__opdraw *draw)
{
    (void)rng;
    (void)p;
    draw->pix.op = op;
    draw->pix.on = true;
}

static void plan_blur(const stk_op *op, stk_rng *rng, stk__xplan *p, stk__opdraw *draw)
{
    (void)p;
    draw->pix.op = op;
    draw->pix.on = true;
    draw->pix.sigma = stk__rng_range(rng, op->sigma[0], op->sigma[1]);
}

/* The policies' warps: the op's interpolation and fill. */
static void ta_warps(const stk_op *op, stk__ta *d)
{
    d->interp = (int)op->interpolation;
    stk__fill_u8(op->fill, d->fill);
}

static void plan_ta(const stk_op *op, stk_rng *rng, stk__xplan *p, stk__opdraw *draw)
{
    (void)p;
    stk__ta_draw(rng, op->num_magnitude_bins, &draw->ta);
    ta_warps(op, &draw->ta);
}

static void plan_ra(const stk_op *op, stk_rng *rng, stk__xplan *p, stk__opdraw *draw)
{
    int64_t h, w;
    stk__plan_size(p, &h, &w);
    stk__ra_draw(rng, op->num_ops, op->magnitude, op->num_magnitude_bins, h, w, &draw->ta);
    ta_warps(op, &draw->ta);
}

static void plan_aa(const stk_op *op, stk_rng *rng, stk__xplan *p, stk__opdraw *draw)
{
    int64_t h, w;
    stk__plan_size(p, &h, &w);
    stk__aa_draw(rng, h, w, &draw->ta);
    ta_warps(op, &draw->ta);
}

/* AugMix: torchvision's defaults (BILINEAR: its interpolation default). */
static void init_augmix(stk_op *op)
{
    op->severity = 3;
    op->mixture_width = 3;
    op->chain_depth = -1;
    op->alpha = 1.0;
    op->all_ops = 1;
    op->interpolation = STK__INTERP_BILINEAR;
}

static stk_status check_augmix(size_t i, stk_op *op)
{
    const char *name = stk_op_name(op->kind);
    if (op->severity < 1 || op->severity > 10)
        return stk__set_last_error(STK_EINVAL, "ops[%zu] (%s): severity must be in 1..10, got %lld",
                                   i, name, (long long)op->severity);
    if (op->mixture_width < 1 || op->mixture_width > STK__AM_MAX_WIDTH)
        return stk__set_last_error(STK_EINVAL,
                                   "ops[%zu] (%s): mixture_width must be in 1..%d, got %lld", i,
                                   name, STK__AM_MAX_WIDTH, (long long)op->mixture_width);
    if (op->chain_depth != -1 && (op->chain_depth < 1 || op->chain_depth > STK__AM_MAX_DEPTH))
        return stk__set_last_error(STK_EINVAL,
                                   "ops[%zu] (%s): chain_depth must be -1 (1..3 at random) or "
                                   "1..%d, got %lld",
                                   i, name, STK__AM_MAX_DEPTH, (long long)op->chain_depth);
    if (!(op->alpha > 0.0 && isfinite(op->alpha)))
        return stk__set_last_error(
            STK_EINVAL, "ops[%zu] (%s): alpha must be finite and > 0, got %g", i, name, op->alpha);
    if (op->all_ops != 0 && op->all_ops != 1)
        return stk__set_last_error(STK_EINVAL, "ops[%zu] (%s): all_ops must be 0 or 1, got %lld", i,
                                   name, (long long)op->all_ops);
    return stk__check_interp_fill(i, op);
}

static void plan_augmix(const stk_op *op, stk_rng *rng, stk__xplan *p, stk__opdraw *draw)
{
    int64_t h, w;
    stk__plan_size(p, &h, &w);
    stk__am_draw(rng, op, h, w, &draw->augmix);
    draw->augmix.interp = (int)op->interpolation;
    stk__fill_u8(op->fill, draw->augmix.fill);
}

static stk_status kernel_augmix(const stk__pixctx *c, const stk__opdraw *draw)
{
    return stk__am_apply(c, &draw->augmix);
}

static stk_status kernel_ta(const stk__pixctx *c, const stk__opdraw *draw)
{
    return stk__ta_apply(c, &draw->ta);
}

static stk_status kernel_jitter(const stk__pixctx *c, const stk__opdraw *draw)
{
    stk__jitter_apply(c->rgb, (size_t)c->w * c->h, &draw->jitter);
    return STK_OK;
}

static stk_status scratch_failed(const stk__pixctx *c, const stk__opdraw *draw)
{
    return stk__set_error(c->err, c->err_size, STK_ENOMEM, "out of memory for %s's scratch",
                          stk_op_name(draw->pix.op->kind));
}

/* One kernel for the ops of stk_pixops.c (each op is one case, called once per sample). */
static stk_status kernel_pixel(const stk__pixctx *c, const stk__opdraw *draw)
{
    const stk_op *op = draw->pix.op;
    size_t npix = (size_t)c->w * c->h;
    if (!draw->pix.on)
        return STK_OK;
    switch (op->kind) {
    case STK_OP_GRAYSCALE:
    case STK_OP_RANDOM_GRAYSCALE:
        stk__px_grayscale(c->rgb, npix);
        break;
    case STK_OP_RANDOM_INVERT:
        stk__px_invert(c->rgb, npix);
        break;
    case STK_OP_RANDOM_POSTERIZE:
        stk__px_posterize(c->rgb, npix, (int)op->bits);
        break;
    case STK_OP_RANDOM_SOLARIZE:
        stk__px_solarize(c->rgb, npix, op->threshold);
        break;
    case STK_OP_RANDOM_ADJUST_SHARPNESS:
        if (!stk__px_sharpness(c->rgb, c->w, c->h, op->sharpness_factor))
            return scratch_failed(c, draw);
        break;
    case STK_OP_RANDOM_AUTOCONTRAST:
        stk__px_autocontrast(c->rgb, npix);
        break;
    case STK_OP_RANDOM_EQUALIZE:
        stk__px_equalize(c->rgb, npix);
        break;
    case STK_OP_GAUSSIAN_BLUR:
        if (!stk__px_gaussian_blur(c->rgb, c->w, c->h, (int)op->kernel_size[0],
                                   (int)op->kernel_size[1], draw->pix.sigma))
            return scratch_failed(c, draw);
        break;
    default:
        break;
    }
    return STK_OK;
}
/* ---- the rows ---- */

/* A row of the ops of stk_pixops.c: one kernel (kernel_pixel), their defaults (init_pixel); dr:
 * whether its plan draws (Grayscale is the one that does not). */
#define PIXEL_ROW(nm, k, dr, pa, chk, pl)                                                          \
    {                                                                                              \
        .name = nm, .kind = k, .stage = STK__OP_PIXEL, .draws = dr, .params = PARAMS(pa),          \
        .init = init_pixel, .check = chk, .plan = pl, .kernel = kernel_pixel                       \
    }

const stk__op_def stk__pixel_op_rows[STK__PIXEL_N_ROWS] = {
    {.name = "ColorJitter",
     .kind = STK_OP_COLOR_JITTER,
     .stage = STK__OP_PIXEL,
     .draws = true,
     .params = PARAMS(p_jitter),
     .check = check_jitter,
     .plan = plan_jitter,
     .kernel = kernel_jitter},
    PIXEL_ROW("Grayscale", STK_OP_GRAYSCALE, false, p_gray, check_gray, plan_pixel),
    PIXEL_ROW("RandomGrayscale", STK_OP_RANDOM_GRAYSCALE, true, stk__params_p, stk__check_p,
              plan_pixel_p),
    PIXEL_ROW("RandomInvert", STK_OP_RANDOM_INVERT, true, stk__params_p, stk__check_p,
              plan_pixel_p),
    PIXEL_ROW("RandomPosterize", STK_OP_RANDOM_POSTERIZE, true, p_posterize, check_posterize,
              plan_pixel_p),
    PIXEL_ROW("RandomSolarize", STK_OP_RANDOM_SOLARIZE, true, p_solarize, check_solarize,
              plan_pixel_p),
    PIXEL_ROW("RandomAdjustSharpness", STK_OP_RANDOM_ADJUST_SHARPNESS, true, p_sharpness,
              check_sharpness, plan_pixel_p),
    PIXEL_ROW("RandomAutocontrast", STK_OP_RANDOM_AUTOCONTRAST, true, stk__params_p, stk__check_p,
              plan_pixel_p),
    PIXEL_ROW("RandomEqualize", STK_OP_RANDOM_EQUALIZE, true, stk__params_p, stk__check_p,
              plan_pixel_p),
    PIXEL_ROW("GaussianBlur", STK_OP_GAUSSIAN_BLUR, true, p_blur, check_blur, plan_blur),
    {.name = "TrivialAugmentWide",
     .kind = STK_OP_TRIVIAL_AUGMENT_WIDE,
     .stage = STK__OP_PIXEL,
     .draws = true,
     .params = PARAMS(p_ta),
     .init = init_ta,
     .check = check_ta,
     .plan = plan_ta,
     .kernel = kernel_ta},
    {.name = "RandAugment",
     .kind = STK_OP_RAND_AUGMENT,
     .stage = STK__OP_PIXEL,
     .draws = true,
     .params = PARAMS(p_ra),
     .init = init_ta,
     .check = check_ra,
     .plan = plan_ra,
     .kernel = kernel_ta},
    {.name = "AutoAugment",
     .kind = STK_OP_AUTO_AUGMENT,
     .stage = STK__OP_PIXEL,
     .draws = true,
     .params = PARAMS(p_aa),
     .check = check_aa,
     .plan = plan_aa,
     .kernel = kernel_ta},
    {.name = "AugMix",
     .kind = STK_OP_AUG_MIX,
     .stage = STK__OP_PIXEL,
     .draws = true,
     .params = PARAMS(p_augmix),
     .init = init_augmix,
     .check = check_augmix,
     .plan = plan_augmix,
     .kernel = kernel_augmix},
};
