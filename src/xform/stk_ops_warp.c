/*
 * stk_ops_warp.c: the op-table rows of the warps, RandomRotation and RandomAffine (torchvision
 * 0.14 on PIL images): their parameters, checks, per-sample draws and kernels. The pixels are
 * PIL's (stk_warp.c); stk_ops.c holds the other rows and joins these to its table.
 *
 * A warp runs on the output-size uint8 image, as a pixel kernel, in op order with the other
 * pixel kernels: exactly torchvision's result when it follows the ops that fix the size (a crop
 * or a resize), which stk_transform_create requires (no geometric op may follow a warp).
 *
 * Threads: the rows are static and read-only.
 */
#include "xform/stk_xform.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#define CHECK(expr)                                                                                \
    do {                                                                                           \
        stk_status rc_ = (expr);                                                                   \
        if (rc_ < 0)                                                                               \
            return rc_;                                                                            \
    } while (0)

static const stk_op_param p_rotation[] = {
    STK__PARAM("degrees", DOUBLE, 2, degrees), STK__PARAM("interpolation", INT64, 1, interpolation),
    STK__PARAM("expand", INT64, 1, expand), STK__PARAM("center", DOUBLE, 2, center),
    STK__PARAM("fill", DOUBLE, 3, fill)};
static const stk_op_param p_affine[] = {STK__PARAM("degrees", DOUBLE, 2, degrees),
                                        STK__PARAM("translate", DOUBLE, 2, translate),
                                        STK__PARAM("scale", DOUBLE, 2, scale),
                                        STK__PARAM("shear", DOUBLE, 4, shear),
                                        STK__PARAM("interpolation", INT64, 1, interpolation),
                                        STK__PARAM("fill", DOUBLE, 3, fill),
                                        STK__PARAM("center", DOUBLE, 2, center)};

/* ---- checks (shared with the policies, which take interpolation and fill too) ---- */

stk_status stk__check_interp_fill(size_t i, const stk_op *op)
{
    if (op->interpolation != STK__INTERP_NEAREST && op->interpolation != STK__INTERP_BILINEAR)
        return stk__set_last_error(STK_EINVAL,
                                   "ops[%zu] (%s): interpolation must be 0 (NEAREST) or 2 "
                                   "(BILINEAR), got %lld",
                                   i, stk_op_name(op->kind), (long long)op->interpolation);
    return stk__check_fill(i, op);
}

stk_status stk__check_fill(size_t i, const stk_op *op)
{
    const char *name = stk_op_name(op->kind);
    for (int c = 0; c < 3; c++)
        if (!(op->fill[c] >= 0.0 && op->fill[c] < 256.0))
            return stk__set_last_error(STK_EINVAL,
                                       "ops[%zu] (%s): fill must be in 0..255 (uint8 scale), got "
                                       "%g in channel %d",
                                       i, name, op->fill[c], c);
    return STK_OK;
}

void stk__fill_u8(const double fill[3], uint8_t out[3])
{
    for (int c = 0; c < 3; c++) /* _parse_fill: int(x) */
        out[c] = (uint8_t)(int)fill[c];
}

/* A (lo, hi) range of finite numbers with lo <= hi. */
static stk_status check_range(size_t i, const stk_op *op, const char *what, const double v[2])
{
    if (!(isfinite(v[0]) && isfinite(v[1]) && v[0] <= v[1]))
        return stk__set_last_error(STK_EINVAL,
                                   "ops[%zu] (%s): %s must be a range (lo, hi) of finite numbers "
                                   "with lo <= hi, got (%g, %g)",
                                   i, stk_op_name(op->kind), what, v[0], v[1]);
    return STK_OK;
}

static stk_status check_center(size_t i, const stk_op *op)
{
    bool none = isnan(op->center[0]) && isnan(op->center[1]);
    if (!none && !(isfinite(op->center[0]) && isfinite(op->center[1])))
        return stk__set_last_error(STK_EINVAL,
                                   "ops[%zu] (%s): center must be (x, y) (finite) or NaN for the "
                                   "image centre, got (%g, %g)",
                                   i, stk_op_name(op->kind), op->center[0], op->center[1]);
    return STK_OK;
}

static stk_status check_rotation(size_t i, stk_op *op)
{
    CHECK(check_range(i, op, "degrees", op->degrees));
    CHECK(check_center(i, op));
    if (op->expand != 0 && op->expand != 1)
        return stk__set_last_error(STK_EINVAL, "ops[%zu] (%s): expand must be 0 or 1, got %lld", i,
                                   stk_op_name(op->kind), (long long)op->expand);
    if (op->expand && op->degrees[0] != op->degrees[1])
        return stk__set_last_error(
            STK_EINVAL,
            "ops[%zu] (%s): expand=True with a range of angles gives each sample its own size "
            "(a batch needs one); use one angle (degrees=(a, a)), or expand=False",
            i, stk_op_name(op->kind));
    return stk__check_interp_fill(i, op);
}

