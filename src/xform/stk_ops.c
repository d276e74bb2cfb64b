/*
 * stk_ops.c: the op table. One row (stk__op_def) per stk_op_kind: torchvision's
 * name, the parameters (name, type, place in stk_op: what stk_op_param_at publishes and the
 * Python front end parses generically), the check, the effect on the output size, the
 * create-time hook, the per-sample plan and the pixel kernel.
 *
 * The rest of src/xform only walks these rows: stk_transform_create checks each op and follows
 * the output size; stk__xform_plan calls each op's plan in op order (geometric ops fold into the
 * per-axis resample, random ops draw from the sample's stream); stk__xform_render runs the
 * kernels the plan collected, once per sample each (never an indirect call per pixel).
 *
 * The rows live in four parts: here the geometric, store, tensor and container ops; the pixel
 * ops and policies in stk_ops_pixel.c; the warps (RandomRotation, RandomAffine) in
 * stk_ops_warp.c; the audio family (torchaudio's ops, media STK_MEDIA_AUDIO) in
 * stk_audio_ops.c. stk__op_def_get finds a kind's row in them.
 *
 * Adding an op: append its kind to stk_op_kind (include/stoker.h), its fields to stk_op if it
 * needs new ones, a row here, its kernel (a pixel op), and its Python class
 * (python/stoker/transforms/). See docs/images.md, "Adding an op".
 *
 * Threads: the table is static and read-only.
 */
#include "xform/stk_xform.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* ---- parameter lists ---- */

#define PARAM STK__PARAM
#define N(a) (sizeof(a) / sizeof((a)[0]))

static const stk_op_param p_rrc[] = {PARAM("size", INT64, 2, size),
                                     PARAM("scale", DOUBLE, 2, scale),
                                     PARAM("ratio", DOUBLE, 2, ratio)};
static const stk_op_param p_size[] = {PARAM("size", INT64, 2, size)};
const stk_op_param stk__params_p[1] = {PARAM("p", DOUBLE, 1, p)};
static const stk_op_param p_normalize[] = {PARAM("mean", FLOAT, 3, mean),
                                           PARAM("std", FLOAT, 3, std)};
static const stk_op_param p_rcrop[] = {
    PARAM("size", INT64, 2, size), PARAM("padding", INT64, 4, padding),
    PARAM("pad_if_needed", INT64, 1, pad_if_needed), PARAM("fill", DOUBLE, 3, fill),
    PARAM("padding_mode", INT64, 1, padding_mode)};
static const stk_op_param p_pad[] = {PARAM("padding", INT64, 4, padding),
                                     PARAM("fill", DOUBLE, 3, fill),
                                     PARAM("padding_mode", INT64, 1, padding_mode)};
static const stk_op_param p_erase[] = {PARAM("p", DOUBLE, 1, p), PARAM("scale", DOUBLE, 2, scale),
                                       PARAM("ratio", DOUBLE, 2, ratio),
                                       PARAM("value", DOUBLE, 3, value)};
static const stk_op_param p_apply[] = {PARAM("transforms", INT64, 1, n_transforms),
                                       PARAM("p", DOUBLE, 1, p)};
static const stk_op_param p_choice[] = {PARAM("transforms", INT64, 1, n_transforms)};

/* ---- checks ---- */

/* size = (h, w) with w = 0 meaning `zero_means` (square for the crops); the crops resolve it. */
static stk_status check_size(size_t i, stk_op *op, const char *zero_means, bool square)
{
    if (op->size[0] < 1 || op->size[0] > STK__XF_MAX_SIZE || op->size[1] < 0 ||
        op->size[1] > STK__XF_MAX_SIZE)
        return stk__set_last_error(STK_EINVAL,
                                   "ops[%zu] (%s): size must be (h, w) with 1 <= h, w <= %d "
                                   "(w = 0: %s), got (%lld, %lld)",
                                   i, stk_op_name(op->kind), STK__XF_MAX_SIZE, zero_means,
                                   (long long)op->size[0], (long long)op->size[1]);
    if (square && op->size[1] == 0)
        op->size[1] = op->size[0]; /* torchvision's int size: square */
    return STK_OK;
}

static stk_status check_crop(size_t i, stk_op *op)
{
    return check_size(i, op, "square", true);
}

static stk_status check_resize(size_t i, stk_op *op)
{
    return check_size(i, op, "resize the shorter side to h", false);
}

