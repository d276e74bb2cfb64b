/*
 * test_sampler.c: epoch order (shuffle bijection, determinism), the rank split with PyTorch's
 * DistributedSampler padding values, resume positions, environment rank parsing, and the Philox
 * per-sample stream (Random123 known-answer vectors).
 */
#include "stk_internal.h"
#include "t.h"

#include <math.h>

/* Philox4x32-10 known-answer vectors from Random123's kat_vectors. */
static int test_philox_kat(void)
{
    static const uint32_t kat[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
         0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
         0x94fdcceb, 0x5001e420, 0x24126ea1},
    };
    for (int i = 0; i < 3; i++) {
        uint32_t out[4];
        stk__philox_block(kat[i], kat[i] + 4, out);
        for (int j = 0; j < 4; j++)
            T_CHECKF(out[j] == kat[i][6 + j], "vector %d word %d: %08x", i, j, out[j]);
    }
    /* The stream of (seed 0, epoch 0, index 0) starts with the first vector's output. */
    stk_rng r;
    stk_rng_init(&r, 0, 0, 0);
    T_EQ(stk_rng_u32(&r), 0x6627e8d5);
    return 0;
}

static int test_rng_streams(void)
{
    stk_rng a, b;
    stk_rng_init(&a, 42, 3, 1000);
    stk_rng_init(&b, 42, 3, 1000);
    for (int i = 0; i < 100; i++)
        T_EQ(stk_rng_u64(&a), stk_rng_u64(&b));
    /* Any change of seed, epoch or index changes the stream. */
    uint64_t base, v;
    stk_rng_init(&a, 42, 3, 1000);
    base = stk_rng_u64(&a);
    stk_rng_init(&a, 43, 3, 1000);
    v = stk_rng_u64(&a);
    T_CHECK(v != base);
    stk_rng_init(&a, 42, 4, 1000);
    v = stk_rng_u64(&a);
    T_CHECK(v != base);
    stk_rng_init(&a, 42, 3, 1001);
    v = stk_rng_u64(&a);
    T_CHECK(v != base);
    stk_rng_init(&a, 42, 3ull << 33, 1000); /* epochs beyond 2^32 get their own streams too */
    v = stk_rng_u64(&a);
    T_CHECK(v != base);
    /* Uniform doubles: in [0, 1), mean 1/2, variance 1/12. */
    double sum = 0, sq = 0;
    const int n = 200000;
    stk_rng_init(&a, 7, 0, 0);
    for (int i = 0; i < n; i++) {
        double u = stk_rng_uniform(&a);
        T_CHECK(u >= 0.0 && u < 1.0);
        sum += u;
        sq += u * u;
    }
    double mean = sum / n, var = sq / n - mean * mean;
    T_CHECKF(fabs(mean - 0.5) < 0.005, "mean %f", mean);
    T_CHECKF(fabs(var - 1.0 / 12) < 0.002, "variance %f", var);
    return 0;
}

/* Every position maps to a distinct record in [0, n). */
static int check_bijection(uint64_t n, uint64_t seed, uint64_t epoch)
{
    uint8_t *seen = calloc(n, 1);
    T_CHECK(seen);
    for (uint64_t p = 0; p < n; p++) {
        uint64_t i = stk_sampler_index(n, true, seed, epoch, p);
        if (i >= n || seen[i]) {
            fprintf(stderr, "  n=%llu: position %llu -> %llu (dup or out of range)\n",
                    (unsigned long long)n, (unsigned long long)p, (unsigned long long)i);
            free(seen);
            return 1;
        }
        seen[i] = 1;
    }
    free(seen);
    return 0;
}

static int test_shuffle_bijection(void)
{
    for (uint64_t n = 1; n <= 300; n++)
        T_CHECK(check_bijection(n, 1234, n) == 0);
    static const uint64_t sizes[] = {1000, 1023, 1024, 1025, 4097, 65536, 100003, 1000000};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        T_CHECK(check_bijection(sizes[i], 99, 5) == 0);
    /* 10^9 records: no table; spot-check range and that the order is not the identity. */
    uint64_t big = 1000000000ULL, moved = 0;
    for (uint64_t p = 0; p < 1000; p++) {
        uint64_t i = stk_sampler_index(big, true, 1, 0, p * 999983);
        T_CHECK(i < big);
        moved += i != p * 999983;
    }
    T_CHECK(moved > 990);
    return 0;
}

