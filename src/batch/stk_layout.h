/*
 * stk_layout.h: layout of a batch slot. A slot is one 64-byte aligned allocation holding every
 * output tensor of one batch at full batch size: workers write each sample straight into its
 * row, so collation copies nothing.
 */
#ifndef STK_LAYOUT_H
#define STK_LAYOUT_H

#include "stk_internal.h"

#define STK_MAX_TENSORS (STK_MAX_FIELDS + 2) /* the fields, a transform's aux output, "index" */

/* Where one output tensor lives inside a slot, and how a sample's row is found. */
typedef struct stk__tlayout {
    char name[STK_MAX_NAME];
    stk_dtype dtype;
    uint32_t ndim;                   /* per sample */
    int64_t shape[STK_MAX_DIMS + 1]; /* per sample; bytes fields: [stride] */
    size_t offset;                   /* of the tensor in the slot */
    size_t row_size;                 /* bytes per sample */
    size_t lengths_offset;           /* bytes fields and transform outputs with lengths (audio):
                                      * int64 lengths[B]; else SIZE_MAX */
    int field;                       /* source field, or -1 for "index" */
    bool transformed;                /* produced by the transform from `field` */
    bool bytes;                      /* a variable-length bytes field */
    bool aux;                        /* the transform's second output (stk__tspec.aux_name:
                                      * video's "video_pts"), before "index"; field -1 */
} stk__tlayout;

typedef struct stk__layout {
    uint32_t batch_size;
    size_t n_tensors;
    stk__tlayout t[STK_MAX_TENSORS];
    int aux_t; /* the tensor with `aux` set, or -1 */
    size_t slot_size;
} stk__layout;

/* Lay out a slot for a record schema: fields[0, n_fields) in order, each bytes field with rows
 * of its largest record max_size[f] (rounded up to 64); field `tfield` replaced by the transform
 * output `tspec` when tfield >= 0 (named tspec->name when set; with a lengths vector when
 * tspec->lengths, followed by tspec->aux_name's tensor when set); then "index". Fails with
 * STK_ELIMIT when the slot size overflows (the shapes and sizes come from a file: untrusted). */
stk_status stk__layout_init(stk__layout *lay, const stk_field *fields, const uint64_t *max_size,
                            size_t n_fields, uint32_t batch_size, int tfield,
                            const stk__tspec *tspec, char *err, size_t err_size);

/* Describe tensor i of a slot holding n samples. */
void stk__layout_tensor(const stk__layout *lay, size_t i, uint8_t *slot, uint32_t n,
                        stk_tensor *out);

#endif /* STK_LAYOUT_H */
