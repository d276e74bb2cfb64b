/*
 * test_pysource.c: what the Python Dataset path stands on, through the public C API: the index
 * dataset (count, describe, fingerprint, empty refused); a loader over it whose sample_fn_v2
 * produces every row, told each sample's epoch, position, worker, row and seed (the seed equal
 * to stk_sample_seed's and independent of the thread count); errors naming "NAME[i]" and skipped
 * under SKIP_CORRUPT; the shared ring: every batch lies in the memfd stk_loader_ring_memory
 * names, and a second mapping of that fd (another process's view) sees the rows the callback
 * wrote at their offsets; no fd without STK_LOADER_SHARED_RING; stk_loader_help (the consumer's
 * thread loading samples of the batch it waits for); STK_LOADER_CALLER_LOADS (the consumer's
 * thread loads every batch, across epochs and a saved state).
 */
#include "stk_internal.h"
#include "t.h"

#include <stdatomic.h>
#include <sys/mman.h>
#include <time.h>

#define N 37
#define B 8

static int test_index_dataset(void)
{
    stk_dataset *ds;
    T_OK(stk_dataset_open_index("MyDataset", N, &ds));
    T_EQ(stk_dataset_n_records(ds), N);
    T_EQ(stk_dataset_n_fields(ds), 0);
    T_CHECK(strcmp(stk_dataset_format(ds), "index") == 0);
    char buf[64];
    T_OK(stk_dataset_describe(ds, 12, buf, sizeof(buf)));
    T_CHECKF(strcmp(buf, "MyDataset[12]") == 0, "%s", buf);
    stk_dataset *other;
    T_OK(stk_dataset_open_index("MyDataset", N + 1, &other));
    T_CHECK(stk_dataset_fingerprint(ds) != stk_dataset_fingerprint(other));
    stk_dataset_close(other);
    T_OK(stk_dataset_open_index("Other", N, &other));
    T_CHECK(stk_dataset_fingerprint(ds) != stk_dataset_fingerprint(other));
    stk_dataset_close(other);
    stk_dataset_close(ds);
    T_EQ(stk_dataset_open_index("empty", 0, &ds), STK_EINVAL);
    T_CHECK(strstr(stk_last_errmsg(), "empty") != NULL);
    return 0;
}

/* Each row: index, epoch, position, seed, row, worker (six int64) in field "v". Fails record 13
 * with STK_EFORMAT. */
static atomic_int calls;
static atomic_int gate_closed; /* test_help: the workers wait until the helper ran a sample */
static stk_status fill(void *ctx, const stk_sample_info *info, const stk_tensor *in, size_t n_in,
                       stk_tensor *out, size_t n_out, char *err, size_t err_size)
{
    (void)ctx;
    (void)in;
    atomic_fetch_add(&calls, 1);
    for (int k = 0; k < 20000 && atomic_load(&gate_closed); k++) /* (at most ~20 s) */
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    if (n_in != 0 || n_out != 1 || out[0].size != 6 * sizeof(int64_t) ||
        info->struct_size < sizeof(*info))
        return stk__set_error(err, err_size, STK_EINVAL, "unexpected call");
    if (info->index == 13)
        return stk__set_error(err, err_size, STK_EFORMAT, "thirteen refused");
    int64_t v[6] = {(int64_t)info->index, (int64_t)info->epoch, (int64_t)info->position,
                    (int64_t)info->seed,  (int64_t)info->row,   (int64_t)info->worker};
    memcpy(out[0].data, v, sizeof(v));
    return STK_OK;
}

static const stk_field vfield = {.struct_size = sizeof(stk_field),
                                 .name = "v",
                                 .kind = STK_FIELD_ARRAY,
                                 .dtype = STK_DTYPE_INT64,
                                 .ndim = 1,
                                 .shape = {6}};

static stk_status make(stk_dataset *ds, int threads, uint32_t flags, stk_loader **L)
{
    stk_loader_opts o;
    stk_loader_opts_init(&o);
    o.dataset = ds;
    o.batch_size = B;
    o.n_threads = threads;
    o.n_slots = 3;
    o.seed = 77;
    o.rank = 0;
    o.world = 1;
    o.flags = flags;
    o.sample_fn_v2 = fill;
    o.sample_fields = &vfield;
    o.n_sample_fields = 1;
    return stk_loader_create(&o, L);
}

