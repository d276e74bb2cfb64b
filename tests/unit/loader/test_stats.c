/*
 * test_stats.c: stage timings, consumer/worker waits, the trace file and the autotuner, on raw
 * records large enough (256 KB, checksums on) that reading them is real work.
 *
 * No verdict here depends on the clock or the machine's load (issue 30): who waits is decided by
 * what can happen (every slot held; the only worker held at a gate), and the autotuner's first
 * decision for a consumer that takes batches as fast as they come is known (growth) whenever
 * it comes; the decision rule itself is tested on synthetic windows in test_autotune.c.
 */
#include "stk_internal.h"
#include "t.h"

#include <pthread.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char tmpdir[256], data[300];

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    nanosleep(&ts, NULL);
}

static int setup(void)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/stk_test_stats.XXXXXX");
    T_CHECK(mkdtemp(tmpdir));
    snprintf(data, sizeof(data), "%s/big.stk", tmpdir);
    stk_field f[2] = {{.struct_size = sizeof(stk_field), .name = "data", .kind = STK_FIELD_BYTES},
                      {.struct_size = sizeof(stk_field), .name = "label", .kind = STK_FIELD_INT64}};
    stk_writer_opts o;
    stk_writer_opts_init(&o);
    o.fields = f;
    o.n_fields = 2;
    stk_writer *w;
    T_OK(stk_writer_open(data, &o, &w));
    static uint8_t buf[256 << 10];
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (uint8_t)(i * 7 + i / 251);
    for (int i = 0; i < 64; i++) {
        buf[0] = (uint8_t)i;
        stk_value v[2] = {{.struct_size = sizeof(stk_value), .data = buf, .size = sizeof(buf)},
                          {.struct_size = sizeof(stk_value), .i64 = i}};
        T_OK(stk_writer_add(w, v));
    }
    T_OK(stk_writer_close(w));
    return 0;
}

static stk_loader_opts opts(int threads, uint32_t flags)
{
    static const char *paths[1];
    paths[0] = data;
    stk_loader_opts o;
    stk_loader_opts_init(&o);
    o.paths = paths;
    o.n_paths = 1;
    o.batch_size = 4;
    o.n_threads = threads;
    o.rank = 0;
    o.world = 1;
    o.flags = flags;
    return o;
}

/* Take batches for `seconds` (or, with seconds = 0, `n` batches, across epochs), sleeping
 * `step_ns` after each (a simulated training step); *samples counts them (may be NULL). */
static int consume(stk_loader *L, double seconds, int n, uint64_t step_ns, uint64_t *samples)
{
    uint64_t end = stk__now_ns() + (uint64_t)(seconds * 1e9), got = 0;
    for (int k = 0; seconds > 0 ? stk__now_ns() < end : k < n;) {
        stk_batch *b;
        stk_status rc = stk_loader_next(L, &b);
        if (rc == STK_END)
            continue;
        T_OK(rc);
        got += stk_batch_n_samples(b);
        stk_batch_release(b);
        k++;
        if (step_ns)
            sleep_ns(step_ns);
    }
    if (samples)
        *samples = got;
    return 0;
}

