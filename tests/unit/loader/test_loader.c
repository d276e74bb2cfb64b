/*
 * test_loader.c: the loader's semantics from DESIGN.md with real numbers: in-order delivery for
 * 1, 2 and 7 threads; exactly-once shuffled epochs across ranks x threads; epoch advance and
 * determinism; drop_last (and its two halves apart, split as DistributedSampler); resume after k
 * batches (also onto another world size); backpressure; shutdown at any point with batches
 * outstanding; errors surfacing at their batch (and the skip policy); bad arguments; allocation
 * failures (debug builds).
 */
#include "source/stk_source.h"
#include "stk_internal.h"
#include "t.h"
#include "data/fixtures.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAXN 2000

static char tmpdir[256];

/* Write a dataset of n records over `shards` shards into tmpdir/name/. */
static int make_dataset(const char *name, uint64_t n, int shards, char *dir, size_t dir_size)
{
    snprintf(dir, dir_size, "%s/%s", tmpdir, name);
    mkdir(dir, 0755);
    uint64_t per = (n + shards - 1) / shards, i = 0;
    for (int s = 0; s < shards; s++) {
        char path[512];
        snprintf(path, sizeof(path), "%s/shard-%05d.stk", dir, s);
        stk_writer *w;
        T_OK(fx_shard_open(path, &w));
        uint64_t k = STK_MIN(per, n - i);
        T_OK(fx_add_records(w, i, k));
        i += k;
        T_OK(stk_writer_close(w));
    }
    return 0;
}

/* Check every field of a batch against the generator; append its indices to seq. */
static int check_batch(stk_batch *b, int64_t *seq, size_t *n_seq)
{
    stk_tensor data, label, index;
    stk_tensor_init(&data);
    stk_tensor_init(&label);
    stk_tensor_init(&index);
    T_EQ(stk_batch_n_tensors(b), 3);
    T_OK(stk_batch_tensor(b, 0, &data));
    T_OK(stk_batch_tensor(b, 1, &label));
    T_OK(stk_batch_tensor(b, 2, &index));
    T_CHECK(strcmp(data.name, "data") == 0 && strcmp(label.name, "label") == 0 &&
            strcmp(index.name, "index") == 0);
    T_EQ(data.dtype, STK_DTYPE_UINT8);
    T_EQ(label.dtype, STK_DTYPE_INT64);
    uint32_t n = stk_batch_n_samples(b);
    T_EQ(index.shape[0], n);
    T_EQ(((uintptr_t)data.data) % 64, 0);
    const int64_t *idx = index.data;
    T_CHECK(idx == stk_batch_indices(b));
    for (uint32_t j = 0; j < n; j++) {
        uint8_t want[512];
        size_t len = fx_payload((uint64_t)idx[j], want);
        T_EQ(data.lengths[j], len);
        T_CHECK(memcmp((uint8_t *)data.data + j * data.shape[1], want, len) == 0);
        T_EQ(((int64_t *)label.data)[j], idx[j] * 7);
        seq[(*n_seq)++] = idx[j];
    }
    return 0;
}

/* Run one epoch, collecting indices; returns batches seen or -1. */
static int64_t run_epoch(stk_loader *L, int64_t *seq, size_t *n_seq)
{
    int64_t batches = 0;
    stk_batch *b;
    stk_status rc;
    *n_seq = 0;
    while ((rc = stk_loader_next(L, &b)) == STK_OK) {
        if (check_batch(b, seq, n_seq))
            return -1;
        stk_batch_release(b);
        batches++;
    }
    if (rc != STK_END) {
        fprintf(stderr, "  next: %d %s\n", rc, stk_loader_errmsg(L));
        return -1;
    }
    return batches;
}

static char ds_main[512], ds_small[512], ds_img[512]; /* ds_img "" without the JPEG fixtures */

static int test_in_order(void)
{
    const char *paths[] = {ds_main};
    static const int threads[] = {1, 2, 7};
    for (int t = 0; t < 3; t++) {
        stk_loader_opts o = fx_opts(paths, 32, threads[t]);
        stk_loader *L;
        T_OK(stk_loader_create(&o, &L));
        static int64_t seq[MAXN];
        size_t n;
        T_EQ(stk_loader_n_batches(L), (1000 + 31) / 32);
        T_EQ(run_epoch(L, seq, &n), (1000 + 31) / 32);
        T_EQ(n, 1000);
        for (size_t i = 0; i < n; i++)
            T_EQ(seq[i], (int64_t)i);
        stk_loader_destroy(L);
    }
    return 0;
}

