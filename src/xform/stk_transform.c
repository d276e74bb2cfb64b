/*
 * stk_transform.c: the image kind of transform object (stk__media_image, stk_media.h):
 * compiling an op list into a stk_transform (each op checked by its row of the op table, the
 * output size followed through the list, the finishing split taken), what it outputs, and its
 * destruction. Applying it to a sample is stk_apply.c; the named recipes are stk_recipe.c; the
 * public create, which loads the options and picks the kind, is stk_media.c.
 *
 * Threads: a stk_transform is immutable after create and shared by every worker and loader.
 */
#include "xform/stk_media.h"
#include "xform/stk_xform.h"

#include <math.h>
#include <string.h>

/* Whether op pads: a Pad or RandomCrop with a padding, or a RandomCrop with pad_if_needed. */
static bool op_pads(const stk_op *op)
{
    if (op->kind != STK_OP_PAD && op->kind != STK_OP_RANDOM_CROP)
        return false;
    return op->padding[0] || op->padding[1] || op->padding[2] || op->padding[3] ||
           (op->kind == STK_OP_RANDOM_CROP && op->pad_if_needed);
}

/* The padding style of ops[i] (Pad/RandomCrop's fill and padding_mode, other than zeros): the
 * axes hold one padding_mode and the render one fill, so every padding op must agree. And no
 * resize may follow a padding, of any style: it would resample the padding as an edge extension,
 * where torchvision blends the fill (or zeros) into the border (up to 224 grey levels apart
 * with Pad(4) then Resize). *pad_at: the first padding op with a style.
 * @return STK_OK or STK_EINVAL. */
static stk_status check_pad_style(stk_transform *t, size_t i, size_t *pad_at)
{
    const stk_op *op = &t->ops[i];
    const stk__op_def *d = t->defs[i];
    if (d->resamples)
        for (size_t k = 0; k < i; k++)
            if (op_pads(&t->ops[k]))
                return stk__set_last_error(STK_EINVAL,
                                           "ops[%zu] (%s): cannot follow %s (ops[%zu]), a "
                                           "padding (stoker resamples padding as an edge "
                                           "extension, where torchvision blends it into the "
                                           "border); put the padding after the resize",
                                           i, d->name, t->defs[k]->name, k);
    if (op->kind != STK_OP_PAD && op->kind != STK_OP_RANDOM_CROP)
        return STK_OK;
    bool styled = op->padding_mode != 0 || op->fill[0] || op->fill[1] || op->fill[2];
    if (*pad_at == SIZE_MAX) {
        if (!styled)
            return STK_OK;
        for (size_t k = 0; k < i; k++)
            if (t->ops[k].kind == STK_OP_PAD || t->ops[k].kind == STK_OP_RANDOM_CROP)
                *pad_at = k; /* an earlier plain one: it must agree too */
        if (*pad_at == SIZE_MAX) {
            *pad_at = i;
            t->pad_fill = op->padding_mode == 0;
            stk__fill_u8(op->fill, t->pad_rgb);
            return STK_OK;
        }
    }
    const stk_op *first = &t->ops[*pad_at];
    if (first->padding_mode != op->padding_mode ||
        memcmp(first->fill, op->fill, sizeof(op->fill)) != 0)
        return stk__set_last_error(STK_EINVAL,
                                   "ops[%zu] (%s): its fill and padding_mode must equal those of "
                                   "%s (ops[%zu]) (one padding style per transform)",
                                   i, d->name, t->defs[*pad_at]->name, *pad_at);
    return STK_OK;
}

/* The image kind's create (stk_transform_create, in stk_media.c, has loaded opts and its ops into
 * the library's layout, at most STK__XF_MAX_OPS of them). */