static int test_shuffle_determinism(void)
{
    const uint64_t n = 1000;
    int same_epoch = 1, diff_epoch = 0, diff_seed = 0, fixed = 0;
    for (uint64_t p = 0; p < n; p++) {
        uint64_t a = stk_sampler_index(n, true, 5, 2, p);
        same_epoch &= a == stk_sampler_index(n, true, 5, 2, p);
        diff_epoch += a != stk_sampler_index(n, true, 5, 3, p);
        diff_seed += a != stk_sampler_index(n, true, 6, 2, p);
        fixed += a == p;
        T_EQ(stk_sampler_index(n, false, 5, 2, p), p); /* no shuffle: identity */
    }
    T_CHECK(same_epoch);
    T_CHECKF(diff_epoch > 950, "only %d positions differ between epochs", diff_epoch);
    T_CHECKF(diff_seed > 950, "only %d positions differ between seeds", diff_seed);
    T_CHECKF(fixed < 20, "%d fixed points", fixed);
    /* Position 0 lands everywhere over many epochs (no stuck first element). */
    uint8_t hit[16] = {0};
    for (uint64_t e = 0; e < 400; e++)
        hit[stk_sampler_index(16, true, 0, e, 0)] = 1;
    for (int i = 0; i < 16; i++)
        T_CHECK(hit[i]);
    return 0;
}

/* Collect a rank's sample records (no shuffle) over a whole epoch. */
static int rank_samples(uint64_t n, uint32_t b, uint32_t r, uint32_t w, bool drop, uint64_t *out,
                        size_t *n_out)
{
    stk_plan p;
    T_OK(stk_plan_init(&p, n, 0, b, r, w, drop));
    *n_out = 0;
    for (uint64_t k = 0; k < p.n_batches; k++) {
        uint64_t first, consumed;
        uint32_t count;
        T_OK(stk_plan_batch(&p, k, &first, &count, &consumed));
        for (uint32_t j = 0; j < count; j++)
            out[(*n_out)++] = (first + j) % n;
    }
    T_EQ(*n_out, p.per_rank - (drop ? p.per_rank % b : 0));
    return 0;
}

/* PyTorch's DistributedSampler values (pytorch/pytorch torch/utils/data/distributed.py). */
static int test_pytorch_padding(void)
{
    static const struct {
        uint64_t n;
        uint64_t want[4][3];
        size_t len;
    } cases[] = {
        {10, {{0, 4, 8}, {1, 5, 9}, {2, 6, 0}, {3, 7, 1}}, 3},
        {9, {{0, 4, 8}, {1, 5, 0}, {2, 6, 1}, {3, 7, 2}}, 3},
        {2, {{0}, {1}, {0}, {1}}, 1},
        {1, {{0}, {0}, {0}, {0}}, 1},
    };
    for (size_t c = 0; c < 4; c++) {
        for (uint32_t r = 0; r < 4; r++) {
            uint64_t got[16];
            size_t n;
            T_CHECK(rank_samples(cases[c].n, 1, r, 4, false, got, &n) == 0);
            T_EQ(n, cases[c].len);
            for (size_t i = 0; i < n; i++)
                T_CHECKF(got[i] == cases[c].want[r][i], "N=%llu rank %u sample %zu: %llu",
                         (unsigned long long)cases[c].n, r, i, (unsigned long long)got[i]);
        }
    }
    /* drop_last: floor(N/W) each; N=10, W=4 -> [0,4] [1,5] [2,6] [3,7]; N=2, W=4 -> none. */
    for (uint32_t r = 0; r < 4; r++) {
        uint64_t got[16];
        size_t n;
        T_CHECK(rank_samples(10, 1, r, 4, true, got, &n) == 0);
        T_EQ(n, 2);
        T_EQ(got[0], r);
        T_EQ(got[1], r + 4);
        T_CHECK(rank_samples(2, 1, r, 4, true, got, &n) == 0);
        T_EQ(n, 0);
    }
    return 0;
}

