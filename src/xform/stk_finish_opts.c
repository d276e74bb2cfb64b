/*
 * stk_finish_opts.c: finishing as a property of the transform (stk_transform_opts
 * .finish_on_device). The transform is compiled in two parts: the workers' part stops at uint8
 * [H, W, 3] (4x fewer bytes to copy than float32), and the finishing the loader applies after
 * the copy: the layout, x / 255, Normalize's (x - mean) / std and the cast, on the device when it
 * can (src/cuda/stk_devcopy.c), else on the CPU (src/cuda/stk_finish_cpu.c), with the same bits
 * as the CPU store would give.
 */
#include "xform/stk_xform.h"

#include <string.h>

stk_status stk__finish_compile(stk_transform *t, const stk_transform_opts *opts)
{
    if (t->dtype != STK_DTYPE_FLOAT32 && t->dtype != STK_DTYPE_FLOAT16 &&
        t->dtype != STK_DTYPE_BFLOAT16)
        return stk__set_last_error(STK_EINVAL,
                                   "finish_on_device: finishing outputs float32, float16 or "
                                   "bfloat16, not %s",
                                   stk_dtype_name(t->dtype));
    if (!(opts->finish_flip >= 0.0f && opts->finish_flip <= 1.0f))
        return stk__set_last_error(STK_EINVAL,
                                   "finish_on_device: flip probability %g is not in [0, 1]",
                                   (double)opts->finish_flip);
    for (size_t i = 0; i < t->n_ops; i++)
        if (t->defs[i]->stage == STK__OP_TENSOR)
            return stk__set_last_error(STK_EINVAL,
                                       "finish_on_device: %s (ops[%zu]) works on the finished "
                                       "tensor; build the transform without finishing",
                                       t->defs[i]->name, i);
    size_t last = t->n_ops - 1;
    for (size_t i = 0; i < last; i++)
        if (t->ops[i].kind == STK_OP_NORMALIZE)
            return stk__set_last_error(STK_EINVAL,
                                       "finish_on_device: Normalize (ops[%zu]) must be the last "
                                       "op",
                                       i);
    stk__finish *f = &t->fin;
    f->on = true;
    f->dtype = t->dtype;
    f->nhwc = t->nhwc;
    f->flip = opts->finish_flip;
    memcpy(f->mean, t->mean, sizeof(f->mean)); /* 0 and 1 without Normalize */
    memcpy(f->std, t->std, sizeof(f->std));
    if (t->normalize) { /* the loader applies it */
        t->n_ops--;
        t->normalize = false;
        for (int c = 0; c < 3; c++) {
            t->mean[c] = 0.0f;
            t->std[c] = 1.0f;
        }
    }
    t->dtype = STK_DTYPE_UINT8;
    t->nhwc = true;
    return STK_OK;
}

void stk__finish_output(const stk_transform *t, stk__tspec *s)
{
    if (!t->fin.on)
        return;
    s->dtype = t->fin.dtype;
    int64_t h = t->out_h, w = t->out_w;
    int64_t chw[3] = {3, h, w}, hwc[3] = {h, w, 3};
    memcpy(s->shape, t->fin.nhwc ? hwc : chw, sizeof(chw));
}

void stk__transform_finish(const stk_transform *t, stk__finish *out)
{
    *out = t->fin;
}