/* RandomResizedCrop's and RandomErasing's aspect range. */
static stk_status check_ratio(size_t i, stk_op *op)
{
    if (!stk__finite2(op->ratio) || op->ratio[0] <= 0 || op->ratio[0] > op->ratio[1])
        return stk__set_last_error(STK_EINVAL,
                                   "ops[%zu] (%s): ratio must satisfy 0 < ratio[0] <= "
                                   "ratio[1], got (%g, %g)",
                                   i, stk_op_name(op->kind), op->ratio[0], op->ratio[1]);
    return STK_OK;
}

static stk_status check_rrc(size_t i, stk_op *op)
{
    stk_status rc = check_crop(i, op);
    if (rc < 0)
        return rc;
    const char *name = stk_op_name(op->kind);
    if (!stk__finite2(op->scale) || op->scale[0] < 0 || op->scale[0] > op->scale[1] ||
        op->scale[1] <= 0)
        return stk__set_last_error(STK_EINVAL,
                                   "ops[%zu] (%s): scale must satisfy 0 <= scale[0] <= "
                                   "scale[1], scale[1] > 0, got (%g, %g)",
                                   i, name, op->scale[0], op->scale[1]);
    return check_ratio(i, op);
}

stk_status stk__check_p(size_t i, stk_op *op)
{
    if (!(op->p >= 0.0 && op->p <= 1.0))
        return stk__set_last_error(STK_EINVAL, "ops[%zu] (%s): p must be in [0, 1], got %g", i,
                                   stk_op_name(op->kind), op->p);
    return STK_OK;
}

static stk_status check_normalize(size_t i, stk_op *op)
{
    const char *name = stk_op_name(op->kind);
    for (int c = 0; c < 3; c++) {
        if (!isfinite(op->mean[c]))
            return stk__set_last_error(STK_EINVAL, "ops[%zu] (%s): mean[%d] must be finite, got %g",
                                       i, name, c, (double)op->mean[c]);
        if (!isfinite(op->std[c]) || op->std[c] == 0.0f)
            return stk__set_last_error(STK_EINVAL,
                                       "ops[%zu] (%s): std[%d] must be finite and non-zero, "
                                       "got %g",
                                       i, name, c, (double)op->std[c]);
    }
    return STK_OK;
}

/* Pad's and RandomCrop's padding (>= 0), fill (0..255) and padding_mode (0..3). */
static stk_status check_padding(size_t i, stk_op *op)
{
    const char *name = stk_op_name(op->kind);
    for (int k = 0; k < 4; k++)
        if (op->padding[k] < 0 || op->padding[k] > STK__XF_MAX_SIZE)
            return stk__set_last_error(STK_EINVAL,
                                       "ops[%zu] (%s): padding must be (left, top, right, bottom) "
                                       "in 0..%d, got (%lld, %lld, %lld, %lld)",
                                       i, name, STK__XF_MAX_SIZE, (long long)op->padding[0],
                                       (long long)op->padding[1], (long long)op->padding[2],
                                       (long long)op->padding[3]);
    if (op->padding_mode < STK__PAD_CONSTANT || op->padding_mode > STK__PAD_SYMMETRIC)
        return stk__set_last_error(STK_EINVAL,
                                   "ops[%zu] (%s): padding_mode must be 0 (constant), 1 (edge), "
                                   "2 (reflect) or 3 (symmetric), got %lld",
                                   i, name, (long long)op->padding_mode);
    return stk__check_fill(i, op);
}

static stk_status check_rcrop(size_t i, stk_op *op)
{
    stk_status rc = check_crop(i, op);
    if (rc < 0)
        return rc;
    if (op->pad_if_needed != 0 && op->pad_if_needed != 1)
        return stk__set_last_error(STK_EINVAL,
                                   "ops[%zu] (%s): pad_if_needed must be 0 or 1, got %lld", i,
                                   stk_op_name(op->kind), (long long)op->pad_if_needed);
    return check_padding(i, op);
}