/* Batch counts: ceil(N/B), floor(N/B) with drop_last; per-rank equal counts. */
static int test_batch_counts(void)
{
    stk_plan p;
    T_OK(stk_plan_init(&p, 100, 0, 3, 0, 1, false));
    T_EQ(p.n_batches, 34);
    T_OK(stk_plan_init(&p, 100, 0, 3, 0, 1, true));
    T_EQ(p.n_batches, 33);
    T_OK(stk_plan_init(&p, 5, 0, 10, 0, 1, false));
    T_EQ(p.n_batches, 1);
    T_OK(stk_plan_init(&p, 5, 0, 10, 0, 1, true));
    T_EQ(p.n_batches, 0);
    T_EQ(stk_plan_init(&p, 0, 0, 1, 0, 1, false), STK_EINVAL);
    T_EQ(stk_plan_init(&p, 10, 0, 0, 0, 1, false), STK_EINVAL);
    T_EQ(stk_plan_init(&p, 10, 0, 1, 4, 4, false), STK_EINVAL);
    T_EQ(stk_plan_init(&p, 10, 0, 1, 0, 0, false), STK_EINVAL);
    /* Every rank gets the same number of batches and samples, also in the last short step. */
    for (uint32_t w = 1; w <= 5; w++)
        for (uint32_t b = 1; b <= 4; b++)
            for (uint64_t n = 1; n <= 23; n++) {
                stk_plan p0;
                T_OK(stk_plan_init(&p0, n, 0, b, 0, w, false));
                for (uint32_t r = 1; r < w; r++) {
                    T_OK(stk_plan_init(&p, n, 0, b, r, w, false));
                    T_EQ(p.n_batches, p0.n_batches);
                    for (uint64_t k = 0; k < p.n_batches; k++) {
                        uint64_t f0, f1, c0, c1;
                        uint32_t n0, n1;
                        T_OK(stk_plan_batch(&p0, k, &f0, &n0, &c0));
                        T_OK(stk_plan_batch(&p, k, &f1, &n1, &c1));
                        T_EQ(n0, n1);
                        T_EQ(c0, c1);
                    }
                }
            }
    return 0;
}

/* Across W ranks the positions of an epoch cover 0..N-1 exactly once plus the padding. */
static int test_cover_once(void)
{
    for (uint32_t w = 1; w <= 4; w++)
        for (uint64_t n = 1; n <= 50; n++) {
            uint32_t counts[64] = {0};
            uint64_t total = 0, pad = (w - n % w) % w;
            for (uint32_t r = 0; r < w; r++) {
                uint64_t got[64];
                size_t k;
                T_CHECK(rank_samples(n, 3, r, w, false, got, &k) == 0);
                for (size_t i = 0; i < k; i++)
                    counts[got[i]]++;
                total += k;
            }
            T_EQ(total, n + pad);
            /* padding wraps: position n+k is record k mod n (tiled when pad > n) */
            uint32_t want[64];
            for (uint64_t i = 0; i < n; i++)
                want[i] = 1;
            for (uint64_t k = 0; k < pad; k++)
                want[k % n]++;
            for (uint64_t i = 0; i < n; i++)
                T_EQ(counts[i], want[i]);
        }
    return 0;
}

/* `rest`, restarted at the position consumed after k batches of `full`, yields exactly full's
 * batches from k on. */
static int same_remainder(const stk_plan *full, const stk_plan *rest, uint64_t k)
{
    T_EQ(rest->n_batches, full->n_batches - k);
    for (uint64_t j = 0; j < rest->n_batches; j++) {
        uint64_t f0, f1, c0, c1;
        uint32_t n0, n1;
        T_OK(stk_plan_batch(full, k + j, &f0, &n0, &c0));
        T_OK(stk_plan_batch(rest, j, &f1, &n1, &c1));
        T_EQ(f0, f1);
        T_EQ(n0, n1);
        T_EQ(c0, c1);
    }
    return 0;
}

/* A plan restarted at the consumed position of step k yields the uninterrupted remainder, and
 * on another world size covers the remaining positions exactly once. */
static int test_resume_positions(void)
{
    const uint64_t n = 37;
    const uint32_t b = 3, w = 2;
    stk_plan full, rest;
    T_OK(stk_plan_init(&full, n, 0, b, 1, w, false));
    for (uint64_t k = 0; k <= full.n_batches; k++) {
        uint64_t start = 0, f, c;
        uint32_t cnt;
        if (k > 0) {
            T_OK(stk_plan_batch(&full, k - 1, &f, &cnt, &c));
            start = c;
        }
        T_OK(stk_plan_init(&rest, n, start, b, 1, w, false));
        T_CHECK(same_remainder(&full, &rest, k) == 0);
    }
    /* Resume at position 12 with 3 ranks instead of 2: positions 12..36 once, plus padding. */
    uint32_t counts[64] = {0};
    for (uint32_t r = 0; r < 3; r++) {
        T_OK(stk_plan_init(&rest, n, 12, b, r, 3, false));
        for (uint64_t j = 0; j < rest.n_batches; j++) {
            uint64_t f, c;
            uint32_t cnt;
            T_OK(stk_plan_batch(&rest, j, &f, &cnt, &c));
            for (uint32_t i = 0; i < cnt; i++)
                counts[(f + i)]++;
        }
    }
    for (uint64_t p = 12; p < n; p++)
        T_EQ(counts[p], 1);
    T_EQ(counts[37], 1); /* 25 remaining -> 27 with padding: positions 37, 38 wrap to 0, 1 */
    T_EQ(counts[38], 1);
    for (uint64_t p = 0; p < 12; p++)
        T_EQ(counts[p], 0);
    return 0;
}

