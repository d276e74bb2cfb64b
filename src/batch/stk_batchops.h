/*
 * stk_batchops.h: batch transforms (MixUp, CutMix; stk_batch_op in stoker.h), applied to a
 * complete batch in its slot by the worker that completed it, before it is marked READY.
 */
#ifndef STK_BATCHOPS_H
#define STK_BATCHOPS_H

#include "batch/stk_layout.h"

typedef struct stk__batchops {
    uint32_t n; /* 0 = none */
    stk_batch_op op[STK_MAX_BATCH_OPS];
    bool choice; /* one op per batch, chosen uniformly */
    int64_t num_classes;
    int img_t, lab_t;    /* tensors of the host view */
    bool hwc;            /* images are [H, W, C], else [..., H, W] */
    size_t scratch_size; /* bytes of per-worker scratch apply needs */
} stk__batchops;

/* Check the options (kinds, alpha, num_classes) and copy them; `n` stays 0 without ops. */
stk_status stk__batchops_opts(stk__batchops *b, const stk_loader_opts *o, char *err,
                              size_t err_size);

/* The label field's layout under batch ops: float32 [num_classes] (the worker stores the int64
 * label at the start of the row; apply turns it into the one-hot row). */
void stk__batchops_label_field(const stk__batchops *b, stk_field *f);

/* Find the image and label tensors in the host view and check them. */
stk_status stk__batchops_init(stk__batchops *b, const stk__layout *view, const char *image,
                              const char *label, bool hwc, char *err, size_t err_size);

/* Apply the ops to the n samples of `slot` (laid out as `view`), drawing from the batch stream
 * of (seed, epoch, key). `scratch` holds scratch_size bytes. Fails with STK_EFORMAT when a label
 * is outside [0, num_classes): *bad is then that sample's record number, for the caller to name
 * the record in front of err. */
stk_status stk__batchops_apply(const stk__batchops *b, const stk__layout *view, uint8_t *slot,
                               uint32_t n, uint64_t seed, uint64_t epoch, uint64_t key,
                               uint8_t *scratch, int64_t *bad, char *err, size_t err_size);

/* lambda ~ Beta(alpha, alpha) from `rng` (exposed for the tests). */
double stk__beta_draw(stk_rng *rng, double alpha);

#endif /* STK_BATCHOPS_H */
