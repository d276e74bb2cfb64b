/*
 * fixtures.h: the raw-record generator and loader options shared by the C tests (test_loader.c,
 * and through cuda_fixtures.h the GPU path's tests). Include after t.h.
 */
#ifndef STK_TEST_FIXTURES_H
#define STK_TEST_FIXTURES_H

#include "stoker.h"

#include <stddef.h>
#include <stdint.h>

#define FX_FN static __attribute__((unused))

/* Deterministic payload of record i: 1 + (i*37 % 300) bytes, byte k = (i*131 + k) & 255. */
FX_FN size_t fx_payload(uint64_t i, uint8_t *buf)
{
    size_t len = 1 + (size_t)(i * 37 % 300);
    for (size_t k = 0; k < len; k++)
        buf[k] = (uint8_t)(i * 131 + k);
    return len;
}

/* Loader options over one dataset path: rank 0 of 1. */
FX_FN stk_loader_opts fx_opts(const char *const *paths, int64_t batch, int threads)
{
    stk_loader_opts o;
    stk_loader_opts_init(&o);
    o.paths = paths;
    o.n_paths = 1;
    o.batch_size = batch;
    o.n_threads = threads;
    o.rank = 0;
    o.world = 1;
    return o;
}

#endif
