/*
 * test_fresh_memory.c: a worker waits for used ring memory rather than open a batch in memory
 * never written (issue 29; stk_ring.h), and nothing else changes: with an unlimited waiting budget
 * a consumer that releases each batch before asking for the next has the whole run written into
 * one slot's memory, one that keeps the previous batch until the next arrives (Python's pattern)
 * into two, one that holds three batches still gets them (no hang), and every pattern sees the
 * same batches in the same order as a loader that never waits (budget 0), over two epochs and
 * after a resume. A loader made after another one was destroyed opens its first batches in the
 * large memory the first one wrote (kept by the process, stk_pinned.c) and delivers the same
 * batches. The decisions are events (releases, the consumer's waits), never the clock.
 */
#include "loader/stk_loader_int.h"
#include "stk_internal.h"
#include "t.h"
#include "data/fixtures.h"

#define N_RECORDS 300
#define BATCH 8
#define EPOCHS 2
#define MAXSEQ ((N_RECORDS + 1) * EPOCHS)
#define BIG_LEN 12000 /* the big set's last record: a slot of 256 rows is over 2 MiB */

static char tmpdir[256], ds[512], big[512];

/* Record i's data: fx_payload's, and for the big set's extra record N_RECORDS, BIG_LEN bytes of
 * the same pattern. */
static size_t payload(int64_t i, uint8_t *buf)
{
    if (i < N_RECORDS)
        return fx_payload((uint64_t)i, buf);
    for (size_t k = 0; k < BIG_LEN; k++)
        buf[k] = (uint8_t)((uint64_t)i * 131 + k);
    return BIG_LEN;
}

enum { RELEASE_FIRST, KEEP_PREVIOUS, HOLD_THREE };

/* How many slots' memory the loader has ever opened a batch in. */
static uint32_t memories_used(const stk_loader *L)
{
    uint32_t n = 0;
    const stk__ring *r = &L->c->r;
    pthread_mutex_lock((pthread_mutex_t *)&r->mu);
    for (uint32_t i = 0; i < r->n_slots; i++)
        n += r->slots[i].used;
    pthread_mutex_unlock((pthread_mutex_t *)&r->mu);
    return n;
}

/* Check batch b's records against the generator and append its indices to seq. */
static int take(stk_batch *b, int64_t *seq, size_t *n)
{
    stk_tensor data, index;
    stk_tensor_init(&data);
    stk_tensor_init(&index);
    T_OK(stk_batch_tensor(b, 0, &data));
    T_OK(stk_batch_tensor(b, 2, &index));
    for (uint32_t j = 0; j < stk_batch_n_samples(b); j++) {
        int64_t i = ((const int64_t *)index.data)[j];
        static uint8_t want[BIG_LEN];
        size_t len = payload(i, want);
        T_EQ(data.lengths[j], len);
        T_CHECK(memcmp((uint8_t *)data.data + j * data.shape[1], want, len) == 0);
        T_CHECK(*n < MAXSEQ);
        seq[(*n)++] = i;
    }
    return 0;
}

/* Run EPOCHS epochs of `path` in batches of `batch` (from a resume state when `state` is set)
 * with the given budget and consumer pattern; the indices in delivery order go to seq, the
 * memories used to *used, the slots given memory an earlier loader wrote to *warm. */
static int run_on(const char *path, int64_t batch, int64_t budget, int pattern, int threads,
                  const char *state, int64_t *seq, size_t *n, uint32_t *used, uint32_t *warm)
{
    stk__fresh_budget_test_ns = budget;
    const char *paths[] = {path};
    stk_loader_opts o = fx_opts(paths, batch, threads);
    o.n_slots = 4;
    o.flags = STK_LOADER_SHUFFLE;
    o.seed = 29;
    stk_loader *L;
    T_OK(stk_loader_create(&o, &L));
    stk__fresh_budget_test_ns = -1;
    *warm = L->c->r.n_kept; /* slots given memory kept from an earlier loader */
    if (state)
        T_OK(stk_loader_load_state(L, state));
    stk_batch *held[3] = {NULL, NULL, NULL};
    uint32_t n_held = 0;
    *n = 0;
    for (int e = 0; e < EPOCHS;) {
        stk_batch *b;
        stk_status rc = stk_loader_next(L, &b);
        if (rc == STK_END) {
            e++;
            continue;
        }
        T_OK(rc);
        if (take(b, seq, n))
            return 1;
        if (pattern == RELEASE_FIRST) {
            stk_batch_release(b);
            continue;
        }
        uint32_t keep = pattern == KEEP_PREVIOUS ? 1 : 3;
        if (n_held == keep) { /* release the oldest, after the new one arrived */
            stk_batch_release(held[0]);
            memmove(held, held + 1, (keep - 1) * sizeof(*held));
            n_held--;
        }
        held[n_held++] = b;
    }
    for (uint32_t i = 0; i < n_held; i++)
        stk_batch_release(held[i]);
    *used = memories_used(L);
    stk_loader_destroy(L);
    return 0;
}

static int run(int64_t budget, int pattern, int threads, const char *state, int64_t *seq, size_t *n,
               uint32_t *used)
{
    uint32_t warm;
    if (run_on(ds, BATCH, budget, pattern, threads, state, seq, n, used, &warm))
        return 1;
    T_EQ(warm, 0); /* slots under 2 MiB: never kept */
    return 0;
}