/* PyTorch's DataLoader batches over DistributedSampler(rank, num_replicas=w, shuffle=False,
 * drop_last=tail) with the loader's drop_last=last (torch/utils/data/distributed.py,
 * dataloader.py), written out: rank r's records in batch order into out, batch sizes into
 * sizes. Returns the number of batches. */
static size_t torch_distributed(uint64_t n, uint32_t b, uint32_t r, uint32_t w, bool tail,
                                bool last, uint64_t *out, uint32_t *sizes)
{
    /* num_samples = ceil((n - w) / w) when drop_last and n % w, else ceil(n / w) */
    uint64_t num = tail && n % w ? (n > w ? (n - w + w - 1) / w : 0) : (n + w - 1) / w;
    uint64_t total = num * w, mine[256];
    size_t k = 0, batches = 0;
    for (uint64_t i = r; i < total; i += w) /* indices[rank:total_size:num_replicas] */
        mine[k++] = i % n;                  /* padding repeats indices from the start */
    for (size_t i = 0; i < k; i += b) {
        uint32_t size = (uint32_t)(k - i < b ? k - i : b);
        if (size < b && last)
            break;
        for (uint32_t j = 0; j < size; j++)
            *out++ = mine[i + j];
        sizes[batches++] = size;
    }
    return batches;
}

/* The strided plan gives exactly those batches for every combination of the two drop_last
 * flags (issue 24: pytorch/examples' imagenet validation loader is DistributedSampler(
 * drop_last=True) under a DataLoader with drop_last=False), and the positions consumed after
 * each step are the same prefix of the global order as the consecutive split's. */
static int test_strided_matches_distributed_sampler(void)
{
    for (uint32_t w = 1; w <= 5; w++)
        for (uint32_t b = 1; b <= 5; b++)
            for (uint64_t n = 1; n <= 41; n++)
                for (unsigned f = 0; f < 4; f++) {
                    bool tail = f & 1, last = f & 2;
                    uint32_t flags = STK_PLAN_STRIDED | (tail ? STK_PLAN_DROP_TAIL : 0) |
                                     (last ? STK_PLAN_DROP_LAST : 0);
                    for (uint32_t r = 0; r < w; r++) {
                        uint64_t want[256], got[256];
                        uint32_t sizes[256];
                        size_t nb = torch_distributed(n, b, r, w, tail, last, want, sizes);
                        stk_plan p, q;
                        T_OK(stk_plan_init_v2(&p, n, 0, b, r, w, flags));
                        T_OK(stk_plan_init_v2(&q, n, 0, b, r, w, flags & ~STK_PLAN_STRIDED));
                        T_CHECKF(p.n_batches == nb,
                                 "n=%llu b=%u w=%u r=%u tail=%d last=%d: "
                                 "%llu batches, torch %zu",
                                 (unsigned long long)n, b, w, r, tail, last,
                                 (unsigned long long)p.n_batches, nb);
                        T_EQ(q.n_batches, nb);
                        size_t k = 0;
                        for (uint64_t j = 0; j < p.n_batches; j++) {
                            uint64_t first, consumed, f2, c2;
                            uint32_t count, n2;
                            T_OK(stk_plan_batch(&p, j, &first, &count, &consumed));
                            T_OK(stk_plan_batch(&q, j, &f2, &n2, &c2));
                            T_EQ(count, sizes[j]);
                            T_EQ(n2, count);
                            T_EQ(consumed, c2);
                            for (uint32_t i = 0; i < count; i++)
                                got[k++] = (first + (uint64_t)i * w) % n;
                        }
                        for (size_t i = 0; i < k; i++)
                            T_CHECKF(got[i] == want[i],
                                     "n=%llu b=%u w=%u r=%u tail=%d last=%d: sample %zu is "
                                     "%llu, torch %llu",
                                     (unsigned long long)n, b, w, r, tail, last, i,
                                     (unsigned long long)got[i], (unsigned long long)want[i]);
                    }
                }
    /* The first form is the second with both halves of drop_last together. */
    stk_plan a, c;
    T_OK(stk_plan_init(&a, 10, 0, 3, 1, 4, true));
    T_OK(stk_plan_init_v2(&c, 10, 0, 3, 1, 4, STK_PLAN_DROP_LAST | STK_PLAN_DROP_TAIL));
    T_CHECK(a.struct_size == c.struct_size && a.n == c.n && a.start == c.start && a.end == c.end &&
            a.per_rank == c.per_rank && a.n_batches == c.n_batches &&
            a.batch_size == c.batch_size && a.rank == c.rank && a.world == c.world &&
            a.drop_last == c.drop_last && a.drop_tail == c.drop_tail && a.strided == c.strided);
    T_CHECK(a.drop_last && a.drop_tail && !a.strided);
    T_EQ(stk_plan_init_v2(&a, 10, 0, 3, 1, 4, 0x8), STK_EINVAL);
    /* The ABI rule: a caller's struct shorter than the plan is refused, not overrun. */
    T_EQ(stk_plan_init_v2_sized(&a, 10, 0, 3, 1, 4, STK_PLAN_STRIDED, sizeof(a) - 1), STK_EINVAL);
    T_EQ(stk_plan_init_v2_sized(NULL, 10, 0, 3, 1, 4, 0, sizeof(a)), STK_EINVAL);
    return 0;
}