static int test_stage_times(void)
{
    stk_loader_opts o = opts(2, STK_LOADER_SHUFFLE);
    stk_loader *L;
    T_OK(stk_loader_create(&o, &L));
    uint64_t n;
    T_CHECK(consume(L, 0.3, 0, 0, &n) == 0);
    stk_loader_stats st = {.struct_size = sizeof(st)};
    stk_loader_stats_get(L, &st);
    T_EQ(st.samples, n);
    T_CHECK(st.wall_ns > 250000000ull);
    T_CHECK(st.read_ns > 0);
    T_EQ(st.decode_ns, 0); /* raw records: nothing decoded */
    T_EQ(st.augment_ns, 0);
    T_CHECK(st.bytes_read >= n * (256 << 10));
    T_EQ(st.active_threads, 2);
    T_EQ(st.depth, 4);
    T_EQ(st.autotune_changes, 0);
    /* Time accounting adds up: no thread spends more than the wall time. */
    T_CHECK(st.read_ns + st.collate_ns + st.worker_wait_ns <= 2 * st.wall_ns);
    T_CHECK(st.consumer_wait_ns <= st.wall_ns);
    stk_loader_destroy(L);

    o = opts(2, STK_LOADER_NO_STATS);
    T_OK(stk_loader_create(&o, &L));
    T_CHECK(consume(L, 0.1, 0, 0, &n) == 0);
    stk_loader_stats_get(L, &st);
    T_EQ(st.read_ns, 0);
    T_EQ(st.worker_wait_ns, 0);
    T_EQ(st.consumer_wait_ns, 0);
    T_CHECK(st.samples > 0);
    stk_loader_destroy(L);
    return 0;
}

/* Every counter only grows from one stats_get to the next, read while the workers run (collate
 * is derived from per-run and per-sample counters, which a reader sees at different moments). */
static int test_counters_never_decrease(void)
{
    stk_loader_opts o = opts(2, STK_LOADER_SHUFFLE);
    stk_loader *L;
    T_OK(stk_loader_create(&o, &L));
    stk_loader_stats prev = {.struct_size = sizeof(prev)}, st = {.struct_size = sizeof(st)};
    stk_loader_stats_get(L, &prev);
    for (int k = 0; k < 3000; k++) {
        stk_batch *b;
        if (k % 8 == 0) {
            stk_status rc = stk_loader_next(L, &b);
            T_CHECK(rc == STK_OK || rc == STK_END);
            if (rc == STK_OK)
                stk_batch_release(b);
        }
        stk_loader_stats_get(L, &st);
        const uint64_t *a[] = {&prev.read_ns, &prev.collate_ns,       &prev.worker_wait_ns,
                               &prev.batches, &prev.consumer_wait_ns, &prev.bytes_read};
        const uint64_t *z[] = {&st.read_ns, &st.collate_ns,       &st.worker_wait_ns,
                               &st.batches, &st.consumer_wait_ns, &st.bytes_read};
        for (size_t i = 0; i < sizeof(a) / sizeof(a[0]); i++)
            T_CHECKF(*z[i] >= *a[i], "counter %zu went from %llu to %llu at read %d", i,
                     (unsigned long long)*a[i], (unsigned long long)*z[i], k);
        prev = st;
    }
    stk_loader_destroy(L);
    return 0;
}

/* The workers' gate for test_who_waits: a sample_fn (run by the worker thread on each sample,
 * with none of the loader's locks held) that stops at the gate while it is closed, so a test can
 * know that no batch can be ready without guessing how long one takes. */
static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static bool gate_closed;
static int gate_waiting;

static void gate_set(bool closed)
{
    pthread_mutex_lock(&gate_mu);
    gate_closed = closed;
    pthread_cond_broadcast(&gate_cv);
    pthread_mutex_unlock(&gate_mu);
}

/* Wait until a worker waits at the gate. */
static void gate_wait_for_worker(void)
{
    pthread_mutex_lock(&gate_mu);
    while (gate_waiting == 0)
        pthread_cond_wait(&gate_cv, &gate_mu);
    pthread_mutex_unlock(&gate_mu);
}

/* out: "label" int64, the record's label, once the gate is open. */
static stk_status gated_label(void *ctx, uint64_t index, const stk_tensor *in, size_t n_in,
                              stk_tensor *out, size_t n_out, char *err, size_t err_size)
{
    (void)ctx;
    (void)index;
    (void)err;
    (void)err_size;
    pthread_mutex_lock(&gate_mu);
    gate_waiting++;
    pthread_cond_broadcast(&gate_cv);
    while (gate_closed)
        pthread_cond_wait(&gate_cv, &gate_mu);
    gate_waiting--;
    pthread_mutex_unlock(&gate_mu);
    if (n_in != 2 || n_out != 1)
        return STK_EINVAL;
    *(int64_t *)out[0].data = *(const int64_t *)in[1].data;
    return STK_OK;
}