static stk_status check_erase(size_t i, stk_op *op)
{
    const char *name = stk_op_name(op->kind);
    if (!stk__finite2(op->scale) || op->scale[0] < 0 || op->scale[0] > op->scale[1] ||
        op->scale[1] > 1)
        return stk__set_last_error(STK_EINVAL,
                                   "ops[%zu] (%s): scale must satisfy 0 <= scale[0] <= scale[1] "
                                   "<= 1, got (%g, %g)",
                                   i, name, op->scale[0], op->scale[1]);
    stk_status rc = check_ratio(i, op);
    if (rc < 0)
        return rc;
    for (int c = 0; c < 3; c++)
        if (!isfinite(op->value[c]))
            return stk__set_last_error(STK_EINVAL, "ops[%zu] (%s): value[%d] must be finite", i,
                                       name, c);
    return stk__check_p(i, op);
}

/* RandomApply/RandomChoice/RandomOrder: 1..16 following ops (stk_transform_create checks what
 * they are). */
static stk_status check_container(size_t i, stk_op *op)
{
    if (op->n_transforms < 1 || op->n_transforms > STK__XF_MAX_OPS)
        return stk__set_last_error(STK_EINVAL,
                                   "ops[%zu] (%s): transforms must count 1..%d following ops, got "
                                   "%lld",
                                   i, stk_op_name(op->kind), STK__XF_MAX_OPS,
                                   (long long)op->n_transforms);
    return op->kind == STK_OP_RANDOM_APPLY ? stk__check_p(i, op) : STK_OK;
}

/* ---- defaults, output sizes, create-time hooks ---- */

static void init_erase(stk_op *op)
{
    op->scale[0] = 0.02; /* torchvision's RandomErasing defaults */
    op->scale[1] = 0.33;
    op->ratio[0] = 0.3;
    op->ratio[1] = 3.3;
}

static void init_resize(stk_op *op)
{
    op->size[0] = 256; /* the ImageNet evaluation recipe's Resize(256): shorter side */
    op->size[1] = 0;
}

/* The crops fix the output size to their own. */
static void size_crop(const stk_op *op, int64_t *h, int64_t *w)
{
    *h = op->size[0];
    *w = op->size[1];
}

/* Resize((h, w)) fixes it; Resize(short side) makes it depend on the image. */
static void size_resize(const stk_op *op, int64_t *h, int64_t *w)
{
    *h = op->size[1] ? op->size[0] : 0;
    *w = op->size[1];
}

/* Pad adds its padding to a known size. */
static void size_pad(const stk_op *op, int64_t *h, int64_t *w)
{
    if (*h)
        *h += op->padding[1] + op->padding[3];
    if (*w)
        *w += op->padding[0] + op->padding[2];
}

static void compile_normalize(const stk_op *op, stk_transform *t)
{
    t->normalize = true;
    memcpy(t->mean, op->mean, sizeof(t->mean));
    memcpy(t->std, op->std, sizeof(t->std));
}

/* ---- per-sample plans ---- */

static void plan_rrc(const stk_op *op, stk_rng *rng, stk__xplan *p, stk__opdraw *draw)
{
    (void)draw;
    stk__box b;
    stk__rrc_box(rng, p->y.n, p->x.n, op->scale, op->ratio, &b);
    if (!p->has_box) {
        p->has_box = true;
        p->box = b;
    }
    stk__axis_crop(&p->y, b.i, b.h);
    stk__axis_crop(&p->x, b.j, b.w);
    stk__axis_resize(&p->y, op->size[0]);
    stk__axis_resize(&p->x, op->size[1]);
}

static void plan_resize(const stk_op *op, stk_rng *rng, stk__xplan *p, stk__opdraw *draw)
{
    (void)rng;
    (void)draw;
    int64_t nh = op->size[0], nw = op->size[1];
    if (nw == 0)
        stk__resize_short(p->y.n, p->x.n, op->size[0], &nh, &nw);
    stk__axis_resize(&p->y, nh);
    stk__axis_resize(&p->x, nw);
}

static void plan_center_crop(const stk_op *op, stk_rng *rng, stk__xplan *p, stk__opdraw *draw)
{
    (void)rng;
    (void)draw;
    stk__axis_center_crop(&p->y, op->size[0]);
    stk__axis_center_crop(&p->x, op->size[1]);
}

/* Pad: a crop that starts before the image and ends after it; the padding pixels get their
 * values by the op's padding_mode (the resample maps them onto content, or they are zero and
 * the fill replaces them: stk__xform_render). */
