/*
 * stk_abi.c: the one rule for structs crossing the ABI (include/stoker.h, "Structs"): a caller's
 * input struct or array element read as far as its struct_size reaches, over our defaults; an
 * output struct written as far as the caller's reaches; an init storing our defaults into the
 * caller's size.
 */
#include "stk_internal.h"

#include <string.h>

bool stk__opts_load(void *dst, size_t dst_size, const void *src)
{
    size_t n;
    if (!src)
        return false;
    memcpy(&n, src, sizeof(n));
    if (n < STK__STRUCT_MIN)
        return false;
    memcpy(dst, src, STK_MIN(n, dst_size)); /* a newer, longer struct: the fields we know */
    memcpy(dst, &dst_size, sizeof(dst_size));
    return true;
}

bool stk__out_store(void *dst, const void *full, size_t full_size)
{
    size_t n;
    if (!dst)
        return false;
    memcpy(&n, dst, sizeof(n));
    if (n < STK__STRUCT_MIN)
        return false;
    n = STK_MIN(n, full_size);
    memcpy(dst, full, n);
    memcpy(dst, &n, sizeof(n));
    return true;
}

void stk__init_store(void *dst, size_t dst_size, const void *full, size_t full_size)
{
    size_t n = STK_MIN(dst_size, full_size);
    if (!dst || n < sizeof(size_t))
        return;
    memcpy(dst, full, n);
    memcpy(dst, &n, sizeof(n));
}

bool stk__elem_load(void *dst, size_t dst_size, const void *array, size_t i)
{
    size_t stride, n;
    if (!array)
        return false;
    memcpy(&stride, array, sizeof(stride));
    if (stride < STK__STRUCT_MIN || i > SIZE_MAX / stride)
        return false;
    const char *src = (const char *)array + i * stride;
    memcpy(&n, src, sizeof(n));
    if (n != stride) /* an element not initialised like the first */
        return false;
    return stk__opts_load(dst, dst_size, src);
}
