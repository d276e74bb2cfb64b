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
    T_EQ(stk__decoder_threads(16, 16, 1000), 1); /* n_threads == cores */
    T_EQ(stk__decoder_threads(16, 32, 1000), 1); /* more threads than cores */
    T_EQ(stk__decoder_threads(16, 4, 1000), 4);
    T_EQ(stk__decoder_threads(16, 1, 1000), STK__DECODER_THREADS_MAX); /* autotune's start */
    T_EQ(stk__decoder_threads(16, 16, 2), STK__DECODER_THREADS_MAX);   /* two clips in all */
    T_EQ(stk__decoder_threads(16, 16, 4), 4);
    T_EQ(stk__decoder_threads(2, 1, 1000), 2);
    T_EQ(stk__decoder_threads(2, 2, 1000), 1);
    T_EQ(stk__decoder_threads(3, 2, 1000), 1);
    T_EQ(stk__decoder_threads(1, 0, 0), 1); /* nothing active, nothing to load: still 1 */
    T_EQ(stk__decoder_threads(0, 4, 10), 1);
    return 0;
}

T_MAIN(T_CASE(test_decoder_threads), T_CASE(test_start), T_CASE(test_grow_by_one_then_settle),
       T_CASE(test_double_above_30_percent), T_CASE(test_undo_growth_without_gain),
       T_CASE(test_reprobe_after_20_windows), T_CASE(test_depth_when_all_threads_busy),
       T_CASE(test_park_idle_thread))