static void pad_axes(stk__xplan *p, const int64_t pad[4], int64_t mode)
{
    p->x.pad_mode = p->y.pad_mode = (int)mode;
    stk__axis_crop(&p->x, -pad[0], p->x.n + pad[0] + pad[2]);
    stk__axis_crop(&p->y, -pad[1], p->y.n + pad[1] + pad[3]);
    p->x.pad_mode = p->y.pad_mode = STK__PAD_CONSTANT; /* a larger CenterCrop pads with zeros */
}

static void plan_pad(const stk_op *op, stk_rng *rng, stk__xplan *p, stk__opdraw *draw)
{
    (void)rng;
    (void)draw;
    pad_axes(p, op->padding, op->padding_mode);
}

/* torchvision's RandomCrop.forward: pad by `padding`; with pad_if_needed pad a side shorter than
 * the crop by the difference at both ends; then get_params: (0, 0) when the sizes are equal,
 * else i = randint(0, h - th + 1), j = randint(0, w - tw + 1) (height first). An image still
 * smaller than the crop (torchvision raises) is padded after its end. */
static void plan_rcrop(const stk_op *op, stk_rng *rng, stk__xplan *p, stk__opdraw *draw)
{
    (void)draw;
    pad_axes(p, op->padding, op->padding_mode);
    int64_t th = op->size[0], tw = op->size[1];
    if (op->pad_if_needed) {
        int64_t dw = tw > p->x.n ? tw - p->x.n : 0, dh = th > p->y.n ? th - p->y.n : 0;
        const int64_t pad[4] = {dw, dh, dw, dh};
        pad_axes(p, pad, op->padding_mode);
    }
    int64_t i = 0, j = 0;
    if (p->y.n != th || p->x.n != tw) {
        i = p->y.n > th ? (int64_t)stk__rng_below(rng, (uint64_t)(p->y.n - th + 1)) : 0;
        j = p->x.n > tw ? (int64_t)stk__rng_below(rng, (uint64_t)(p->x.n - tw + 1)) : 0;
    }
    stk__axis_crop(&p->y, i, th);
    stk__axis_crop(&p->x, j, tw);
}

static void plan_hflip(const stk_op *op, stk_rng *rng, stk__xplan *p, stk__opdraw *draw)
{
    (void)draw;
    if (stk_rng_uniform(rng) < op->p) /* torch.rand(1) < p */
        stk__axis_flip(&p->x);
}

static void plan_vflip(const stk_op *op, stk_rng *rng, stk__xplan *p, stk__opdraw *draw)
{
    (void)draw;
    if (stk_rng_uniform(rng) < op->p) /* torch.rand(1) < p */
        stk__axis_flip(&p->y);
}

/* RandomErasing: torch.rand(1) < p, then get_params on the output size. */
static void plan_erase(const stk_op *op, stk_rng *rng, stk__xplan *p, stk__opdraw *draw)
{
    int64_t h, w;
    stk__plan_size(p, &h, &w);
    draw->erase.op = op;
    draw->erase.on = false;
    if (stk_rng_uniform(rng) < op->p)
        stk__erase_box(rng, h, w, op->scale, op->ratio, &draw->erase);
}

static void post_erase(const stk_transform *t, void *dst, const stk__opdraw *draw)
{
    stk__erase_apply(t, dst, &draw->erase);
}

static void init_container(stk_op *op)
{
    op->n_transforms = 1;
}

/* RandomApply: torchvision's `if self.p < torch.rand(1): return img` (one uniform), then the
 * transforms draw only when applied. */
static void plan_apply(const stk_op *op, stk_rng *rng, stk__xplan *p, stk__opdraw *draw)
{
    (void)draw;
    if (op->p < stk_rng_uniform(rng))
        p->skip |= (uint32_t)((1ull << op->n_transforms) - 1);
}

/* RandomChoice: one of the transforms, uniformly (torchvision draws it with Python's random;
 * here from the sample's stream). */
static void plan_choice(const stk_op *op, stk_rng *rng, stk__xplan *p, stk__opdraw *draw)
{
    (void)draw;
    uint64_t k = stk__rng_below(rng, (uint64_t)op->n_transforms);
    p->skip |= (uint32_t)(((1ull << op->n_transforms) - 1) & ~(1ull << k));
}

/* RandomOrder: its ops in a random order (torchvision shuffles with Python's random.shuffle:
 * for i = n - 1 .. 1, swap i with randbelow(i + 1); here from the sample's stream). */