static int test_shuffle_once_ranks_threads(void)
{
    const char *paths[] = {ds_main};
    static const int threads[] = {1, 2, 7};
    int64_t first_rank0[MAXN];
    size_t first_n = 0;
    for (uint32_t w = 1; w <= 4; w++)
        for (int t = 0; t < 3; t++) {
            static uint32_t count[MAXN];
            memset(count, 0, sizeof(count));
            uint64_t total = 0;
            for (uint32_t r = 0; r < w; r++) {
                stk_loader_opts o = fx_opts(paths, 24, threads[t]);
                o.flags = STK_LOADER_SHUFFLE;
                o.seed = 11;
                o.rank = (int32_t)r;
                o.world = (int32_t)w;
                stk_loader *L;
                T_OK(stk_loader_create(&o, &L));
                static int64_t seq[MAXN];
                size_t n;
                T_CHECK(run_epoch(L, seq, &n) >= 0);
                T_EQ(n, (1000 + w - 1) / w);
                for (size_t i = 0; i < n; i++)
                    count[seq[i]]++;
                total += n;
                if (w == 1 && t == 0) {
                    memcpy(first_rank0, seq, n * sizeof(int64_t));
                    first_n = n;
                } else if (w == 1) { /* same order whatever the thread count */
                    T_EQ(n, first_n);
                    T_CHECK(memcmp(first_rank0, seq, n * sizeof(int64_t)) == 0);
                }
                stk_loader_destroy(L);
            }
            uint64_t pad = (w - 1000 % w) % w, dups = 0;
            for (int i = 0; i < 1000; i++) {
                T_CHECKF(count[i] >= 1 && count[i] <= 2, "record %d seen %u times (W=%u K=%d)", i,
                         count[i], w, threads[t]);
                dups += count[i] - 1;
            }
            T_EQ(dups, pad);
            T_EQ(total, 1000 + pad);
        }
    /* Shuffled is not the identity. */
    size_t same = 0;
    for (size_t i = 0; i < first_n; i++)
        same += first_rank0[i] == (int64_t)i;
    T_CHECK(same < 20);
    return 0;
}

static int test_epochs_advance_and_repeat(void)
{
    const char *paths[] = {ds_small};
    static int64_t a0[MAXN], a1[MAXN], b0[MAXN], b1[MAXN];
    size_t n;
    stk_loader *A, *B;
    stk_loader_opts o = fx_opts(paths, 8, 2);
    o.flags = STK_LOADER_SHUFFLE;
    o.seed = 3;
    T_OK(stk_loader_create(&o, &A));
    T_OK(stk_loader_create(&o, &B));
    T_EQ(stk_loader_epoch(A), 0);
    T_EQ(run_epoch(A, a0, &n), 13); /* 100 records, batch 8 */
    T_EQ(stk_loader_epoch(A), 1);   /* advanced by itself after STK_END */
    T_EQ(run_epoch(A, a1, &n), 13);
    T_EQ(run_epoch(B, b0, &n), 13);
    T_EQ(run_epoch(B, b1, &n), 13);
    T_CHECK(memcmp(a0, b0, 100 * 8) == 0);
    T_CHECK(memcmp(a1, b1, 100 * 8) == 0);
    T_CHECK(memcmp(a0, a1, 100 * 8) != 0);
    /* set_epoch jumps; setting the upcoming epoch is a no-op. */
    T_OK(stk_loader_set_epoch(B, 1));
    T_EQ(run_epoch(B, b1, &n), 13);
    T_CHECK(memcmp(a1, b1, 100 * 8) == 0);
    T_OK(stk_loader_set_epoch(B, 3));
    T_OK(stk_loader_set_epoch(B, 3));
    T_EQ(stk_loader_epoch(B), 3);
    /* Batch metadata. */
    stk_batch *b;
    T_OK(stk_loader_next(B, &b));
    T_EQ(stk_batch_epoch(b), 3);
    T_EQ(stk_batch_number(b), 0);
    stk_batch_release(b);
    stk_loader_destroy(A);
    stk_loader_destroy(B);
    return 0;
}