static int test_same_batches_fewer_memories(void)
{
    static int64_t want[MAXSEQ], got[MAXSEQ];
    for (int threads = 1; threads <= 3; threads++) {
        size_t n_want, n_got;
        uint32_t used;
        T_CHECK(run(0, RELEASE_FIRST, threads, NULL, want, &n_want, &used) == 0);
        T_EQ(n_want, N_RECORDS * EPOCHS);
        const int patterns[] = {RELEASE_FIRST, KEEP_PREVIOUS, HOLD_THREE};
        const uint32_t max_used[] = {1, 2, 4}; /* 4: a held batch needs memory of its own */
        for (int p = 0; p < 3; p++) {
            T_CHECK(run(INT64_MAX, patterns[p], threads, NULL, got, &n_got, &used) == 0);
            T_EQ(n_got, n_want);
            T_CHECK(memcmp(got, want, n_want * sizeof(*want)) == 0);
            T_CHECKF(used >= 1 && used <= max_used[p], "%d threads, pattern %d: %u memories",
                     threads, p, used);
            if (p == RELEASE_FIRST)
                T_EQ(used, 1);
            if (p == KEEP_PREVIOUS)
                T_EQ(used, 2); /* the kept batch and the next one */
        }
    }
    return 0;
}

/* A resume lands on the same batches with or without waiting for used memory. */
static int test_resume_same(void)
{
    const char *paths[] = {ds};
    stk_loader_opts o = fx_opts(paths, BATCH, 2);
    o.n_slots = 4;
    o.flags = STK_LOADER_SHUFFLE;
    o.seed = 29;
    stk_loader *L;
    T_OK(stk_loader_create(&o, &L));
    for (int i = 0; i < 7; i++) {
        stk_batch *b;
        T_OK(stk_loader_next(L, &b));
        stk_batch_release(b);
    }
    char state[4096];
    T_OK(stk_loader_save_state(L, state, sizeof(state)));
    stk_loader_destroy(L);
    static int64_t want[MAXSEQ], got[MAXSEQ];
    size_t n_want, n_got;
    uint32_t used;
    T_CHECK(run(0, RELEASE_FIRST, 2, state, want, &n_want, &used) == 0);
    T_CHECK(run(INT64_MAX, RELEASE_FIRST, 2, state, got, &n_got, &used) == 0);
    T_EQ(n_got, n_want);
    T_CHECK(n_want > 0 && memcmp(got, want, n_want * sizeof(*want)) == 0);
    T_EQ(used, 1);
    return 0;
}

/* A loader made after another one is destroyed opens its first batches in the large memory the
 * first one wrote (kept by the process), and its batches, their bytes (checked by take) and order
 * are those of a loader with no kept memory; at 1-3 threads, keep-previous consumer. */
static int test_kept_across_loaders(void)
{
    static int64_t want[MAXSEQ], got[MAXSEQ];
    for (int threads = 1; threads <= 3; threads++) {
        size_t n_want, n_got;
        uint32_t used, warm;
        stk__slot_kept_trim();
        T_CHECK(run_on(big, 256, -1, KEEP_PREVIOUS, threads, NULL, want, &n_want, &used, &warm) ==
                0);
        T_EQ(n_want, (N_RECORDS + 1) * EPOCHS);
        T_EQ(warm, 0);
        T_CHECK(used >= 1);
        size_t kept = stk__slot_kept_bytes();
        T_CHECKF(kept >= ((size_t)2 << 20) * used, "%zu bytes kept for %u memories", kept, used);
        T_CHECK(run_on(big, 256, -1, KEEP_PREVIOUS, threads, NULL, got, &n_got, &used, &warm) == 0);
        T_CHECKF(warm >= 1, "%d threads: %u slots of kept memory", threads, warm);
        T_EQ(n_got, n_want);
        T_CHECK(memcmp(got, want, n_want * sizeof(*want)) == 0);
    }
    stk__slot_kept_trim();
    T_EQ(stk__slot_kept_bytes(), 0);
    return 0;
}

static int setup(void)
{
    const char *dir = fx_tmpdir("fresh");
    T_CHECK(dir != NULL);
    snprintf(tmpdir, sizeof(tmpdir), "%s", dir);
    snprintf(ds, sizeof(ds), "%s/shard-00000.stk", tmpdir);
    stk_writer *w;
    T_OK(fx_shard_open(ds, &w));
    T_OK(fx_add_records(w, 0, N_RECORDS)); /* the records test_loader's datasets hold */
    T_OK(stk_writer_close(w));
    snprintf(big, sizeof(big), "%s/big-00000.stk", tmpdir);
    T_OK(fx_shard_open(big, &w));
    T_OK(fx_add_records(w, 0, N_RECORDS));
    static uint8_t buf[BIG_LEN];
    stk_value v[2] = {
        {.struct_size = sizeof(stk_value), .data = buf, .size = payload(N_RECORDS, buf)},
        {.struct_size = sizeof(stk_value), .i64 = (int64_t)N_RECORDS * 7}};
    T_OK(stk_writer_add(w, v));
    T_OK(stk_writer_close(w));
    return 0;
}

static int teardown(void)
{
    fx_rmtree(tmpdir);
    return 0;
}

T_MAIN(T_CASE(setup), T_CASE(test_same_batches_fewer_memories), T_CASE(test_resume_same),
       T_CASE(test_kept_across_loaders), T_CASE(teardown))