/* Run one epoch; rows[index] = the row's values (index 13 fails: its batch raises, or under
 * skip is replaced). Returns the number of failed batches, -1 on a check failure. */
static int run_epoch(stk_loader *L, int64_t rows[N][6], char *errtext, size_t errsize)
{
    int failed = 0;
    for (;;) {
        stk_batch *b;
        stk_status rc = stk_loader_next(L, &b);
        if (rc == STK_END)
            break;
        if (rc < 0) {
            snprintf(errtext, errsize, "%s", stk_loader_errmsg(L));
            failed++;
            continue;
        }
        stk_tensor t;
        stk_tensor_init(&t);
        if (stk_batch_tensor(b, 0, &t) != STK_OK || strcmp(t.name, "v") != 0)
            return -1;
        const int64_t *v = t.data;
        for (uint32_t i = 0; i < stk_batch_n_samples(b); i++)
            if (v[i * 6] >= 0 && v[i * 6] < N)
                memcpy(rows[v[i * 6]], v + i * 6, sizeof(rows[0]));
        stk_batch_release(b);
    }
    return failed;
}

static int test_v2_info(void)
{
    stk_dataset *ds;
    T_OK(stk_dataset_open_index("Rows", N, &ds));
    int64_t one[N][6], three[N][6];
    for (int threads = 1; threads <= 3; threads += 2) {
        stk_loader *L;
        T_OK(make(ds, threads, STK_LOADER_SHUFFLE, &L));
        int64_t(*rows)[6] = threads == 1 ? one : three;
        memset(rows, 0xff, sizeof(one));
        char err[STK_ERRMSG_SIZE] = "";
        T_EQ(run_epoch(L, rows, err, sizeof(err)), 1); /* the batch holding record 13 */
        T_CHECKF(strstr(err, "Rows[13]: thirteen refused") != NULL, "%s", err);
        for (uint64_t i = 0; i < N; i++) {
            if (i == 13 || rows[i][0] == -1)
                continue; /* the failed batch's rows are not delivered */
            T_EQ(rows[i][0], i);
            T_EQ(rows[i][1], 0);
            T_EQ(stk_sampler_index(N, true, 77, 0, (uint64_t)rows[i][2]), i);
            T_EQ(rows[i][3], (int64_t)stk_sample_seed(77, 0, i));
            T_EQ(rows[i][4], rows[i][2] % B);
            T_CHECK(rows[i][5] >= 0 && rows[i][5] < threads);
        }
        /* epoch 1: other seeds */
        char err1[STK_ERRMSG_SIZE];
        int64_t again[N][6];
        memset(again, 0xff, sizeof(again));
        T_EQ(run_epoch(L, again, err1, sizeof(err1)), 1);
        for (uint64_t i = 0; i < N; i++)
            if (i != 13 && again[i][0] != -1) {
                T_EQ(again[i][1], 1);
                T_EQ(again[i][3], (int64_t)stk_sample_seed(77, 1, i));
            }
        stk_loader_destroy(L);
    }
    for (uint64_t i = 0; i < N; i++) /* the same seed whatever the thread count */
        if (one[i][0] != -1 && three[i][0] != -1)
            T_EQ(one[i][3], three[i][3]);
    T_CHECK(stk_sample_seed(77, 0, 5) != stk_sample_seed(77, 0, 6));
    T_CHECK(stk_sample_seed(77, 0, 5) != stk_sample_seed(78, 0, 5));
    T_CHECK(stk_sample_seed(77, 0, 5) != stk_sample_seed(77, 1, 5));
    /* skip: record 13 replaced by the next good one and counted */
    stk_loader *L;
    T_OK(make(ds, 2, STK_LOADER_SKIP_CORRUPT, &L));
    int64_t rows[N][6];
    memset(rows, 0xff, sizeof(rows));
    char err[STK_ERRMSG_SIZE];
    T_EQ(run_epoch(L, rows, err, sizeof(err)), 0);
    stk_loader_stats st = {.struct_size = sizeof(st)};
    T_OK(stk_loader_stats_get(L, &st));
    T_EQ(st.skipped, 1);
    stk_loader_destroy(L);
    stk_dataset_close(ds);
    return 0;
}