static void plan_order(const stk_op *op, stk_rng *rng, stk__xplan *p, stk__opdraw *draw)
{
    (void)draw;
    stk__orderdraw *o = &p->order;
    o->n = (int)op->n_transforms;
    for (int k = 0; k < o->n; k++)
        o->perm[k] = (uint8_t)k;
    for (int k = o->n - 1; k > 0; k--) {
        int j = (int)stk__rng_below(rng, (uint64_t)k + 1);
        uint8_t tmp = o->perm[k];
        o->perm[k] = o->perm[j];
        o->perm[j] = tmp;
    }
}

/* ---- pixel kernels ---- */

/* ---- the table ---- */

#define PARAMS(a) a, N(a)

/* The geometric, store, tensor and container rows. */
static const stk__op_def op_table[] = {
    {.name = "RandomResizedCrop",
     .kind = STK_OP_RANDOM_RESIZED_CROP,
     .stage = STK__OP_GEOMETRY,
     .draws = true,
     .resamples = true,
     .params = PARAMS(p_rrc),
     .check = check_rrc,
     .size = size_crop,
     .plan = plan_rrc},
    {.name = "Resize",
     .kind = STK_OP_RESIZE,
     .stage = STK__OP_GEOMETRY,
     .resamples = true,
     .params = PARAMS(p_size),
     .init = init_resize,
     .check = check_resize,
     .size = size_resize,
     .plan = plan_resize},
    {.name = "CenterCrop",
     .kind = STK_OP_CENTER_CROP,
     .stage = STK__OP_GEOMETRY,
     .params = PARAMS(p_size),
     .check = check_crop,
     .size = size_crop,
     .plan = plan_center_crop},
    {.name = "RandomHorizontalFlip",
     .kind = STK_OP_RANDOM_HORIZONTAL_FLIP,
     .stage = STK__OP_GEOMETRY,
     .draws = true,
     .after_store = true,
     .params = PARAMS(stk__params_p),
     .check = stk__check_p,
     .plan = plan_hflip},
    {.name = "Normalize",
     .kind = STK_OP_NORMALIZE,
     .stage = STK__OP_STORE,
     .params = PARAMS(p_normalize),
     .check = check_normalize,
     .compile = compile_normalize},
    {.name = "RandomVerticalFlip",
     .kind = STK_OP_RANDOM_VERTICAL_FLIP,
     .stage = STK__OP_GEOMETRY,
     .draws = true,
     .after_store = true,
     .params = PARAMS(stk__params_p),
     .check = stk__check_p,
     .plan = plan_vflip},
    {.name = "RandomCrop",
     .kind = STK_OP_RANDOM_CROP,
     .stage = STK__OP_GEOMETRY,
     .draws = true,
     .params = PARAMS(p_rcrop),
     .check = check_rcrop,
     .size = size_crop,
     .plan = plan_rcrop},
    {.name = "Pad",
     .kind = STK_OP_PAD,
     .stage = STK__OP_GEOMETRY,
     .params = PARAMS(p_pad),
     .check = check_padding,
     .size = size_pad,
     .plan = plan_pad},
    {.name = "RandomErasing",
     .kind = STK_OP_RANDOM_ERASING,
     .stage = STK__OP_TENSOR,
     .draws = true,
     .after_store = true,
     .params = PARAMS(p_erase),
     .init = init_erase,
     .check = check_erase,
     .plan = plan_erase,
     .post = post_erase},
    {.name = "RandomApply",
     .kind = STK_OP_RANDOM_APPLY,
     .stage = STK__OP_GEOMETRY,
     .draws = true,
     .container = true,
     .params = PARAMS(p_apply),
     .init = init_container,
     .check = check_container,
     .plan = plan_apply},
    {.name = "RandomChoice",
     .kind = STK_OP_RANDOM_CHOICE,
     .stage = STK__OP_GEOMETRY,
     .draws = true,
     .container = true,
     .params = PARAMS(p_choice),
     .init = init_container,
     .check = check_container,
     .plan = plan_choice},
    {.name = "RandomOrder",
     .kind = STK_OP_RANDOM_ORDER,
     .stage = STK__OP_GEOMETRY,
     .draws = true,
     .container = true,
     .params = PARAMS(p_choice),
     .init = init_container,
     .check = check_container,
     .plan = plan_order},
};