static int test_drop_last(void)
{
    const char *paths[] = {ds_small};
    static int64_t seq[MAXN];
    size_t n;
    stk_loader *L;
    stk_loader_opts o = fx_opts(paths, 8, 3);
    o.flags = STK_LOADER_DROP_LAST;
    T_OK(stk_loader_create(&o, &L));
    T_EQ(stk_loader_n_batches(L), 12);
    T_EQ(run_epoch(L, seq, &n), 12);
    T_EQ(n, 96);
    stk_loader_destroy(L);
    /* batch larger than the dataset: one short batch, or none with drop_last; its ring slots
     * hold the 100 records, not 1000 rows (nor 50 on each of two ranks) */
    stk_loader_info info = {.struct_size = sizeof(info)}, exact = {.struct_size = sizeof(exact)};
    o = fx_opts(paths, 100, 2);
    T_OK(stk_loader_create(&o, &L));
    stk_loader_info_get(L, &exact);
    stk_loader_destroy(L);
    o = fx_opts(paths, 1000, 2);
    T_OK(stk_loader_create(&o, &L));
    stk_loader_info_get(L, &info);
    T_EQ(info.slot_size, exact.slot_size);
    T_EQ(info.batch_size, 1000);
    T_EQ(run_epoch(L, seq, &n), 1);
    T_EQ(n, 100);
    stk_loader_destroy(L);
    o.rank = 1;
    o.world = 2;
    T_OK(stk_loader_create(&o, &L));
    stk_loader_info_get(L, &info);
    T_CHECK(info.slot_size < exact.slot_size);
    T_EQ(run_epoch(L, seq, &n), 1);
    T_EQ(n, 50);
    stk_loader_destroy(L);
    o = fx_opts(paths, 1000, 2);
    o.flags = STK_LOADER_DROP_LAST;
    T_OK(stk_loader_create(&o, &L));
    T_EQ(run_epoch(L, seq, &n), 0);
    T_EQ(run_epoch(L, seq, &n), 0); /* no hang on empty epochs */
    stk_loader_destroy(L);
    /* The two halves apart, split as DistributedSampler (issue 24): 100 records on 3 ranks,
     * the tail dropped (33 each) and the partial batch kept, or the tail padded (34 each) and
     * the partial batch dropped; rank 1 reads 1, 4, 7, ... */
    const uint32_t flags[2] = {STK_LOADER_STRIDED | STK_LOADER_DROP_TAIL,
                               STK_LOADER_STRIDED | STK_LOADER_DROP_LAST | STK_LOADER_PAD_TAIL};
    const size_t want_n[2] = {33, 32}, want_b[2] = {5, 4};
    for (int k = 0; k < 2; k++) {
        o = fx_opts(paths, 8, 2);
        o.flags = flags[k];
        o.rank = 1;
        o.world = 3;
        T_OK(stk_loader_create(&o, &L));
        T_EQ(stk_loader_n_batches(L), want_b[k]);
        T_EQ(run_epoch(L, seq, &n), (int64_t)want_b[k]);
        T_EQ(n, want_n[k]);
        for (size_t i = 0; i < n; i++)
            T_EQ(seq[i], (int64_t)(1 + 3 * i));
        stk_loader_destroy(L);
    }
    o = fx_opts(paths, 8, 1);
    o.flags = STK_LOADER_DROP_TAIL | STK_LOADER_PAD_TAIL;
    T_EQ(stk_loader_create(&o, &L), STK_EINVAL);
    T_CHECK(strstr(stk_last_errmsg(), "STK_LOADER_PAD_TAIL"));
    return 0;
}

/* Collect `k` batches' indices after restoring `state` (NULL = fresh) into seq; the state is
 * given at create (opts.state) when resume_at_create is set, else loaded after it. */
static bool resume_at_create;
static int resume_run(const char *const *paths, uint32_t rank, uint32_t world, const char *state,
                      int64_t max_batches, int64_t *seq, size_t *n_seq, int64_t *batches)
{
    stk_loader_opts o = fx_opts(paths, 8, 3);
    o.flags = STK_LOADER_SHUFFLE;
    o.seed = 77;
    o.rank = (int32_t)rank;
    o.world = (int32_t)world;
    o.state = resume_at_create ? state : NULL;
    stk_loader *L;
    T_OK(stk_loader_create(&o, &L));
    if (state && !resume_at_create)
        T_OK(stk_loader_load_state(L, state));
    *n_seq = 0;
    *batches = 0;
    stk_batch *b;
    while (*batches < max_batches) {
        stk_status rc = stk_loader_next(L, &b);
        if (rc == STK_END)
            break;
        T_OK(rc);
        T_CHECK(check_batch(b, seq, n_seq) == 0);
        stk_batch_release(b);
        (*batches)++;
    }
    stk_loader_destroy(L);
    return 0;
}

static int test_resume(void)
{
    const char *paths[] = {ds_small};
    static int64_t full[MAXN], head[MAXN], tail[MAXN];
    size_t nf, nh, nt;
    int64_t bf, bt;
    T_CHECK(resume_run(paths, 0, 1, NULL, 1000, full, &nf, &bf) == 0);
    T_EQ(bf, 13);
    static const int64_t ks[] = {0, 1, 6, 12, 13};
    for (size_t i = 0; i < 5; i++) {
        int64_t k = ks[i];
        /* Run k batches, take the state, resume in a new loader. */
        stk_loader_opts o = fx_opts(paths, 8, 2);
        o.flags = STK_LOADER_SHUFFLE;
        o.seed = 77;
        stk_loader *L;
        T_OK(stk_loader_create(&o, &L));
        nh = 0;
        for (int64_t j = 0; j < k; j++) {
            stk_batch *b;
            T_OK(stk_loader_next(L, &b));
            T_CHECK(check_batch(b, head, &nh) == 0);
            stk_batch_release(b);
        }
        char state[256];
        T_OK(stk_loader_save_state(L, state, sizeof(state)));
        stk_loader_destroy(L);
        for (int at_create = 0; at_create < 2; at_create++) {
            resume_at_create = at_create;
            T_CHECK(resume_run(paths, 0, 1, state, 1000, tail, &nt, &bt) == 0);
            resume_at_create = false;
            T_EQ(bt, 13 - k);
            T_EQ(nh + nt, nf);
            T_CHECK(memcmp(head, full, nh * 8) == 0);
            T_CHECKF(memcmp(tail, full + nh, nt * 8) == 0,
                     "resume after %lld batches differs (state given at create: %d)", (long long)k,
                     at_create);
        }
    }
    /* After STK_END the state resumes to the whole next epoch. */
    {
        stk_loader_opts o = fx_opts(paths, 8, 2);
        o.flags = STK_LOADER_SHUFFLE;
        o.seed = 77;
        stk_loader *L;
        size_t n;
        T_OK(stk_loader_create(&o, &L));
        T_EQ(run_epoch(L, head, &n), 13);
        char state[256];
        T_OK(stk_loader_save_state(L, state, sizeof(state)));
        static int64_t e1[MAXN];
        T_EQ(run_epoch(L, e1, &n), 13); /* epoch 1, uninterrupted */
        stk_loader_destroy(L);
        T_CHECK(resume_run(paths, 0, 1, state, 1000, tail, &nt, &bt) == 0);
        T_EQ(bt, 13);
        T_CHECK(memcmp(tail, e1, 100 * 8) == 0);
    }
    return 0;
}

