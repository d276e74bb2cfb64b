/*
 * stk_order.h: the epoch's order of a loader (stk_order_kind, include/stoker.h): which record
 * each position of an epoch reads. The pure parts (the weighted draws) are exposed for
 * tests/unit/loader/test_sampler.c; the loader's state lives in `core` (stk_loader_int.h).
 */
#ifndef STK_ORDER_H
#define STK_ORDER_H

#include "stk_internal.h"

/* One key of a draw without replacement. */
typedef struct stk__okey {
    double key;
    uint64_t index;
} stk__okey;

/* Prefix sums of `weights` (n of them) into cdf[0..n): checks every weight is finite and >= 0
 * and at least one > 0; *positive = how many are > 0. */
stk_status stk__order_cdf(const double *weights, uint64_t n, double *cdf, uint64_t *positive,
                          char *err, size_t err_size);

/* The record drawn at position `pos` of epoch `epoch` with replacement: the first i with
 * cdf[i] > u * cdf[n-1], u uniform in [0, 1) from the order's stream of (seed, epoch, pos). */
uint64_t stk__order_draw(const double *cdf, uint64_t n, uint64_t seed, uint64_t epoch,
                         uint64_t pos);

/* Epoch `epoch`'s list without replacement: the m (<= the positive weights) records of largest
 * key log(u_i) / w_i, largest first; `keys` is scratch of n entries. */
void stk__order_list(const double *weights, uint64_t n, uint64_t m, uint64_t seed, uint64_t epoch,
                     stk__okey *keys, uint64_t *out);

#endif /* STK_ORDER_H */