/* A strided plan resumed at the position consumed after step k yields the uninterrupted
 * remainder (same world), with the tail dropped and the partial batch kept. */
static int test_strided_resume(void)
{
    const uint64_t n = 500;
    const uint32_t b = 32, w = 4;
    for (uint32_t r = 0; r < w; r++) {
        stk_plan full, rest;
        T_OK(stk_plan_init_v2(&full, n, 0, b, r, w, STK_PLAN_STRIDED | STK_PLAN_DROP_TAIL));
        T_EQ(full.per_rank, 125); /* all 125 samples of each rank, not 96 */
        T_EQ(full.n_batches, 4);
        for (uint64_t k = 1; k <= full.n_batches; k++) {
            uint64_t f, c;
            uint32_t cnt;
            T_OK(stk_plan_batch(&full, k - 1, &f, &cnt, &c));
            T_OK(stk_plan_init_v2(&rest, n, c, b, r, w, STK_PLAN_STRIDED | STK_PLAN_DROP_TAIL));
            T_CHECK(same_remainder(&full, &rest, k) == 0);
        }
    }
    return 0;
}

static int test_env_rank(void)
{
    uint32_t r = 9, w = 9;
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    unsetenv("SLURM_PROCID");
    unsetenv("SLURM_NTASKS");
    unsetenv("OMPI_COMM_WORLD_RANK");
    unsetenv("OMPI_COMM_WORLD_SIZE");
    T_OK(stk_env_rank(&r, &w));
    T_EQ(r, 0);
    T_EQ(w, 1);
    setenv("OMPI_COMM_WORLD_RANK", "1", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "3", 1);
    T_OK(stk_env_rank(&r, &w));
    T_EQ(r, 1);
    T_EQ(w, 3);
    setenv("SLURM_PROCID", "2", 1); /* SLURM wins over Open MPI */
    setenv("SLURM_NTASKS", "4", 1);
    T_OK(stk_env_rank(&r, &w));
    T_EQ(r, 2);
    T_EQ(w, 4);
    setenv("RANK", "3", 1); /* torchrun wins over both */
    setenv("WORLD_SIZE", "8", 1);
    T_OK(stk_env_rank(&r, &w));
    T_EQ(r, 3);
    T_EQ(w, 8);
    setenv("RANK", "8", 1);
    T_EQ(stk_env_rank(&r, &w), STK_EINVAL);
    T_CHECK(strstr(stk_last_errmsg(), "RANK=8"));
    setenv("RANK", "x1", 1);
    T_EQ(stk_env_rank(&r, &w), STK_EINVAL);
    T_CHECK(strstr(stk_last_errmsg(), "RANK"));
    setenv("RANK", "-1", 1);
    T_EQ(stk_env_rank(&r, &w), STK_EINVAL);
    unsetenv("WORLD_SIZE");
    setenv("RANK", "0", 1);
    T_EQ(stk_env_rank(&r, &w), STK_EINVAL);
    T_CHECK(strstr(stk_last_errmsg(), "WORLD_SIZE"));
    unsetenv("RANK");
    unsetenv("SLURM_PROCID");
    unsetenv("SLURM_NTASKS");
    unsetenv("OMPI_COMM_WORLD_RANK");
    unsetenv("OMPI_COMM_WORLD_SIZE");
    return 0;
}

T_MAIN(T_CASE(test_philox_kat), T_CASE(test_rng_streams), T_CASE(test_shuffle_bijection),
       T_CASE(test_shuffle_determinism), T_CASE(test_pytorch_padding), T_CASE(test_batch_counts),
       T_CASE(test_cover_once), T_CASE(test_resume_positions),
       T_CASE(test_strided_matches_distributed_sampler), T_CASE(test_strided_resume),
       T_CASE(test_env_rank))