static int test_resume_other_world(void)
{
    const char *paths[] = {ds_small};
    /* Two ranks take 3 steps (2*8*3 = 48 positions), then 3 ranks finish the epoch. */
    static int64_t seq[MAXN];
    size_t n;
    int64_t b;
    static uint32_t count[MAXN];
    memset(count, 0, sizeof(count));
    char state[256] = "";
    for (uint32_t r = 0; r < 2; r++) {
        stk_loader_opts o = fx_opts(paths, 8, 2);
        o.flags = STK_LOADER_SHUFFLE;
        o.seed = 77;
        o.rank = (int32_t)r;
        o.world = 2;
        stk_loader *L;
        T_OK(stk_loader_create(&o, &L));
        n = 0;
        for (int j = 0; j < 3; j++) {
            stk_batch *bb;
            T_OK(stk_loader_next(L, &bb));
            T_CHECK(check_batch(bb, seq, &n) == 0);
            stk_batch_release(bb);
        }
        for (size_t i = 0; i < n; i++)
            count[seq[i]]++;
        T_OK(stk_loader_save_state(L, state, sizeof(state)));
        stk_loader_destroy(L);
    }
    T_CHECK(strstr(state, "\"consumed\": 48"));
    uint64_t total = 0;
    for (uint32_t r = 0; r < 3; r++) {
        T_CHECK(resume_run(paths, r, 3, state, 1000, seq, &n, &b) == 0);
        T_EQ(n, (100 - 48 + 2) / 3);
        for (size_t i = 0; i < n; i++)
            count[seq[i]]++;
        total += n;
    }
    /* 52 remaining -> 54 with padding; every record at least once, 2 repeated */
    uint64_t dups = 0;
    for (int i = 0; i < 100; i++) {
        T_CHECKF(count[i] >= 1, "record %d lost", i);
        dups += count[i] - 1;
    }
    T_EQ(dups, 2);
    return 0;
}

static int test_backpressure_and_holding(void)
{
    const char *paths[] = {ds_small};
    stk_loader_opts o = fx_opts(paths, 4, 2);
    o.n_slots = 3;
    stk_loader *L;
    T_OK(stk_loader_create(&o, &L));
    stk_loader_info info = {.struct_size = sizeof(info)};
    stk_loader_info_get(L, &info);
    T_EQ(info.n_slots, 3);
    T_EQ(info.n_threads, 2);
    stk_batch *b[3], *extra;
    for (int i = 0; i < 3; i++)
        T_OK(stk_loader_next(L, &b[i]));
    /* All three slots held: the next batch cannot be produced; its own status (STK_EBUSY, not
     * a hang), and nothing consumed: the timed call says the same. */
    T_EQ(stk_loader_next(L, &extra), STK_EBUSY);
    T_CHECK(extra == NULL);
    T_CHECK(strstr(stk_loader_errmsg(L), "release"));
    T_CHECK(strcmp(stk_strerror(STK_EBUSY), "the next ring slot is held by the caller") == 0);
    T_EQ(stk_loader_next_timeout(L, &extra, 10), STK_EBUSY);
    /* Releasing a newer batch does not help: the next batch needs the oldest slot. */
    stk_batch_release(b[2]);
    T_EQ(stk_loader_next(L, &extra), STK_EBUSY);
    stk_batch_release(b[0]);
    T_OK(stk_loader_next(L, &extra));
    T_EQ(stk_batch_indices(extra)[0], 12);
    T_EQ(stk_batch_indices(b[1])[0], 4); /* held batches stay intact */
    stk_batch_release(extra);
    stk_batch_release(b[1]);
    stk_loader_destroy(L);
    return 0;
}