static int test_shared_ring(void)
{
    stk_dataset *ds;
    T_OK(stk_dataset_open_index("Shared", N, &ds));
    stk_loader *L;
    T_OK(make(ds, 2, 0, &L));
    stk_ring_memory m;
    stk_ring_memory_init(&m);
    T_OK(stk_loader_ring_memory(L, &m));
    T_EQ(m.fd, -1); /* not shared without the flag */
    T_CHECK(m.base == NULL);
    stk_loader_destroy(L);

    T_OK(make(ds, 2, STK_LOADER_SHARED_RING, &L));
    stk_ring_memory_init(&m);
    T_OK(stk_loader_ring_memory(L, &m));
    T_CHECK(m.fd >= 0);
    T_CHECK(m.base != NULL && m.size > 0);
    T_CHECK(!m.pinned);
    stk_loader_info info = {.struct_size = sizeof(info)};
    T_OK(stk_loader_info_get(L, &info));
    T_CHECK(m.size >= info.slot_size * info.n_slots);
    /* another mapping of the fd: what a worker process sees */
    uint8_t *view = mmap(NULL, m.size, PROT_READ, MAP_SHARED, m.fd, 0);
    T_CHECK(view != MAP_FAILED);
    uint64_t seen = 0;
    for (;;) {
        stk_batch *b;
        stk_status rc = stk_loader_next(L, &b);
        if (rc == STK_END)
            break;
        if (rc < 0)
            continue; /* record 13's batch */
        stk_tensor t;
        stk_tensor_init(&t);
        T_OK(stk_batch_tensor(b, 0, &t));
        const uint8_t *p = t.data;
        T_CHECK(p >= (const uint8_t *)m.base && p + t.size <= (const uint8_t *)m.base + m.size);
        size_t off = (size_t)(p - (const uint8_t *)m.base);
        T_CHECK(memcmp(view + off, p, t.size) == 0);
        const int64_t *v = (const int64_t *)(view + off);
        for (uint32_t i = 0; i < stk_batch_n_samples(b); i++)
            T_EQ(v[i * 6 + 3], (int64_t)stk_sample_seed(77, 0, (uint64_t)v[i * 6]));
        seen += stk_batch_n_samples(b);
        stk_batch_release(b);
    }
    T_EQ(seen, N - B); /* every batch but record 13's (positions 8..15) */
    munmap(view, m.size);
    stk_loader_destroy(L);
    stk_dataset_close(ds);
    return 0;
}

/* stk_loader_help's callback: fill, but its first call returns STK_ECANCELED (interrupted;
 * nothing written) and records the row; later calls open the workers' gate. */
static int help_calls, help_rows, help_cancel_row = -1, help_rerun_row = -1;
static stk_status help_fill(void *ctx, const stk_sample_info *info, const stk_tensor *in,
                            size_t n_in, stk_tensor *out, size_t n_out, char *err, size_t err_size)
{
    if (help_calls++ == 0) {
        help_cancel_row = (int)info->row;
        return STK_ECANCELED;
    }
    if (help_calls == 2)
        help_rerun_row = (int)info->row;
    atomic_store(&gate_closed, 0);
    stk_status rc = fill(ctx, info, in, n_in, out, n_out, err, err_size);
    help_rows++;
    return rc;
}

/* The consumer's thread takes tickets of the batch it waits for: an interrupted one runs again
 * first at the next call, every sample comes once with its own values (worker = n_threads for
 * the helper's rows), and a reset discards the interrupted ticket. The workers wait until the
 * helper ran a sample, so the helper always finds tickets (no clock; after the reset it may
 * find none). */
