/*
 * stk_field.c: the schema model every format shares: a field's validity (names, kinds, shapes
 * bounded so an array's byte size fits 32 bits), its canonical form (what files store and readers
 * compare) and its fixed byte size.
 */
#include "stk_internal.h"

#include <string.h>

/* Fixed byte size of a field's value, or 0 for variable-length bytes. */
uint64_t stk__field_fixed_size(const stk_field *f)
{
    switch (f->kind) {
    case STK_FIELD_INT64:
        return 8;
    case STK_FIELD_FLOAT32:
        return 4;
    case STK_FIELD_ARRAY: {
        uint64_t n = stk_dtype_size(f->dtype);
        for (uint32_t d = 0; d < f->ndim; d++)
            n *= (uint64_t)f->shape[d]; /* validated: each dim <= 2^32, product checked below */
        return n;
    }
    default:
        return 0;
    }
}

/* Validate one field description; `why` gets the reason. Shapes are bounded so that the array's
 * byte size fits the u32 of an index entry. */
bool stk__field_valid(const stk_field *f, char *why, size_t why_size)
{
    size_t len = strnlen(f->name, STK_MAX_NAME);
    if (len == 0 || len == STK_MAX_NAME) {
        snprintf(why, why_size, "field name empty or longer than %d bytes", STK_MAX_NAME - 1);
        return false;
    }
    for (size_t i = 0; i < len; i++) {
        char c = f->name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-' || c == '/')) {
            snprintf(why, why_size, "field name '%.*s' has a character outside [A-Za-z0-9_./-]",
                     (int)len, f->name);
            return false;
        }
    }
    if ((unsigned)f->kind > STK_FIELD_ARRAY) {
        snprintf(why, why_size, "field '%s': unknown kind %u", f->name, (unsigned)f->kind);
        return false;
    }
    if (f->kind != STK_FIELD_ARRAY)
        return true;
    if (stk_dtype_size(f->dtype) == 0) {
        snprintf(why, why_size, "field '%s': unknown dtype %u", f->name, (unsigned)f->dtype);
        return false;
    }
    if (f->ndim < 1 || f->ndim > STK_MAX_DIMS) {
        snprintf(why, why_size, "field '%s': ndim %u not in 1..%d", f->name, f->ndim, STK_MAX_DIMS);
        return false;
    }
    uint64_t n = stk_dtype_size(f->dtype);
    for (uint32_t d = 0; d < f->ndim; d++) {
        if (f->shape[d] < 1 || f->shape[d] > UINT32_MAX || n * (uint64_t)f->shape[d] > UINT32_MAX) {
            snprintf(why, why_size,
                     "field '%s': shape dimension %u is %lld (need 1.., total under "
                     "4 GiB)",
                     f->name, d, (long long)f->shape[d]);
            return false;
        }
        n *= (uint64_t)f->shape[d];
    }
    return true;
}

/* The canonical form of a field: what the file stores and what readers compare. Scalars and
 * bytes carry their implied dtype and no shape. */
stk_field stk__field_canonical(const stk_field *f)
{
    stk_field c;
    memset(&c, 0, sizeof(c));
    c.struct_size = sizeof(c);
    memcpy(c.name, f->name, strnlen(f->name, STK_MAX_NAME - 1));
    c.kind = f->kind;
    switch (f->kind) {
    case STK_FIELD_BYTES:
        c.dtype = STK_DTYPE_UINT8;
        break;
    case STK_FIELD_INT64:
        c.dtype = STK_DTYPE_INT64;
        break;
    case STK_FIELD_FLOAT32:
        c.dtype = STK_DTYPE_FLOAT32;
        break;
    case STK_FIELD_ARRAY:
        c.dtype = f->dtype;
        c.ndim = f->ndim;
        for (uint32_t d = 0; d < f->ndim && d < STK_MAX_DIMS; d++)
            c.shape[d] = f->shape[d];
        break;
    }
    return c;
}

bool stk__fields_load(stk_field *dst, const stk_field *src, size_t n, char *why, size_t why_size)
{
    for (size_t i = 0; i < n; i++) {
        stk_field_init(&dst[i]);
        if (!stk__elem_load(&dst[i], sizeof(dst[i]), src, i)) {
            snprintf(why, why_size,
                     "field %zu not initialised with stk_field_init (struct_size unset or unlike "
                     "field 0's)",
                     i);
            return false;
        }
    }
    return true;
}

bool stk__field_equal(const stk_field *a, const stk_field *b)
{
    if (strcmp(a->name, b->name) != 0 || a->kind != b->kind || a->dtype != b->dtype ||
        a->ndim != b->ndim)
        return false;
    for (uint32_t d = 0; d < STK_MAX_DIMS; d++)
        if (a->shape[d] != b->shape[d])
            return false;
    return true;
}