static int test_shutdown_anywhere(void)
{
    const char *paths[] = {ds_main};
    /* Destroy right after create, mid-epoch, and with batches outstanding (then read them). */
    for (int k = 0; k < 20; k++) {
        stk_loader_opts o = fx_opts(paths, 16, 1 + k % 7);
        o.n_slots = 2 + k % 3; /* holding one batch while asking for the next needs 2 */
        stk_loader *L;
        T_OK(stk_loader_create(&o, &L));
        stk_batch *held = NULL;
        for (int j = 0; j < k; j++) {
            stk_batch *b;
            T_OK(stk_loader_next(L, &b));
            if (held)
                stk_batch_release(held);
            held = b;
        }
        stk_loader_destroy(L);
        if (held) {
            int64_t seq[64];
            size_t n = 0;
            T_CHECK(check_batch(held, seq, &n) == 0);
            T_EQ(seq[0], (k - 1) * 16);
            stk_batch_release(held); /* the last release frees the ring */
        }
    }
    stk_loader_destroy(NULL);
    stk_batch_release(NULL);
    return 0;
}

/* A child forked while a loader runs (and holds a batch) can destroy its copy without hanging:
 * it has none of the worker threads and may have inherited the mutex locked. */
static int test_fork_child(void)
{
    const char *paths[] = {ds_main};
    stk_loader_opts o = fx_opts(paths, 16, 2);
    stk_loader *L;
    T_OK(stk_loader_create(&o, &L));
    stk_batch *b;
    T_OK(stk_loader_next(L, &b));
    pid_t pid = fork();
    T_CHECK(pid >= 0);
    if (pid == 0) {
        alarm(10); /* a hang fails the test instead of blocking it */
        stk_batch_release(b);
        stk_loader_destroy(L);
        _exit(0);
    }
    int status = 0;
    T_CHECK(waitpid(pid, &status, 0) == pid);
    T_CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
    /* the parent's loader is untouched */
    T_EQ(stk_batch_indices(b)[0], 0);
    stk_batch_release(b);
    T_OK(stk_loader_next(L, &b));
    T_EQ(stk_batch_indices(b)[0], 16);
    stk_batch_release(b);
    stk_loader_destroy(L);
    return 0;
}

/* Polling with a zero timeout gets STK_EAGAIN until a batch is ready and loses nothing. */
static int test_next_timeout(void)
{
    const char *paths[] = {ds_main};
    stk_loader_opts o = fx_opts(paths, 16, 2);
    stk_loader *L;
    T_OK(stk_loader_create(&o, &L));
    static int64_t seq[MAXN];
    size_t n = 0;
    stk_status rc;
    stk_batch *b;
    long again = 0;
    while ((rc = stk_loader_next_timeout(L, &b, again % 2 ? 1 : 0)) != STK_END) {
        if (rc == STK_EAGAIN) {
            T_CHECK(b == NULL);
            again++;
            continue;
        }
        T_OK(rc);
        T_CHECK(check_batch(b, seq, &n) == 0);
        stk_batch_release(b);
    }
    T_EQ(n, 1000);
    for (size_t i = 0; i < n; i++)
        T_EQ(seq[i], (int64_t)i);
    /* With a long timeout it behaves as stk_loader_next. */
    T_OK(stk_loader_next_timeout(L, &b, 10000));
    T_EQ(stk_batch_indices(b)[0], 0);
    stk_batch_release(b);
    stk_loader_destroy(L);
    return 0;
}

static int test_bad_arguments(void)
{
    const char *paths[] = {ds_small};
    const char *missing[] = {"/nonexistent/x.stk"};
    stk_loader *L = (stk_loader *)1;
    stk_loader_opts o = fx_opts(paths, 0, 1);
    T_EQ(stk_loader_create(&o, &L), STK_EINVAL);
    T_CHECK(L == NULL);
    T_CHECK(strstr(stk_last_errmsg(), "batch size"));
    o = fx_opts(paths, (int64_t)1 << 40, 1); /* too large, not "must be >= 1" */
    T_EQ(stk_loader_create(&o, &L), STK_EINVAL);
    T_CHECKF(strstr(stk_last_errmsg(), "batch size 1099511627776 is too large"), "%s",
             stk_last_errmsg());
    o = fx_opts(paths, 4, -1);
    T_EQ(stk_loader_create(&o, &L), STK_EINVAL);
    T_CHECK(strstr(stk_last_errmsg(), "thread count"));
    o = fx_opts(paths, 4, 1);
    o.rank = 4;
    o.world = 4;
    T_EQ(stk_loader_create(&o, &L), STK_EINVAL);
    T_CHECK(strstr(stk_last_errmsg(), "rank 4"));
    o = fx_opts(paths, 4, 1);
    o.n_slots = -2;
    T_EQ(stk_loader_create(&o, &L), STK_EINVAL);
    o = fx_opts(missing, 4, 1);
    T_CHECK(stk_loader_create(&o, &L) < 0);
    T_CHECK(strstr(stk_last_errmsg(), "/nonexistent/x.stk"));
    o = fx_opts(NULL, 4, 1);
    o.n_paths = 0;
    T_EQ(stk_loader_create(&o, &L), STK_EINVAL);
    stk_loader_opts raw;
    memset(&raw, 0, sizeof(raw));
    T_EQ(stk_loader_create(&raw, &L), STK_EINVAL); /* not initialised */
    return 0;
}

