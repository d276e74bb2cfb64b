/*
 * stk_types.c: the public header's constants as functions: the library's version, and the sizes
 * and names of the public enums (dtypes, field kinds).
 */
#include "stk_internal.h"

unsigned stk_version_number(void)
{
    return STK_VERSION_NUMBER;
}

const char *stk_version_string(void)
{
    return STK_VERSION_STRING;
}

size_t stk_dtype_size(stk_dtype dtype)
{
    switch (dtype) {
    case STK_DTYPE_UINT8:
    case STK_DTYPE_INT8:
        return 1;
    case STK_DTYPE_INT16:
    case STK_DTYPE_FLOAT16:
    case STK_DTYPE_BFLOAT16:
        return 2;
    case STK_DTYPE_INT32:
    case STK_DTYPE_FLOAT32:
        return 4;
    case STK_DTYPE_INT64:
    case STK_DTYPE_FLOAT64:
        return 8;
    }
    return 0;
}

const char *stk_dtype_name(stk_dtype dtype)
{
    switch (dtype) {
    case STK_DTYPE_UINT8:
        return "uint8";
    case STK_DTYPE_INT8:
        return "int8";
    case STK_DTYPE_INT16:
        return "int16";
    case STK_DTYPE_INT32:
        return "int32";
    case STK_DTYPE_INT64:
        return "int64";
    case STK_DTYPE_FLOAT16:
        return "float16";
    case STK_DTYPE_BFLOAT16:
        return "bfloat16";
    case STK_DTYPE_FLOAT32:
        return "float32";
    case STK_DTYPE_FLOAT64:
        return "float64";
    }
    return "unknown";
}

const char *stk_field_kind_name(stk_field_kind kind)
{
    switch (kind) {
    case STK_FIELD_BYTES:
        return "bytes";
    case STK_FIELD_INT64:
        return "int64";
    case STK_FIELD_FLOAT32:
        return "float32";
    case STK_FIELD_ARRAY:
        return "array";
    }
    return "unknown";
}