static stk_status check_affine(size_t i, stk_op *op)
{
    const char *name = stk_op_name(op->kind);
    CHECK(check_range(i, op, "degrees", op->degrees));
    CHECK(check_center(i, op));
    for (int k = 0; k < 2; k++)
        if (!(op->translate[k] >= 0.0 && op->translate[k] <= 1.0))
            return stk__set_last_error(STK_EINVAL,
                                       "ops[%zu] (%s): translate values must be in [0, 1], got "
                                       "(%g, %g)",
                                       i, name, op->translate[0], op->translate[1]);
    CHECK(check_range(i, op, "scale", op->scale));
    if (!(op->scale[0] > 0.0))
        return stk__set_last_error(STK_EINVAL, "ops[%zu] (%s): scale values must be > 0, got %g", i,
                                   name, op->scale[0]);
    CHECK(check_range(i, op, "shear (x)", op->shear));
    CHECK(check_range(i, op, "shear (y)", op->shear + 2));
    for (int k = 0; k < 4; k++)
        if (fabs(op->shear[k]) >= 90.0)
            return stk__set_last_error(STK_EINVAL,
                                       "ops[%zu] (%s): shear must be within (-90, 90) degrees, "
                                       "got %g",
                                       i, name, op->shear[k]);
    return stk__check_interp_fill(i, op);
}

/* ---- defaults and sizes ---- */

static void init_warp(stk_op *op)
{
    op->center[0] = op->center[1] = NAN;
    op->scale[0] = op->scale[1] = 1.0; /* RandomAffine's scale=None */
}

/* expand (one angle: checked): Image.rotate's expanded size of a known size. */
static void size_rotation(const stk_op *op, int64_t *h, int64_t *w)
{
    if (!op->expand || !*h || !*w)
        return;
    double m[6];
    int nw, nh;
    stk__warp_rotate_size((int)*w, (int)*h, op->degrees[0],
                          isnan(op->center[0]) ? NULL : op->center, true, &nw, &nh, m);
    *h = nh;
    *w = nw;
}

/* ---- per-sample draws ---- */

/* RandomRotation.get_params: one uniform angle. */
static void plan_rotation(const stk_op *op, stk_rng *rng, stk__xplan *p, stk__opdraw *draw)
{
    memset(&draw->warp, 0, sizeof(draw->warp));
    draw->warp.op = op;
    draw->warp.angle = stk__rng_range(rng, op->degrees[0], op->degrees[1]);
    draw->warp.scale = 1.0;
    if (op->expand) { /* the ops after it see the expanded image */
        int64_t h, w;
        stk__plan_size(p, &h, &w);
        size_rotation(op, &h, &w);
        p->pix_h = h;
        p->pix_w = w;
    }
}

/* RandomAffine.get_params on the image (width w, height h), all five always drawn: angle,
 * tx = round(U(-translate[0] * w, +)), ty likewise with h (Python's round: half to even),
 * scale, shear x, shear y. */
static void plan_affine(const stk_op *op, stk_rng *rng, stk__xplan *p, stk__opdraw *draw)
{
    stk__warpdraw *d = &draw->warp;
    memset(d, 0, sizeof(*d));
    d->op = op;
    d->angle = stk__rng_range(rng, op->degrees[0], op->degrees[1]);
    int64_t h, w;
    stk__plan_size(p, &h, &w);
    double mx = op->translate[0] * (double)w, my = op->translate[1] * (double)h;
    d->translate[0] = nearbyint(stk__rng_range(rng, -mx, mx));
    d->translate[1] = nearbyint(stk__rng_range(rng, -my, my));
    d->scale = stk__rng_range(rng, op->scale[0], op->scale[1]);
    d->shear[0] = stk__rng_range(rng, op->shear[0], op->shear[1]);
    d->shear[1] = stk__rng_range(rng, op->shear[2], op->shear[3]);
}

/* ---- kernels ---- */

static stk_status kernel_warp(const stk__pixctx *c, const stk__opdraw *draw)
{
    const stk__warpdraw *d = &draw->warp;
    const stk_op *op = d->op;
    int w = (int)c->w, h = (int)c->h;
    size_t n = (size_t)w * h * 3;
    uint8_t *src = stk__malloc(n);
    if (!src)
        return stk__set_error(c->err, c->err_size, STK_ENOMEM, "out of memory for %s's scratch",
                              stk_op_name(op->kind));
    memcpy(src, c->rgb, n);
    uint8_t fill[3];
    stk__fill_u8(op->fill, fill);
    const double *center = isnan(op->center[0]) ? NULL : op->center;
    int interp = (int)op->interpolation;
    if (op->kind == STK_OP_RANDOM_ROTATION) {
        stk__warp_rotate(c->rgb, src, w, h, d->angle, center, op->expand != 0, interp, fill);
    } else {
        const double mid[2] = {w * 0.5, h * 0.5};
        double m[6];
        stk__warp_inverse_matrix(center ? center : mid, d->angle, d->translate, d->scale, d->shear,
                                 m);
        stk__warp_affine(c->rgb, w, h, src, w, h, m, interp, fill);
    }
    stk__free(src);
    return STK_OK;
}

/* ---- the rows (stk_ops.c joins them to the table, in stk_op_kind order) ---- */

const stk__op_def stk__warp_op_rows[STK__WARP_N_ROWS] = {
    {.name = "RandomRotation",
     .kind = STK_OP_RANDOM_ROTATION,
     .stage = STK__OP_PIXEL,
     .draws = true,
     .warp = true,
     .params = p_rotation,
     .n_params = sizeof(p_rotation) / sizeof(p_rotation[0]),
     .init = init_warp,
     .check = check_rotation,
     .size = size_rotation,
     .plan = plan_rotation,
     .kernel = kernel_warp},
    {.name = "RandomAffine",
     .kind = STK_OP_RANDOM_AFFINE,
     .stage = STK__OP_PIXEL,
     .draws = true,
     .warp = true,
     .params = p_affine,
     .n_params = sizeof(p_affine) / sizeof(p_affine[0]),
     .init = init_warp,
     .check = check_affine,
     .plan = plan_affine,
     .kernel = kernel_warp},
};