static stk_status image_create(const stk_transform_opts *opts, stk_transform **out)
{
    stk_status rc = STK_OK;
    stk_transform *t = NULL;
    *out = NULL;
    if (opts->n_ops == 0)
        return stk__set_last_error(STK_EINVAL, "stk_transform_create: no ops");
    if (opts->dtype != STK_DTYPE_UINT8 && opts->dtype != STK_DTYPE_FLOAT32 &&
        opts->dtype != STK_DTYPE_FLOAT16 && opts->dtype != STK_DTYPE_BFLOAT16)
        return stk__set_last_error(STK_EINVAL,
                                   "stk_transform_create: output dtype %s not supported (uint8, "
                                   "float32, float16 or bfloat16)",
                                   stk_dtype_name(opts->dtype));

    t = stk__calloc(1, sizeof(*t));
    if (!t)
        return stk__set_last_error(STK_ENOMEM, "stk_transform_create: out of memory");
    t->media = STK_MEDIA_IMAGE;
    t->n_ops = opts->n_ops;
    memcpy(t->ops, opts->ops, opts->n_ops * sizeof(stk_op));
    t->dtype = opts->dtype;
    t->nhwc = opts->nhwc;
    t->exact = opts->exact;
    t->max_pixels = opts->max_pixels ? opts->max_pixels : STK__XF_DEFAULT_MAX_PIXELS;
    t->lenient = opts->lenient;
    for (int c = 0; c < 3; c++)
        t->std[c] = 1.0f;

    /* Validate each op and follow the output size through the list (the op table's rows). */
    int64_t oh = 0, ow = 0;                                   /* 0: depends on the image */
    int64_t size_h[STK__XF_MAX_OPS], size_w[STK__XF_MAX_OPS]; /* before each op */
    size_t norm_at = SIZE_MAX;                                /* the STORE op (Normalize) */
    size_t tensor_at = SIZE_MAX; /* the first TENSOR op (RandomErasing) */
    size_t warp_at = SIZE_MAX;   /* the first warp (RandomRotation, RandomAffine) */
    size_t pad_at = SIZE_MAX;    /* the first Pad/RandomCrop with a fill or padding_mode */
    for (size_t i = 0; i < t->n_ops; i++) {
        stk_op *op = &t->ops[i];
        size_h[i] = oh;
        size_w[i] = ow;
        const stk__op_def *d = stk__op_def_get(op->kind);
        if (!d) {
            rc = stk__set_last_error(STK_EINVAL, "ops[%zu]: unknown op kind %d", i, (int)op->kind);
            goto fail;
        }
        t->defs[i] = d;
        if (d->media != STK_MEDIA_IMAGE) {
            rc = stk__set_last_error(STK_EINVAL,
                                     "ops[%zu] (%s): an audio op in an image transform (ops[0] "
                                     "is %s; a transform is one media kind)",
                                     i, d->name, stk_op_name(t->ops[0].kind));
            goto fail;
        }
        if (d->check)
            STK_TRY(d->check(i, op));
        if (norm_at != SIZE_MAX && !d->after_store) {
            char after[256];
            stk__op_list_names(true, after, sizeof(after));
            rc = stk__set_last_error(STK_EINVAL,
                                     "ops[%zu] (%s): %s (ops[%zu]) must come last (only %s may "
                                     "follow it)",
                                     i, d->name, t->defs[norm_at]->name, norm_at, after);
            goto fail;
        }
        if (tensor_at != SIZE_MAX && d->stage != STK__OP_TENSOR) {
            rc = stk__set_last_error(STK_EINVAL,
                                     "ops[%zu] (%s): %s (ops[%zu]) works on the output tensor; "
                                     "only such ops may follow it",
                                     i, d->name, t->defs[tensor_at]->name, tensor_at);
            goto fail;
        }
        if (warp_at != SIZE_MAX && d->stage == STK__OP_GEOMETRY && !d->container) {
            rc = stk__set_last_error(STK_EINVAL,
                                     "ops[%zu] (%s): a geometric op cannot follow %s (ops[%zu]), "
                                     "which warps the output-size image; put %s after the "
                                     "crops, resizes and flips",
                                     i, d->name, t->defs[warp_at]->name, warp_at,
                                     t->defs[warp_at]->name);
            goto fail;
        }
        if (d->warp && warp_at == SIZE_MAX)
            warp_at = i;
        STK_TRY(check_pad_style(t, i, &pad_at));
        if (d->stage == STK__OP_TENSOR && tensor_at == SIZE_MAX)
            tensor_at = i;
        if (d->size)
            d->size(op, &oh, &ow);
        if (d->compile)
            d->compile(op, t);
        if (d->stage == STK__OP_STORE)
            norm_at = i;
    }
    /* RandomApply/RandomChoice/RandomOrder: their `transforms` ops follow them and may not
     * change the size (the output size would depend on the draw) nor be the store or a tensor
     * op; RandomOrder's are single ops, and not both warps and geometric ops (the geometry is
     * folded into the resample before every kernel, so it cannot come after a warp). */
    for (size_t i = 0; i < t->n_ops; i++) {
        if (!t->defs[i]->container)
            continue;
        int64_t n = t->ops[i].n_transforms;
        bool order = t->defs[i]->kind == STK_OP_RANDOM_ORDER;
        bool has_warp = false, has_geometry = false;
        if ((size_t)n > t->n_ops - 1 - i) {
            rc = stk__set_last_error(STK_EINVAL,
                                     "ops[%zu] (%s): its %lld transforms must follow it (only "
                                     "%zu ops do)",
                                     i, t->defs[i]->name, (long long)n, t->n_ops - 1 - i);
            goto fail;
        }
        for (size_t k = i + 1; k <= i + (size_t)n; k++) {
            const stk__op_def *c = t->defs[k];
            bool nested = c->container && t->defs[i]->kind != STK_OP_RANDOM_APPLY;
            int64_t h = size_h[k], w = size_w[k];
            if (c->size)
                c->size(&t->ops[k], &h, &w);
            bool resizes = c->size && (c->stage != STK__OP_PIXEL || h == 0 || w == 0 ||
                                       h != size_h[k] || w != size_w[k]);
            has_warp |= c->warp;
            has_geometry |= c->stage == STK__OP_GEOMETRY;
            if (order && has_warp && has_geometry) {
                rc = stk__set_last_error(STK_EINVAL,
                                         "ops[%zu] (%s): its transforms cannot mix warps "
                                         "(RandomRotation, RandomAffine) with geometric ops "
                                         "(a geometric op cannot run after a warp)",
                                         i, t->defs[i]->name);
                goto fail;
            }
            if (resizes || c->stage == STK__OP_STORE || c->stage == STK__OP_TENSOR || nested) {
                rc = stk__set_last_error(STK_EINVAL,
                                         "ops[%zu] (%s): ops[%zu] (%s) cannot be one of its "
                                         "transforms (only ops that keep the size: flips, "
                                         "pixel ops, warps%s)",
                                         i, t->defs[i]->name, k, c->name,
                                         t->defs[i]->kind == STK_OP_RANDOM_APPLY ? ", RandomApply"
                                                                                 : "");
                goto fail;
            }
        }
    }
    if (oh == 0 || ow == 0) {
        rc = stk__set_last_error(STK_EINVAL,
                                 "the output size is not fixed: end the geometric ops with "
                                 "RandomResizedCrop, CenterCrop or Resize((h, w))");
        goto fail;
    }
    if (t->normalize && t->dtype == STK_DTYPE_UINT8) {
        rc = stk__set_last_error(STK_EINVAL,
                                 "ops[%zu] (Normalize): needs a float output dtype, "
                                 "not uint8",
                                 norm_at);
        goto fail;
    }
    t->out_h = (uint32_t)oh;
    t->out_w = (uint32_t)ow;
    if (opts->finish_on_device)
        STK_TRY(stk__finish_compile(t, opts));
    stk__store_init(t);
    t->planar = !t->exact;
    *out = t;
    return STK_OK;
fail:
    stk__free(t);
    return rc;
}

