/*
 * stk_layout.c: the layout of a batch slot (see stk_layout.h). Every tensor starts on a 64-byte
 * boundary; a bytes field gets rows of `stride` bytes (its largest record rounded up to 64) and
 * an int64 lengths vector, as does a transform output that asks for one (audio's valid lengths).
 * The slot is allocated once per ring entry through stk__slot_alloc (stk_pinned.c), the one
 * function that can make it pinned.
 */
#include "batch/stk_layout.h"

#include <string.h>

/* Append `size` bytes (64-byte aligned) to the slot; false on overflow. */
static bool grow(size_t *total, size_t size, size_t *offset)
{
    size_t at = (size_t)STK_ALIGN_UP(*total, 64);
    if (at < *total || at + size < at)
        return false;
    *offset = at;
    *total = at + size;
    return true;
}

stk_status stk__layout_init(stk__layout *lay, const stk_field *fields, const uint64_t *max_size,
                            size_t n_fields, uint32_t batch_size, int tfield,
                            const stk__tspec *tspec, char *err, size_t err_size)
{
    memset(lay, 0, sizeof(*lay));
    lay->batch_size = batch_size;
    lay->aux_t = -1;
    size_t total = 0, nf = STK_MIN(n_fields, (size_t)STK_MAX_FIELDS);
    for (size_t f = 0; f <= nf; f++) {
        stk__tlayout *t = &lay->t[lay->n_tensors++];
        t->lengths_offset = SIZE_MAX;
        t->field = f < nf ? (int)f : -1;
        size_t elems = 1;
        if (f == nf && tfield >= 0 && tspec->aux_name && lay->aux_t < 0) {
            /* the transform's aux output ("video_pts") before "index" */
            snprintf(t->name, sizeof(t->name), "%s", tspec->aux_name);
            t->aux = true;
            lay->aux_t = (int)(lay->n_tensors - 1);
            t->dtype = tspec->aux_dtype;
            t->ndim = 1;
            t->shape[0] = tspec->aux_n;
            if (tspec->aux_n < 0 || !stk__mul_ok(elems, (size_t)tspec->aux_n, &elems))
                goto too_large;
            f--;              /* "index" next */
        } else if (f == nf) { /* the "index" tensor */
            snprintf(t->name, sizeof(t->name), "index");
            t->dtype = STK_DTYPE_INT64;
        } else if ((int)f == tfield) {
            const stk_field *fd = &fields[f];
            const char *name = tspec->name ? tspec->name : fd->name;
            for (size_t k = 0; k < nf; k++) /* "audio" from field 'wav': no clash allowed */
                if ((int)k != tfield && strcmp(fields[k].name, name) == 0)
                    return stk__set_error(err, err_size, STK_EINVAL,
                                          "the transform's output is named '%s', which field %zu "
                                          "is called too; rename that field",
                                          name, k);
            snprintf(t->name, sizeof(t->name), "%s", name);
            t->transformed = true;
            t->dtype = tspec->dtype;
            t->ndim = tspec->ndim;
            for (uint32_t d = 0; d < tspec->ndim; d++) {
                t->shape[d] = tspec->shape[d];
                if (tspec->shape[d] < 0 || !stk__mul_ok(elems, (size_t)tspec->shape[d], &elems))
                    goto too_large;
            }
        } else {
            const stk_field *fd = &fields[f];
            snprintf(t->name, sizeof(t->name), "%s", fd->name);
            switch (fd->kind) {
            case STK_FIELD_BYTES:
                t->bytes = true;
                t->dtype = STK_DTYPE_UINT8;
                t->ndim = 1;
                if (max_size[f] > (uint64_t)INT64_MAX - 64)
                    goto too_large;
                t->shape[0] = (int64_t)STK_ALIGN_UP(max_size[f], 64);
                elems = (size_t)t->shape[0];
                break;
            case STK_FIELD_INT64:
                t->dtype = STK_DTYPE_INT64;
                break;
            case STK_FIELD_FLOAT32:
                t->dtype = STK_DTYPE_FLOAT32;
                break;
            case STK_FIELD_ARRAY:
                t->dtype = fd->dtype;
                t->ndim = fd->ndim;
                for (uint32_t d = 0; d < fd->ndim; d++) {
                    t->shape[d] = fd->shape[d];
                    /* the shape comes from the shard's schema: untrusted */
                    if (fd->shape[d] < 0 || !stk__mul_ok(elems, (size_t)fd->shape[d], &elems))
                        goto too_large;
                }
                break;
            }
        }
        size_t row, all;
        if (!stk__mul_ok(elems, stk_dtype_size(t->dtype), &row) ||
            !stk__mul_ok(row, batch_size, &all) || !grow(&total, all, &t->offset))
            goto too_large;
        t->row_size = row;
        bool lengths = t->bytes || (t->transformed && tspec->lengths);
        if (lengths && !grow(&total, sizeof(int64_t) * batch_size, &t->lengths_offset))
            return stk__set_error(err, err_size, STK_ELIMIT, "batch slot too large");
    }
    lay->slot_size = (size_t)STK_ALIGN_UP(total, 64);
    return STK_OK;
too_large:
    return stk__set_error(err, err_size, STK_ELIMIT,
                          "batch slot too large (field '%s' x batch size %u)",
                          lay->t[lay->n_tensors - 1].name, batch_size);
}

void stk__layout_tensor(const stk__layout *lay, size_t i, uint8_t *slot, uint32_t n,
                        stk_tensor *out)
{
    const stk__tlayout *t = &lay->t[i];
    stk_tensor_init(out); /* the library's size: sample_fn's tensors are ours */
    out->name = t->name;
    out->dtype = t->dtype;
    out->ndim = t->ndim + 1;
    out->shape[0] = n;
    for (uint32_t d = 0; d < t->ndim; d++)
        out->shape[d + 1] = t->shape[d];
    out->data = slot + t->offset;
    out->size = t->row_size * n;
    out->lengths =
        t->lengths_offset != SIZE_MAX ? (const int64_t *)(slot + t->lengths_offset) : NULL;
}
