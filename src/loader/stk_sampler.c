/*
 * stk_sampler.c: the order of an epoch and its split among ranks.
 *
 * Order: a pure function of (n, shuffle, seed, epoch, position). The shuffle is a keyed Feistel
 * network over the smallest even-bit power-of-two domain >= n, with cycle walking back into
 * [0, n): a bijection computed in O(1) memory and O(1) expected time (the domain is < 4n, so the
 * expected number of walks is < 4), which is what lets a 10^9-record dataset shuffle without a
 * permutation table.
 *
 * Split (DESIGN.md "Distributed"): positions start..end-1 are padded by wrapping (p mod n) to a
 * multiple of world (PyTorch's DistributedSampler rule) or truncated (its drop_last: the "tail");
 * each global step of world*B positions is cut into world consecutive equal slices, slice r for
 * rank r, or (strided) dealt to the ranks in turn, position g+r+j*world to rank r, which is
 * DistributedSampler's indices[r::world] batched by the DataLoader. A rank's partial last batch
 * is kept or dropped apart from the tail (the DataLoader's drop_last). Either way the positions
 * consumed after k steps are a prefix of the global order whatever world is, which is what lets
 * a run resume on another number of ranks.
 *
 * The per-sample random stream (Philox4x32-10) is src/common/stk_rng.c.
 */
#include "stk_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- keyed Feistel permutation ---- */

#define FEISTEL_ROUNDS 6

uint64_t stk_sampler_index(uint64_t n, bool shuffle, uint64_t seed, uint64_t epoch, uint64_t pos)
{
    if (!shuffle || n <= 1)
        return pos;
    /* Smallest even bit count 2h with 2^(2h) >= n; the two halves are h bits each. */
    unsigned bits = 64 - (unsigned)__builtin_clzll(n - 1);
    unsigned h = (bits + 1) / 2;
    uint64_t mask = (h >= 32) ? 0xffffffffULL : ((1ULL << h) - 1);
    uint64_t base = stk__mix64(seed ^ stk__mix64(epoch + 0x9e3779b97f4a7c15ULL));
    uint64_t x = pos;
    do {
        uint64_t left = x >> h, right = x & mask;
        for (unsigned r = 0; r < FEISTEL_ROUNDS; r++) {
            uint64_t f = stk__mix64(right ^ (base + r * 0xd6e8feb86659fd93ULL)) & mask;
            uint64_t t = left ^ f;
            left = right;
            right = t;
        }
        x = (left << h) | right;
    } while (x >= n); /* cycle walking: stays a bijection of [0, n) */
    return x;
}

/* ---- the epoch plan ---- */

stk_status stk_plan_init_v2_sized(stk_plan *dst, uint64_t n, uint64_t start, uint32_t batch_size,
                                  uint32_t rank, uint32_t world, uint32_t flags, size_t struct_size)
{
    if (n == 0 || batch_size == 0 || world == 0 || rank >= world || !dst ||
        struct_size < sizeof(stk_plan) ||
        (flags & ~(STK_PLAN_DROP_LAST | STK_PLAN_DROP_TAIL | STK_PLAN_STRIDED)))
        return STK_EINVAL;
    stk_plan full = {.struct_size = sizeof(full)}, *plan = &full;
    plan->n = n;
    plan->start = start;
    plan->batch_size = batch_size;
    plan->rank = rank;
    plan->world = world;
    plan->drop_last = flags & STK_PLAN_DROP_LAST;
    plan->drop_tail = flags & STK_PLAN_DROP_TAIL;
    plan->strided = flags & STK_PLAN_STRIDED;
    if (start < n) {
        uint64_t rem = n - start;
        plan->per_rank = plan->drop_tail ? rem / world : (rem + world - 1) / world;
    }
    plan->end = start + plan->per_rank * world;
    plan->n_batches = plan->drop_last ? plan->per_rank / batch_size
                                      : (plan->per_rank + batch_size - 1) / batch_size;
    *dst = full;
    return STK_OK;
}

stk_status stk_plan_init_sized(stk_plan *plan, uint64_t n, uint64_t start, uint32_t batch_size,
                               uint32_t rank, uint32_t world, bool drop_last, size_t struct_size)
{
    return stk_plan_init_v2_sized(plan, n, start, batch_size, rank, world,
                                  drop_last ? STK_PLAN_DROP_LAST | STK_PLAN_DROP_TAIL : 0,
                                  struct_size);
}

stk_status stk_plan_batch(const stk_plan *plan, uint64_t b, uint64_t *first, uint32_t *n_samples,
                          uint64_t *consumed)
{
    if (b >= plan->n_batches)
        return STK_EINVAL;
    uint64_t step = (uint64_t)plan->world * plan->batch_size;
    uint64_t g = plan->start + b * step;
    uint64_t m = STK_MIN(step, plan->end - g); /* a multiple of world (see stk_plan_init) */
    uint64_t per = m / plan->world;
    /* Strided: the rank's j-th sample of the epoch is position start + rank + j * world, so its
     * batch b starts at g + rank (DistributedSampler's indices[rank::world], batched). */
    *first = plan->strided ? g + plan->rank : g + plan->rank * per;
    *n_samples = (uint32_t)per;
    *consumed = g + m;
    return STK_OK;
}

/* ---- rank and world from the environment ---- */

/* Parse a non-negative decimal environment variable; 1 = set and valid, 0 = unset, <0 = bad. */
static int env_u32(const char *name, uint32_t *out)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return 0;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || *end || v[0] == '-' || x > 0x7fffffffULL) {
        stk__set_last_error(STK_EINVAL, "environment variable %s=\"%s\" is not a valid number",
                            name, v);
        return -1;
    }
    *out = (uint32_t)x;
    return 1;
}

stk_status stk_env_rank(uint32_t *rank, uint32_t *world)
{
    static const char *const pairs[][2] = {
        {"RANK", "WORLD_SIZE"},
        {"SLURM_PROCID", "SLURM_NTASKS"},
        {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
    };
    for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
        uint32_t r = 0, w = 0;
        int hr = env_u32(pairs[i][0], &r), hw = env_u32(pairs[i][1], &w);
        if (hr < 0 || hw < 0)
            return STK_EINVAL;
        if (hr == 0 && hw == 0)
            continue;
        if (hr == 0 || hw == 0)
            return stk__set_last_error(STK_EINVAL, "%s is set but %s is not", pairs[i][hr ? 0 : 1],
                                       pairs[i][hr ? 1 : 0]);
        if (w == 0 || r >= w)
            return stk__set_last_error(STK_EINVAL, "rank %s=%u is not below world size %s=%u",
                                       pairs[i][0], r, pairs[i][1], w);
        *rank = r;
        *world = w;
        return STK_OK;
    }
    *rank = 0;
    *world = 1;
    return STK_OK;
}
