/*
 * test_autotune.c: the autotune decision (src/loader/stk_autotune.c) fed synthetic measurement
 * windows: no threads, no sleeps, no clock. Each case states what a window says (the consumer's
 * share of time waiting, the workers' idle time in threads' worth, samples/s) and what the
 * decision must do with it.
 */
#include "loader/stk_autotune.h"
#include "t.h"

#define DT 250000000ull /* a 250 ms window, as the loader takes them */

/* A window in which the consumer waited `cw` of the time, the workers idled `ww` threads' worth
 * and `rate` samples/s were consumed. */
static stk__at_window win(double cw, double ww, double rate)
{
    stk__at_window w = {DT, (uint64_t)(cw * (double)DT), (uint64_t)(ww * (double)DT),
                        (uint64_t)(rate * (double)DT / 1e9)};
    return w;
}

/* Feed one window; returns whether the decision changed something. */
static bool feed(stk__autotune *a, double cw, double ww, double rate)
{
    stk__at_window w = win(cw, ww, rate);
    return stk__autotune_decide(a, &w);
}

static int test_start(void)
{
    stk__autotune a;
    stk__autotune_init(&a, 8, 4);
    T_EQ(a.active, 1);
    T_EQ(a.depth, 2);
    T_EQ(a.changes, 0);
    T_CHECK(a.reason[0] == '\0');
    stk__autotune_init(&a, 8, 1); /* depth never above n_slots */
    T_EQ(a.depth, 1);
    return 0;
}

/* A consumer waiting a little adds one thread; the next window only settles. */
static int test_grow_by_one_then_settle(void)
{
    stk__autotune a;
    stk__autotune_init(&a, 8, 4);
    T_CHECK(feed(&a, 0.10, 0.0, 1000));
    T_EQ(a.active, 2);
    T_EQ(a.changes, 1);
    T_CHECKF(strcmp(a.reason, "consumer waited 10% of the time with 1 thread: 2 threads") == 0,
             "%s", a.reason);
    T_CHECK(!feed(&a, 0.50, 0.0, 5000)); /* settling: judged by nobody */
    T_EQ(a.active, 2);
    T_EQ(a.changes, 1);
    /* A consumer that barely waits (2% or less) is left alone. */
    stk__autotune_init(&a, 8, 4);
    T_CHECK(!feed(&a, 0.02, 0.0, 1000));
    T_EQ(a.active, 1);
    T_EQ(a.depth, 2);
    return 0;
}

/* Above 30% waiting the thread count doubles, capped at n_threads. */
static int test_double_above_30_percent(void)
{
    stk__autotune a;
    stk__autotune_init(&a, 6, 4);
    T_CHECK(feed(&a, 0.50, 0.0, 1000));
    T_EQ(a.active, 2);
    T_CHECK(!feed(&a, 0.50, 0.0, 2000));
    T_CHECK(feed(&a, 0.40, 0.0, 2000)); /* 2000 >= 1.05 x 1000: the growth is kept, and again */
    T_EQ(a.active, 4);
    T_CHECK(!feed(&a, 0.40, 0.0, 4000));
    T_CHECK(feed(&a, 0.40, 0.0, 4000));
    T_EQ(a.active, 6); /* 8 capped at the 6 threads there are */
    T_CHECKF(strstr(a.reason, "waited 40% of the time with 4 threads: 6 threads"), "%s", a.reason);
    return 0;
}

/* A growth that did not bring 5% more samples/s is undone and its count remembered as the
 * ceiling: while it holds, a waiting consumer gets depth, not threads. */
static int test_undo_growth_without_gain(void)
{
    stk__autotune a;
    stk__autotune_init(&a, 8, 4);
    T_CHECK(feed(&a, 0.10, 0.0, 1000));  /* 1 -> 2 at 1000 samples/s */
    T_CHECK(!feed(&a, 0.10, 0.0, 1000)); /* settle */
    T_CHECK(feed(&a, 0.10, 0.0, 1040));  /* under 1050: back to 1 */
    T_EQ(a.active, 1);
    T_EQ(a.ceiling, 1);
    T_EQ(a.changes, 2);
    T_CHECKF(
        strcmp(a.reason, "2 threads gave no gain over 1 (1040 vs 1000 samples/s): back to 1") == 0,
        "%s", a.reason);
    T_CHECK(!feed(&a, 0.10, 0.0, 1000)); /* settle */
    T_CHECK(feed(&a, 0.10, 0.2, 1000));  /* capped at 1 thread, busy: one more batch ahead */
    T_EQ(a.active, 1);
    T_EQ(a.depth, 3);
    T_CHECKF(strstr(a.reason, "with all 1 threads busy: depth 3"), "%s", a.reason);
    /* A growth with its 5% is kept. */
    stk__autotune_init(&a, 8, 4);
    T_CHECK(feed(&a, 0.10, 0.0, 1000));
    T_CHECK(!feed(&a, 0.10, 0.0, 1000));
    T_CHECK(feed(&a, 0.10, 0.0, 1100)); /* 10% more than 1000: kept, and it grows again */
    T_EQ(a.active, 3);
    return 0;
}