static int test_bad_states(void)
{
    const char *paths[] = {ds_small}, *other[] = {ds_main};
    stk_loader *L, *M;
    stk_loader_opts o = fx_opts(paths, 8, 1);
    T_OK(stk_loader_create(&o, &L));
    o = fx_opts(other, 8, 1);
    T_OK(stk_loader_create(&o, &M));
    char state[256];
    T_OK(stk_loader_save_state(M, state, sizeof(state)));
    T_EQ(stk_loader_load_state(L, state), STK_EINVAL); /* another dataset */
    T_CHECK(strstr(stk_loader_errmsg(L), "another dataset"));
    T_EQ(stk_loader_load_state(L, "{\"hello\": 1}"), STK_EINVAL);
    T_EQ(stk_loader_load_state(L, "not json"), STK_EINVAL);
    T_EQ(stk_loader_load_state(L, NULL), STK_EINVAL);
    T_OK(stk_loader_save_state(L, state, sizeof(state)));
    char future[300];
    snprintf(future, sizeof(future), "%s", state);
    char *v = strstr(future, "\"version\": 1");
    T_CHECK(v);
    v[11] = '9';
    T_EQ(stk_loader_load_state(L, future), STK_ENOTSUP);
    T_CHECK(strstr(stk_loader_errmsg(L), "newer"));
    /* shuffle mismatch */
    o = fx_opts(paths, 8, 1);
    o.flags = STK_LOADER_SHUFFLE;
    stk_loader *S;
    T_OK(stk_loader_create(&o, &S));
    T_EQ(stk_loader_load_state(S, state), STK_EINVAL);
    T_CHECK(strstr(stk_loader_errmsg(S), "shuffle"));
    /* a wrong value is named, not called missing; a position past the end is refused */
    char *c = strstr(state, "\"consumed\": 0");
    T_CHECK(c);
    char edited[300];
    snprintf(edited, sizeof(edited), "%.*s\"consumed\": -1%s", (int)(c - state), state, c + 13);
    T_EQ(stk_loader_load_state(L, edited), STK_EINVAL);
    T_CHECK(strstr(stk_loader_errmsg(L), "\"consumed\" is -1, not a whole number"));
    snprintf(edited, sizeof(edited), "%.*s\"consumed\": 101%s", (int)(c - state), state, c + 13);
    T_EQ(stk_loader_load_state(L, edited), STK_EINVAL); /* 101 of 100 records, in world 1 */
    T_CHECK(strstr(stk_loader_errmsg(L), "past the epoch's end"));
    /* given at create, a bad state fails the create with the same message */
    o = fx_opts(paths, 8, 1);
    o.state = edited;
    stk_loader *N = NULL;
    T_EQ(stk_loader_create(&o, &N), STK_EINVAL);
    T_CHECK(!N && strstr(stk_last_errmsg(), "past the epoch's end"));
    T_EQ(stk_loader_save_state(L, state, 10), STK_ELIMIT);
    /* the loader is still usable after refused states */
    static int64_t seq[MAXN];
    size_t n;
    T_EQ(run_epoch(L, seq, &n), 13);
    stk_loader_destroy(S);
    stk_loader_destroy(L);
    stk_loader_destroy(M);
    return 0;
}

/* Flip a byte inside record `idx` of the dataset in `dir`. */
static int corrupt_record(const char *dir, uint64_t idx)
{
    const char *paths[] = {dir};
    stk_dataset *ds;
    T_OK(stk_dataset_open(paths, 1, 0, &ds));
    stk__recinfo loc;
    char err[256];
    T_OK(stk__dataset_locate(ds, idx, &loc, err, sizeof(err)));
    stk_shard_info si = {.struct_size = sizeof(si)};
    T_OK(stk_dataset_shard(ds, loc.file, &si));
    int fd = open(si.path, O_RDWR);
    T_CHECK(fd >= 0);
    uint8_t byte;
    T_EQ(pread(fd, &byte, 1, (off_t)loc.offset), 1);
    byte ^= 0x5a;
    T_EQ(pwrite(fd, &byte, 1, (off_t)loc.offset), 1);
    close(fd);
    stk_dataset_close(ds);
    return 0;
}