static int test_help(void)
{
    stk_dataset *ds;
    T_OK(stk_dataset_open_index("Rows", N, &ds));
    for (int reset = 0; reset <= 1; reset++) {
        help_calls = help_rows = 0;
        help_cancel_row = help_rerun_row = -1;
        atomic_store(&gate_closed, 1);
        stk_loader *L;
        T_OK(make(ds, 1, 0, &L));
        uint32_t ran = 7;
        T_EQ(stk_loader_help(L, help_fill, NULL, &ran), STK_ECANCELED);
        T_EQ(ran, 0u);
        uint64_t epoch = 0;
        if (reset) { /* discards the batch and the interrupted ticket with it (the reset
                      * waits for the worker's sample: the gate opens first) */
            atomic_store(&gate_closed, 0);
            T_OK(stk_loader_set_epoch(L, 1));
            epoch = 1;
        }
        int loops = 0;
        do {
            T_OK(stk_loader_help(L, help_fill, NULL, &ran));
            loops++;
        } while (ran && loops < 100);
        if (!reset) {
            T_EQ(help_rerun_row, help_cancel_row); /* the interrupted ticket first */
            T_CHECK(help_rows >= 1);
        }
        T_CHECK(loops - 1 == help_rows); /* every call but the last ran one */
        int64_t rows[N][6];
        memset(rows, 0xff, sizeof(rows));
        char errtext[STK_ERRMSG_SIZE] = "";
        T_EQ(run_epoch(L, rows, errtext, sizeof(errtext)), 1); /* record 13's batch */
        T_CHECK(strstr(errtext, "Rows[13]") != NULL);
        int from_helper = 0;
        for (int64_t i = 0; i < N; i++) { /* every index of the good batches: each once */
            if (i / B == 13 / B)
                continue;
            T_EQ(rows[i][0], i);
            T_EQ(rows[i][1], (int64_t)epoch);
            T_EQ(rows[i][3], (int64_t)stk_sample_seed(77, epoch, (uint64_t)i));
            T_EQ(rows[i][4], i % B);
            from_helper += rows[i][5] == 1; /* the helper's worker number: n_threads */
        }
        T_EQ(from_helper, help_rows);
        stk_loader_destroy(L);
    }
    stk_dataset_close(ds);
    return 0;
}

/* Load the batch stk_loader_next returns next on this thread (STK_LOADER_CALLER_LOADS), then take
 * it: STK_OK, STK_END, or the batch's error. One call loads the whole batch: a second that ran
 * anything is STK_EINVAL here. */
static stk_status caller_next(stk_loader *L, stk_batch **b, int *ran_total)
{
    uint32_t ran;
    int calls_that_ran = 0;
    do {
        stk_status rc = stk_loader_help(L, fill, NULL, &ran);
        if (rc < 0)
            return rc;
        *ran_total += (int)ran;
        calls_that_ran += ran != 0;
    } while (ran);
    if (calls_that_ran > 1)
        return STK_EINVAL;
    return stk_loader_next(L, b);
}

/* fill, but row 3 of the first batch returns STK_ECANCELED once (interrupted, nothing written). */
static int cancel_calls;
static stk_status cancel_row3(void *ctx, const stk_sample_info *info, const stk_tensor *in,
                              size_t n_in, stk_tensor *out, size_t n_out, char *err,
                              size_t err_size)
{
    if (info->row == 3 && cancel_calls++ == 0)
        return STK_ECANCELED;
    return fill(ctx, info, in, n_in, out, n_out, err, err_size);
}

/* STK_LOADER_CALLER_LOADS: no worker thread runs a sample (the callback only ever sees the
 * helper's worker number), every index comes once per epoch,
 * record 13's batch fails as under workers, stk_loader_next refuses a batch nobody loaded
 * instead of waiting for it, and a state saved mid-epoch resumes with the same rows. */