/* The ceiling is forgotten every 20 windows: the machine may have changed, so more threads are
 * tried again. */
static int test_reprobe_after_20_windows(void)
{
    stk__autotune a;
    stk__autotune_init(&a, 8, 2);
    T_CHECK(feed(&a, 0.10, 0.0, 1000));  /* window 1: 1 -> 2 */
    T_CHECK(!feed(&a, 0.10, 0.0, 1000)); /* 2: settle */
    T_CHECK(feed(&a, 0.10, 0.0, 1000));  /* 3: no gain: back to 1, ceiling 1 */
    T_EQ(a.ceiling, 1);
    uint32_t windows = 3;
    /* The consumer keeps waiting with the depth at n_slots already: nothing to do until the
     * 20th window forgets the ceiling. */
    while (windows < 19) {
        T_CHECK(!feed(&a, 0.10, 0.2, 1000));
        windows++;
        T_EQ(a.active, 1);
        T_EQ(a.ceiling, 1);
    }
    T_CHECK(feed(&a, 0.10, 0.2, 1000)); /* window 20: ceiling 8 again, so 1 -> 2 */
    T_EQ(a.windows, 20);
    T_EQ(a.ceiling, 8);
    T_EQ(a.active, 2);
    return 0;
}

/* Every allowed thread busy and the consumer still waiting: open one more batch ahead, up to
 * n_slots. */
static int test_depth_when_all_threads_busy(void)
{
    stk__autotune a;
    stk__autotune_init(&a, 1, 4); /* one thread: it cannot grow */
    T_CHECK(feed(&a, 0.10, 0.2, 1000));
    T_EQ(a.depth, 3);
    T_CHECK(!feed(&a, 0.10, 0.2, 1000));
    T_CHECK(feed(&a, 0.10, 0.2, 1000));
    T_EQ(a.depth, 4);
    T_CHECK(!feed(&a, 0.10, 0.2, 1000));
    T_CHECK(!feed(&a, 0.10, 0.2, 1000)); /* at n_slots: nothing left to raise */
    T_EQ(a.depth, 4);
    /* Workers idle half a thread or more: waiting is not for want of batches ahead. */
    stk__autotune_init(&a, 1, 4);
    T_CHECK(!feed(&a, 0.10, 0.5, 1000));
    T_EQ(a.depth, 2);
    return 0;
}

/* A consumer that never waits while the workers idle more than 1.2 threads' worth: park one. */
static int test_park_idle_thread(void)
{
    stk__autotune a;
    stk__autotune_init(&a, 8, 4);
    a.active = 3; /* as if grown earlier */
    T_CHECK(feed(&a, 0.001, 1.5, 1000));
    T_EQ(a.active, 2);
    T_CHECKF(strcmp(a.reason, "consumer never waited and 3 threads idled 1.5 threads' worth: 2 "
                              "threads") == 0,
             "%s", a.reason);
    T_CHECK(!feed(&a, 0.001, 1.5, 1000)); /* settle */
    T_CHECK(!feed(&a, 0.001, 1.1, 1000)); /* idle under 1.2 threads: kept */
    T_CHECK(!feed(&a, 0.01, 1.5, 1000));  /* the consumer waited 1%: kept */
    T_EQ(a.active, 2);
    T_CHECK(feed(&a, 0.0, 1.3, 1000));
    T_EQ(a.active, 1);
    T_CHECK(!feed(&a, 0.0, 1.3, 1000));
    T_CHECK(!feed(&a, 0.0, 5.0, 1000)); /* never below one thread */
    T_EQ(a.active, 1);
    T_EQ(a.changes, 2);
    return 0;
}

/* The codec threads of the thread plan: one each when the active threads fill the cores, the
 * cores shared among the clips decoded at once otherwise, never 0, never above the cap. */
static int test_decoder_threads(void)
{
    const uint32_t B = 64, D = 2; /* batches large enough not to bound the clips in flight */
    T_EQ(stk__decoder_threads(16, 16, 1000, B, D), 1); /* n_threads == cores */
    T_EQ(stk__decoder_threads(16, 32, 1000, B, D), 1); /* more threads than cores */
    T_EQ(stk__decoder_threads(16, 4, 1000, B, D), 4);
    T_EQ(stk__decoder_threads(16, 1, 1000, B, D), STK__DECODER_THREADS_MAX); /* autotune's start */
    T_EQ(stk__decoder_threads(16, 16, 2, B, D), STK__DECODER_THREADS_MAX);   /* two clips in all */
    T_EQ(stk__decoder_threads(16, 16, 4, B, D), 4);
    T_EQ(stk__decoder_threads(2, 1, 1000, B, D), 2);
    T_EQ(stk__decoder_threads(2, 2, 1000, B, D), 1);
    T_EQ(stk__decoder_threads(3, 2, 1000, B, D), 1);
    T_EQ(stk__decoder_threads(1, 0, 0, B, D), 1); /* nothing active, nothing to load: still 1 */
    T_EQ(stk__decoder_threads(0, 4, 10, B, D), 1);
    return 0;
}