static int test_corrupt_record(void)
{
    char dir[512];
    T_CHECK(make_dataset("corrupt", 100, 2, dir, sizeof(dir)) == 0);
    T_CHECK(corrupt_record(dir, 42) == 0);
    const char *paths[] = {dir};
    /* raise: the error arrives at batch 5 (records 40..49), names shard and record; the loader
     * goes on with batch 6. */
    stk_loader_opts o = fx_opts(paths, 10, 3);
    stk_loader *L;
    T_OK(stk_loader_create(&o, &L));
    int ok = 0, failed = 0;
    stk_status rc;
    stk_batch *b;
    while ((rc = stk_loader_next(L, &b)) != STK_END) {
        if (rc == STK_EFORMAT) {
            T_EQ(ok, 4);
            const char *m = stk_loader_errmsg(L);
            T_CHECKF(strstr(m, "shard-00000.stk") && strstr(m, "record 42") &&
                         strstr(m, "checksum"),
                     "message: %s", m);
            failed++;
            continue;
        }
        T_OK(rc);
        ok++;
        stk_batch_release(b);
    }
    T_EQ(ok, 9);
    T_EQ(failed, 1);
    stk_loader_stats st = {.struct_size = sizeof(st)};
    stk_loader_stats_get(L, &st);
    T_EQ(st.errors, 1);
    stk_loader_destroy(L);
    /* skip: record 42 is replaced by the next good one (43) and counted */
    o.flags = STK_LOADER_SKIP_CORRUPT;
    T_OK(stk_loader_create(&o, &L));
    int64_t all[200];
    size_t n = 0;
    while ((rc = stk_loader_next(L, &b)) == STK_OK) {
        const int64_t *idx = stk_batch_indices(b);
        for (uint32_t j = 0; j < stk_batch_n_samples(b); j++)
            all[n++] = idx[j];
        stk_batch_release(b);
    }
    T_EQ(rc, STK_END);
    T_EQ(n, 100);
    T_EQ(all[42], 43);
    T_EQ(all[43], 43);
    stk_loader_stats_get(L, &st);
    T_EQ(st.skipped, 1);
    T_EQ(st.errors, 0);
    stk_loader_destroy(L);
    return 0;
}

/* Every allocation failure point of create + a partial epoch + destroy fails cleanly. */
static int test_alloc_failures(void)
{
#ifdef STK_DEBUG
    extern void stk__fault_alloc_set(long n);
    const char *paths[] = {ds_small};
    int failures = 0;
    bool completed = false;
    for (long k = 1; k < 500; k++) {
        stk_loader_opts o = fx_opts(paths, 8, 2);
        stk_loader *L;
        stk__fault_alloc_set(k);
        stk_status rc = stk_loader_create(&o, &L);
        if (rc == STK_OK) {
            stk_batch *b;
            for (int j = 0; j < 3 && stk_loader_next(L, &b) == STK_OK; j++)
                stk_batch_release(b);
            stk_loader_destroy(L);
            stk__fault_alloc_set(0);
            completed = true;
            break;
        }
        T_CHECKF(rc == STK_ENOMEM, "allocation %ld: rc %d (%s)", k, rc, stk_last_errmsg());
        failures++;
    }
    stk__fault_alloc_set(0);
    T_CHECKF(completed, "still failing after %d allocations: not every one was tried", failures);
    T_CHECK(failures > 3);
    return 0;
#else
    return T_SKIP;
#endif
}

/* 24 JPEG records {image, label} from tests/data/decode into tmpdir/img.stk; ds_img stays ""
 * when the fixtures are not found (the tests run from the repository root). */
static int make_image_dataset(void)
{
    size_t sz[2];
    uint8_t *jpg[2] = {fx_read_file("tests/data/decode/h4v2.jpg", &sz[0]),
                       fx_read_file("tests/data/decode/h2v4_prog.jpg", &sz[1])};
    if (jpg[0] && jpg[1]) {
        char path[512];
        snprintf(path, sizeof(path), "%s/img.stk", tmpdir);
        stk_field f[2] = {
            {.struct_size = sizeof(stk_field), .name = "image", .kind = STK_FIELD_BYTES},
            {.struct_size = sizeof(stk_field), .name = "label", .kind = STK_FIELD_INT64}};
        stk_writer_opts wo;
        stk_writer_opts_init(&wo);
        wo.fields = f;
        wo.n_fields = 2;
        stk_writer *w;
        T_OK(stk_writer_open(path, &wo, &w));
        for (uint64_t i = 0; i < 24; i++) {
            stk_value v[2] = {
                {.struct_size = sizeof(stk_value), .data = jpg[i % 2], .size = sz[i % 2]},
                {.struct_size = sizeof(stk_value), .i64 = (int64_t)i}};
            T_OK(stk_writer_add(w, v));
        }
        T_OK(stk_writer_close(w));
        snprintf(ds_img, sizeof(ds_img), "%s", path);
    }
    free(jpg[0]);
    free(jpg[1]);
    return 0;
}

/* The workers' allocations (decode buffers, resize tables, per-thread scratch) failing in turn,
 * over a whole epoch of decoded images: each failure is STK_ENOMEM from stk_loader_next, naming
 * the record and saying "out of memory"; destroy after it is clean (ASan: no leak). */