static int test_caller_loads(void)
{
    stk_dataset *ds;
    T_OK(stk_dataset_open_index("Rows", N, &ds));
    stk_loader *L;
    T_OK(make(ds, 1, STK_LOADER_CALLER_LOADS, &L));
    stk_loader_info li;
    stk_loader_info_init(&li);
    T_OK(stk_loader_info_get(L, &li));
    T_EQ(li.n_threads, 0u); /* none running */
    stk_batch *b;
    T_EQ(stk_loader_next(L, &b), STK_ESTATE); /* not loaded: an error, not a wait */
    T_CHECK(strstr(stk_loader_errmsg(L), "not loaded") != NULL);
    int64_t seen[2][N];
    memset(seen, 0, sizeof(seen));
    char state[4096] = "";
    int64_t after_state[B * 6]; /* the batch that follows the saved state */
    for (int epoch = 0; epoch < 2; epoch++) {
        int ran = 0, failed = 0, batches = 0;
        for (;;) {
            stk_status rc = caller_next(L, &b, &ran);
            if (rc == STK_END)
                break;
            if (rc < 0) {
                T_CHECK(strstr(stk_loader_errmsg(L), "Rows[13]") != NULL);
                failed++;
                continue;
            }
            stk_tensor t;
            stk_tensor_init(&t);
            T_OK(stk_batch_tensor(b, 0, &t));
            const int64_t *v = t.data;
            for (uint32_t i = 0; i < stk_batch_n_samples(b); i++) {
                T_CHECK(v[i * 6] >= 0 && v[i * 6] < N);
                T_EQ(v[i * 6 + 1], (int64_t)epoch);
                T_EQ(v[i * 6 + 5], 1); /* the helper's worker number (n_threads): no worker's */
                seen[epoch][v[i * 6]]++;
            }
            if (epoch == 1 && batches == 2)
                memcpy(after_state, v, sizeof(after_state));
            stk_batch_release(b);
            if (epoch == 1 && ++batches == 2)
                T_OK(stk_loader_save_state(L, state, sizeof(state)));
        }
        T_EQ(failed, 1);
        T_EQ(ran, N);
        for (int i = 0; i < N; i++)
            T_EQ(seen[epoch][i], i / B == 13 / B ? 0 : 1);
    }
    stk_loader_destroy(L);
    /* resumed after the second batch of epoch 1: its third batch again, loaded here */
    T_OK(make(ds, 1, STK_LOADER_CALLER_LOADS, &L));
    T_OK(stk_loader_load_state(L, state));
    int ran = 0;
    T_OK(caller_next(L, &b, &ran));
    stk_tensor t;
    stk_tensor_init(&t);
    T_OK(stk_batch_tensor(b, 0, &t));
    T_EQ(stk_batch_n_samples(b), (uint32_t)B);
    T_CHECK(memcmp(t.data, after_state, sizeof(after_state)) == 0);
    stk_batch_release(b);
    stk_loader_destroy(L);
    /* interrupted at row 3: the rows before it counted, then row 3 first and the rest */
    T_OK(make(ds, 1, STK_LOADER_CALLER_LOADS, &L));
    uint32_t n_ran = 99;
    T_EQ(stk_loader_help(L, cancel_row3, NULL, &n_ran), STK_ECANCELED);
    T_EQ(n_ran, 3u);
    T_OK(stk_loader_help(L, cancel_row3, NULL, &n_ran));
    T_EQ(n_ran, (uint32_t)B - 3);
    T_OK(stk_loader_help(L, cancel_row3, NULL, &n_ran));
    T_EQ(n_ran, 0u);
    T_OK(stk_loader_next(L, &b));
    T_OK(stk_batch_tensor(b, 0, &t));
    for (uint32_t i = 0; i < B; i++) {
        const int64_t *v = (const int64_t *)t.data + i * 6;
        T_EQ(v[2], (int64_t)i); /* position i of epoch 0, in row i */
        T_EQ(v[4], (int64_t)i);
    }
    stk_batch_release(b);
    stk_loader_destroy(L);
    /* without a sample callback: refused */
    stk_loader_opts o;
    stk_loader_opts_init(&o);
    o.dataset = ds;
    o.flags = STK_LOADER_CALLER_LOADS;
    T_EQ(stk_loader_create(&o, &L), STK_EINVAL);
    T_CHECK(strstr(stk_last_errmsg(), "CALLER_LOADS") != NULL);
    stk_dataset_close(ds);
    return 0;
}

T_MAIN(T_CASE(test_index_dataset), T_CASE(test_v2_info), T_CASE(test_shared_ring),
       T_CASE(test_help), T_CASE(test_caller_loads))