/* Many cores (issue 28): 64 threads on 64 cores but batches of 2 with 2 batches open ahead keep
 * only 4 clips decoding: each gets the cap, not 1 (the plan before counted threads alone and left
 * 60 cores idle). Then, over a grid of cores 1..1024, threads 0..2048, dataset sizes, batch
 * sizes and depths, the plan's invariants: within 1 .. cap; the cap exactly when the cores
 * cover cap threads for every clip in flight, 1 when the clips in flight outnumber the cores;
 * never more threads in all than the cores (beyond one per clip in flight); never fewer threads
 * for fewer clips in flight (more active threads, a larger batch or depth never raise it). */
static int test_decoder_threads_many_cores(void)
{
    const uint32_t MAX = STK__DECODER_THREADS_MAX;
    T_EQ(stk__decoder_threads(64, 64, 100000, 2, 2), MAX);
    T_EQ(stk__decoder_threads(64, 64, 100000, 8, 2), 4);      /* 16 clips in flight */
    T_EQ(stk__decoder_threads(64, 64, 100000, 256, 4), 1);    /* every thread has a clip */
    T_EQ(stk__decoder_threads(256, 32, 100000, 256, 4), MAX); /* 32 clips on 256 cores */
    T_EQ(stk__decoder_threads(192, 64, 100000, 16, 2), 6);    /* 32 in flight: 192 / 32 */
    T_EQ(stk__decoder_threads(128, 128, 100000, 1, 0), MAX);  /* depth 0 counts as 1 */
    T_EQ(stk__decoder_threads(UINT32_MAX, UINT32_MAX, UINT64_MAX, UINT32_MAX, UINT32_MAX), 1);
    T_EQ(stk__decoder_threads(UINT32_MAX, 1, UINT64_MAX, 1, 1), MAX);
    static const uint32_t cores[] = {1,  2,  3,  4,   8,   12,  16,  24,  32,
                                     48, 64, 96, 128, 192, 256, 512, 1024};
    static const uint32_t actives[] = {0, 1, 2, 3, 4, 7, 8, 16, 31, 32, 64, 128, 256, 512, 2048};
    static const uint64_t samples[] = {0, 1, 2, 5, 16, 100, 1000, 1000000, UINT64_MAX};
    static const uint32_t batches[] = {0, 1, 2, 3, 8, 32, 256, 4096};
    static const uint32_t depths[] = {0, 1, 2, 4, 16};
#define N_OF(a) (sizeof(a) / sizeof((a)[0]))
    size_t checked = 0;
    for (size_t ci = 0; ci < N_OF(cores); ci++)
        for (size_t ai = 0; ai < N_OF(actives); ai++)
            for (size_t si = 0; si < N_OF(samples); si++)
                for (size_t bi = 0; bi < N_OF(batches); bi++)
                    for (size_t di = 0; di < N_OF(depths); di++) {
                        uint32_t c = cores[ci], a = actives[ai], b = batches[bi], d = depths[di];
                        uint64_t s = samples[si];
                        uint32_t t = stk__decoder_threads(c, a, s, b, d);
                        uint64_t open = (uint64_t)(b ? b : 1) * (d ? d : 1);
                        uint64_t at_once = a < s ? a : s;
                        at_once = at_once < open ? at_once : open;
                        at_once = at_once ? at_once : 1;
                        T_CHECK(t >= 1 && t <= MAX);
                        if (at_once * MAX <= c)
                            T_EQ(t, MAX);
                        if (at_once > c)
                            T_EQ(t, 1);
                        /* the cores are not oversubscribed beyond one thread per clip */
                        T_CHECK(t == 1 || at_once * t <= c);
                        /* at most one thread short of using the cores, up to the cap */
                        T_CHECK(t == MAX || at_once * (t + 1) > c);
                        if (ai + 1 < N_OF(actives))
                            T_CHECK(stk__decoder_threads(c, actives[ai + 1], s, b, d) <= t);
                        if (bi + 1 < N_OF(batches))
                            T_CHECK(stk__decoder_threads(c, a, s, batches[bi + 1], d) <= t);
                        if (di + 1 < N_OF(depths))
                            T_CHECK(stk__decoder_threads(c, a, s, b, depths[di + 1]) <= t);
                        if (ci + 1 < N_OF(cores))
                            T_CHECK(stk__decoder_threads(cores[ci + 1], a, s, b, d) >= t);
                        checked++;
                    }
#undef N_OF
    T_EQ(checked, (size_t)17 * 15 * 9 * 8 * 5);
    return 0;
}

T_MAIN(T_CASE(test_decoder_threads), T_CASE(test_decoder_threads_many_cores), T_CASE(test_start),
       T_CASE(test_grow_by_one_then_settle), T_CASE(test_double_above_30_percent),
       T_CASE(test_undo_growth_without_gain), T_CASE(test_reprobe_after_20_windows),
       T_CASE(test_depth_when_all_threads_busy), T_CASE(test_park_idle_thread))
