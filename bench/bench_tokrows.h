/*
 * bench_tokrows.h: the shuffled window order of bench_tokcopy.c and bench_tokwiden.c: row
 * r -> (a r + c) mod R, a bijection of the R rows (a coprime with R), standing in for a loader's
 * shuffle without its cost. Not part of the library.
 */
#ifndef BENCH_TOKROWS_H
#define BENCH_TOKROWS_H

#include <stdint.h>

typedef struct {
    uint64_t R, a, c;
} rows_order;

static inline rows_order rows_order_make(uint64_t R)
{
    rows_order o = {R, 2654435761u % R, R / 3};
    for (;; o.a++) { /* gcd(a, R) = 1 */
        uint64_t x = o.a, y = R;
        while (y) {
            uint64_t t = x % y;
            x = y;
            y = t;
        }
        if (x == 1)
            return o;
    }
}

/* The row read k-th. */
static inline uint64_t rows_order_at(const rows_order *o, uint64_t k)
{
    return (o->a * k + o->c) % o->R;
}

#endif