/* Who waits, decided by what can happen, not by how long it takes (both halves once compared
 * measured times, which a loaded machine turned over: a consumer sleeping 20 ms per batch
 * waited 173 ms against the worker's 642; issue 30).
 * A slow consumer: it holds every ring slot, taking batches with zero-timeout polls (which wait
 * for nothing and count nothing), so the worker has nothing to fill and waits for a slot. The
 * rounds go on until the worker's wait shows (a loaded machine may need more of them; the bound
 * is a hang guard), and the consumer's wait is exactly 0.
 * A fast consumer: the worker is held at a gate inside its first sample, so no batch can be
 * ready and the consumer's timed next() blocks and gives up (STK_EAGAIN): its wait is positive,
 * and the worker's, which never lacked work, exactly 0. */
static int test_who_waits(void)
{
    enum { SLOTS = 4, MAX_ROUNDS = 1000 };
    stk_loader_opts o = opts(1, 0);
    o.n_slots = SLOTS;
    stk_loader *L;
    stk_loader_stats st = {.struct_size = sizeof(st)};
    T_OK(stk_loader_create(&o, &L));
    int round = 0;
    for (; round < MAX_ROUNDS; round++) {
        stk_batch *held[SLOTS];
        for (int k = 0; k < SLOTS;) {
            stk_status rc = stk_loader_next_timeout(L, &held[k], 0);
            if (rc == STK_EAGAIN) {
                sleep_ns(200000); /* not ready: wait outside the loader */
                continue;
            }
            if (rc == STK_END)
                continue;
            T_OK(rc);
            k++;
        }
        sleep_ns(10000000ull); /* every slot held: the worker has nothing to do */
        for (int k = 0; k < SLOTS; k++)
            stk_batch_release(held[k]);
        stk_loader_stats_get(L, &st);
        if (st.worker_wait_ns > 0)
            break;
    }
    T_CHECKF(round < MAX_ROUNDS, "the worker never waited in %d rounds of a full ring", round);
    T_CHECKF(st.consumer_wait_ns == 0, "a polling consumer waited %llu ns (workers %llu ns)",
             (unsigned long long)st.consumer_wait_ns, (unsigned long long)st.worker_wait_ns);
    stk_loader_destroy(L);

    stk_field label = {.struct_size = sizeof(stk_field), .name = "label", .kind = STK_FIELD_INT64};
    o.sample_fn = gated_label;
    o.sample_fields = &label;
    o.n_sample_fields = 1;
    gate_set(true);
    T_OK(stk_loader_create(&o, &L));
    gate_wait_for_worker();
    stk_batch *b;
    T_EQ(stk_loader_next_timeout(L, &b, 10), STK_EAGAIN); /* the only worker is held */
    stk_loader_stats_get(L, &st);
    T_CHECKF(st.consumer_wait_ns > 0 && st.worker_wait_ns == 0, "workers %llu ns, consumer %llu ns",
             (unsigned long long)st.worker_wait_ns, (unsigned long long)st.consumer_wait_ns);
    gate_set(false);
    T_OK(stk_loader_next(L, &b));
    T_EQ(stk_batch_n_samples(b), 4);
    stk_batch_release(b);
    stk_loader_destroy(L);
    return 0;
}

