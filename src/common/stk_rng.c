/*
 * stk_rng.c: the per-sample random stream. Philox4x32-10 (Salmon et al., SC'11), key = seed,
 * counter = (index, epoch, block): counter-based, so a sample's numbers depend on nothing but
 * (seed, epoch, index). Used by the transforms (src/xform) and the loader's finishing flip.
 */
#include "stk_internal.h"

#include <math.h>

/* ---- Philox4x32-10 ---- */

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

/* One Philox4x32-10 block: 4 words out of a 4-word counter and a 2-word key. */
void stk__philox_block(const uint32_t ctr_in[4], const uint32_t key_in[2], uint32_t out[4])
{
    uint32_t c0 = ctr_in[0], c1 = ctr_in[1], c2 = ctr_in[2], c3 = ctr_in[3];
    uint32_t k0 = key_in[0], k1 = key_in[1];
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c0 = n0;
        c1 = (uint32_t)p1;
        c2 = n2;
        c3 = (uint32_t)p0;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

void stk_rng_init_sized(stk_rng *rng, uint64_t seed, uint64_t epoch, uint64_t index,
                        size_t struct_size)
{
    /* Epochs beyond 2^32 fold their high half into the key rather than wrap the counter. */
    uint64_t key = seed ^ stk__mix64((epoch >> 32) + 0x6a09e667f3bcc908ULL);
    if ((epoch >> 32) == 0)
        key = seed;
    stk_rng r = {.struct_size = sizeof(r)};
    r.key[0] = (uint32_t)key;
    r.key[1] = (uint32_t)(key >> 32);
    r.ctr[0] = (uint32_t)index;
    r.ctr[1] = (uint32_t)(index >> 32);
    r.ctr[2] = (uint32_t)epoch;
    r.ctr[3] = 0; /* block number within the sample's stream */
    r.used = 4;
    if (struct_size == sizeof(r))
        *rng = r; /* the usual case, without a call */
    else
        stk__init_store(rng, struct_size, &r, sizeof(r));
}

uint32_t stk_rng_u32(stk_rng *rng)
{
    if (rng->used == 4) {
        stk__philox_block(rng->ctr, rng->key, rng->buf);
        rng->ctr[3]++;
        rng->used = 0;
    }
    return rng->buf[rng->used++];
}

uint64_t stk_rng_u64(stk_rng *rng)
{
    uint64_t hi = stk_rng_u32(rng);
    return (hi << 32) | stk_rng_u32(rng);
}

double stk_rng_uniform(stk_rng *rng)
{
    return (double)(stk_rng_u64(rng) >> 11) * (1.0 / 9007199254740992.0);
}

/* ---- samplers (MixUp/CutMix's Beta, AugMix's Dirichlet) ---- */

static double normal_draw(stk_rng *rng)
{
    double u1 = 1.0 - stk_rng_uniform(rng), u2 = stk_rng_uniform(rng); /* u1 in (0, 1] */
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* Gamma(a, 1) by Marsaglia and Tsang (2000); a < 1 through Gamma(a + 1) * U^(1/a). */
double stk__rng_gamma(stk_rng *rng, double a)
{
    if (a < 1.0) {
        double u = 1.0 - stk_rng_uniform(rng);
        return stk__rng_gamma(rng, a + 1.0) * pow(u, 1.0 / a);
    }
    double d = a - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x = normal_draw(rng), v = 1.0 + c * x;
        if (v <= 0.0)
            continue;
        v = v * v * v;
        double u = 1.0 - stk_rng_uniform(rng);
        if (u < 1.0 - 0.0331 * x * x * x * x || log(u) < 0.5 * x * x + d * (1.0 - v + log(v)))
            return d * v;
    }
}

/* Salt of the per-sample seed stream: apart from the augmentation stream (key = seed) and the
 * order's (stk_order.c's ORDER_SALT). */
#define SAMPLE_SEED_SALT 0x9e6c63d0676a9a99ULL

uint64_t stk_sample_seed(uint64_t seed, uint64_t epoch, uint64_t index)
{
    stk_rng r;
    stk_rng_init(&r, seed ^ SAMPLE_SEED_SALT, epoch, index);
    return stk_rng_u64(&r);
}