/* The table: op_table, the pixel ops' rows (stk_ops_pixel.c) and the warps' (stk_ops_warp.c).
 * Every kind 0 .. stk_op_n_kinds() - 1 has exactly one row (tests/unit/xform/test_xform.c checks).
 */
static const struct {
    const stk__op_def *rows;
    size_t n;
} parts[] = {{op_table, N(op_table)},
             {stk__pixel_op_rows, STK__PIXEL_N_ROWS},
             {stk__warp_op_rows, STK__WARP_N_ROWS},
             {stk__audio_op_rows, STK__AUDIO_N_ROWS}};

static size_t n_rows(void)
{
    size_t n = 0;
    for (size_t k = 0; k < N(parts); k++)
        n += parts[k].n;
    return n;
}

const stk__op_def *stk__op_def_get(stk_op_kind kind)
{
    for (size_t k = 0; k < N(parts); k++)
        for (size_t i = 0; i < parts[k].n; i++)
            if (parts[k].rows[i].kind == kind)
                return &parts[k].rows[i];
    return NULL;
}

void stk__op_list_names(bool after_store_only, char *buf, size_t size)
{
    size_t len = 0;
    if (size)
        buf[0] = '\0';
    for (size_t k = 0; k < n_rows() && len < size; k++) {
        const stk__op_def *d = stk__op_def_get((stk_op_kind)k);
        if (after_store_only && !d->after_store)
            continue;
        int n = snprintf(buf + len, size - len, "%s%s", len ? ", " : "", d->name);
        if (n < 0)
            break;
        len += (size_t)n;
    }
}

/* ---- public API ---- */

void stk_op_init_sized(stk_op *dst, stk_op_kind kind, size_t struct_size)
{
    stk_op full = {.struct_size = sizeof(full)}, *op = &full;
    op->kind = kind;
    /* torchvision requires a size; these are the ImageNet recipes' (224 crops, Resize(256)). */
    op->size[0] = 224;
    op->size[1] = 224;
    op->scale[0] = 0.08;
    op->scale[1] = 1.0;
    op->ratio[0] = 3.0 / 4.0;
    op->ratio[1] = 4.0 / 3.0;
    op->p = 0.5;
    for (int c = 0; c < 3; c++) { /* torchvision has no default; the identity */
        op->mean[c] = 0.0f;
        op->std[c] = 1.0f;
    }
    const stk__op_def *d = stk__op_def_get(kind);
    if (d && d->init)
        d->init(op);
    stk__init_store(dst, struct_size, &full, sizeof(full));
}

size_t stk_op_n_kinds(void)
{
    return n_rows();
}

stk_status stk_op_kind_at(size_t i, stk_op_kind *out)
{
    if (i >= n_rows() || !out)
        return stk__set_last_error(STK_EINVAL, "stk_op_kind_at: %s",
                                   !out ? "NULL out" : "index past the table");
    *out = (stk_op_kind)i; /* enum order: every kind below the count has its row */
    return STK_OK;
}

const char *stk_op_name(stk_op_kind kind)
{
    const stk__op_def *d = stk__op_def_get(kind);
    return d ? d->name : NULL;
}

bool stk_op_draws(stk_op_kind kind)
{
    const stk__op_def *d = stk__op_def_get(kind);
    return d && d->draws;
}

stk_status stk_op_find(const char *name, stk_op_kind *out)
{
    if (!name || !out)
        return stk__set_last_error(STK_EINVAL, "stk_op_find: NULL %s", !name ? "name" : "out");
    for (size_t k = 0; k < n_rows(); k++)
        if (strcmp(name, stk__op_def_get((stk_op_kind)k)->name) == 0) {
            *out = (stk_op_kind)k;
            return STK_OK;
        }
    char names[1280];
    stk__op_list_names(false, names, sizeof(names));
    return stk__set_last_error(STK_EINVAL, "unknown op '%s' (supported: %s)", name, names);
}

stk_media stk_op_media(stk_op_kind kind)
{
    const stk__op_def *d = stk__op_def_get(kind);
    return d ? d->media : STK_MEDIA_IMAGE;
}

size_t stk_op_n_params(stk_op_kind kind)
{
    const stk__op_def *d = stk__op_def_get(kind);
    return d ? d->n_params : 0;
}

const stk_op_param *stk_op_param_at(stk_op_kind kind, size_t i)
{
    const stk__op_def *d = stk__op_def_get(kind);
    return d && i < d->n_params ? &d->params[i] : NULL;
}