bool stk__transform_nhwc(const stk_transform *t)
{
    return t->nhwc;
}

static void image_spec(const stk_transform *t, stk__tspec *out)
{
    memset(out, 0, sizeof(*out));
    out->dtype = t->dtype;
    out->ndim = 3;
    if (t->nhwc) {
        out->shape[0] = t->out_h;
        out->shape[1] = t->out_w;
        out->shape[2] = 3;
    } else {
        out->shape[0] = 3;
        out->shape[1] = t->out_h;
        out->shape[2] = t->out_w;
    }
}

bool stk_transform_draws(const stk_transform *t)
{
    for (size_t i = 0; t && i < t->n_ops; i++)
        if (t->defs[i]->draws)
            return true;
    return false;
}

void stk_transform_output(const stk_transform *t, stk_dtype *dtype, uint32_t *ndim,
                          int64_t shape[STK_MAX_DIMS])
{
    stk__tspec s;
    stk__transform_spec(t, &s);
    stk__finish_output(t, &s); /* the finished output when the loader finishes */
    if (dtype)
        *dtype = s.dtype;
    if (ndim)
        *ndim = s.ndim;
    if (shape)
        memcpy(shape, s.shape, sizeof(s.shape));
}

static void image_destroy(stk_transform *t)
{
    stk__free(t);
}

const stk__media_ops stk__media_image = {
    .name = "image",
    .create = image_create,
    .destroy = image_destroy,
    .spec = image_spec,
    .worker_create = stk__image_worker_create,
    .worker_destroy = stk__image_worker_destroy,
    .stage_ns = stk__image_stage_ns,
    .trust = stk__image_trust,
    .checked = stk__image_checked,
    .apply = stk__image_apply,
};