static int test_trace(void)
{
    stk_loader_opts o = opts(2, 0);
    stk_loader *L;
    T_OK(stk_loader_create(&o, &L));
    char path[320];
    snprintf(path, sizeof(path), "%s/trace.json", tmpdir);
    T_EQ(stk_loader_trace_write(L, path), STK_ESTATE); /* not enabled */
    T_CHECK(strstr(stk_loader_errmsg(L), "trace_events"));
    stk_loader_destroy(L);
    o.trace_events = 100;
    T_OK(stk_loader_create(&o, &L));
    uint64_t n;
    /* batches, not seconds: a step slice is recorded by the call after it (0.2 s once held only
     * the first batch on a loaded machine) */
    T_CHECK(consume(L, 0, 30, 1000000ull, &n) == 0);
    T_OK(stk_loader_trace_write(L, path));
    T_EQ(stk_loader_trace_write(L, "/nonexistent/dir/t.json"), STK_EIO);
    stk_loader_destroy(L);
    FILE *f = fopen(path, "r");
    T_CHECK(f);
    static char text[1 << 20];
    size_t len = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[len] = '\0';
    T_CHECK(strstr(text, "\"traceEvents\""));
    T_CHECK(strstr(text, "\"consumer\"") && strstr(text, "\"worker 0\"") &&
            strstr(text, "\"worker 1\""));
    T_CHECK(strstr(text, "\"name\": \"read\"") && strstr(text, "\"name\": \"step\""));
    /* Capacity is per thread: at most 100 slices on each of the 3 tracks. */
    size_t slices = 0;
    for (const char *p = text; (p = strstr(p, "\"ph\": \"X\"")); p++)
        slices++;
    T_CHECK(slices > 10 && slices <= 300);
    return 0;
}

/* A slow consumer ending on one thread was tested here by timing a real consumer against a
 * measured single-thread rate: its verdict depended on the wall clock and flaked on loaded
 * machines. The decision itself (park a thread when the consumer never waits and the workers
 * idle more than one thread's worth) is tested on synthetic windows in test_autotune.c
 * (test_park_idle_thread, test_start). */

/* A consumer that takes batches as fast as they come makes the autotuner add threads: its first
 * decision, read after every batch (one decision at most per stk_loader_next), must be growth,
 * with the consumer's wait as the reason. From one thread of four, growth is the only change
 * the rule can make (stk__autotune_decide), so the first decision is known whatever the
 * machine's load; what follows (kept, or "no gain" and back) depends on the cores' speed and is
 * tested on synthetic windows in test_autotune.c. (This consumed for 2.5 s and then accepted
 * either later state, which a loaded machine could miss: issue 30.) The bound on batches is a
 * hang guard: a consumer that never waits would never get a decision. */
static int test_autotune_fast_consumer(void)
{
    enum { MAX_BATCHES = 1000000 };
    stk_loader_opts o = opts(4, STK_LOADER_AUTOTUNE);
    o.n_slots = 8;
    stk_loader *L;
    T_OK(stk_loader_create(&o, &L));
    stk_loader_stats st = {.struct_size = sizeof(st)};
    stk_loader_stats_get(L, &st);
    T_EQ(st.active_threads, 1);
    T_EQ(st.autotune_changes, 0);
    int k = 0;
    for (; k < MAX_BATCHES && st.autotune_changes == 0; k++) {
        stk_batch *b;
        stk_status rc = stk_loader_next(L, &b);
        if (rc == STK_END)
            continue;
        T_OK(rc);
        stk_batch_release(b);
        stk_loader_stats_get(L, &st);
    }
    T_CHECKF(st.autotune_changes == 1, "%u decisions after %d batches (%s)", st.autotune_changes, k,
             st.autotune_reason);
    T_CHECKF(st.active_threads >= 2 && strncmp(st.autotune_reason, "consumer waited ", 16) == 0,
             "fast consumer: %u threads (%s)", st.active_threads, st.autotune_reason);
    printf("     autotune, fast consumer: %u threads after %d batches: %s\n", st.active_threads, k,
           st.autotune_reason);
    stk_loader_destroy(L);
    return 0;
}

static int teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
    T_CHECK(system(cmd) == 0);
    return 0;
}

T_MAIN(T_CASE(setup), T_CASE(test_stage_times), T_CASE(test_counters_never_decrease),
       T_CASE(test_who_waits), T_CASE(test_trace), T_CASE(test_autotune_fast_consumer),
       T_CASE(teardown))
