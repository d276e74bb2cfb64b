/*
 * stk_npy.h: the NumPy `.npy` header (format versions 1-3), parsed from memory: for the npy
 * source (stk_src_npy.c, which implements these) and `.npy` members of WebDataset samples
 * (stk_src_wds.c). Supported: little-endian or byte-sized integers and floats, C order.
 */
#ifndef STK_NPY_H
#define STK_NPY_H

#include "stk_internal.h"

/* What a .npy header says. */
typedef struct stk__npy {
    stk_dtype dtype;
    uint32_t nd;                    /* 0 for a 0-d array */
    int64_t dims[STK_MAX_DIMS + 1]; /* the shape */
    uint64_t data_offset;           /* bytes before the data (magic, version, length, dict) */
} stk__npy;

/* The bytes the header of a .npy takes (magic to the end of the dict), from its first n bytes
 * (12 suffice; fewer only when the file is that short). STK_EFORMAT ("WHAT: not a .npy file")
 * when they are not the start of one. */
stk_status stk__npy_header_size(const uint8_t *pre, size_t n, const char *what, uint64_t *size,
                                char *err, size_t err_size);

/* Parse the header at the start of b (n bytes, at least the header's). Errors start with
 * `what`: STK_EFORMAT (not a .npy, corrupt dict), STK_ENOTSUP (Fortran order, object,
 * structured or big-endian dtypes, over STK_MAX_DIMS + 1 dimensions), STK_ENOMEM. */
stk_status stk__npy_parse(const uint8_t *b, size_t n, const char *what, stk__npy *out, char *err,
                          size_t err_size);

#endif /* STK_NPY_H */