static int test_alloc_failures_decode(void)
{
#ifdef STK_DEBUG
    extern void stk__fault_alloc_set(long n);
    if (!ds_img[0])
        return T_SKIP;
    const char *paths[] = {ds_img};
    int failures = 0, in_workers = 0;
    bool completed = false;
    for (long k = 1; k < 2000 && !completed; k++) {
        stk_transform *t = NULL;
        stk_loader *L = NULL;
        stk__fault_alloc_set(k);
        stk_status rc = stk_transform_recipe("imagenet-train", false, &t);
        if (rc == STK_OK) {
            stk_loader_opts o = fx_opts(paths, 8, 2);
            o.transform = t;
            rc = stk_loader_create(&o, &L);
        }
        if (rc == STK_OK) {
            stk_batch *b;
            while ((rc = stk_loader_next(L, &b)) == STK_OK)
                stk_batch_release(b);
            if (rc == STK_END) {
                rc = STK_OK;
                completed = true;
            } else {
                T_CHECKF(rc == STK_ENOMEM, "allocation %ld: next rc %d (%s)", k, rc,
                         stk_loader_errmsg(L));
                const char *msg = stk_loader_errmsg(L);
                T_CHECKF(strstr(msg, "img.stk record") && strstr(msg, "out of memory"),
                         "allocation %ld: message '%s'", k, msg);
                in_workers++;
            }
        }
        stk__fault_alloc_set(0);
        stk_loader_destroy(L);
        stk_transform_destroy(t);
        T_CHECKF(rc == STK_OK || rc == STK_ENOMEM, "allocation %ld: rc %d (%s)", k, rc,
                 stk_last_errmsg());
        failures += rc == STK_ENOMEM;
    }
    T_CHECKF(completed, "still failing after %d allocations: not every one was tried", failures);
    T_CHECKF(in_workers > 3, "only %d failures inside the workers", in_workers);
    return 0;
#else
    return T_SKIP;
#endif
}

static int setup(void)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/stk_test_loader.XXXXXX");
    T_CHECK(mkdtemp(tmpdir));
    T_CHECK(make_dataset("main", 1000, 3, ds_main, sizeof(ds_main)) == 0);
    T_CHECK(make_dataset("small", 100, 1, ds_small, sizeof(ds_small)) == 0);
    T_CHECK(make_image_dataset() == 0);
    return 0;
}

static int teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
    T_CHECK(system(cmd) == 0);
    return 0;
}

/* memory_budget: the loader's fixed memory at create (ring; per thread the read scratch)
 * against the budget, over it create fails saying what takes what; decode buffers are charged
 * while running, and a decode that does not fit in what remains fails its record, named (the
 * huge-image case is python/tests/test_strict_decode.py's). */
static int test_memory_budget(void)
{
    const char *paths[] = {ds_small};
    stk_loader *L;
    stk_loader_opts o = fx_opts(paths, 4, 2);
    o.n_slots = 3;
    o.memory_budget = 1;
    T_EQ(stk_loader_create(&o, &L), STK_ELIMIT);
    T_CHECKF(strstr(stk_last_errmsg(), "memory budget of 1 bytes exceeded: the ring takes") &&
                 strstr(stk_last_errmsg(), "(3 slots of"),
             "%s", stk_last_errmsg());
    o.memory_budget = 1ull << 30;
    T_OK(stk_loader_create(&o, &L));
    stk_batch *b;
    T_OK(stk_loader_next(L, &b));
    stk_batch_release(b);
    stk_loader_destroy(L);
    if (!ds_img[0])
        return 0;
    /* with a transform: created under 256 MiB with 2 threads (the worst-case decode of
     * 2 x 64 Mpx x 3 is no longer reserved up front), and it reads */
    const char *img[] = {ds_img};
    stk_transform *t;
    T_OK(stk_transform_recipe("imagenet-train", false, &t));
    o = fx_opts(img, 4, 2);
    o.transform = t;
    o.memory_budget = 256ull << 20;
    T_OK(stk_loader_create(&o, &L));
    T_OK(stk_loader_next(L, &b));
    stk_batch_release(b);
    stk_loader_destroy(L);
    /* a budget of the fixed part plus 1000 bytes: the first decode fails its record, named */
    o.memory_budget = 1;
    T_EQ(stk_loader_create(&o, &L), STK_ELIMIT);
    const char *all = strstr(stk_last_errmsg(), " in all, before any image");
    T_CHECK(all != NULL);
    while (all[-1] >= '0' && all[-1] <= '9')
        all--;
    o.memory_budget = strtoull(all, NULL, 10) + 1000;
    T_OK(stk_loader_create(&o, &L));
    T_EQ(stk_loader_next(L, &b), STK_ELIMIT);
    T_CHECKF(strstr(stk_loader_errmsg(L), ds_img) && strstr(stk_loader_errmsg(L), "record ") &&
                 strstr(stk_loader_errmsg(L), "over the memory budget of"),
             "%s", stk_loader_errmsg(L));
    stk_loader_destroy(L);
    stk_transform_destroy(t);
    return 0;
}

T_MAIN(T_CASE(setup), T_CASE(test_in_order), T_CASE(test_shuffle_once_ranks_threads),
       T_CASE(test_epochs_advance_and_repeat), T_CASE(test_drop_last), T_CASE(test_resume),
       T_CASE(test_resume_other_world), T_CASE(test_backpressure_and_holding),
       T_CASE(test_shutdown_anywhere), T_CASE(test_fork_child), T_CASE(test_next_timeout),
       T_CASE(test_bad_arguments), T_CASE(test_bad_states), T_CASE(test_corrupt_record),
       T_CASE(test_alloc_failures), T_CASE(test_alloc_failures_decode), T_CASE(test_memory_budget),
       T_CASE(teardown))
