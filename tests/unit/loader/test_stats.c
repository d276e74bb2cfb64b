/*
 * test_stats.c: stage timings, consumer/worker waits, the trace file and the autotuner, on raw
 * records large enough (256 KB, checksums on) that reading them is real work.
 *
 * The autotune cases are behavioural, not speed assertions: a consumer that needs a quarter of
 * what one thread delivers must end on one thread; a consumer that takes batches as fast as they
 * come must make the loader add a thread (on a machine with at least 2 CPUs).
 */
#include "stk_internal.h"
#include "t.h"

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

/* A slow consumer leaves the workers waiting for slots: one that holds every slot of the ring
 * for 20 ms at a time, taking them without ever blocking (it polls: a zero timeout waits for
 * nothing), gives the workers nothing to fill, so they wait while it never does. (A consumer
 * sleeping 20 ms per batch was compared with the workers here before: on a loaded machine the
 * starved worker kept it waiting too, 173 ms against the workers' 642; issue 30.) A fast
 * consumer waits for the workers: it spends its time blocked in stk_loader_next, the workers
 * theirs working. */
static int test_who_waits(void)
{
    enum { SLOTS = 4 };
    stk_loader_opts o = opts(1, 0);
    o.n_slots = SLOTS;
    stk_loader *L;
    stk_loader_stats st = {.struct_size = sizeof(st)};
    T_OK(stk_loader_create(&o, &L));
    for (int round = 0; round < 10; round++) {
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
        sleep_ns(20000000ull); /* every slot held: the worker has nothing to do */
        for (int k = 0; k < SLOTS; k++)
            stk_batch_release(held[k]);
    }
    stk_loader_stats_get(L, &st);
    T_CHECKF(st.worker_wait_ns > 0 && st.consumer_wait_ns == 0, "workers %llu ns, consumer %llu ns",
             (unsigned long long)st.worker_wait_ns, (unsigned long long)st.consumer_wait_ns);
    stk_loader_destroy(L);
    T_OK(stk_loader_create(&o, &L));
    T_CHECK(consume(L, 0, 100, 0, NULL) == 0);
    stk_loader_stats_get(L, &st);
    T_CHECKF(st.consumer_wait_ns > st.worker_wait_ns, "workers %llu ns, consumer %llu ns",
             (unsigned long long)st.worker_wait_ns, (unsigned long long)st.consumer_wait_ns);
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

static int test_autotune_fast_consumer(void)
{
    if (stk_n_cpus() < 2)
        return T_SKIP;
    stk_loader_opts o = opts(4, STK_LOADER_AUTOTUNE);
    o.n_slots = 8;
    stk_loader *L;
    uint64_t n;
    T_OK(stk_loader_create(&o, &L));
    T_CHECK(consume(L, 2.5, 0, 0, &n) == 0);
    stk_loader_stats st = {.struct_size = sizeof(st)};
    stk_loader_stats_get(L, &st);
    /* It must have added threads. Where it kept them depends on what they gained: on a machine
     * whose other processes hold the cores, a second thread gains nothing and going back to one
     * is the right decision, which the reason then says with the measured rates. */
    bool kept = st.active_threads >= 2;
    bool tried = strstr(st.autotune_reason, "gave no gain over 1 ") != NULL ||
                 strstr(st.autotune_reason, "with all 1 threads busy") != NULL; /* capped at 1 */
    T_CHECKF(kept || tried, "fast consumer: %u threads (%s)", st.active_threads,
             st.autotune_reason);
    T_CHECK(st.autotune_changes >= 1);
    T_CHECK(st.autotune_reason[0] != '\0');
    printf("     autotune, fast consumer: %u threads, depth %u, %u changes; last: %s\n",
           st.active_threads, st.depth, st.autotune_changes, st.autotune_reason);
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
